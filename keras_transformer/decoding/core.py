"""The rules of beam search, once, in `keras.ops` (top-k and gathers: faster TensorFlow kernels
under TensorFlow). A score is log-probability / `length_penalty`, length counting the end token."""
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer.constants import PAD_ID

NEG = -1e9
"""A finite "minus infinity": keeps sums of scores free of NaNs."""


class Decoded(NamedTuple):
    """What every search returns: n-best (or sampled) outputs per sentence, best first: `ids`
    int32 [batch, n, length], 0-padded after the end token; `scores` float32 [batch, n],
    log-probabilities divided by the length penalty; where asked for, `token_log_probs` float32
    [batch, n, length], 0 at padding, and `alignment`, int32: each token's most-attended source
    position, -1 at padding."""

    ids: Any
    scores: Any
    token_log_probs: Any = None
    alignment: Any = None


def on_tensorflow():
    return keras.backend.backend() == "tensorflow"


def top_k(values, k, wide=False):
    """(values, int32 indices) of the k largest of each row [rows, n]; `wide`: `tf_graph.top_k`."""
    if wide and on_tensorflow():
        from keras_transformer.decoding import tf_graph

        return tf_graph.top_k(values, k)
    top, indices = ops.top_k(values, k)
    return top, ops.cast(indices, "int32")


def take_along(x, indices):
    """x [batch, m, ...] picked along axis 1 by int32 indices [batch, j]."""
    if on_tensorflow():
        import tensorflow as tf

        return tf.gather(x, indices, batch_dims=1)
    return ops.take_along_axis(x, indices, axis=1)


def take_rows(x, rows):
    if on_tensorflow():
        import tensorflow as tf

        return tf.gather(x, rows)
    return ops.take(x, rows, axis=0)


def length_penalty(length, alpha):
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016, Section 7), float32."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def alignment_layer(num_layers):
    """The decoder layer whose head-averaged cross-attention aligns best: the penultimate (Garg et
    al., 2019, Section 4), or a 1-layer decoder's only one."""
    return max(num_layers - 2, 0)


def output_lengths(source_ids, extra_length, cap, prefix_ids=None, terms_ids=None):
    """(max_lengths int32 [batch], max_steps, the cut prefix int32 or None): how many tokens a
    translation of each 0-padded source may have (source length + extra_length, at most cap),
    and the search's bound (from the padded widths, a Python int where static: one compiled
    search per shape). A 0-padded `prefix_ids` [batch, width] (forced first tokens, cut to
    `cap - 1`) and `terms_ids` [batch, phrases, length] (required phrases; TensorFlow only;
    InvalidArgumentError where they need more than `cap`) get room, with the end token."""
    source_lengths = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)
    max_lengths = ops.minimum(source_lengths + extra_length, cap)
    width = source_ids.shape[1]
    if width is None or not isinstance(extra_length, int):
        max_steps = ops.minimum(ops.shape(source_ids)[1] + extra_length, cap)
    else:
        max_steps = min(width + extra_length, cap)
    if prefix_ids is None and terms_ids is None:
        return max_lengths, max_steps, None
    needed, bound = 1, 1  # the end token
    if prefix_ids is not None:
        prefix_ids = ops.cast(ops.convert_to_tensor(prefix_ids), "int32")[:, :cap - 1]
        columns = ops.shape(prefix_ids)[1]
        # Up to the last non-padding column: the forced tokens plus the end token must fit.
        needed += ops.max(ops.where(ops.not_equal(prefix_ids, PAD_ID),
                                    ops.arange(1, columns + 1, dtype="int32")[None, :], 0),
                          axis=1, initial=0)
        bound += columns
    if terms_ids is not None:  # required phrases exist under TensorFlow only
        import tensorflow as tf

        terms_ids = tf.convert_to_tensor(terms_ids, tf.int32)
        needed += tf.reduce_sum(tf.cast(tf.not_equal(terms_ids, PAD_ID), tf.int32), [1, 2])
        bound += tf.shape(terms_ids)[1] * tf.shape(terms_ids)[2]
        check = tf.debugging.assert_less_equal(
            needed, cap, message=f"the required phrases do not fit: with the target prefix "
            f"and the end token, a translation may have at most {cap} tokens")
        with tf.control_dependencies([check]):
            needed = tf.identity(needed)
    return (ops.minimum(ops.maximum(max_lengths, needed), cap),
            ops.minimum(ops.maximum(max_steps, bound), cap), prefix_ids)


def gather_beams(nest, beam_indices, sentences=None):
    """Picks hypotheses along axis 1 of every tensor of `nest` ([batch, beam, ...]); with
    `sentences` (int32 [b]; `beam_indices` [b, beams]) also keeps only those sentences, in one
    gather of flat rows (faster without XLA than a batched one: docs/library.md)."""
    shape = ops.shape(beam_indices)
    picked = ops.arange(shape[0], dtype="int32") if sentences is None else sentences

    def gather(x):
        rest = tuple(ops.shape(x)[2:])
        flat = ops.reshape(beam_indices + picked[:, None] * ops.shape(x)[1], (-1,))
        rows = take_rows(ops.reshape(x, (-1,) + rest), flat)
        return ops.reshape(rows, (shape[0], shape[1]) + rest)

    return keras.tree.map_structure(gather, nest)


def log_softmax_parts(logits):
    """(float32 [batch * beam, vocab] rows of `logits`, their maxima, log sum exp(x - max) [rows,
    1]), as TensorFlow's log_softmax: a token's log-probability is (logit - max) - normaliser."""
    logits = ops.cast(logits, "float32")
    rows = ops.reshape(logits, (-1, ops.shape(logits)[2]))
    row_max = ops.max(rows, axis=1, keepdims=True)
    normaliser = ops.log(ops.sum(ops.exp(rows - row_max), axis=1, keepdims=True))
    return rows, row_max, normaliser


def candidates(logits, alive_log_probs, width, eos_id, last, forced, first=False):
    """The `width` (int or int32 scalar) best one-token continuations of each sentence's live
    hypotheses, from `logits` [batch, beam, vocab] and `alive_log_probs` float32 [batch, beam]:
    (sums float32 best first, beams int32, tokens int32, token log-probabilities float32), each
    [batch, width]; `NEG` log-probabilities where fewer than `width` are allowed.

    As if ranking all beam x vocabulary continuations (padding never, only the end token where
    `last` (bool [batch]), the `forced` token (int32 [batch] or None) where > 0, the end token
    not `first` (bool scalar); scores unmasked), ranking each hypothesis's best `width` + 2. A
    hypothesis never ends before its first token (fairseq's `--min-len 1`): under a length
    penalty an empty one may outscore every real translation.
    """
    batch, beams, vocab = ops.shape(logits)
    rows, row_max, normaliser = log_softmax_parts(logits)
    # `width` + 1 per hypothesis (padding, never chosen, may be among them; a Python int where
    # static: JAX's top-k needs a static k), plus the end (or forced) token as its own column:
    # the only one allowed where it must come, else never.
    static = isinstance(width, int) and isinstance(vocab, int)
    k = min(width + 1, vocab) if static else ops.minimum(width + 1, vocab)
    values, tokens = top_k(rows, k, wide=True)
    special, only_special = ops.full((batch,), eos_id, "int32"), last
    if forced is not None:
        special = ops.where(forced > 0, forced, special)
        only_special = last | (forced > 0)
    special = ops.repeat(special, beams, axis=0)[:, None]
    values = ops.concatenate([values, take_along(rows, special)], axis=1)
    tokens = ops.concatenate([tokens, special], axis=1)
    columns = ops.shape(tokens)[1]
    is_special = ops.equal(ops.arange(columns, dtype="int32"), columns - 1)
    ending_too_soon = ops.logical_and(first, ops.equal(tokens, eos_id))
    allowed = ops.where(ops.repeat(only_special, beams, axis=0)[:, None], is_special[None, :],
                        ops.logical_not(is_special)[None, :] & ops.not_equal(tokens, PAD_ID)
                        & ops.logical_not(ending_too_soon))
    token_log_probs = ops.where(allowed, (values - row_max) - normaliser, NEG)
    sums = ops.reshape(alive_log_probs, (-1, 1)) + token_log_probs
    top_sums, picks = top_k(ops.reshape(sums, (batch, -1)), width)
    return (top_sums, picks // columns, take_along(ops.reshape(tokens, (batch, -1)), picks),
            take_along(ops.reshape(token_log_probs, (batch, -1)), picks))


def can_improve(step, alive_log_probs, finished_scores, max_lengths, alpha, num_results,
                stop_rule="exact"):
    """bool [batch]: whether a sentence is still searched. "exact": its best live hypothesis,
    scored at its maximum length, can still beat its `num_results`-th finished one (once False,
    always False). "best_finished" (CTranslate2's, Hugging Face's): also stop once that one beats
    the best live one as it stands (fewer steps, not always exact)."""
    target = finished_scores[:, num_results - 1]
    going = ((alive_log_probs[:, 0] / length_penalty(max_lengths, alpha) > target)
             & (step < max_lengths))
    if stop_rule == "best_finished":
        going = going & (alive_log_probs[:, 0] / length_penalty(step, alpha) > target)
    return going
