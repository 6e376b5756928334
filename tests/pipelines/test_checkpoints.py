"""Checkpoints: averaging, resuming (weights, Adam moments, step), and what decoding loads."""
import keras
import numpy as np
import pytest

from pipelines import checkpoints
from pipelines import model_dir as md
from pipelines.errors import ModelDirError
from pipelines.model_dir import build_model
from tests.helpers import tiny_config


def _saved_checkpoints(directory, steps=(10, 20, 30)):
    """A model whose checkpoints at `steps` hold random weights; returns those weights."""
    model = build_model(tiny_config())
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    manager = checkpoints.checkpoint_manager(model, optimizer, directory, max_to_keep=5)
    rng = np.random.default_rng(0)
    saved = []
    for step in steps:
        weights = [rng.normal(size=w.shape).astype("float32") for w in model.weights]
        model.set_weights(weights)
        optimizer.iterations.assign(step)
        manager.save(checkpoint_number=step)
        saved.append(weights)
    return saved


def test_average_equals_mean_of_last_checkpoints(tmp_path):
    saved = _saved_checkpoints(tmp_path)
    assert [p.rsplit("-", 1)[1] for p in checkpoints.checkpoint_paths(tmp_path)] == ["10", "20", "30"]
    fresh = build_model(tiny_config())
    out = tmp_path / "final.weights.h5"
    checkpoints.average_checkpoints(fresh, tmp_path, out, last_n=2, log=lambda _: None)
    loaded = build_model(tiny_config())
    loaded.load_weights(out)
    for got, a, b in zip(loaded.weights, saved[1], saved[2]):
        np.testing.assert_allclose(got.numpy(), (a + b) / 2, rtol=1e-6, atol=1e-7)


def test_restore_latest_returns_the_step_weights_and_adam_moments(tmp_path):
    model = build_model(tiny_config())
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    manager = checkpoints.checkpoint_manager(model, optimizer, tmp_path)
    assert checkpoints.restore_latest(manager, optimizer) == 0
    rng = np.random.default_rng(1)
    for variable in optimizer.variables[1:]:  # moments (the first is the step counter)
        variable.assign(rng.normal(size=variable.shape).astype(variable.dtype))
    optimizer.iterations.assign(7)
    manager.save(checkpoint_number=7)
    saved = [w.numpy() for w in model.weights]
    moments = [v.numpy() for v in optimizer.variables[1:]]
    model.set_weights([w * 0 for w in saved])
    for variable in optimizer.variables[1:]:
        variable.assign(np.zeros(variable.shape, variable.dtype))
    optimizer.iterations.assign(0)
    assert checkpoints.restore_latest(manager, optimizer) == 7
    for got, want in zip(model.weights, saved):
        np.testing.assert_array_equal(got.numpy(), want)
    assert any(np.abs(m).sum() > 0 for m in moments)
    for got, want in zip(optimizer.variables[1:], moments):
        np.testing.assert_array_equal(got.numpy(), want)


def test_decoding_loads_the_average_else_the_latest_or_a_named_checkpoint(tmp_path):
    md.save_config(tmp_path, tiny_config())
    saved = _saved_checkpoints(md.checkpoint_dir(tmp_path))
    messages = []
    latest = md.load_final_model(tmp_path, log=messages.append)
    assert "final.weights.h5 is missing: using the latest checkpoint" in messages[0]
    np.testing.assert_array_equal(latest.weights[0].numpy(), saved[2][0])
    named = md.load_final_model(tmp_path, "bfloat16", checkpoint="ckpt-10")
    assert named.weights[0].dtype == "bfloat16"
    np.testing.assert_allclose(named.weights[0].numpy().astype("float32"), saved[0][0],
                               rtol=1e-2)
    with pytest.raises(ModelDirError, match="no checkpoint 'ckpt-99' \\(have: ckpt-10, ckpt-20"):
        md.load_final_model(tmp_path, checkpoint="ckpt-99")
    # A truncated final.weights.h5 or checkpoint is one clear error, not a traceback.
    md.final_weights(tmp_path).write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    with pytest.raises(ModelDirError, match="final.weights.h5: cannot load"):
        md.load_final_model(tmp_path)
    data = next(md.checkpoint_dir(tmp_path).glob("ckpt-20.data-*"))
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ModelDirError, match="ckpt-20: cannot restore this checkpoint"):
        md.load_final_model(tmp_path, checkpoint="ckpt-20")


def test_no_untrained_checkpoint_under_accumulation():
    """With --accumulate_steps 2 the update counter is still 0 after the first micro-batch:
    no ckpt-0 (averaging could mix the initial weights in), one save per update."""
    import types

    import tensorflow as tf

    from pipelines.callbacks import StepCheckpoint

    saved = []
    manager = types.SimpleNamespace(
        save=lambda checkpoint_number, check_interval: saved.append(checkpoint_number))
    model = types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=tf.Variable(0)))
    callback = StepCheckpoint(manager, every=2)
    callback.set_model(model)
    for micro_batch in range(8):  # updates after micro-batches 2, 4, 6, 8
        model.optimizer.iterations.assign((micro_batch + 1) // 2)
        callback.on_train_batch_end(micro_batch)
    callback.on_train_end()
    assert saved == [2, 4]
    resumed = StepCheckpoint(manager, every=2, start_step=4)  # already saved at 4
    resumed.set_model(model)
    resumed.on_train_end()
    assert saved == [2, 4]
