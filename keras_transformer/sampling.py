"""Sampling decoding: top-k, top-p (nucleus) and temperature, reproducible from a seed.

Beam search finds likely translations; back-translation (Edunov et al., 2018, "Understanding
Back-Translation at Scale") trains better on *sampled* ones, whose variety the beam's
near-copies lack. `sample_ids` draws each token from the model's next-token distribution:

  1. the model's log-probabilities (PAD never allowed; at a sentence's last allowed position
     only EOS; a `DecodingConstraint` or a target prefix restrict the choice as in beam
     search), divided by `temperature` (< 1 sharpens, > 1 flattens);
  2. top-k: only the k most likely tokens (0: no cut);
  3. top-p: of those, renormalised, only the smallest set of most likely tokens whose
     probability reaches p (at least the most likely one; 1: no cut);
  4. one draw from what is left, renormalised.

The order (temperature, top-k, top-p) is that of Hugging Face's samplers. Randomness comes
from stateless ops seeded with (`seed`, step): the same seed, sources and settings give the
same samples on every call, in `tf.function`, eagerly and in an exported SavedModel under
either loader; another seed gives other samples. A row's draws depend on its index in the
batch (row i of the batch, result j: stream position i * num_results + j), not on the other
rows' content. Pure TensorFlow (`tf.while_loop`, `StatelessMultinomial`, `TopKV2`), so it
runs inside an exported graph served by stock TensorFlow Serving.

The incremental decoder is reached as in `keras_transformer.search.translate_ids`:
`model.encode` once, `model.initial_decode_state(..., num_rows=num_results)` (the
cross-attention keys/values are computed once per sentence and shared by its samples), then
one `model.decode_step` a token.
"""
from keras_transformer.backend import require_tensorflow

require_tensorflow(__name__)
import tensorflow as tf  # noqa: E402  (TensorFlow is the backend: checked above)

from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import SamplingSettings  # noqa: F401  (this module's settings)
from keras_transformer.search import (alignment_layer, cache_length, loop_shape_invariants,
                                      output_lengths)

_NEG = -1e9  # a finite "minus infinity", as in beam search


def truncated_logits(log_probs, topk, topp, temperature):
    """The distribution a token is drawn from, as logits over the most likely tokens.

    Args:
        log_probs: float32 [rows, vocab]; disallowed tokens at about -1e9.
        topk, topp, temperature: int32, float32, float32 scalars (see `SamplingSettings`).
    Returns:
        (logits float32 [rows, width], token ids int32 [rows, width]): the tokens' scaled
        log-probabilities, cut tokens at -1e9, for the `width` most likely tokens (all of
        them unless only top-k cuts).
    """
    scaled = tf.where(log_probs > _NEG / 2, log_probs / temperature, _NEG)
    vocab = tf.shape(scaled)[1]
    # A full sort only when top-p needs the cumulative probabilities.
    width = tf.where((topp < 1.0) | (topk <= 0), vocab, tf.minimum(topk, vocab))
    values, tokens = tf.math.top_k(scaled, k=width)
    rank = tf.range(width)[None, :]
    keep = (rank < topk) | (topk <= 0)
    values = tf.where(keep, values, _NEG)
    # Top-p on the top-k distribution, renormalised: keep a token while the tokens before
    # it have less than p; so the first token always stays.
    before = tf.math.cumsum(tf.nn.softmax(values, axis=-1), axis=-1, exclusive=True)
    keep &= (before < topp) | (topp >= 1.0)
    return tf.where(keep, values, _NEG), tokens


def _draw(log_probs, topk, topp, temperature, seed):
    """One token per row [rows] from `truncated_logits`, by stateless multinomial draws."""
    def truncated():
        logits, tokens = truncated_logits(log_probs, topk, topp, temperature)
        pick = tf.random.stateless_categorical(logits, 1, seed, dtype=tf.int32)
        return tf.gather(tokens, pick, batch_dims=1)[:, 0]

    def plain():
        scaled = tf.where(log_probs > _NEG / 2, log_probs / temperature, _NEG)
        return tf.random.stateless_categorical(scaled, 1, seed, dtype=tf.int32)[:, 0]

    return tf.cond((topk > 0) | (topp < 1.0), truncated, plain)


def sample_ids(model, source_ids, *, seed, topk=0, topp=1.0, temperature=1.0, num_results=1,
               extra_length=50, max_length=None, bos_id=BOS_ID, eos_id=EOS_ID,
               constraint=None, target_prefix_ids=None, return_token_scores=False,
               return_alignment=False):
    """Samples translations from a `Transformer`: source ids in, sampled ids out.

    Example:
        >>> ids, log_probs = sample_ids(model, [[52, 17, 9, 3]], seed=7, topp=0.9)

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: int [batch, source_len], 0-padded.
        seed: int or int scalar tensor (int64 range); see the module docstring.
        topk, topp, temperature: see `SamplingSettings` (Python numbers or scalar tensors;
            tensors are not checked here).
        num_results: independent samples per sentence (int or int32 scalar tensor).
        extra_length, max_length, bos_id, eos_id, constraint: as for `translate_ids`; a
            sentence stops at EOS, and EOS is forced at its last allowed position.
        target_prefix_ids: optional int [batch, width], 0-padded: the first tokens of every
            sample are forced to these (their log-probabilities count), as in `translate_ids`.
        return_token_scores, return_alignment: also return each token's log-probability and
            source alignment (`translate_ids`'s: the head-averaged cross-attention argmax of
            `alignment_layer`).
    Returns:
        (ids int32 [batch, num_results, length], 0-padded after EOS, in draw order;
        log_probs float32 [batch, num_results]): the sum of the sampled tokens'
        log-probabilities under the *model's* distribution (without temperature or
        truncation; renormalised over a constraint's allowed tokens, as in beam search), so
        that they compare with beam search scores at alpha 0 and with `score_ids`.
        With `return_token_scores` or `return_alignment` a dict instead: "ids", "log_probs"
        and "token_log_probs" float32 (0 at padding) and/or "alignment" int32 (-1 at
        padding), [batch, num_results, length].
    """
    if not model.built:
        model.build()
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    n = num_results if isinstance(num_results, int) else tf.cast(num_results, tf.int32)
    topk = tf.cast(topk, tf.int32)
    topp, temperature = tf.cast(topp, tf.float32), tf.cast(temperature, tf.float32)
    seed = tf.cast(seed, tf.int64)
    cap = model.config.max_length if max_length is None else max_length
    max_lengths, max_steps, prefix = output_lengths(source_ids, extra_length, cap,
                                                    target_prefix_ids)
    if prefix is not None:  # one column per step: prefix[:, step] is always defined
        prefix = tf.concat([prefix, tf.zeros([batch, max_steps], tf.int32)], 1)[:, :max_steps]
    row_lengths = tf.repeat(max_lengths, n)  # [batch * n], row-major like the draws

    memory, mask = model.encode(source_ids, training=False)
    cache, memory_state = model.initial_decode_state(memory, mask, num_rows=n,
                                                     max_length=cache_length(max_steps))
    if constraint is not None:
        cache = {"model": cache,
                 "constraint": constraint.initial_state(source_ids, n, max_steps)}
    layer = alignment_layer(model.config.num_layers)
    vocab = model.config.vocab_size

    def step_log_probs(ids, step, cache):
        """Model (or constrained) log-probs [batch * n, vocab], the new cache, alignment."""
        model_cache, inputs = cache, ids
        if constraint is not None:
            model_cache = cache["model"]
            inputs = constraint.decoder_inputs(ids, cache["constraint"])
        out = model.decode_step(inputs, step, model_cache, memory_state,
                                return_attention_scores=return_alignment,
                                attention_layer=layer)
        logits, model_cache = out[0], out[1]
        aligned = tf.zeros([batch, n], tf.int32)
        if return_alignment:  # weights [batch, heads, n, source_len]
            aligned = tf.argmax(tf.reduce_mean(tf.cast(out[2], tf.float32), axis=1), axis=-1,
                                output_type=tf.int32)
        if constraint is not None:
            allowed, state = constraint.allowed(ids, step, cache["constraint"], max_lengths,
                                                vocab)
            logits = tf.where(allowed, constraint.logits(logits, state), _NEG)
            model_cache = {"model": model_cache, "constraint": state}
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        return tf.reshape(log_probs, [-1, vocab]), model_cache, tf.reshape(aligned, [-1])

    def body(step, ids, done, total, cache, tokens_ta, scores_ta, align_ta):
        log_probs, cache, aligned = step_log_probs(tf.reshape(ids, [batch, n]), step, cache)
        columns = tf.range(vocab)[None, :]
        # As in beam search: PAD never, only EOS at the last position, the prefix's token
        # where there is one; the choice is restricted, the scores stay the model's.
        disallowed = tf.equal(columns, PAD_ID) | (
            tf.equal(step + 1, row_lengths)[:, None] & tf.not_equal(columns, eos_id))
        if prefix is not None:
            forced = tf.repeat(prefix[:, step], n)
            disallowed |= (forced > 0)[:, None] & tf.not_equal(columns, forced[:, None])
        choice = tf.where(disallowed, _NEG, log_probs)
        token = _draw(choice, topk, topp, temperature, tf.stack([seed, tf.cast(step, tf.int64)]))
        token_log_prob = tf.gather(log_probs, token, batch_dims=1)
        token = tf.where(done, PAD_ID, token)
        token_log_prob = tf.where(done, 0.0, token_log_prob)
        aligned = tf.where(done, -1, aligned)
        return (step + 1, token, done | tf.equal(token, eos_id), total + token_log_prob, cache,
                tokens_ta.write(step, token), scores_ta.write(step, token_log_prob),
                align_ta.write(step, aligned))

    def not_done(step, ids, done, *_):
        return (step < max_steps) & ~tf.reduce_all(done)

    rows = batch * n
    arrays = [tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=[None])
              for dtype in (tf.int32, tf.float32, tf.int32)]
    loop_vars = (tf.constant(0), tf.fill([rows], bos_id), tf.zeros([rows], tf.bool),
                 tf.zeros([rows]), cache, *arrays)
    out = tf.while_loop(not_done, body, loop_vars, maximum_iterations=max_steps,
                        shape_invariants=loop_shape_invariants(loop_vars))
    total, arrays = out[3], out[5:]

    def per_sentence(array):  # [steps, batch * n] -> [batch, n, steps]
        stacked = tf.transpose(array.stack())
        return tf.reshape(stacked, [batch, n, -1])

    ids = per_sentence(arrays[0])
    log_probs = tf.reshape(total, [batch, n])
    if not (return_token_scores or return_alignment):
        return ids, log_probs
    result = {"ids": ids, "log_probs": log_probs}
    if return_token_scores:
        result["token_log_probs"] = per_sentence(arrays[1])
    if return_alignment:
        result["alignment"] = per_sentence(arrays[2])
    return result
