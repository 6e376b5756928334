"""Beam search written once in `keras.ops`: the same search on every Keras backend.

The fixed-settings path of `keras_transformer.search.translate_ids` (beam size, alpha, extra
length, n-best, early finish) without TensorFlow: `keras.ops.while_loop`, `keras.ops.top_k`,
`keras.ops.take_along_axis` and `keras.tree`, as keras-hub's `BeamSampler` is written, so
that it runs eagerly, inside `tf.function` and inside `jax.jit`. Shapes never change inside
the loop (the decoder cache has a fixed slot per output position, as `search.py` keeps it
under XLA), which `jax.lax.while_loop` and XLA need; every sentence stays in the batch until
the whole batch is done.

The search is the paper's (Section 6.1: beam 4, alpha 0.6, at most input length + 50
tokens) and `search.py`'s: scores are log-probabilities divided by the length penalty
((5 + length) / 6) ** alpha of Wu et al. (2016, "Google's Neural Machine Translation
System", Section 7), length counting the end token; the end token is forced at each sentence's
last allowed position; an ending counts only when it ranks among the k best candidates (so
beam 1 with alpha 0 is greedy decoding); a batch stops as soon as no live hypothesis of any
sentence can beat its finished ones. Its results equal `search.translate_ids`'s (tested).

Under TensorFlow, `search.translate_ids` is faster outside XLA (a cache that grows one
position a step, finished sentences leaving the batch), so `make_translate_function` and
`translate` use it there. Per-request options (the SavedModel's dynamic beam), target
prefixes, constraints, token scores and alignments stay TensorFlow-only
(`keras_transformer.search`).
"""
import keras
from keras import ops

from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import DecodingSettings

NEG = -1e9
"""A finite "minus infinity", as in `search.py`: keeps sums of scores free of NaNs."""
PAPER = DecodingSettings()


def length_penalty(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016), float32."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def output_lengths(source_ids, extra_length, cap):
    """How many tokens each translation may have, end token included, and the loop bound.

    Returns:
        (int32 [batch]: min(source length + extra_length, cap); the bound
        min(padded source width + extra_length, cap), a Python int when the width is static,
        so that a compiled search serves every batch of one shape).
    """
    source_lengths = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)
    max_lengths = ops.minimum(source_lengths + extra_length, cap)
    width = source_ids.shape[1]
    if width is None:  # a TensorFlow graph with a dynamic width
        return max_lengths, ops.minimum(ops.shape(source_ids)[1] + extra_length, cap)
    return max_lengths, min(width + extra_length, cap)


def _gather_beams(nest, indices):
    """Picks rows along axis 1 of every tensor [batch, beams, ...] of `nest`.

    Args:
        indices: int32 [batch, n], each in [0, beams).
    Returns:
        The nest with tensors [batch, n, ...]. One `ops.take` of the flat [batch * beams, ...]
        rows, which is cheaper than a batched gather on a decoder cache.
    """
    batch, n = ops.shape(indices)[0], indices.shape[1]

    def gather(x):
        rest = tuple(ops.shape(x)[2:])  # static where known (a TF graph may leave some out)
        offsets = ops.arange(batch, dtype="int32")[:, None] * x.shape[1]
        rows = ops.take(ops.reshape(x, (-1,) + rest),
                        ops.reshape(indices + offsets, (-1,)), axis=0)
        return ops.reshape(rows, (batch, n) + rest)

    return keras.tree.map_structure(gather, nest)


def _candidates(logits, alive_log_probs, width, eos_id, last):
    """The `width` best one-token continuations of each sentence's live hypotheses.

    Equal to ranking all beam x vocabulary sums of a hypothesis's log-probability and the
    next token's log-softmax, padding never chosen and only the end token at a sentence's
    `last` position; but since a hypothesis adds one constant to all its tokens, a
    sentence's best `width` continuations lie among each hypothesis's best `width` tokens,
    so only beam x (width + 2) candidates are ranked (`search._candidates`).

    Args:
        logits: float [batch, beam, vocab].
        alive_log_probs: float32 [batch, beam].
        width: int, the candidates to return (2 x beam).
        last: bool [batch], the next token is the sentence's last allowed one.
    Returns:
        (sums float32 [batch, width] best first, beams int32 [batch, width], tokens int32
        [batch, width]); disallowed candidates have sums near `NEG`.
    """
    logits = ops.cast(logits, "float32")
    batch, beams, vocab = ops.shape(logits)[0], logits.shape[1], logits.shape[2]
    # The log-softmax normaliser as TensorFlow computes it: max + log sum exp(x - max).
    row_max = ops.max(logits, axis=2, keepdims=True)
    normaliser = ops.log(ops.sum(ops.exp(logits - row_max), axis=2, keepdims=True))
    # One more than `width` per hypothesis (padding may be among them), then the end token
    # as its own column: the only one allowed at a last position, never allowed elsewhere.
    values, tokens = ops.top_k(logits, min(width + 1, vocab))
    values = ops.concatenate([values, logits[:, :, eos_id:eos_id + 1]], axis=2)
    tokens = ops.concatenate([ops.cast(tokens, "int32"),
                              ops.full((batch, beams, 1), eos_id, "int32")], axis=2)
    columns = tokens.shape[2]
    is_end_column = ops.equal(ops.arange(columns), columns - 1)
    allowed = ops.where(last[:, None, None], is_end_column,
                        ops.logical_not(is_end_column) & ops.not_equal(tokens, PAD_ID))
    token_log_probs = ops.where(allowed, (values - row_max) - normaliser, NEG)
    sums = ops.reshape(alive_log_probs[:, :, None] + token_log_probs, (batch, -1))
    top_sums, picks = ops.top_k(sums, width)
    picks = ops.cast(picks, "int32")
    tokens = ops.take_along_axis(ops.reshape(tokens, (batch, -1)), picks, axis=1)
    return top_sums, picks // columns, tokens


def translate_ids(model, source_ids, beam_size=PAPER.beam_size, alpha=PAPER.alpha,
                  extra_length=PAPER.extra_length, max_length=None, bos_id=BOS_ID,
                  eos_id=EOS_ID, num_results=1, early_finish=True):
    """Beam search over a `Transformer` in `keras.ops`: source ids in, target ids out.

    Encodes once; cross-attention keys/values are computed once per sentence and shared by
    its beams; every step runs `model.decode_step` on one new position with a fixed-slot
    cache. Runs eagerly, inside `tf.function` and inside `jax.jit`
    (`make_translate_function`).

    Example:
        >>> import numpy as np
        >>> from keras_transformer import Transformer, TransformerConfig
        >>> model = Transformer(TransformerConfig.preset("base", vocab_size=20,
        ...                     num_layers=1, d_model=16, d_ff=32, num_heads=2))
        >>> ids, scores = translate_ids(model, np.array([[5, 6, 7, 3]]), beam_size=2,
        ...                             extra_length=3, num_results=2)
        >>> tuple(ids.shape), tuple(scores.shape)
        ((1, 2, 7), (1, 2))

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: int [batch, source_len], 0-padded.
        beam_size: k, an int; 1 with alpha 0 is greedy decoding.
        alpha: the length-penalty exponent (0.6 in the paper; 0 ranks by log-probability).
        extra_length: an int: each sentence may produce up to its source length + this
            many tokens, end token included (and at most `max_length`).
        max_length: a cap on generated tokens (default: the model's `max_length`).
        bos_id, eos_id: start and end tokens of the target vocabulary (ints).
        num_results: hypotheses returned per sentence, best first (1 <= n <= beam_size).
        early_finish: stop once no live hypothesis can beat the finished ones; False
            always runs every step (for benchmarks).
    Returns:
        (ids int32 [batch, num_results, min(padded source width + extra_length, cap)],
        0-padded after the end token; scores float32 [batch, num_results], best first), as
        `search.translate_ids` returns them.
    """
    if not 1 <= num_results <= beam_size:
        raise ValueError(f"num_results must be in [1, beam_size={beam_size}], "
                         f"got {num_results}")
    if not model.built:
        model.build()
    k = beam_size
    source_ids = ops.cast(ops.convert_to_tensor(source_ids), "int32")
    batch = ops.shape(source_ids)[0]
    cap = model.config.max_length if max_length is None else max_length
    max_lengths, steps = output_lengths(source_ids, extra_length, cap)
    memory, mask = model.encode(source_ids, training=False)
    cache, memory_state = model.initial_decode_state(memory, mask, num_rows=k,
                                                     max_length=steps)
    positions = ops.arange(steps + 1)

    # Tokens per hypothesis: the start token at position 0, generated tokens after it.
    ids = ops.concatenate([ops.full((batch, k, 1), bos_id, "int32"),
                           ops.zeros((batch, k, steps), "int32")], axis=2)
    # Only the first beam is live at the start, or the k beams would be k copies.
    alive_log_probs = ops.tile(ops.convert_to_tensor([[0.0] + [NEG] * (k - 1)], "float32"),
                               (batch, 1))
    finished_scores = ops.full((batch, k), NEG, "float32")

    def can_improve(step, alive_log_probs, finished_scores):
        # The best a live beam can still reach: its log-probability only falls and the
        # penalty is largest at the sentence's maximum length.
        best_alive = alive_log_probs[:, 0] / length_penalty(max_lengths, alpha)
        return (best_alive > finished_scores[:, num_results - 1]) & (step < max_lengths)

    def not_done(step, alive, alive_log_probs, cache, finished, finished_scores):
        going = step < steps
        if early_finish:
            going = going & ops.any(can_improve(step, alive_log_probs, finished_scores))
        return going

    def body(step, alive, alive_log_probs, cache, finished, finished_scores):
        logits, cache = model.decode_step(alive[:, :, step], step, cache, memory_state)
        last = ops.equal(step + 1, max_lengths)
        top_log_probs, top_beams, top_tokens = _candidates(logits, alive_log_probs, 2 * k,
                                                           eos_id, last)
        write = ops.equal(positions, step + 1)[None, None, :]
        top = ops.where(write, top_tokens[:, :, None], _gather_beams(alive, top_beams))
        top_is_eos = ops.equal(top_tokens, eos_id)

        # Live beams: the k best candidates that did not end.
        alive_log_probs, alive_pick = ops.top_k(ops.where(top_is_eos, NEG, top_log_probs), k)
        alive_pick = ops.cast(alive_pick, "int32")
        alive = _gather_beams(top, alive_pick)
        parents = ops.take_along_axis(top_beams, alive_pick, axis=1)

        # Finished: the k best of the old finished and the candidates that ended now; an
        # ending counts only if it ranks among the k best candidates (beam 1 = greedy).
        ended = top_is_eos & (ops.arange(2 * k) < k)[None, :] & (top_log_probs > NEG / 2)
        ended_scores = ops.where(ended, top_log_probs / length_penalty(step + 1, alpha), NEG)
        finished_scores, pick = ops.top_k(
            ops.concatenate([finished_scores, ended_scores], axis=1), k)
        finished = _gather_beams(ops.concatenate([finished, top], axis=1),
                                 ops.cast(pick, "int32"))
        return (step + 1, alive, alive_log_probs, _gather_beams(cache, parents), finished,
                finished_scores)

    loop_vars = (ops.convert_to_tensor(0, "int32"), ids, alive_log_probs, cache,
                 ops.zeros_like(ids), finished_scores)
    _, alive, alive_log_probs, _, finished, finished_scores = ops.while_loop(
        not_done, body, loop_vars, maximum_iterations=steps)

    # A sentence with no finished hypothesis (only without early finish, stopped at the
    # bound before its own end) returns its live beams instead.
    has_finished = finished_scores[:, :1] > NEG / 2
    alive_scores = alive_log_probs / length_penalty(steps, alpha)
    ids = ops.where(has_finished[:, :, None], finished, alive)[:, :num_results, 1:]
    scores = ops.where(has_finished, finished_scores, alive_scores)[:, :num_results]
    return ids, scores


def make_translate_function(model, beam_size=PAPER.beam_size, alpha=PAPER.alpha,
                            extra_length=PAPER.extra_length, max_length=None, bos_id=BOS_ID,
                            eos_id=EOS_ID, num_results=1, early_finish=True,
                            tensorflow_search=True):
    """A compiled `source_ids -> (ids, scores)` beam search for the current Keras backend.

    * JAX: `translate_ids` under `jax.jit`, the model's variables passed as arguments (in a
      `keras.StatelessScope`, as keras-hub compiles `generate`): weights are not baked into
      the program, and one compilation serves every batch of one shape.
    * TensorFlow: a `tf.function` of `search.translate_ids`, faster outside XLA (a cache
      that grows, finished sentences leave the batch: 2.7x the sentences per CPU second on
      64 Multi30k sentences; under XLA the two are within 10%), or of `translate_ids` with
      `tensorflow_search=False`. Both give the same results.
    * Other backends: `translate_ids` as it is.

    Args: see `translate_ids`. Keep the returned function for many batches: each call of
    `make_translate_function` compiles anew.
    """
    settings = dict(beam_size=beam_size, alpha=alpha, extra_length=extra_length,
                    max_length=max_length, bos_id=bos_id, eos_id=eos_id,
                    num_results=num_results, early_finish=early_finish)
    if not model.built:
        model.build()
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if tensorflow_search:
            from keras_transformer import search

            return tf.function(lambda ids: search.translate_ids(model, ids, **settings))
        return tf.function(lambda ids: translate_ids(model, ids, **settings))
    if backend == "jax":
        import jax

        variables = model.variables

        @jax.jit
        def compiled(values, source_ids):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return translate_ids(model, source_ids, **settings)

        return lambda source_ids: compiled([v.value for v in variables],
                                           ops.convert_to_tensor(source_ids, "int32"))
    return lambda source_ids: translate_ids(model, source_ids, **settings)


def translate(model, source_ids, **settings):
    """Beam search over one batch on the current Keras backend: (ids, scores).

    Under TensorFlow `search.translate_ids` (eagerly: nothing to trace for one batch), else
    `make_translate_function(model, **settings)(source_ids)`. For many batches keep a
    `make_translate_function` instead.

    Args:
        settings: `beam_size`, `alpha`, `extra_length`, `max_length`, `bos_id`, `eos_id`,
            `num_results`, `early_finish`, as `translate_ids` takes them.
    """
    if keras.backend.backend() == "tensorflow":
        from keras_transformer import search

        return search.translate_ids(model, source_ids, **settings)
    return make_translate_function(model, **settings)(source_ids)
