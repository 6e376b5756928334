"""The library under JAX, inside the one plain `pytest` run (issue 25).

The Keras backend is fixed per process, so `test_the_library_under_jax`, in the TensorFlow
process, runs `JAX_TESTS` (this file included) in a `KERAS_BACKEND=jax` pytest process.
There the tests below compare with what the library computed under TensorFlow, which that
test writes to a file first. Run alone, `KERAS_BACKEND=jax pytest tests/test_backends.py`
computes the TensorFlow values in a TensorFlow subprocess instead.
"""
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.helpers import ROOT, random_ids, tiny_config
from tests.decoding.test_drivers import (JAX_CASES, VOCAB, case_args, case_name,
                                         write_beam_reference)
from tests.test_losses import loss_and_gradient

pytestmark = pytest.mark.xdist_group("test_backends")  # its module fixtures: one worker

JAX_TESTS = ["tests/layers", "tests/test_losses.py", "tests/test_schedules.py",
             "tests/test_backends.py"]
"""What runs under JAX: every layer (the shared harness, masks, cached steps), the loss and
metrics, the schedule and optimizer, and the model's training and beam search below; about
100 s of one core, most of it XLA compiling each new op shape that eager JAX meets.
tests/test_model.py would add minutes for that reason; `test_fit_lowers_the_loss` trains the
model instead."""
LABEL_SMOOTHINGS = (0.1, 0.0)
REFERENCE_FILE = "KT_TENSORFLOW_REFERENCE"
"""The environment variable naming the file of TensorFlow's values (`write_reference`)."""

on_tensorflow = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                   reason="starts the JAX process")
on_jax = pytest.mark.skipif(keras.backend.backend() != "jax",
                            reason="runs in test_the_library_under_jax's JAX process")


def backend_env(backend, **extra):
    """This process's environment with another Keras backend (JAX on the CPU, as 2 XLA
    devices for `test_data_parallel_over_two_devices_equals_one_device`; the other tests run
    on the first)."""
    return {**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} "
                         "--xla_force_host_platform_device_count=2".strip(), **extra}


def beam_weights(reference_path):
    """Where `write_reference` saves the beam-search model's weights: beside the .npz."""
    return str(pathlib.Path(reference_path).with_suffix(".weights.h5"))


def write_reference(path):
    """Saves the loss and its gradient (`tests.test_losses.loss_and_gradient`), as this
    process's backend computes them, to `path` (.npz); and a trained model's weights
    (`beam_weights(path)`) with TensorFlow's beam search results for it
    (`tests.decoding.test_drivers.write_beam_reference`)."""
    values = {}
    for label_smoothing in LABEL_SMOOTHINGS:
        values[f"loss_{label_smoothing}"], values[f"gradient_{label_smoothing}"] = (
            loss_and_gradient(label_smoothing))
    write_beam_reference(beam_weights(path), values)
    np.savez(path, **values)


@on_tensorflow
def test_the_library_under_jax(tmp_path):
    """`JAX_TESTS` pass in a KERAS_BACKEND=jax process, given this process's values."""
    reference = tmp_path / "tensorflow.npz"
    write_reference(reference)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-n", "0",
         *JAX_TESTS],
        env=backend_env("jax", **{REFERENCE_FILE: str(reference)}), cwd=ROOT,
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    # The JAX-side tests ran there (here they are skipped).
    for test in ("test_loss_and_gradient_equal_tensorflows", "test_fit_lowers_the_loss",
                 "test_beam_search_equals_tensorflows"):
        assert f"PASSED tests/test_backends.py::{test}" in result.stdout, test


@pytest.mark.quick
@on_tensorflow
def test_the_package_imports_without_tensorflow_under_jax():
    """Under another backend `import keras_transformer` (model, layers, loss, schedule,
    decoding settings, the beam search `translate` / `decode`) loads no TensorFlow: only
    `keras_transformer.decoding.sampling` and `.terms` need it, and say so on import."""
    probe = ("import sys, keras_transformer; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))\n"
             "for name in ('sampling', 'terms'):\n"
             "    try:\n"
             "        __import__('keras_transformer.decoding.' + name)\n"
             "    except ImportError as e:\n"
             "        print(name, e)")
    result = subprocess.run([sys.executable, "-c", probe], env=backend_env("jax"), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "[]", result.stdout[-2000:]
    assert [line.split()[0] for line in lines[1:]] == ["sampling", "terms"], lines
    assert all("needs the TensorFlow Keras backend (KERAS_BACKEND=jax)" in line
               and "keras_transformer.decoding.decode" in line for line in lines[1:]), lines


@pytest.fixture(scope="module")
def tensorflow_reference_path(tmp_path_factory):
    """The file of the values the library computes under TensorFlow: the one the TensorFlow
    process that started this one wrote, else one from a fresh TensorFlow process."""
    path = os.environ.get(REFERENCE_FILE)
    if not path:
        path = str(tmp_path_factory.mktemp("tensorflow") / "tensorflow.npz")
        subprocess.run([sys.executable, "-c", "from tests.test_backends import "
                        f"write_reference; write_reference({path!r})"],
                       env=backend_env("tensorflow"), cwd=ROOT, check=True, timeout=300)
    return path


@pytest.fixture(scope="module")
def tensorflow_reference(tensorflow_reference_path):
    return np.load(tensorflow_reference_path)


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


@on_jax
def test_data_parallel_over_two_devices_equals_one_device():
    """keras.distribution.DataParallel (`pipelines/run.py --backend jax` over several devices)
    splits each batch between the devices. The loss divides by the global batch's target
    tokens, so two steps on a batch whose halves hold 4x different token counts give one
    device's weights; a per-device mean would weight the short half's tokens 4x more.

    The attention key biases are left out: their gradient is 0 in exact arithmetic (they add
    one constant to all the logits of a query's softmax), and Adam turns its float noise
    into steps of about the learning rate, different on each device layout."""
    from keras_transformer import LabelSmoothedCrossEntropy, Transformer, paper_optimizer

    devices = keras.distribution.list_devices("cpu")
    assert len(devices) == 2, "the JAX process starts with 2 XLA CPU devices (backend_env)"
    source = random_ids(4, 8, seed=1)
    target = random_ids(4, 8, seed=2)
    target[2:, 2:] = 0  # the second device's rows: 2 target tokens each, the first's 8
    target_in = np.concatenate([np.full((4, 1), 1, "int32"), target[:, :-1]], axis=1)
    config = tiny_config()

    def trained(distribution):
        keras.distribution.set_distribution(distribution)
        try:
            keras.utils.set_random_seed(0)
            model = Transformer(config)
            before = [np.asarray(w.numpy()) for w in model.weights
                      if not w.path.endswith("kv/bias")]
            model.compile(optimizer=paper_optimizer(config.d_model, warmup_steps=10),
                          loss=LabelSmoothedCrossEntropy(0.1))
            model.fit((source, target_in), target, batch_size=4, epochs=2, shuffle=False,
                      verbose=0)
            return before, [np.asarray(w.numpy()) for w in model.weights
                            if not w.path.endswith("kv/bias")]
        finally:
            keras.distribution.set_distribution(None)

    (start, one), (same_start, two) = (
        trained(None), trained(keras.distribution.DataParallel(devices=devices)))
    largest = lambda a, b: max(np.max(np.abs(x - y)) for x, y in zip(a, b))  # noqa: E731
    assert largest(start, same_start) == 0
    assert largest(start, one) > 1e-3  # the steps moved the weights ...
    assert largest(one, two) < 1e-5  # ... as much on 2 devices as on one


@on_jax
def test_beam_search_equals_tensorflows(tensorflow_reference, tensorflow_reference_path):
    """The beam search under JAX (`keras_transformer.translate`, jax.jit, fixed slots) finds
    the n-best lists that TensorFlow's graph driver found with the same weights
    (`tests.decoding.test_drivers.JAX_CASES`), on sources of 1-6 tokens."""
    from keras_transformer import Transformer, translate

    model = Transformer(tiny_config(vocab_size=VOCAB))
    model.load_weights(beam_weights(tensorflow_reference_path))
    for case in JAX_CASES:
        search, options = case_args(case, extra_length=5)
        ids, scores, *_ = translate(model, tensorflow_reference["beam_source"], search, **options)
        np.testing.assert_array_equal(np.asarray(ids),
                                      tensorflow_reference[f"beam_ids_{case_name(case)}"])
        np.testing.assert_allclose(np.asarray(scores),
                                   tensorflow_reference[f"beam_scores_{case_name(case)}"],
                                   rtol=0, atol=1e-5)
