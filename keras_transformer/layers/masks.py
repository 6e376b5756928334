"""Boolean attention masks (True: allowed) that broadcast against attention scores
[batch, heads, queries, keys]."""
from keras import ops

from keras_transformer.constants import PAD_ID


def padding_mask(ids):
    """Mask of the non-pad keys of `ids` [batch, length] -> [batch, 1, 1, length], so that outputs
    do not depend on how much padding a batch adds."""
    return ops.expand_dims(ops.expand_dims(ops.not_equal(ids, PAD_ID), 1), 1)


def causal_mask(length):
    """Mask letting position i attend to positions <= i only -> [1, 1, length, length] (3.2.3)."""
    positions = ops.arange(length)
    return ops.expand_dims(ops.expand_dims(positions[:, None] >= positions[None, :], 0), 0)


def segment_mask(query_segments, key_segments):
    """Mask keeping attention within each pair of a packed row -> [batch, 1, queries, keys]:
    `*_segments` [batch, length] number a row's (source, target) pairs 1, 2, ... (0: padding). A
    query sees only its own pair's keys, so each pair is computed as if alone; padding queries see
    only padding, so no query is left without a key."""
    same = ops.equal(ops.expand_dims(query_segments, 2), ops.expand_dims(key_segments, 1))
    return ops.expand_dims(same, 1)


def apply_mask(scores, mask):
    """Sets scores of disallowed keys to a large negative number before the softmax."""
    if mask is None:
        return scores
    return ops.where(mask, scores, ops.cast(-1e9, scores.dtype))
