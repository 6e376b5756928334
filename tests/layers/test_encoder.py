"""EncoderLayer and Encoder (Section 3.1; the N-layer stack of stack.py).

Each layer is self-attention then a position-wise FFN, each in a residual with dropout
(5.4). Users rely on: padding never changing the vectors of real tokens, N layers with
their own weights, a closing LayerNorm only under pre-norm, dropout only in training.
"""
import numpy as np
import pytest

from keras_transformer.layers import Encoder, EncoderLayer, padding_mask
from tests.layers.harness import normal, run_layer_test, to_numpy

BATCH, LENGTH, D_MODEL, D_FF, HEADS, D_K = 2, 5, 16, 32, 2, 8
LAYER = dict(d_ff=D_FF, num_heads=HEADS, d_k=D_K, d_v=D_K, dropout=0.1)
ATTENTION_PARAMS = 4 * (D_MODEL * D_MODEL + D_MODEL)  # W^Q, W^K, W^V, W^O and biases
FFN_PARAMS = 2 * D_MODEL * D_FF + D_FF + D_MODEL
NORM_PARAMS = 2 * D_MODEL  # gamma, beta
LAYER_PARAMS = ATTENTION_PARAMS + FFN_PARAMS + 2 * NORM_PARAMS


def padded_batch():
    """x, the same x with sentence 1's padding (positions 3:) changed, and the mask."""
    x = normal((BATCH, LENGTH, D_MODEL), seed=1)
    changed = x.copy()
    changed[1, 3:] = normal((LENGTH - 3, D_MODEL), seed=2, scale=5.0)
    ids = np.array([[4] * LENGTH, [4, 4, 4, 0, 0]], "int32")
    return x, changed, padding_mask(ids)


@pytest.mark.parametrize("norm", ["post", pytest.param("pre", marks=pytest.mark.quick)])
def test_encoder_layer(norm):
    x, changed, mask = padded_batch()
    run_layer_test(
        EncoderLayer, dict(LAYER, norm=norm), x,
        expected_output_shape=(BATCH, LENGTH, D_MODEL),
        expected_num_trainable_weights=12,  # attention 4, FFN 4, two LayerNorms 2 each
        expected_num_trainable_params=LAYER_PARAMS,
        call_kwargs=dict(padding_mask=mask),
        mask_kwarg="padding_mask", masked_input_data=changed, unaffected_output=np.s_[:, :3])


@pytest.mark.parametrize("norm, num_layers, weights, params", [
    # N layers with their own weights (shared ones would be counted once).
    ("post", 2, 24, 2 * LAYER_PARAMS),
    ("pre", 1, 14, LAYER_PARAMS + NORM_PARAMS),  # + the stack's closing LayerNorm
])
def test_encoder_stack(norm, num_layers, weights, params):
    x, changed, mask = padded_batch()
    layer, _ = run_layer_test(
        Encoder, dict(LAYER, num_layers=num_layers, norm=norm), x,
        expected_output_shape=(BATCH, LENGTH, D_MODEL),
        expected_num_trainable_weights=weights, expected_num_trainable_params=params,
        call_kwargs=dict(padding_mask=mask),
        mask_kwarg="padding_mask", masked_input_data=changed, unaffected_output=np.s_[:, :3],
        precision_policies=("mixed_bfloat16",))  # the layers' own tests run "bfloat16"
    assert [block.name for block in layer.blocks] == [f"layer_{i}" for i in range(num_layers)]
    assert (layer.final_norm is not None) == (norm == "pre")


@pytest.mark.quick
def test_appended_padding_does_not_change_real_positions():
    encoder = Encoder(num_layers=2, **LAYER)
    x = normal((BATCH, 4, D_MODEL), seed=3)
    padded = np.concatenate([x, normal((BATCH, 3, D_MODEL), seed=4)], axis=1)
    mask = padding_mask(np.array([[5] * 4 + [0] * 3] * BATCH, "int32"))
    np.testing.assert_allclose(to_numpy(encoder(padded, padding_mask=mask))[:, :4],
                               to_numpy(encoder(x)), atol=1e-5)


def test_dropout_only_in_training():
    layer = EncoderLayer(**dict(LAYER, dropout=0.5))
    x = normal((BATCH, LENGTH, D_MODEL), seed=5)
    inference = to_numpy(layer(x, training=False))
    np.testing.assert_array_equal(to_numpy(layer(x)), inference)
    assert not np.allclose(to_numpy(layer(x, training=True)), inference, atol=1e-3)
