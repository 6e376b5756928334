"""The one entry point, `decode` (a `BeamSearch` or `Sampling` over a `Transformer` -> `Decoded`,
on the backend's driver), and the Keras API: `translate`, `make_translate_function`."""
import dataclasses
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import core, step
from keras_transformer.decoding.beam import SearchOptions, beam_search
from keras_transformer.decoding.settings import BeamSearch, Sampling

PAPER = BeamSearch()


class Required(NamedTuple):
    """What every output of a sentence must hold, beside what the search chooses: `prefix_ids`
    int [batch, width], 0-padded, forced (and scored) first tokens; `terms_ids` int [batch,
    phrases, length], 0-padded, phrases every output contains (`terms`; beam search under
    TensorFlow only; InvalidArgumentError if over the cap)."""
    prefix_ids: Any = None
    terms_ids: Any = None


def decode(model, source_ids, search=PAPER, *, num_results=1, max_length=None, constraint=None,
           required=Required(), details=False):
    """Decodes a batch of sources with a `Transformer`, encoded once: source ids in, `Decoded`
    (ids [batch, num_results, length]) out; eagerly, in `tf.function` (XLA or not), in `jax.jit`.

    Example:
        >>> import numpy as np
        >>> from keras_transformer import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig.preset("base", vocab_size=20,
        ...                     num_layers=1, d_model=16, d_ff=32, num_heads=2))
        >>> out = decode(model, np.array([[5, 6, 7, 3]]), BeamSearch(beam_size=2,
        ...              extra_length=3), num_results=2)
        >>> tuple(out.ids.shape), tuple(out.scores.shape)
        ((1, 2, 7), (1, 2))

    Args:
        source_ids: int [batch, source_len], 0-padded.
        search: `BeamSearch` (the paper's by default) or `Sampling` (TensorFlow only); under
            TensorFlow, fields but `stop_rule` may be scalar tensors.
        num_results: outputs per sentence, best first (n-best or samples; may be a tensor).
        max_length: a cap on generated tokens (default: the model's `max_length`).
        constraint: an optional `DecodingConstraint` on the generated tokens.
        required: a `Required`: a target prefix and phrases per sentence (default none).
        details: also return each token's log-probability and alignment.
    """
    if isinstance(search, Sampling) and not core.on_tensorflow():
        raise ValueError(f"sampling needs the TensorFlow backend, not {keras.backend.backend()}")
    source_ids = ops.cast(ops.convert_to_tensor(source_ids), "int32")
    cap = model.config.max_length if max_length is None else max_length
    max_lengths, max_steps, prefix = core.output_lengths(
        source_ids, search.extra_length, cap, required.prefix_ids, required.terms_ids)
    terms_ids = required.terms_ids
    if terms_ids is not None:  # nothing runs before the phrases are known to fit
        import tensorflow as tf

        with tf.control_dependencies([max_lengths]):
            source_ids = tf.identity(source_ids)
    options = SearchOptions(num_results=num_results, max_steps=max_steps, forced_ids=prefix,
                            track_details=details)
    decoding = _Decoding(model, source_ids, constraint, max_lengths, options)
    if isinstance(search, Sampling):
        return decoding.sample(search)
    if terms_ids is None:
        return decoding.beam(search)
    # The plain search is faster where no sentence has phrases.
    return tf.cond(tf.reduce_any(tf.not_equal(terms_ids, PAD_ID)),
                   lambda: decoding.beam(search, terms_ids), lambda: decoding.beam(search))


class _Decoding:
    """One batch's sources, encoded once, and the searches `decode` runs over them."""

    def __init__(self, model, source_ids, constraint, max_lengths, options):
        self.model, self.source_ids, self.constraint = model, source_ids, constraint
        self.max_lengths, self.options = max_lengths, options
        self.memory, self.mask = model.encode(source_ids, training=False)
        self.cache_length = options.max_steps
        if core.on_tensorflow():  # outside XLA the decoder cache grows a position a step
            from keras_transformer.decoding import tf_graph

            self.cache_length = tf_graph.cache_length(options.max_steps)

    def begin(self, rows, step_fn):
        """(step_fn, cache, per-sentence state) for `rows` rows per sentence."""
        cache, memory_state = self.model.initial_decode_state(
            self.memory, self.mask, num_rows=rows, max_length=self.cache_length)
        if self.constraint is not None:
            cache = {"model": cache, "constraint": self.constraint.initial_state(
                self.source_ids, rows, self.options.max_steps)}
            step_fn = step.constrained(step_fn, self.constraint, self.model.config.vocab_size)
        return step_fn, cache, memory_state

    def start_ids(self, rows_per_sentence):
        return ops.full((ops.shape(self.source_ids)[0] * rows_per_sentence,), BOS_ID, "int32")

    def beam(self, search, terms=None):
        """Beam search. Details come from `token_details` after the search (which then runs
        unchanged), or, under a constraint that renormalises each step, from the search."""
        details = self.options.track_details
        track = details and self.constraint is not None
        step_fn, cache, memory_state = self.begin(search.beam_size,
                                                  step.model_step(self.model, track))
        out = beam_search(step_fn, self.start_ids(1), cache, search, self.max_lengths, EOS_ID,
                          dataclasses.replace(self.options, track_details=track,
                                              sentence_state=memory_state, terms=terms))
        if not details or track:
            return out
        # Only up to the longest hypothesis: the rest of the search's storage is padding.
        width = ops.max(ops.sum(ops.cast(ops.not_equal(out.ids, PAD_ID), "int32"), axis=2))
        return token_details(self.model, self.memory, self.mask, out.ids[:, :, :width],
                             out.scores)

    def sample(self, search):
        """`num_results` draws per sentence, scored as beam search scores them, best first."""
        from keras_transformer.decoding import sampling

        n = self.options.num_results
        step_fn, cache, memory_state = self.begin(
            n, step.model_step(self.model, self.options.track_details))
        out = sampling.sample(step_fn, self.start_ids(n), cache, search, self.max_lengths, EOS_ID,
                              dataclasses.replace(self.options, sentence_state=memory_state))
        lengths = ops.sum(ops.cast(ops.not_equal(out.ids, PAD_ID), "int32"), axis=2)
        scores, order = core.top_k(out.scores / core.length_penalty(lengths, search.alpha), n)
        return core.Decoded(scores=scores, **{
            name: core.take_along(value, order)
            for name, value in out._asdict().items() if name != "scores" and value is not None})


def token_details(model, memory, mask, ids, scores):
    """`Decoded` with the search's per-token details of finished `ids` int32 [batch, n, length]
    (0-padded after the end token; `scores` theirs), by one teacher-forced pass over `memory`,
    `mask` (`model.encode` of the sources)."""
    batch, n, length = ops.shape(ids)
    flat = ops.reshape(ids, (batch * n, length))
    target_in = ops.concatenate([ops.full((batch * n, 1), BOS_ID, "int32"), flat[:, :-1]],
                                axis=1)
    logits, weights = model.decode(
        target_in, ops.repeat(memory, n, axis=0), ops.repeat(mask, n, axis=0),
        return_attention_scores=True, training=False,
        attention_layer=core.alignment_layer(model.config.num_layers))
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    token_log_probs = ops.take_along_axis(log_probs, flat[:, :, None], axis=2)[:, :, 0]
    # weights [batch * n, heads, length, source_len]: head average, then the argmax.
    alignment = ops.cast(ops.argmax(ops.mean(ops.cast(weights, "float32"), axis=1), axis=-1),
                         "int32")
    padding = ops.equal(flat, PAD_ID)
    shape = (batch, n, length)
    return core.Decoded(ids, scores,
                        ops.reshape(ops.where(padding, 0.0, token_log_probs), shape),
                        ops.reshape(ops.where(padding, -1, alignment), shape))


def score_ids(model, source_ids, target_ids, alpha=PAPER.alpha, bos_id=BOS_ID,
              teacher_inputs=None):
    """The score beam search reports for `target_ids` (int [batch, length], each ending with the
    end token, 0-padded after it), by the full forward pass (its reference). `teacher_inputs`:
    optional `f(source_ids, target_in) -> target_in`, what the decoder reads instead of [BOS] +
    target (`DecodingConstraint.decoder_inputs`)."""
    target_ids = ops.cast(ops.convert_to_tensor(target_ids), "int32")
    target_in = ops.concatenate([ops.full((ops.shape(target_ids)[0], 1), bos_id, "int32"),
                                 target_ids[:, :-1]], axis=1)
    if teacher_inputs is not None:
        target_in = teacher_inputs(source_ids, target_in)
    logits = model((source_ids, target_in), training=False)
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    token_log_probs = ops.take_along_axis(log_probs, target_ids[:, :, None], axis=2)[:, :, 0]
    mask = ops.cast(ops.not_equal(target_ids, PAD_ID), "float32")
    return (ops.sum(token_log_probs * mask, axis=1)
            / core.length_penalty(ops.sum(mask, axis=1), alpha))


def make_translate_function(model, search=PAPER, *, jit_compile=False, **options):
    """A compiled `source_ids -> Decoded` function of `decode` (`search`, `options` as it takes
    them) for the current Keras backend; each call compiles anew: keep the result.

    TensorFlow: a `tf.function` for int batches of any shape (`jit_compile`: XLA), no AutoGraph
    (slow; `decode` is graph code). JAX: `jax.jit` with the variables as arguments (in a
    `keras.StatelessScope`), one compilation per shape. Other backends: `decode` itself.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        traced = tf.function(lambda ids: decode(model, ids, search, **options),
                             input_signature=[tf.TensorSpec([None, None], tf.int32)],
                             jit_compile=jit_compile, autograph=False)
        return lambda source_ids: traced(tf.cast(source_ids, tf.int32))
    if backend == "jax":
        import jax

        variables = model.variables

        @jax.jit
        def compiled(values, source_ids):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return decode(model, source_ids, search, **options)

        return lambda source_ids: compiled([v.value for v in variables],
                                           ops.convert_to_tensor(source_ids, "int32"))
    return lambda source_ids: decode(model, source_ids, search, **options)


def translate(model, source_ids, search=PAPER, **options):
    """`search` (the paper's beam by default) over one batch on this backend -> `Decoded`:
    TensorFlow decodes eagerly, others via `make_translate_function` (keep one for many)."""
    if keras.backend.backend() == "tensorflow":
        return decode(model, source_ids, search, **options)
    return make_translate_function(model, search, **options)(source_ids)
