"""Training checkpoints that a kill cannot corrupt, and checkpoint averaging (Section 6.1).

Checkpoints are TensorFlow object checkpoints of the model AND the optimizer (Adam moments,
step counter), written by `tf.train.CheckpointManager`: data files first, then the small
`checkpoint` index file is replaced atomically. A process killed mid-write leaves files the
index does not name, which are never restored, so the same command resumes at the last
complete checkpoint's step.
"""
from __future__ import annotations

import pathlib

import numpy as np
import tensorflow as tf

from pipelines.errors import ModelDirError
from pipelines.files import atomic_files


def _by_path(variables) -> dict:
    """Variables keyed by their Keras path without the owner's (counter-suffixed) name.

    `tf.train.Checkpoint(model=keras_model)` does not see variables of layers held in
    lists (measured with Keras 3.15: only the embedding was saved), so checkpoints name
    every variable explicitly. Dropping the first path component ("transformer_3/...",
    "adam_1/...") makes the names independent of how many models a process built.
    """
    named = {v.path.split("/", 1)[-1]: v.value for v in variables}
    if len(named) != len(variables):
        raise ValueError("variable paths are not unique; cannot checkpoint by name")
    return named


def _checkpoint(model, optimizer=None) -> tf.train.Checkpoint:
    if optimizer is None:
        return tf.train.Checkpoint(model=_by_path(model.weights))
    return tf.train.Checkpoint(model=_by_path(model.weights),
                               optimizer=_by_path(optimizer.variables))


def checkpoint_manager(model, optimizer, checkpoint_dir, max_to_keep=20):
    """The manager of `checkpoint_dir`, numbering checkpoints by optimizer update.

    The optimizer must be built (its variables exist) before this is called.
    """
    checkpoint = _checkpoint(model, optimizer)
    return tf.train.CheckpointManager(checkpoint, str(checkpoint_dir), max_to_keep=max_to_keep,
                                      step_counter=optimizer.iterations, checkpoint_name="ckpt")


def _restore(checkpoint: tf.train.Checkpoint, path: str, partial: bool):
    """Restores `path` into `checkpoint`; a damaged file is a `ModelDirError`."""
    try:
        status = checkpoint.restore(path)
        (status.expect_partial() if partial else status).assert_existing_objects_matched()
    except (tf.errors.OpError, ValueError, AssertionError, IndexError) as e:  # truncated
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelDirError(f"{path}: cannot restore this checkpoint ({first}); delete it (and "
                            f"its entry in the 'checkpoint' index) or train a new model dir"
                            ) from None


def restore_latest(manager, optimizer) -> int:
    """Restores the newest complete checkpoint, if any; returns its update (0 if none)."""
    if manager.latest_checkpoint is None:
        return 0
    _restore(manager.checkpoint, manager.latest_checkpoint, partial=False)
    return int(optimizer.iterations.numpy())


def checkpoint_paths(checkpoint_dir) -> list[str]:
    """Complete checkpoints in `checkpoint_dir`, oldest first."""
    state = tf.train.get_checkpoint_state(str(checkpoint_dir))
    return list(state.all_model_checkpoint_paths) if state else []


def restore_weights(model, path: str) -> None:
    """Loads the model weights of checkpoint `path` into `model` (optimizer state ignored)."""
    _restore(_checkpoint(model), path, partial=True)


def average_checkpoints(model, checkpoint_dir, out_path, last_n=5, log=print) -> pathlib.Path:
    """Averages the model weights of the last `last_n` checkpoints into `out_path` (.weights.h5).

    The paper averages the last 5 (base) or 20 (big) checkpoints, written at 10-minute
    intervals, for its test results. Optimizer state is not averaged (not needed to decode).
    """
    paths = checkpoint_paths(checkpoint_dir)
    if not paths:
        raise ModelDirError(f"{checkpoint_dir}: no checkpoints to average. Train first.")
    if len(paths) < last_n:
        log(f"average: only {len(paths)} checkpoint(s) for --average_last {last_n}")
    paths = paths[-last_n:]
    total = None
    for path in paths:
        restore_weights(model, path)
        weights = [np.asarray(w.numpy(), dtype=np.float64) for w in model.weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([(t / len(paths)).astype(w.dtype) for t, w in
                       zip(total, (v.numpy() for v in model.weights))])
    with atomic_files(out_path) as (tmp,):
        model.save_weights(tmp)
    log(f"average: {len(paths)} checkpoint(s) ({', '.join(pathlib.Path(p).name for p in paths)})"
        f" -> {out_path}")
    return pathlib.Path(out_path)
