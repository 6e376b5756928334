"""MultiHeadAttention: Section 3.2 (Eq. 1, multi-head 3.2.2, masking 3.2.3) and its cache.

Checks that the layer computes softmax(Q K^T / sqrt(d_k)) V per head as in the paper, that
a padding mask gives padded keys exactly zero weight (their contents cannot leak into the
output), that a causal mask hides later positions, and that the cached `step` used by
beam search reproduces the full causal pass.
"""
import math

import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import MultiHeadAttention, causal_mask, padding_mask
from tests.layers.harness import normal, run_layer_test, to_numpy

BATCH, LENGTH, MEMORY_LENGTH, D_MODEL = 2, 5, 7, 16


def lengths_mask(lengths, max_length):
    """padding_mask of ids whose sentence i has `lengths[i]` real tokens."""
    ids = np.zeros((len(lengths), max_length), "int32")
    for row, length in enumerate(lengths):
        ids[row, :length] = 7
    return padding_mask(ids)


def reference(layer, query, memory=None, mask=None):
    """Eq. 1 and Section 3.2.2 in numpy from the layer's own weights -> (output, weights)."""
    h, dk, dv = layer.num_heads, layer.key_dim, layer.value_dim
    if layer.self_attention:
        kernel, bias = (to_numpy(w) for w in layer.qkv_projection.weights)
        qkv = query @ kernel + bias
        q, k, v = qkv[..., :h * dk], qkv[..., h * dk:2 * h * dk], qkv[..., 2 * h * dk:]
    else:
        kernel, bias = (to_numpy(w) for w in layer.query_projection.weights)
        q = query @ kernel + bias
        kernel, bias = (to_numpy(w) for w in layer.kv_projection.weights)
        kv = memory @ kernel + bias
        k, v = kv[..., :h * dk], kv[..., h * dk:]

    def heads(t, depth):
        return t.reshape(t.shape[0], t.shape[1], h, depth).transpose(0, 2, 1, 3)

    scores = heads(q, dk) @ heads(k, dk).transpose(0, 1, 3, 2) / math.sqrt(dk)
    if mask is not None:
        scores = np.where(to_numpy(mask), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    concat = (weights @ heads(v, dv)).transpose(0, 2, 1, 3).reshape(
        query.shape[0], query.shape[1], h * dv)
    kernel, bias = (to_numpy(w) for w in layer.output_projection.weights)
    return concat @ kernel + bias, weights


@pytest.mark.quick
def test_self_attention_layer():
    x = normal((BATCH, LENGTH, D_MODEL), seed=1)
    changed = x.copy()
    changed[1, 3:] = normal((LENGTH - 3, D_MODEL), seed=2, scale=5.0)  # sentence 1's padding
    run_layer_test(
        MultiHeadAttention, dict(num_heads=2, key_dim=8), x,
        expected_output_shape=(BATCH, LENGTH, D_MODEL),
        run_graph_check=True,
        expected_num_trainable_weights=4,  # fused qkv and output: kernel + bias each
        # W^Q, W^K, W^V, W^O are d_model x d_model when h * d_k = d_model, plus biases.
        expected_num_trainable_params=4 * (D_MODEL * D_MODEL + D_MODEL),
        call_kwargs=dict(attention_mask=lengths_mask([LENGTH, 3], LENGTH)),
        mask_kwarg="attention_mask", masked_input_data=changed,
        unaffected_output=np.s_[:, :3])  # every real (non-pad) query position


def test_cross_attention_layer_with_free_d_k_d_v_and_memory_width():
    """Table 3 rows A/B vary d_k and d_v apart from d_model; K and V come from the memory."""
    query = normal((BATCH, 3, D_MODEL), seed=3)
    memory = normal((BATCH, MEMORY_LENGTH, 12), seed=4)
    changed = memory.copy()
    changed[1, 4:] = normal((MEMORY_LENGTH - 4, 12), seed=5, scale=5.0)
    h, dk, dv = 2, 4, 6
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=h, key_dim=dk, value_dim=dv, self_attention=False),
        dict(query=query, memory=memory),
        expected_output_shape=(BATCH, 3, D_MODEL),
        run_graph_check=True,
        expected_num_trainable_weights=6,  # query, fused kv, output
        expected_num_trainable_params=(D_MODEL * h * dk + h * dk)            # W^Q
        + (12 * h * (dk + dv) + h * (dk + dv))                               # W^K, W^V
        + (h * dv * D_MODEL + D_MODEL),                                      # W^O
        call_kwargs=dict(attention_mask=lengths_mask([MEMORY_LENGTH, 4], MEMORY_LENGTH)),
        mask_kwarg="attention_mask", masked_input_data=dict(query=query, memory=changed))


@pytest.mark.parametrize("self_attention", [True, False])
def test_matches_equation_1_and_padded_keys_get_zero_weight(self_attention):
    layer = MultiHeadAttention(num_heads=2, key_dim=8, self_attention=self_attention)
    query = normal((BATCH, LENGTH, D_MODEL), seed=6)
    memory = query if self_attention else normal((BATCH, MEMORY_LENGTH, D_MODEL), seed=7)
    keys = memory.shape[1]
    mask = lengths_mask([keys, 3], keys)
    output, weights = layer(query, memory=None if self_attention else memory,
                            attention_mask=mask, return_attention_scores=True)
    expected_output, expected_weights = reference(layer, query, memory, mask)
    np.testing.assert_allclose(to_numpy(output), expected_output, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-6)
    weights = to_numpy(weights)
    assert weights.shape == (BATCH, 2, LENGTH, keys)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(weights[1, :, :, 3:], 0.0)
    assert np.all(weights[1, :, :, :3] > 0)


@pytest.mark.quick
def test_scores_are_scaled_by_sqrt_d_k():
    """Identical keys for every position: only the 1/sqrt(d_k) scale sets the peakedness."""
    layer = MultiHeadAttention(num_heads=1, key_dim=4)
    x = normal((1, 3, 8), seed=8)
    _, weights = layer(x, return_attention_scores=True)
    kernel, bias = (to_numpy(w) for w in layer.qkv_projection.weights)
    qkv = x @ kernel + bias
    scores = qkv[0, :, :4] @ qkv[0, :, 4:8].T
    for scale, close in ((1 / math.sqrt(4), True), (1.0, False)):
        s = scores * scale
        expected = np.exp(s - s.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        assert np.allclose(to_numpy(weights)[0, 0], expected, atol=1e-6) == close


@pytest.mark.quick
def test_causal_mask_hides_later_positions():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    x = normal((BATCH, LENGTH, D_MODEL), seed=9)
    mask = causal_mask(LENGTH)
    out = to_numpy(layer(x, attention_mask=mask))
    for t in (1, 3):
        changed = x.copy()
        changed[:, t:] = normal((BATCH, LENGTH - t, D_MODEL), seed=10 + t)
        np.testing.assert_allclose(to_numpy(layer(changed, attention_mask=mask))[:, :t],
                                   out[:, :t], atol=1e-6)
        # Without the mask, the same change reaches the earlier positions.
        assert not np.allclose(to_numpy(layer(changed))[:, :t], to_numpy(layer(x))[:, :t],
                               atol=1e-3)


@pytest.mark.quick
def test_fully_padded_sentence_stays_finite():
    """A batch-filler sentence of pad only (every key masked) must not produce NaN."""
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    out = to_numpy(layer(normal((BATCH, LENGTH, D_MODEL), seed=11),
                         attention_mask=lengths_mask([LENGTH, 0], LENGTH)))
    assert np.all(np.isfinite(out))


def test_cross_attention_precomputed_memory_kv_equals_memory():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, self_attention=False)
    query, memory = normal((BATCH, 3, D_MODEL), seed=12), normal((BATCH, 6, D_MODEL), seed=13)
    mask = lengths_mask([6, 2], 6)
    direct = to_numpy(layer(query, memory=memory, attention_mask=mask))
    memory_kv = layer.project_memory(memory)
    assert tuple(memory_kv[0].shape) == (BATCH, 2, 6, 8) == tuple(memory_kv[1].shape)
    np.testing.assert_allclose(
        to_numpy(layer(query, memory_kv=memory_kv, attention_mask=mask)), direct, atol=1e-6)
    with pytest.raises(ValueError, match="memory"):
        layer(query)


@pytest.mark.parametrize("dk, dv", [(8, 8), (4, 6)])
def test_cached_step_matches_causal_full_pass(dk, dv):
    """Beam search's path: one position per step for 2 hypotheses (rows) per sentence."""
    layer = MultiHeadAttention(num_heads=2, key_dim=dk, value_dim=dv)
    rows = [normal((BATCH, LENGTH, D_MODEL), seed=14 + r) for r in range(2)]
    full = [to_numpy(layer(r, attention_mask=causal_mask(LENGTH))) for r in rows]
    caches = {"fixed": layer.initial_cache(BATCH, 2, max_length=LENGTH + 3),  # > used
              "growing": layer.initial_cache(BATCH, 2)}
    assert tuple(caches["fixed"]["key"].shape) == (BATCH, 2, 2, LENGTH + 3, dk)
    assert tuple(caches["fixed"]["value"].shape) == (BATCH, 2, 2, LENGTH + 3, dv)
    assert tuple(caches["growing"]["growing_key"].shape) == (BATCH, 2, 2, 0, dk)
    for position in range(LENGTH):
        query = np.stack([r[:, position] for r in rows], axis=1)  # [batch, rows, d_model]
        for kind, cache in caches.items():
            out, caches[kind] = layer.step(query, position, cache)
            for r in range(2):
                np.testing.assert_allclose(to_numpy(out)[:, r], full[r][:, position],
                                           atol=1e-5)
    fixed, growing = caches["fixed"], caches["growing"]
    # Fixed slots past the last position were never written; the growing cache holds
    # exactly the positions decoded, equal to the fixed slots'.
    np.testing.assert_array_equal(to_numpy(fixed["key"])[:, :, :, LENGTH:], 0.0)
    assert np.all(np.any(to_numpy(fixed["key"])[:, :, :, :LENGTH] != 0, axis=-1))
    np.testing.assert_array_equal(to_numpy(growing["growing_key"]),
                                  to_numpy(fixed["key"])[:, :, :, :LENGTH])
    np.testing.assert_array_equal(to_numpy(growing["growing_value"]),
                                  to_numpy(fixed["value"])[:, :, :, :LENGTH])


def test_step_attention_weights_cover_the_prefix_only():
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    x = normal((1, 4, D_MODEL), seed=16)
    _, full_weights = layer(x, attention_mask=causal_mask(4), return_attention_scores=True)
    cache = layer.initial_cache(1, 1, max_length=6)
    for position in range(4):
        _, cache, weights = layer.step(x[:, position:position + 1], position, cache,
                                       return_attention_scores=True)
        weights = to_numpy(weights)  # [batch, rows, heads, max_length]
        np.testing.assert_allclose(weights[0, 0, :, :4], to_numpy(full_weights)[0, :, position],
                                   atol=1e-6)
        np.testing.assert_array_equal(weights[0, 0, :, position + 1:], 0.0)


def test_initial_cache_has_compute_dtype():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dtype="bfloat16")
    layer(ops.zeros((1, 2, D_MODEL), "bfloat16"))
    cache = layer.initial_cache(1, 3, 4)
    assert cache["key"].dtype == cache["value"].dtype == "bfloat16"
