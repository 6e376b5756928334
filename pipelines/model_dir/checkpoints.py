"""Training checkpoints that a kill cannot corrupt, and checkpoint averaging (Section 6.1).

Checkpoints hold the model, the optimizer (Adam moments, step) and the dropout layers' random
state, so a resumed run draws the masks the uninterrupted one would; the `checkpoint` index is
replaced atomically after the data files. The files are the same under every Keras backend
(`_Mirror`). `layout.DEV_METRIC_LOG` holds each evaluated checkpoint's dev metric (higher wins).
"""

import json
import pathlib
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.atomic_files import atomic_files, write_atomic
from pipelines.errors import ModelDirError
from pipelines.model_dir import layout as md


def _key(variable, model_name: str | None = None) -> str:
    """A variable's checkpoint name: its Keras path without the owner's counter-suffixed name
    (docs/training.md); with `model_name`, Adam slots' "transformer_3_" becomes "transformer_"."""
    name = variable.path.split("/", 1)[-1]
    if model_name and name.startswith(model_name + "_"):
        name = "transformer_" + name[len(model_name) + 1:]
    return name


class _Mirror:
    """Keras variables as the named `tf.Variable`s a `tf.train.Checkpoint` holds: under
    TensorFlow the variables themselves, else same-named copies (`_value`) so the files match."""

    def __init__(self, pairs):
        self._pairs = list(pairs)  # (checkpoint name, Keras variable)
        if len({key for key, _ in self._pairs}) != len(self._pairs):
            raise ValueError("variable paths are not unique; cannot checkpoint by name")
        self._own = keras.backend.backend() == "tensorflow"
        self.named = {key: v.value if self._own else
                      tf.Variable(self._value(v), trainable=False) for key, v in self._pairs}

    @staticmethod
    def _value(variable) -> np.ndarray:
        """A Keras variable's value in the dtype TensorFlow keeps it in: integers (the
        optimizer's step counter, the seed states) in int64, which JAX holds in (u)int32."""
        value = np.asarray(variable.numpy())
        return value.astype(np.int64) if np.issubdtype(value.dtype, np.integer) else value

    def pull(self) -> None:
        """The Keras values -> the checkpoint's variables (before a save)."""
        if not self._own:
            for key, variable in self._pairs:
                self.named[key].assign(self._value(variable))

    def push(self) -> None:
        """The checkpoint's variables -> the Keras variables (after a restore)."""
        if not self._own:
            for key, variable in self._pairs:
                variable.assign(self.named[key].numpy())


def mirrors_of(model, optimizer=None) -> dict[str, _Mirror]:
    """Mirrors of `model`'s weights and, with `optimizer`, of its variables and the model's
    `random_state`, named by order (Keras names them by a process-wide counter)."""
    mirrors = {"model": _Mirror((_key(v), v) for v in model.weights)}
    if optimizer is not None:
        mirrors["optimizer"] = _Mirror((_key(v, model.name), v) for v in optimizer.variables)
        mirrors["random"] = _Mirror((f"seed_{i}", v) for i, v in enumerate(random_state(model)))
    return mirrors


def random_state(model) -> list:
    """`model`'s seed generator states (its dropout layers'): the variables beyond its weights."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def checkpoint_of(mirrors: dict[str, _Mirror]) -> tf.train.Checkpoint:
    """The checkpoint that saves and restores `mirrors` under their names."""
    return tf.train.Checkpoint(**{name: m.named for name, m in mirrors.items()})


def _step(path) -> int:
    """The update a checkpoint was written at ("<dir>/ckpt-400" -> 400)."""
    return int(str(path).rsplit("-", 1)[1])


def _read_records(checkpoint_dir) -> list[dict]:
    path = pathlib.Path(checkpoint_dir) / md.DEV_METRIC_LOG
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            record = json.loads(line)
            records.append({**record, "step": int(record["step"]), "value": float(record["value"])})
        except (ValueError, KeyError, TypeError):
            raise ModelDirError(f"{path}:{number}: not a dev-metric record ({line[:60]!r}); "
                                f"delete the line (that checkpoint loses its dev metric)") from None
    return records


def read_metrics(checkpoint_dir) -> dict[int, float]:
    """The recorded dev metric by checkpoint step, in step order ({} if none)."""
    return {r["step"]: r["value"] for r in sorted(_read_records(checkpoint_dir),
                                                  key=lambda r: r["step"])}


def record_metric(checkpoint_dir, step: int, name: str, value: float) -> dict[int, float]:
    """Records (or replaces) checkpoint `step`'s dev metric; returns them all (`read_metrics`)."""
    records = [r for r in _read_records(checkpoint_dir) if r["step"] != step]
    records.append({"step": int(step), "metric": name, "value": float(value)})
    records.sort(key=lambda r: r["step"])
    write_atomic(pathlib.Path(checkpoint_dir) / md.DEV_METRIC_LOG,
                 "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return {r["step"]: r["value"] for r in records}


def select_checkpoints(paths, count: int, metrics: dict[int, float] | None = None) -> list[str]:
    """The `count` checkpoints of `paths` (oldest first) to average and keep, oldest first: the
    last, or given `metrics` the best of those that have one (the later step winning ties)."""
    if metrics is None:
        return list(paths)[-count:] if count > 0 else []
    ranked = sorted((p for p in paths if _step(p) in metrics),
                    key=lambda p: (metrics[_step(p)], _step(p)), reverse=True)
    return sorted(ranked[:count], key=_step)


def plateau(metrics: dict[int, float], patience: int) -> str | None:
    """Why training should stop early, or None: the last `patience` (>= 1) evaluations of
    `metrics` (step order) did not improve on the best before them (an equal value does not)."""
    history = list(metrics.items())
    if not history:
        return None
    best = max(range(len(history)), key=lambda i: (history[i][1], -i))  # the first best
    since = len(history) - 1 - best
    if since < patience:
        return None
    step, value = history[best]
    return (f"the dev metric has not improved for {since} evaluation(s) "
            f"(--early_stop_patience {patience}); the best, {value:.2f}, was at step {step:,}")


class _Manager(tf.train.CheckpointManager):
    """Keeps the `max_to_keep` newest checkpoints and the `keep_best` best by dev metric, on disk
    and in the index where averaging finds them: overrides the private `_sweep` (stable since
    TF 2.0; tests/pipelines/test_checkpoints.py)."""

    def __init__(self, *args, keep_best: int = 0, mirrors=None, **kwargs):
        self.keep_best, self.mirrors = keep_best, mirrors or {}  # mirrors: pulled before a save
        super().__init__(*args, **kwargs)

    def save(self, *args, **kwargs):
        for mirror in self.mirrors.values():
            mirror.pull()
        return super().save(*args, **kwargs)

    def _sweep(self):
        if not self.keep_best:
            return super()._sweep()
        paths = list(self._maybe_delete)
        best = set(select_checkpoints(paths, self.keep_best, read_metrics(self.directory)))
        for path in paths[:-self._max_to_keep]:
            if path not in best:
                del self._maybe_delete[path]
                for name in (tf.io.gfile.glob(f"{path}.index")
                             + tf.io.gfile.glob(f"{path}.data-?????-of-?????")):
                    tf.io.gfile.remove(name)


def checkpoint_manager(model, optimizer, checkpoint_dir, max_to_keep=20, keep_best=0):
    """The `_Manager` of `checkpoint_dir`; save with `checkpoint_number=step` (the optimizer
    update). The optimizer must be built (its variables exist) first."""
    mirrors = mirrors_of(model, optimizer)
    return _Manager(checkpoint_of(mirrors), str(checkpoint_dir), max_to_keep=max_to_keep,
                    checkpoint_name="ckpt", keep_best=keep_best, mirrors=mirrors)


def _restore(mirrors: dict[str, _Mirror], path: str, partial: bool, checkpoint=None):
    """Restores `path` into `mirrors` (via their manager's `checkpoint` where the file has them
    all); a damaged file is a `ModelDirError`. Without `partial`, what the file has must match
    (one without random state resumes with fresh dropout seeds)."""
    try:
        if not partial:
            saved = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}
            if not saved >= {name for name, m in mirrors.items() if m.named}:
                mirrors, checkpoint = {n: m for n, m in mirrors.items() if n in saved}, None
        status = (checkpoint or checkpoint_of(mirrors)).restore(path)
        (status.expect_partial() if partial else status).assert_existing_objects_matched()
        for mirror in mirrors.values():
            mirror.push()
    except (tf.errors.OpError, ValueError, AssertionError, IndexError) as e:  # truncated
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelDirError(f"{path}: cannot restore this checkpoint ({first}); delete it (and its "
                            f"entry in the 'checkpoint' index) or train a new model dir") from None


def restore_latest(manager, optimizer) -> int:
    """Restores the newest complete checkpoint, if any; returns its update (0 if none)."""
    if manager.latest_checkpoint is None:
        return 0
    _restore(manager.mirrors, manager.latest_checkpoint, partial=False,
             checkpoint=manager.checkpoint)
    return int(optimizer.iterations.numpy())


def _named(paths: Sequence[str], names: Sequence[str], checkpoint_dir) -> list[str]:
    """The checkpoints of `paths` called `names`, oldest first; ModelDirError names any missing."""
    by_name = {pathlib.Path(p).name: p for p in paths}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise ModelDirError(f"{checkpoint_dir}: no checkpoint {', '.join(missing)} (have: "
                            f"{', '.join(by_name)}); --average_checkpoints takes these names")
    return [p for p in paths if pathlib.Path(p).name in names]


def restore_weights(model, path: str) -> None:
    """Loads the model weights of checkpoint `path` into `model` (optimizer state ignored)."""
    _restore(mirrors_of(model), path, partial=True)


def average_checkpoints(model, checkpoint_dir, out_path, last_n=5, keep_best_by="last",
                        log=print, chosen: Sequence[str] = ()) -> pathlib.Path:
    """Averages the model weights of `last_n` checkpoints into `out_path` (.weights.h5): the
    last ones (the paper: 5 base, 20 big), or with `keep_best_by` "dev_metric" the best
    (`select_checkpoints`); or the `chosen` ones, by name (ckpt-N). Optimizer state is dropped."""
    paths = md.checkpoint_paths(checkpoint_dir)
    if not paths:
        raise ModelDirError(f"{checkpoint_dir}: no checkpoints to average. Train first.")
    metrics = read_metrics(checkpoint_dir) if keep_best_by == "dev_metric" else None
    if chosen:
        metrics, last_n = None, len(chosen)
        paths = _named(paths, chosen, checkpoint_dir)
    paths = select_checkpoints(paths, last_n, metrics)
    if not paths:
        raise ModelDirError(f"{checkpoint_dir}: no checkpoint has a dev metric recorded in "
                            f"{md.DEV_METRIC_LOG} to choose by; train with --dev_metric_every, or "
                            f"average with --keep_best_by last")
    if len(paths) < last_n:
        log(f"average: only {len(paths)} checkpoint(s)"
            f"{' with a recorded dev metric' if metrics is not None else ''} for "
            f"--average_last {last_n}")
    total = None
    for path in paths:
        restore_weights(model, path)
        weights = [np.asarray(w.numpy(), dtype=np.float64) for w in model.weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([(t / len(paths)).astype(w.dtype) for t, w in
                       zip(total, (v.numpy() for v in model.weights))])
    with atomic_files(out_path) as (tmp,):
        model.save_weights(tmp)
    names = [pathlib.Path(p).name + ("" if metrics is None else f" {metrics[_step(p)]:.2f}")
             for p in paths]
    log(f"average: {len(paths)} checkpoint(s)"
        f"{'' if metrics is None else ', the best by dev metric'} ({', '.join(names)})"
        f" -> {out_path}")
    return pathlib.Path(out_path)
