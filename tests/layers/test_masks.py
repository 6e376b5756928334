"""Attention masks: padding (id 0 is never attended to), causal (Section 3.2.3) and segment
(the pairs of a packed row never see each other).

A mask is boolean, True where attention is allowed, and broadcasts against scores of shape
[batch, heads, queries, keys]. The layers and the model rely on exactly these shapes and
values; `apply_mask` is what turns them into zero attention weight.
"""
import pytest
import numpy as np
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.layers.masks import apply_mask, causal_mask, padding_mask, segment_mask
from tests.layers.harness import to_numpy

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)


def test_padding_mask_masks_pad_id_only():
    assert PAD_ID == 0
    ids = np.array([[5, 1, 2, 3, 0], [9, 0, 0, 0, 0]], "int32")  # 1-3: reserved, not pad
    mask = padding_mask(ids)
    assert tuple(mask.shape) == (2, 1, 1, 5)
    assert mask.dtype == "bool"
    np.testing.assert_array_equal(to_numpy(mask)[:, 0, 0], ids != 0)


def test_padding_mask_broadcasts_over_heads_and_queries():
    mask = padding_mask(np.array([[4, 4, 0]], "int32"))
    scores = ops.zeros((1, 3, 2, 3))  # [batch, heads, queries, keys]
    masked = to_numpy(apply_mask(scores, mask))
    np.testing.assert_array_equal(masked[..., :2], 0.0)
    np.testing.assert_array_equal(masked[..., 2], -1e9)


def test_causal_mask_is_lower_triangular():
    """Position i may attend to positions <= i: itself included, the future excluded."""
    mask = causal_mask(4)
    assert tuple(mask.shape) == (1, 1, 4, 4)
    assert mask.dtype == "bool"
    np.testing.assert_array_equal(to_numpy(mask)[0, 0], np.tril(np.ones((4, 4), bool)))


def test_causal_and_padding_masks_combine():
    combined = to_numpy(ops.logical_and(causal_mask(3), padding_mask(np.array([[6, 0, 0]]))))
    assert combined.shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(combined[0, 0], [[True, False, False]] * 3)


def test_apply_mask_sets_forbidden_scores_to_a_large_negative():
    scores = np.arange(6, dtype="float32").reshape(1, 1, 2, 3)
    mask = np.array([[[[True, False, True], [False, True, True]]]])
    out = to_numpy(apply_mask(ops.convert_to_tensor(scores), mask))
    np.testing.assert_array_equal(out[mask], scores[mask])
    np.testing.assert_array_equal(out[~mask], -1e9)
    # After the softmax a forbidden key has exactly zero weight.
    weights = to_numpy(ops.softmax(ops.convert_to_tensor(out), axis=-1))
    np.testing.assert_array_equal(weights[~mask], 0.0)


def test_apply_mask_without_mask_is_identity():
    scores = ops.convert_to_tensor(np.ones((1, 1, 2, 2), "float32"))
    assert apply_mask(scores, None) is scores


def test_segment_mask_keeps_attention_within_each_pair():
    """Pairs 1 and 2 of a packed row, then padding (0): each sees only its own pair."""
    segments = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1]], "int32")
    mask = segment_mask(segments, segments)
    assert tuple(mask.shape) == (2, 1, 6, 6)
    assert mask.dtype == "bool"
    blocks = np.zeros((6, 6), bool)
    blocks[:2, :2] = blocks[2:5, 2:5] = blocks[5:, 5:] = True
    np.testing.assert_array_equal(to_numpy(mask)[0, 0], blocks)
    np.testing.assert_array_equal(to_numpy(mask)[1, 0], np.ones((6, 6), bool))  # one pair


def test_segment_mask_between_target_and_source_rows():
    """Cross-attention: each target position sees the source of its own pair only; rows of
    different lengths (targets longer here) are fine."""
    source = np.array([[1, 1, 2, 0]], "int32")
    target = np.array([[1, 1, 1, 2, 2, 0]], "int32")
    mask = to_numpy(segment_mask(target, source))
    assert mask.shape == (1, 1, 6, 4)
    np.testing.assert_array_equal(mask[0, 0], target[0][:, None] == source[0][None, :])
    assert not mask[0, 0, :5, 3].any()  # real positions never see padding


def test_segment_and_causal_masks_combine_into_causal_blocks():
    segments = np.array([[1, 1, 1, 2, 2]], "int32")
    combined = to_numpy(ops.logical_and(causal_mask(5), segment_mask(segments, segments)))
    expected = np.zeros((5, 5), bool)
    expected[:3, :3] = np.tril(np.ones((3, 3), bool))
    expected[3:, 3:] = np.tril(np.ones((2, 2), bool))
    np.testing.assert_array_equal(combined[0, 0], expected)
