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

from pipelines.model_dir import CHECKPOINT_DIR, FINAL_WEIGHTS_FILE, ModelDirError


def checkpoint_manager(model, optimizer, model_dir, max_to_keep=20):
    """The manager of `<model_dir>/checkpoints`, numbering checkpoints by optimizer step."""
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    return tf.train.CheckpointManager(checkpoint, str(pathlib.Path(model_dir) / CHECKPOINT_DIR),
                                      max_to_keep=max_to_keep, step_counter=optimizer.iterations,
                                      checkpoint_name="ckpt")


def restore_latest(manager) -> int:
    """Restores the newest complete checkpoint, if any; returns its step (0 if none)."""
    if manager.latest_checkpoint is None:
        return 0
    manager.checkpoint.restore(manager.latest_checkpoint).expect_partial()
    return int(manager.checkpoint.optimizer.iterations.numpy())


def checkpoint_paths(model_dir) -> list[str]:
    """Complete checkpoints of `model_dir`, oldest first."""
    state = tf.train.get_checkpoint_state(str(pathlib.Path(model_dir) / CHECKPOINT_DIR))
    return list(state.all_model_checkpoint_paths) if state else []


def average_checkpoints(model, model_dir, last_n=5, log=print) -> pathlib.Path:
    """Averages the model weights of the last `last_n` checkpoints into final.weights.h5.

    The paper averages the last 5 (base) or 20 (big) checkpoints, written at 10-minute
    intervals, for its test results. Optimizer state is not averaged (not needed to decode).
    """
    paths = checkpoint_paths(model_dir)[-last_n:]
    if not paths:
        raise ModelDirError(f"{pathlib.Path(model_dir) / CHECKPOINT_DIR}: no checkpoints to "
                            "average. Train first.")
    total = None
    checkpoint = tf.train.Checkpoint(model=model)
    for path in paths:
        checkpoint.restore(path).expect_partial()
        weights = [np.asarray(w.numpy(), dtype=np.float64) for w in model.weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([(t / len(paths)).astype(w.dtype) for t, w in
                       zip(total, (v.numpy() for v in model.weights))])
    final = pathlib.Path(model_dir) / FINAL_WEIGHTS_FILE
    tmp = final.with_name(".tmp." + final.name)
    model.save_weights(tmp)
    tmp.replace(final)
    log(f"average: {len(paths)} checkpoint(s) ({', '.join(pathlib.Path(p).name for p in paths)})"
        f" -> {final}")
    return final
