"""FeedForward: FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position (Eq. 2, 3.3)."""
import pytest
import numpy as np

from keras_transformer.layers import FeedForward
from tests.layers.harness import normal, run_layer_test, to_numpy

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

D_MODEL, D_FF = 16, 32


def test_feed_forward_layer():
    run_layer_test(
        FeedForward, dict(d_ff=D_FF), normal((2, 5, D_MODEL), seed=1),
        expected_output_shape=(2, 5, D_MODEL),
        expected_num_trainable_weights=4,  # W1, b1, W2, b2
        expected_num_trainable_params=2 * D_MODEL * D_FF + D_FF + D_MODEL)


def test_output_width_follows_the_input():
    layer = FeedForward(d_ff=8)
    assert tuple(layer(normal((1, 3, 12))).shape) == (1, 3, 12)
    assert tuple(layer.inner.kernel.shape) == (12, 8)
    assert tuple(layer.outer.kernel.shape) == (8, 12)


def test_equals_equation_2():
    layer = FeedForward(d_ff=D_FF)
    x = normal((2, 5, D_MODEL), seed=2)
    out = to_numpy(layer(x))
    w1, b1 = to_numpy(layer.inner.kernel), to_numpy(layer.inner.bias)
    w2, b2 = to_numpy(layer.outer.kernel), to_numpy(layer.outer.bias)
    hidden = x @ w1 + b1
    assert np.any(hidden < 0)  # the ReLU has something to cut
    np.testing.assert_allclose(out, np.maximum(0.0, hidden) @ w2 + b2, atol=1e-5)


def test_is_position_wise():
    """Same weights at every position: permuting positions permutes the outputs."""
    layer = FeedForward(d_ff=D_FF)
    x = normal((2, 6, D_MODEL), seed=3)
    order = np.array([3, 0, 5, 1, 4, 2])
    np.testing.assert_allclose(to_numpy(layer(x[:, order])), to_numpy(layer(x))[:, order],
                               atol=1e-6)


def test_relu_dropout_only_in_training():
    layer = FeedForward(d_ff=D_FF, relu_dropout=0.5)
    x = normal((2, 5, D_MODEL), seed=4)
    inference = to_numpy(layer(x, training=False))
    np.testing.assert_array_equal(to_numpy(layer(x)), inference)  # default: inference
    assert not np.allclose(to_numpy(layer(x, training=True)), inference, atol=1e-3)
