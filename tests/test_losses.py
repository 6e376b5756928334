"""Label-smoothed loss (Section 5.4) and the padding-aware metrics."""
import math

import keras
import numpy as np
import pytest

from keras_transformer import LabelSmoothedCrossEntropy, Perplexity, TokenAccuracy, losses
from keras_transformer.losses import smoothed_loss_floor
from tests.helpers import gradients

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)


def loss_and_gradient(label_smoothing):
    """The loss of a fixed padded batch of 37-way logits and its gradient with respect to
    the logits: what training uses, compared across kernels and backends."""
    rng = np.random.default_rng(5)
    targets = rng.integers(3, 37, size=(4, 9)).astype("int32")
    targets[1, 6:] = targets[3, 2:] = 0
    logits = (3.0 * rng.normal(size=(4, 9, 37))).astype("float32")
    loss_fn = LabelSmoothedCrossEntropy(label_smoothing)
    (gradient,) = gradients(lambda x: loss_fn(targets, x), logits)
    return float(loss_fn(targets, logits)), gradient


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the fused kernel and tf.distribute are TensorFlow's")
@pytest.mark.parametrize("label_smoothing", [0.1, 0.0])
def test_tensorflows_kernels_equal_the_keras_ops_reference(label_smoothing, monkeypatch):
    """TensorFlow trains with the fused softmax cross-entropy against the smoothed targets,
    every other backend with the keras.ops version, the reference: loss and gradient agree
    within 1e-6."""
    fused_loss, fused_gradient = loss_and_gradient(label_smoothing)
    monkeypatch.setattr(losses, "tensorflow_kernels", lambda: None)
    loss, gradient = loss_and_gradient(label_smoothing)
    assert abs(fused_loss - loss) <= 1e-6
    np.testing.assert_allclose(fused_gradient, gradient, rtol=0, atol=1e-6)
    assert np.all(gradient[1, 6:] == 0) and np.abs(gradient).max() > 1e-3  # padding: none


def exact_logits(targets, vocab, eps):
    """Logits whose softmax is exactly the smoothed target distribution."""
    on, off = 1 - eps, eps / (vocab - 1)
    logits = np.full(targets.shape + (vocab,), math.log(off), dtype="float32")
    np.put_along_axis(logits, targets[..., None], math.log(on), axis=-1)
    return logits


def test_exact_prediction_gets_the_analytic_smoothed_value():
    vocab, eps = 10, 0.1
    targets = np.array([[3, 4, 5, 0, 0]], dtype="int32")
    loss = float(LabelSmoothedCrossEntropy(eps)(targets, exact_logits(targets, vocab, eps)))
    on, off = 1 - eps, eps / (vocab - 1)
    analytic = -(on * math.log(on) + (vocab - 1) * off * math.log(off))
    assert loss == pytest.approx(analytic, rel=1e-5)
    assert smoothed_loss_floor(vocab, eps) == pytest.approx(analytic)


def test_padded_positions_contribute_nothing():
    rng = np.random.default_rng(0)
    targets = np.array([[3, 4, 5, 0, 0]], dtype="int32")
    logits = rng.normal(size=(1, 5, 10)).astype("float32")
    other = logits.copy()
    other[:, 3:] = rng.normal(size=(1, 2, 10)) * 100  # garbage at the pad positions
    loss_fn = LabelSmoothedCrossEntropy(0.1)
    assert float(loss_fn(targets, logits)) == pytest.approx(float(loss_fn(targets, other)))
    # ...and the mean is over the 3 real tokens, not the 5 positions.
    unpadded = float(loss_fn(targets[:, :3], logits[:, :3]))
    assert float(loss_fn(targets, logits)) == pytest.approx(unpadded, rel=1e-6)


def test_without_smoothing_it_is_plain_cross_entropy():
    targets = np.array([[1, 2]], dtype="int32")
    logits = np.log(np.array([[[0.2, 0.7, 0.1], [0.5, 0.25, 0.25]]], dtype="float32"))
    loss = float(LabelSmoothedCrossEntropy(0.0)(targets, logits))
    assert loss == pytest.approx(-(math.log(0.7) + math.log(0.25)) / 2, rel=1e-5)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.3])
def test_token_accuracy_and_perplexity_ignore_padding(label_smoothing):
    """Perplexity is unsmoothed whatever the loss's eps_ls it derives its values beside."""
    targets = np.array([[1, 2, 0]], dtype="int32")
    probs = np.array([[[0.1, 0.8, 0.1], [0.5, 0.25, 0.25], [0.9, 0.05, 0.05]]], dtype="float32")
    accuracy = TokenAccuracy()
    accuracy.update_state(targets, np.log(probs))
    assert float(accuracy.result()) == pytest.approx(0.5)  # pad position (right by arg-max) ignored
    perplexity = Perplexity(label_smoothing=label_smoothing)
    perplexity.update_state(targets, np.log(probs))
    assert float(perplexity.result()) == pytest.approx(math.exp(-(math.log(0.8) + math.log(0.25)) / 2),
                                                       rel=1e-5)
