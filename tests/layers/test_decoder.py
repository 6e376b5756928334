"""DecoderLayer and Decoder (Section 3.1; masked self-attention 3.2.3; stack.py).

Each layer: masked self-attention, attention over the encoder output, position-wise FFN.
Users rely on: position i never seeing targets > i, padded source positions never seen,
the cached one-position `step` (beam search) reproducing the full teacher-forced pass, and
the cross-attention weights (used for alignment) being a distribution over real tokens.
"""
import numpy as np
import pytest

from keras_transformer.layers import Decoder, DecoderLayer, causal_mask, padding_mask
from tests.layers.harness import normal, run_layer_test, to_numpy

BATCH, LENGTH, SOURCE, D_MODEL, D_FF, HEADS, D_K = 2, 5, 7, 16, 32, 2, 8
LAYER = dict(d_ff=D_FF, num_heads=HEADS, d_k=D_K, d_v=D_K, dropout=0.1)
ATTENTION_PARAMS = 4 * (D_MODEL * D_MODEL + D_MODEL)
FFN_PARAMS = 2 * D_MODEL * D_FF + D_FF + D_MODEL
NORM_PARAMS = 2 * D_MODEL
LAYER_PARAMS = 2 * ATTENTION_PARAMS + FFN_PARAMS + 3 * NORM_PARAMS
SOURCE_IDS = np.array([[6] * SOURCE, [6, 6, 6, 6, 0, 0, 0]], "int32")  # sentence 1 padded


def inputs():
    x = normal((BATCH, LENGTH, D_MODEL), seed=1)
    memory = normal((BATCH, SOURCE, D_MODEL), seed=2)
    changed = memory.copy()
    changed[1, 4:] = normal((SOURCE - 4, D_MODEL), seed=3, scale=5.0)
    return x, memory, changed


@pytest.mark.parametrize("norm", [pytest.param("post", marks=pytest.mark.quick), "pre"])
def test_decoder_layer(norm):
    x, memory, changed = inputs()
    run_layer_test(
        DecoderLayer, dict(LAYER, norm=norm), dict(x=x, memory=memory),
        expected_output_shape=(BATCH, LENGTH, D_MODEL),
        # self-attention 4, cross-attention 6 (query, fused kv, output), FFN 4, 3 LayerNorms
        expected_num_trainable_weights=20,
        expected_num_trainable_params=LAYER_PARAMS,
        call_kwargs=dict(self_mask=causal_mask(LENGTH), memory_mask=padding_mask(SOURCE_IDS)),
        mask_kwarg="memory_mask", masked_input_data=dict(x=x, memory=changed))


@pytest.mark.parametrize("norm, num_layers, weights, params", [
    # N layers with their own weights (shared ones would be counted once).
    ("post", 2, 40, 2 * LAYER_PARAMS),
    ("pre", 1, 22, LAYER_PARAMS + NORM_PARAMS),  # + the stack's closing LayerNorm
])
def test_decoder_stack(norm, num_layers, weights, params):
    x, memory, changed = inputs()
    layer, _ = run_layer_test(
        Decoder, dict(LAYER, num_layers=num_layers, norm=norm), dict(x=x, memory=memory),
        expected_output_shape=(BATCH, LENGTH, D_MODEL),
        expected_num_trainable_weights=weights, expected_num_trainable_params=params,
        call_kwargs=dict(memory_mask=padding_mask(SOURCE_IDS)),
        mask_kwarg="memory_mask", masked_input_data=dict(x=x, memory=changed),
        precision_policies=("mixed_bfloat16",))  # the layers' own tests run "bfloat16"
    assert (layer.final_norm is not None) == (norm == "pre")


def test_decoder_layer_self_mask_hides_later_targets():
    layer = DecoderLayer(**LAYER)
    x, memory, _ = inputs()
    mask = causal_mask(LENGTH)
    out = to_numpy(layer(x, memory, self_mask=mask))
    changed = x.copy()
    changed[:, 2:] = normal((BATCH, LENGTH - 2, D_MODEL), seed=4)
    np.testing.assert_allclose(to_numpy(layer(changed, memory, self_mask=mask))[:, :2],
                               out[:, :2], atol=1e-5)
    assert not np.allclose(to_numpy(layer(changed, memory))[:, :2],
                           to_numpy(layer(x, memory))[:, :2], atol=1e-3)


@pytest.mark.quick
def test_decoder_is_causal_without_being_asked():
    decoder = Decoder(num_layers=2, **LAYER)
    x, memory, _ = inputs()
    out = to_numpy(decoder(x, memory))
    changed = x.copy()
    changed[:, 2:] = normal((BATCH, LENGTH - 2, D_MODEL), seed=5)
    other = to_numpy(decoder(changed, memory))
    np.testing.assert_allclose(other[:, :2], out[:, :2], atol=1e-5)
    assert not np.allclose(other[:, 2:], out[:, 2:], atol=1e-3)


def test_cross_attention_weights_are_a_distribution_over_real_source_tokens():
    decoder = Decoder(num_layers=2, **LAYER)
    x, memory, _ = inputs()
    out, weights = decoder(x, memory, memory_mask=padding_mask(SOURCE_IDS),
                           return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), to_numpy(
        decoder(x, memory, memory_mask=padding_mask(SOURCE_IDS))), atol=1e-6)
    weights = to_numpy(weights)
    assert weights.shape == (BATCH, HEADS, LENGTH, SOURCE)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(weights[1, ..., 4:], 0.0)


def run_cached(layer, rows, memory_kv, memory_mask, max_length):
    """Feeds `rows` (hypotheses [batch, rows, length, d]) one position at a time."""
    if isinstance(layer, Decoder):
        cache = layer.initial_cache(BATCH, rows.shape[1], max_length)
    else:
        cache = layer.self_attention.initial_cache(BATCH, rows.shape[1], max_length)
    outputs, weights = [], []
    for position in range(rows.shape[2]):
        out, cache, w = layer.step(rows[:, :, position], position, cache, memory_kv,
                                   memory_mask, return_attention_scores=True)
        outputs.append(to_numpy(out))
        weights.append(to_numpy(w))
    # -> [batch, rows, length, d_model], [batch, heads, rows, length, source_length]
    return np.stack(outputs, axis=2), np.stack(weights, axis=3)


@pytest.mark.parametrize("stack, norm", [(False, "post"), (True, "pre")])
def test_cached_step_matches_full_pass(stack, norm):
    layer = (Decoder(num_layers=2, **dict(LAYER, norm=norm)) if stack
             else DecoderLayer(**dict(LAYER, norm=norm)))
    _, memory, _ = inputs()
    mask = padding_mask(SOURCE_IDS)
    rows = np.stack([normal((BATCH, LENGTH, D_MODEL), seed=10 + r) for r in range(2)], axis=1)
    full, full_weights = [], []
    for r in range(2):
        if stack:
            out, w = layer(rows[:, r], memory, memory_mask=mask, return_attention_scores=True)
        else:
            out, w = layer(rows[:, r], memory, self_mask=causal_mask(LENGTH), memory_mask=mask,
                           return_attention_scores=True)
        full.append(to_numpy(out))
        full_weights.append(to_numpy(w))
    memory_kv = (layer.project_memory(memory) if stack
                 else layer.cross_attention.project_memory(memory))
    cached, cached_weights = run_cached(layer, rows, memory_kv, mask, max_length=LENGTH + 2)
    for r in range(2):
        np.testing.assert_allclose(cached[:, r], full[r], atol=1e-4)
        np.testing.assert_allclose(cached_weights[:, :, r], full_weights[r], atol=1e-5)
