"""`pipelines/run.py --backend jax` (issue 25): the same tf.data pipeline trains the model
under JAX, into checkpoints and final weights that TensorFlow resumes, evaluates and exports
with the same translations."""
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.pipelines.run_helpers import TINY_MODEL, copy_prepared, run_command, run_stages

pytestmark = pytest.mark.xdist_group("test_backend_training")  # its module fixtures: one worker

NO_DROPOUT = ["--config_override=dropout=0.0", "--nomixed_precision"]
"""Dropout draws from each backend's own random stream; without it a step depends only on
the weights, the optimizer state and the batch. In float32 on every CPU (TensorFlow trains
in bfloat16 by default where the CPU has it), so that backends differ by float32 noise."""


KEY_BIAS = re.compile(r"kv(\.S|_)bias")
"""The attention key biases (and their Adam moments) in checkpoint names: their gradient is
0 in exact arithmetic (one constant added to all the logits of a query's softmax), and Adam
turns its float noise into steps of about the learning rate, which differ between any two
ways of computing the same step (TensorFlow with and without XLA too)."""


def checkpoint_values(model_dir, step) -> dict:
    """Every variable of checkpoint `step` (model and optimizer) but the key biases, by name."""
    reader = tf.train.load_checkpoint(str(model_dir / "checkpoints" / f"ckpt-{step}"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith(("model/", "optimizer/")) and not KEY_BIAS.search(name)}


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
               for k in a)


def train(model_dir, shared_data, *flags, backend="tensorflow"):
    result = run_command([f"--model_dir={model_dir}", f"--backend={backend}", *TINY_MODEL,
                          "--mode=train", *flags], shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.quick
def test_jax_with_several_cpu_devices_asks_xla_for_them(monkeypatch):
    """`--backend jax --num_cpu_devices 2` (as in the last test below) sets the Keras backend
    and XLA's host device count before anything imports JAX (`cli.startup`, in-process);
    TensorFlow's run gets neither, and a flag given as two words counts the same."""
    from cli import startup

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert startup.select_backend(["run.py", "--num_cpu_devices=2"]) == "tensorflow"
    assert os.environ["KERAS_BACKEND"] == "tensorflow" and "XLA_FLAGS" not in os.environ
    assert startup.select_backend(["run.py", "--backend", "jax", "--num_cpu_devices",
                                   "2"]) == "jax"
    assert os.environ["KERAS_BACKEND"] == "jax"
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
    startup.select_backend(["run.py", "--backend=jax", "--num_cpu_devices=1"])
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false"  # 1: left alone


JAX_JOB = ["--checkpoint_every=20", "--average_last=2", "--dev_metric_every=20",
           "--dev_metric_sentences=8", "--extra_length=8", "--eval_sentences=24"]
"""`jax_trained`'s flags but its steps, which its resumed twin repeats."""


@pytest.fixture(scope="module")
def jax_trained(prepared, tmp_path_factory, shared_data):
    """A tiny model trained under JAX by the default job (prepare, train, average, evaluate)."""
    model_dir = copy_prepared(prepared, tmp_path_factory.mktemp("jax") / "model")
    result = run_command([f"--model_dir={model_dir}", "--backend=jax", *TINY_MODEL,
                          "--train_steps=60", *JAX_JOB], shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return model_dir, result


def test_jax_trains_checkpoints_scores_averages_and_evaluates(jax_trained):
    model_dir, result = jax_trained
    log = result.stderr
    assert "device: cpu" in log and ", jax: float32 (device: jax compiles every step" in log
    assert "XLA on (device: Keras compiles every jax step" in log
    index = (model_dir / "checkpoints" / "checkpoint").read_text()
    assert all(f'"ckpt-{step}"' in index for step in (20, 40, 60))
    dev = (model_dir / "checkpoints" / "dev_metric.jsonl").read_text()
    assert all(f'"step": {step}' in dev for step in (20, 40, 60))
    assert "average: 2 checkpoint(s) (ckpt-40, ckpt-60)" in log
    # The model learns: each validation pass has a lower loss than the one before.
    val_losses = [float(v) for v in re.findall(r"\bval_loss ([0-9.]+)", log)]
    assert len(val_losses) == 3 and val_losses[0] > val_losses[1] > val_losses[2], val_losses
    assert re.search(r"^test sacrebleu: \d+\.\d\d ", result.stdout, re.M), result.stdout
    assert "export under TensorFlow: python pipelines/run.py --mode export --model_dir" in log


def test_tensorflow_evaluates_and_exports_the_jax_weights(jax_trained, shared_data, tmp_path):
    """The weights trained under JAX give TensorFlow's search the translations JAX's gave."""
    model_dir, _ = jax_trained
    under_jax = (model_dir / "eval" / "test.first24.hyp").read_text(encoding="utf-8")
    ran = run_stages("evaluate,export", shared_data, model_dir=str(model_dir), eval_sentences=24,
                     export_dir=str(tmp_path / "export"))
    assert re.search(r"^test sacrebleu: \d+\.\d\d ", ran.out, re.M), ran.out
    assert "OK: every op is registered by core TensorFlow or tensorflow-text." in ran.log
    under_tensorflow = (model_dir / "eval" / "test.first24.hyp").read_text(encoding="utf-8")
    assert len(under_jax.splitlines()) == 24
    assert under_tensorflow == under_jax


def test_a_resumed_jax_run_trains_what_an_uninterrupted_one_does(jax_trained, prepared,
                                                                 tmp_path, shared_data):
    """`jax_trained`'s run stopped at step 20 and resumed: its step 40 is the uninterrupted
    run's, every weight and Adam moment to the bit, with dropout on (the seeds' state is in
    the checkpoints)."""
    whole, _ = jax_trained
    parts = copy_prepared(prepared, tmp_path / "parts")
    train(parts, shared_data, "--train_steps=20", *JAX_JOB, backend="jax")
    resumed = train(parts, shared_data, "--train_steps=40", *JAX_JOB, backend="jax")
    assert "resumed from" in resumed.stderr and "ckpt-20 at step 20" in resumed.stderr
    assert largest_difference(checkpoint_values(whole, 40), checkpoint_values(parts, 40)) == 0


def test_either_backend_resumes_the_other_s_checkpoints(prepared, tmp_path, shared_data):
    """TensorFlow 0 -> 8, JAX 8 -> 10, TensorFlow 10 -> 12: the weights and Adam moments of
    TensorFlow 0 -> 12, to float32 noise. A step counter or moments lost on the way would
    show: Adam restarted from zero moments moves each weight by about the learning rate
    (5e-3 here)."""
    whole = copy_prepared(prepared, tmp_path / "whole")
    train(whole, shared_data, "--train_steps=12", "--checkpoint_every=2", *NO_DROPOUT)
    mixed = copy_prepared(prepared, tmp_path / "mixed")
    train(mixed, shared_data, "--train_steps=8", "--checkpoint_every=2", *NO_DROPOUT)
    under_jax = train(mixed, shared_data, "--train_steps=10", *NO_DROPOUT, backend="jax")
    assert "ckpt-8 at step 8" in under_jax.stderr
    back = train(mixed, shared_data, "--train_steps=12", *NO_DROPOUT)
    assert "ckpt-10 at step 10" in back.stderr
    for step in (10, 12):
        difference = largest_difference(checkpoint_values(whole, step),
                                        checkpoint_values(mixed, step))
        assert difference < 1e-4, (step, difference)


def test_two_jax_cpu_devices_resume_a_tensorflow_checkpoint(prepared, tmp_path, shared_data):
    """--num_cpu_devices 2 under JAX: keras.distribution.DataParallel over 2 XLA CPU devices
    (that its updates are one device's: tests/test_backends.py), resuming TensorFlow's
    checkpoint."""
    model_dir = copy_prepared(prepared, tmp_path / "model")
    train(model_dir, shared_data, "--train_steps=2", "--checkpoint_every=2", *NO_DROPOUT)
    result = train(model_dir, shared_data, "--train_steps=4", "--num_cpu_devices=2",
                   *NO_DROPOUT, backend="jax")
    assert "train: 2 replica(s)" in result.stderr and "ckpt-2 at step 2" in result.stderr
    assert 'model_checkpoint_path: "ckpt-4"' in (model_dir / "checkpoints" / "checkpoint"
                                                   ).read_text()
    before, after = (checkpoint_values(model_dir, step) for step in (2, 4))
    assert after["optimizer/iteration/.ATTRIBUTES/VARIABLE_VALUE"] == 4
    weights = [name for name in before if name.startswith("model/")]
    moved = largest_difference(*({k: values[k] for k in weights} for values in (before, after)))
    assert 1e-4 < moved < 1  # trained, and no blow-up
