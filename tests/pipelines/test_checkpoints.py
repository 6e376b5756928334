"""Checkpoints: averaging, resuming (weights, Adam moments, step), and what decoding loads."""
import keras
import numpy as np
import pytest

from pipelines.errors import ModelDirError
from pipelines.model_dir import checkpoints
from pipelines.model_dir import layout as md
from pipelines.model_dir.layout import build_model
from tests.helpers import random_ids, tiny_config, training_options


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
    assert [p.rsplit("-", 1)[1] for p in md.checkpoint_paths(tmp_path)] == ["10", "20", "30"]
    fresh = build_model(tiny_config())
    out = tmp_path / "final.weights.h5"
    checkpoints.average_checkpoints(fresh, tmp_path, out, last_n=2, log=lambda _: None)
    loaded = build_model(tiny_config())
    loaded.load_weights(out)
    for got, a, b in zip(loaded.weights, saved[1], saved[2]):
        np.testing.assert_allclose(got.numpy(), (a + b) / 2, rtol=1e-6, atol=1e-7)


def test_chosen_checkpoints_are_averaged_and_decoded_from_their_file(tmp_path):
    md.save_config(tmp_path, tiny_config())
    saved = _saved_checkpoints(md.checkpoint_dir(tmp_path))
    out = md.average_weights(tmp_path, ["ckpt-10", "ckpt-30"])
    assert out.name == "average.ckpt-10+ckpt-30.weights.h5"
    checkpoints.average_checkpoints(build_model(tiny_config()), md.checkpoint_dir(tmp_path),
                                    out, log=lambda _: None, chosen=["ckpt-30", "ckpt-10"])
    loaded = md.load_final_model(tmp_path, checkpoint=out.name)  # found in the model dir
    for got, a, b in zip(loaded.weights, saved[0], saved[2]):
        np.testing.assert_allclose(got.numpy(), (a + b) / 2, rtol=1e-6, atol=1e-7)
    assert not md.final_weights(tmp_path).exists()
    with pytest.raises(ModelDirError, match=r"no checkpoint ckpt-5 \(have: ckpt-10, ckpt-20, "):
        checkpoints.average_checkpoints(build_model(tiny_config()), md.checkpoint_dir(tmp_path),
                                        out, chosen=["ckpt-5"])
    with pytest.raises(ModelDirError, match=r"^--checkpoint other.weights.h5: no such weights "):
        md.load_final_model(tmp_path, checkpoint="other.weights.h5")


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

    # A model built later in the same process has another name ("transformer_4"), which
    # Adam's slot names carry: its moments restore all the same.
    other = build_model(tiny_config())
    assert other.name != model.name
    other_optimizer = keras.optimizers.Adam()
    other_optimizer.build(other.trainable_variables)
    other_manager = checkpoints.checkpoint_manager(other, other_optimizer, tmp_path)
    assert checkpoints.restore_latest(other_manager, other_optimizer) == 7
    for got, want in zip(other_optimizer.variables[1:], moments):
        np.testing.assert_array_equal(got.numpy(), want)


def test_a_resumed_run_draws_the_dropout_masks_of_an_uninterrupted_one(tmp_path):
    """The checkpoint holds the dropout layers' random state: 2 steps, a checkpoint, 2 more
    give the weights that 2 steps after restoring it into a fresh model give (with dropout,
    a fresh seed state would draw other masks)."""
    import tensorflow as tf

    from pipelines.training import train as train_lib

    def compiled():
        return train_lib.compile_model(tiny_config(dropout=0.3), tf.distribute.get_strategy(),
                                       training_options(warmup_steps=10))

    batches = [(random_ids(4, 7, seed=2 * i), random_ids(4, 6, seed=2 * i + 1)) for i in range(4)]

    def train(model, steps):
        for source, target in steps:
            model.train_on_batch((source, target[:, :-1]), target[:, 1:])

    model = compiled()
    manager = checkpoints.checkpoint_manager(model, model.optimizer, tmp_path)
    train(model, batches[:2])
    manager.save(checkpoint_number=2)
    train(model, batches[2:])

    resumed = compiled()
    manager = checkpoints.checkpoint_manager(resumed, resumed.optimizer, tmp_path)
    assert checkpoints.restore_latest(manager, resumed.optimizer) == 2
    train(resumed, batches[2:])
    for a, b in zip(model.weights, resumed.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_checkpoint_without_random_state_still_resumes(tmp_path):
    """A checkpoint of the release before the random state was saved (model and optimizer
    only) resumes: its step, weights and moments, the dropout seeds left fresh."""
    import tensorflow as tf

    model = build_model(tiny_config(dropout=0.3))
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    mirrors = checkpoints.mirrors_of(model, optimizer)
    assert mirrors["random"].named  # dropout has seed states to save
    older = checkpoints.checkpoint_of({k: m for k, m in mirrors.items() if k != "random"})
    rng = np.random.default_rng(0)
    for variable in optimizer.variables:  # moments that a fresh optimizer does not have
        variable.assign(rng.normal(size=variable.shape).astype(variable.dtype))
    optimizer.iterations.assign(3)
    tf.train.CheckpointManager(older, str(tmp_path), 5, checkpoint_name="ckpt").save(
        checkpoint_number=3)
    fresh = build_model(tiny_config(dropout=0.3))
    fresh_optimizer = keras.optimizers.Adam()
    fresh_optimizer.build(fresh.trainable_variables)
    manager = checkpoints.checkpoint_manager(fresh, fresh_optimizer, tmp_path)
    assert checkpoints.restore_latest(manager, fresh_optimizer) == 3
    for a, b in zip(model.weights + optimizer.variables,
                    fresh.weights + fresh_optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


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


@pytest.mark.quick
def test_no_untrained_checkpoint_under_accumulation():
    """With --accumulate_steps 2 the update counter is still 0 after the first micro-batch:
    no ckpt-0 (averaging could mix the initial weights in), one save per update."""
    import types

    import tensorflow as tf

    from pipelines.training.callbacks import StepCheckpoint

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


@pytest.mark.quick
def test_best_checkpoints_by_recorded_dev_metric(tmp_path):
    """--keep_best_by dev_metric: the best recorded values, the later step on a tie, only
    checkpoints with a record; read back from dev_metric.jsonl as a later run sees it."""
    for step, value in [(100, 10.0), (200, 14.0), (300, 12.5), (400, 14.0), (500, 9.0)]:
        checkpoints.record_metric(tmp_path, step, "dev_f1", value)
    checkpoints.record_metric(tmp_path, 300, "dev_f1", 13.0)  # re-evaluated: replaced
    metrics = checkpoints.read_metrics(tmp_path)
    assert metrics == {100: 10.0, 200: 14.0, 300: 13.0, 400: 14.0, 500: 9.0}
    paths = [f"{tmp_path}/ckpt-{step}" for step in (100, 200, 300, 400, 500, 600)]
    names = lambda chosen: [p.rsplit("/", 1)[1] for p in chosen]  # noqa: E731
    assert names(checkpoints.select_checkpoints(paths, 2, metrics)) == ["ckpt-200", "ckpt-400"]
    assert names(checkpoints.select_checkpoints(paths, 1, metrics)) == ["ckpt-400"]  # the tie
    assert names(checkpoints.select_checkpoints(paths, 3, metrics)) == [
        "ckpt-200", "ckpt-300", "ckpt-400"]  # oldest first
    # ckpt-600 has no record: never chosen; ckpt-100 is no longer on disk: not a candidate.
    assert names(checkpoints.select_checkpoints(paths[1:], 9, metrics)) == [
        "ckpt-200", "ckpt-300", "ckpt-400", "ckpt-500"]
    assert names(checkpoints.select_checkpoints(paths, 2)) == ["ckpt-500", "ckpt-600"]  # last
    lines = (tmp_path / md.DEV_METRIC_LOG).read_text().splitlines()
    assert lines[2] == '{"metric": "dev_f1", "step": 300, "value": 13.0}'
    (tmp_path / md.DEV_METRIC_LOG).write_text(lines[0] + "\n{truncated\n")
    with pytest.raises(ModelDirError, match="dev_metric.jsonl:2: not a dev-metric record"):
        checkpoints.read_metrics(tmp_path)


def test_average_by_dev_metric_takes_the_best_checkpoints(tmp_path):
    saved = _saved_checkpoints(tmp_path, steps=(10, 20, 30))
    fresh, out, logged = build_model(tiny_config()), tmp_path / "final.weights.h5", []
    with pytest.raises(ModelDirError, match="no checkpoint has a dev metric recorded"):
        checkpoints.average_checkpoints(fresh, tmp_path, out, 2, keep_best_by="dev_metric")
    for step, value in [(10, 5.0), (20, 3.0), (30, 4.0)]:
        checkpoints.record_metric(tmp_path, step, "dev_sacrebleu", value)
    checkpoints.average_checkpoints(fresh, tmp_path, out, 2, keep_best_by="dev_metric",
                                    log=logged.append)
    assert logged == [f"average: 2 checkpoint(s), the best by dev metric (ckpt-10 5.00, "
                      f"ckpt-30 4.00) -> {out}"]
    loaded = build_model(tiny_config())
    loaded.load_weights(out)
    for got, a, b in zip(loaded.weights, saved[0], saved[2]):
        np.testing.assert_allclose(got.numpy(), (a + b) / 2, rtol=1e-6, atol=1e-7)


def test_the_best_checkpoints_outlive_keep_checkpoints(tmp_path):
    """The manager deletes the oldest beyond --keep_checkpoints except the --average_last best
    by recorded metric, which stay on disk and in the index, across a restart too."""
    model = build_model(tiny_config())
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)

    def train(steps, values):  # what training does: save, then record the dev metric
        manager = checkpoints.checkpoint_manager(model, optimizer, tmp_path, max_to_keep=2,
                                                 keep_best=2)
        for step, value in zip(steps, values):
            optimizer.iterations.assign(step)
            manager.save(checkpoint_number=step, check_interval=False)
            checkpoints.record_metric(tmp_path, step, "dev_f1", value)

    def on_disk():
        return sorted(int(p.name[5:-6]) for p in tmp_path.glob("ckpt-*.index"))

    train([1, 2, 3, 4], [7.0, 9.0, 8.0, 1.0])
    assert [int(p.rsplit("-", 1)[1]) for p in md.checkpoint_paths(tmp_path)] == [
        2, 3, 4] == on_disk()  # 1 deleted; 2 and 3 are the best
    train([5, 6, 7], [2.0, 9.5, 3.0])  # a resumed run: a new manager, the recorded metrics
    assert [int(p.rsplit("-", 1)[1]) for p in md.checkpoint_paths(tmp_path)] == [
        2, 6, 7] == on_disk()
    # Without keep_best the manager is tf.train.CheckpointManager's own: the newest 2.
    manager = checkpoints.checkpoint_manager(model, optimizer, tmp_path, max_to_keep=2)
    optimizer.iterations.assign(8)
    manager.save(checkpoint_number=8, check_interval=False)
    assert on_disk() == [7, 8]


@pytest.mark.quick
def test_early_stop_after_patience_evaluations_without_improvement(tmp_path):
    """DevMetric stops `fit` at the `patience`-th evaluation in a row that does not beat the
    best (a tie does not), saying so once; a resumed run counts the recorded history."""
    import types

    import tensorflow as tf

    from pipelines.training.callbacks import DevMetric

    values = iter([10.0, 12.0, 11.0, 12.0, 11.5, 13.0])

    def evaluate(model):
        return next(values)

    evaluate.metric_name = "dev_f1"
    model = types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=tf.Variable(0)),
                                  stop_training=False)
    logged = []

    def callback():
        made = DevMetric(evaluate, every_epochs=1, checkpoint_dir=tmp_path, patience=3,
                         log=logged.append)
        made.set_model(model)
        return made

    dev_metric, stops = callback(), []
    for epoch in range(4):  # 10, 12 (best), 11, 12 (a tie: no improvement)
        model.optimizer.iterations.assign(100 * (epoch + 1))
        logs = {}
        dev_metric.on_epoch_end(epoch, logs)
        stops.append(model.stop_training)
    assert logs == {"dev_f1": 12.0} and stops == [False] * 4 and not logged
    assert checkpoints.plateau(checkpoints.read_metrics(tmp_path), 3) is None
    dev_metric = callback()  # resumed: two evaluations without improvement recorded
    model.optimizer.iterations.assign(500)
    dev_metric.on_epoch_end(4, {})  # 11.5: the third
    assert model.stop_training
    assert logged == ["train: early stop at step 500: the dev metric has not improved for 3 "
                      "evaluation(s) (--early_stop_patience 3); the best, 12.00, was at step 200"]
    assert checkpoints.plateau({1: 1.0, 2: 2.0, 3: 2.0}, 2) is None  # 2.0 is still the best
    assert checkpoints.plateau({1: 1.0, 2: 0.5, 3: 2.0}, 1) is None  # improved at the last
    assert checkpoints.plateau({}, 1) is None
