"""Residual connections around every sub-layer (Section 3.1) with dropout on the sub-layer
output before the sum (Section 5.4); post-norm (the paper) and pre-norm.
"""
import keras
import numpy as np
import pytest

from keras_transformer.layers import Encoder, EncoderLayer
from keras_transformer.layers.residual import residual
from tests.layers.harness import normal, to_numpy

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

X = normal((2, 4, 8), seed=1, scale=3.0) + 2.0


def sublayer(h):
    return h * 0.5 - 1.0


def test_post_norm_is_layer_norm_of_the_sum():
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    out = to_numpy(residual(X, sublayer, norm, keras.layers.Dropout(0.5), False, False))
    s = X + sublayer(X)
    expected = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_pre_norm_adds_the_sublayer_of_the_normalised_input():
    norm = keras.layers.LayerNormalization(epsilon=1e-6)
    out = to_numpy(residual(X, sublayer, norm, keras.layers.Dropout(0.5), True, False))
    normalised = (X - X.mean(-1, keepdims=True)) / np.sqrt(X.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, X + sublayer(normalised), atol=1e-4)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_dropout_hits_the_sublayer_output_not_the_residual_path(pre_norm):
    """With an identity norm and a sub-layer of ones, out - x is 0 (dropped) or 2 (kept,
    scaled by 1 / (1 - 0.5)): x itself always passes."""
    ones = lambda h: h * 0.0 + 1.0  # noqa: E731
    identity = lambda h: h  # noqa: E731
    dropout = keras.layers.Dropout(0.5, seed=3)
    delta = to_numpy(residual(X, ones, identity, dropout, pre_norm, True)) - X
    assert set(np.round(np.unique(delta), 4)) == {0.0, 2.0}
    np.testing.assert_allclose(
        to_numpy(residual(X, ones, identity, dropout, pre_norm, False)) - X, 1.0, atol=1e-6)


def per_position_stats(x):
    return x.mean(-1), x.std(-1)


def test_post_norm_layers_emit_normalised_vectors_pre_norm_layers_do_not():
    """Post-norm: every layer output is LayerNorm'd (mean 0, std 1 per position at init).
    Pre-norm: the residual stream is left unnormalised, so the stack closes with a
    LayerNorm (stack.py) and only the stack's output is normalised."""
    kwargs = dict(d_ff=16, num_heads=2, d_k=4, d_v=4, dropout=0.0)
    for out, normalised in (
            (EncoderLayer(**kwargs, norm="post")(X), True),
            (EncoderLayer(**kwargs, norm="pre")(X), False),
            (Encoder(num_layers=2, **kwargs, norm="pre")(X), True)):
        mean, std = per_position_stats(to_numpy(out))
        assert np.allclose(mean, 0.0, atol=1e-4) == normalised
        assert np.allclose(std, 1.0, atol=1e-3) == normalised
