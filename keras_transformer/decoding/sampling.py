"""Sampling decoding: top-k, top-p (nucleus) and temperature (`truncated_logits`), reproducible
from a seed (for back-translation: Edunov et al., 2018).

Stateless ops seeded with (`seed`, step) give the same samples for the same seed, sources and
settings, eagerly, in `tf.function` and in a SavedModel; row i's result j uses stream position
i * num_results + j, whatever the other rows. Pure TensorFlow: TensorFlow Serving runs it.
"""
from keras_transformer.backend import require_tensorflow

require_tensorflow(__name__)
import tensorflow as tf  # noqa: E402  (TensorFlow is the backend: checked above)

from keras_transformer.constants import PAD_ID  # noqa: E402
from keras_transformer.decoding import tf_graph  # noqa: E402
from keras_transformer.decoding.beam import SearchOptions  # noqa: E402
from keras_transformer.decoding.core import NEG as _NEG  # noqa: E402
from keras_transformer.decoding.core import Decoded  # noqa: E402


def truncated_logits(log_probs, topk, topp, temperature):
    """The distribution a token is drawn from `log_probs` float32 [rows, vocab] (disallowed
    tokens at about -1e9): divided by `temperature`, cut to the top k, then to the top-p nucleus
    of those renormalised (at least the most likely token), in Hugging Face's order. Returns
    (logits float32 [rows, width], token ids int32 [rows, width]): scaled log-probabilities, cut
    tokens at -1e9, of the `width` most likely tokens (all unless only top-k cuts)."""
    scaled = tf.where(log_probs > _NEG / 2, log_probs / temperature, _NEG)
    vocab = tf.shape(scaled)[1]
    # A full sort only when top-p needs the cumulative probabilities.
    width = tf.where((topp < 1.0) | (topk <= 0), vocab, tf.minimum(topk, vocab))
    values, tokens = tf.math.top_k(scaled, k=width)
    rank = tf.range(width)[None, :]
    keep = (rank < topk) | (topk <= 0)
    values = tf.where(keep, values, _NEG)
    # Top-p on the renormalised top-k: keep a token while those before it hold less than p.
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


def sample(step_fn, initial_ids, cache, sampling, max_lengths, eos_id, options=SearchOptions()):
    """Draws `options.num_results` outputs per sentence, a token a step from `step_fn`'s logits.

    Args: as `beam_search`'s, but `initial_ids` [batch * num_results] and `cache` have
    num_results rows per sentence, `max_lengths` is [batch], `sampling` is a `Sampling`
    (numbers or unchecked scalar tensors) and `options` have no early_finish or terms.
    Returns:
        `Decoded` in draw order: ids int32 [batch, num_results, length], 0-padded after EOS;
        scores: the sums of the drawn tokens' model log-probabilities (no temperature or cut), as
        beam search's at alpha 0; details with `track_details`.
    """
    topk, topp = tf.cast(sampling.topk, tf.int32), tf.cast(sampling.topp, tf.float32)
    temperature, seed = tf.cast(sampling.temperature, tf.float32), tf.cast(sampling.seed, tf.int64)
    batch = tf.shape(max_lengths)[0]
    n, forced_ids, track_details = options.num_results, options.forced_ids, options.track_details
    n = n if isinstance(n, int) else tf.cast(n, tf.int32)
    max_steps = tf.reduce_max(max_lengths) if options.max_steps is None else options.max_steps
    sentences = {"memory": options.sentence_state, "max_lengths": max_lengths}
    row_lengths = tf.repeat(max_lengths, n)  # [batch * n], row-major like the draws
    if forced_ids is not None:  # one column per step: forced_ids[:, step] always exists
        forced_ids = tf.concat([forced_ids, tf.zeros([batch, max_steps], tf.int32)],
                               1)[:, :max_steps]

    def body(step, ids, done, total, cache, tokens_ta, scores_ta, align_ta):
        out = step_fn(tf.reshape(ids, [batch, n]), step, cache, sentences)
        cache = out[1]
        vocab = out[0].shape[2] or tf.shape(out[0])[2]
        log_probs = tf.reshape(tf.nn.log_softmax(tf.cast(out[0], tf.float32), axis=-1),
                               [-1, vocab])
        aligned = tf.reshape(out[2], [-1]) if track_details else tf.zeros_like(ids)
        columns = tf.range(vocab)[None, :]
        # As in beam search: PAD never, only EOS last, EOS never first, the prefix's token
        # where there is one; the choice is restricted, the scores stay the model's.
        last = tf.equal(step + 1, row_lengths)[:, None]
        disallowed = tf.equal(columns, PAD_ID) | (last & tf.not_equal(columns, eos_id)) | (
            ~last & tf.equal(step, 0) & tf.equal(columns, eos_id))
        if forced_ids is not None:
            forced = tf.repeat(forced_ids[:, step], n)
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

    arrays = [tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=[None])
              for dtype in (tf.int32, tf.float32, tf.int32)]
    rows = tf.shape(initial_ids)[0]
    loop_vars = (tf.constant(0), initial_ids, tf.zeros([rows], tf.bool), tf.zeros([rows]),
                 cache, *arrays)
    out = tf_graph.while_loop(not_done, body, loop_vars, maximum_iterations=max_steps)
    total, arrays = out[3], out[5:]

    def per_sentence(array):  # [steps, batch * n] -> [batch, n, steps]
        return tf.reshape(tf.transpose(array.stack()), [batch, n, -1])

    details = map(per_sentence, arrays[1:]) if track_details else ()
    return Decoded(per_sentence(arrays[0]), tf.reshape(total, [batch, n]), *details)
