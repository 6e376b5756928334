"""The library under JAX, inside the one plain `pytest` run (issue 25).

The Keras backend is fixed per process, so `test_the_library_under_jax`, in the TensorFlow
process, runs `JAX_TESTS` (this file included) in a `KERAS_BACKEND=jax` pytest process.
There the tests below compare with what the library computed under TensorFlow, which that
test writes to a file first. Run alone, `KERAS_BACKEND=jax pytest tests/test_backends.py`
computes the TensorFlow values in a TensorFlow subprocess instead.
"""
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.helpers import ROOT, tiny_config
from tests.test_losses import loss_and_gradient

JAX_TESTS = ["tests/layers", "tests/test_losses.py", "tests/test_schedules.py",
             "tests/test_backends.py"]
"""What runs under JAX: every layer (the shared harness, masks, cached steps), the loss and
metrics, the schedule and optimizer, and the model's training below; about 90 s of one
core, most of it XLA compiling each new op shape that eager JAX meets. tests/test_model.py
would add minutes for that reason; `test_fit_lowers_the_loss` trains the model instead."""
LABEL_SMOOTHINGS = (0.1, 0.0)
REFERENCE_FILE = "KT_TENSORFLOW_REFERENCE"
"""The environment variable naming the file of TensorFlow's values (`write_reference`)."""

on_tensorflow = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                   reason="starts the JAX process")
on_jax = pytest.mark.skipif(keras.backend.backend() != "jax",
                            reason="runs in test_the_library_under_jax's JAX process")


def backend_env(backend, **extra):
    """This process's environment with another Keras backend (JAX on the CPU)."""
    return {**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu", **extra}


def write_reference(path):
    """Saves the loss and its gradient (`tests.test_losses.loss_and_gradient`), as this
    process's backend computes them, to `path` (.npz)."""
    values = {}
    for label_smoothing in LABEL_SMOOTHINGS:
        values[f"loss_{label_smoothing}"], values[f"gradient_{label_smoothing}"] = (
            loss_and_gradient(label_smoothing))
    np.savez(path, **values)


@on_tensorflow
def test_the_library_under_jax(tmp_path):
    """`JAX_TESTS` pass in a KERAS_BACKEND=jax process, given this process's values."""
    reference = tmp_path / "tensorflow.npz"
    write_reference(reference)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *JAX_TESTS],
        env=backend_env("jax", **{REFERENCE_FILE: str(reference)}), cwd=ROOT,
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    # The JAX-side tests ran there (here they are skipped).
    for test in ("test_loss_and_gradient_equal_tensorflows", "test_fit_lowers_the_loss"):
        assert f"PASSED tests/test_backends.py::{test}" in result.stdout, test


@on_tensorflow
def test_the_package_imports_without_tensorflow_under_jax():
    """Under another backend `import keras_transformer` (model, layers, loss, schedule,
    decoding settings) loads no TensorFlow: only `keras_transformer.search` and `.sampling`
    need it."""
    probe = ("import sys, keras_transformer; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))")
    result = subprocess.run([sys.executable, "-c", probe], env=backend_env("jax"), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", result.stdout[-2000:]


@pytest.fixture(scope="module")
def tensorflow_reference(tmp_path_factory):
    """The values the library computes under TensorFlow: from the file the TensorFlow
    process that started this one wrote, else from a fresh TensorFlow process."""
    path = os.environ.get(REFERENCE_FILE)
    if not path:
        path = str(tmp_path_factory.mktemp("tensorflow") / "tensorflow.npz")
        subprocess.run([sys.executable, "-c", "from tests.test_backends import "
                        f"write_reference; write_reference({path!r})"],
                       env=backend_env("tensorflow"), cwd=ROOT, check=True, timeout=300)
    return np.load(path)


@on_jax
@pytest.mark.parametrize("label_smoothing", LABEL_SMOOTHINGS)
def test_loss_and_gradient_equal_tensorflows(label_smoothing, tensorflow_reference):
    """JAX trains on the keras.ops loss, TensorFlow on its fused kernel: loss and gradient
    agree within 1e-6."""
    loss, gradient = loss_and_gradient(label_smoothing)
    assert abs(loss - float(tensorflow_reference[f"loss_{label_smoothing}"])) <= 1e-6
    np.testing.assert_allclose(gradient, tensorflow_reference[f"gradient_{label_smoothing}"],
                               rtol=0, atol=1e-6)


@on_jax
def test_fit_lowers_the_loss():
    """200 steps of `fit` (jax.jit) with the paper's optimizer and the label-smoothed loss
    teach a one-layer Transformer to reverse 5 tokens (TensorFlow: tests/test_model.py)."""
    from keras_transformer import (BOS_ID, LabelSmoothedCrossEntropy, TokenAccuracy,
                                   Transformer, paper_optimizer)

    vocab, length, n = 16, 5, 3200
    source = np.random.default_rng(0).integers(4, vocab, size=(n, length)).astype("int32")
    target = source[:, ::-1]
    target_in = np.concatenate([np.full((n, 1), BOS_ID, "int32"), target[:, :-1]], axis=1)
    config = tiny_config(vocab_size=vocab, num_layers=1)
    model = Transformer(config)
    model.compile(optimizer=paper_optimizer(config.d_model, warmup_steps=100),
                  loss=LabelSmoothedCrossEntropy(0.1), metrics=[TokenAccuracy()])
    history = model.fit((source, target_in), target, batch_size=32, epochs=2, verbose=0).history
    assert int(model.optimizer.iterations) == 200
    assert history["loss"][1] < history["loss"][0] - 1.0, history
    assert history["token_accuracy"][1] > 0.85, history
