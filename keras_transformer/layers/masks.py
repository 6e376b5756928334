"""Attention masks, named and explicit. A mask is boolean: True where attention is allowed.

Masks broadcast against attention scores of shape [batch, heads, queries, keys].
"""
from keras import ops

from keras_transformer.constants import PAD_ID


def padding_mask(ids):
    """Mask of the non-pad keys of `ids` [batch, length] -> [batch, 1, 1, length].

    Queries must never attend to padding (id 0): the model's output for real positions then
    does not depend on how much padding a batch adds.
    """
    return ops.expand_dims(ops.expand_dims(ops.not_equal(ids, PAD_ID), 1), 1)


def causal_mask(length):
    """Mask letting position i attend to positions <= i only -> [1, 1, length, length].

    Section 3.2.3: the decoder must not see the tokens it is about to predict.
    """
    positions = ops.arange(length)
    return ops.expand_dims(ops.expand_dims(positions[:, None] >= positions[None, :], 0), 0)


def segment_mask(query_segments, key_segments):
    """Mask keeping attention within each pair of a packed row -> [batch, 1, queries, keys].

    A packed row holds several (source, target) pairs one after another; `*_segments`
    [batch, length] number them 1, 2, ... along the row, 0 marking padding. A query may see
    only the keys of its own pair, so each pair is computed exactly as if it were alone
    (with the causal mask in decoder self-attention, and between target and source of
    the same pair in cross-attention). Real queries never see padding (segment 0), and
    padding queries see only padding, so no query is left without a key.
    """
    same = ops.equal(ops.expand_dims(query_segments, 2), ops.expand_dims(key_segments, 1))
    return ops.expand_dims(same, 1)


def apply_mask(scores, mask):
    """Sets scores of disallowed keys to a large negative number before the softmax."""
    if mask is None:
        return scores
    return ops.where(mask, scores, ops.cast(-1e9, scores.dtype))


