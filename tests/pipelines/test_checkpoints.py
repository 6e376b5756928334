"""Checkpoint averaging: the averaged weights are the mean of the averaged checkpoints."""
import numpy as np
import keras

from pipelines import checkpoints
from pipelines.model_dir import FINAL_WEIGHTS_FILE, build_model
from tests.helpers import tiny_config


def test_average_equals_mean_of_last_checkpoints(tmp_path):
    model = build_model(tiny_config())
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    manager = checkpoints.checkpoint_manager(model, optimizer, tmp_path, max_to_keep=5)
    rng = np.random.default_rng(0)
    saved = []
    for step in (10, 20, 30):
        weights = [rng.normal(size=w.shape).astype("float32") for w in model.weights]
        model.set_weights(weights)
        optimizer.iterations.assign(step)
        manager.save(checkpoint_number=step)
        saved.append(weights)
    assert [p.rsplit("-", 1)[1] for p in checkpoints.checkpoint_paths(tmp_path)] == ["10", "20", "30"]

    fresh = build_model(tiny_config())
    checkpoints.average_checkpoints(fresh, tmp_path, last_n=2, log=lambda _: None)
    loaded = build_model(tiny_config())
    loaded.load_weights(tmp_path / FINAL_WEIGHTS_FILE)
    for got, a, b in zip(loaded.weights, saved[1], saved[2]):
        np.testing.assert_allclose(got.numpy(), (a + b) / 2, rtol=1e-6, atol=1e-7)


def test_restore_latest_returns_the_saved_step(tmp_path):
    model = build_model(tiny_config())
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    manager = checkpoints.checkpoint_manager(model, optimizer, tmp_path)
    assert checkpoints.restore_latest(manager, optimizer) == 0
    optimizer.iterations.assign(7)
    manager.save(checkpoint_number=7)
    saved = [w.numpy() for w in model.weights]
    model.set_weights([w * 0 for w in saved])
    optimizer.iterations.assign(0)
    assert checkpoints.restore_latest(manager, optimizer) == 7
    for got, want in zip(model.weights, saved):  # the weights come back too
        np.testing.assert_array_equal(got.numpy(), want)
