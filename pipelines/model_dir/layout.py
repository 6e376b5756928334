"""The model directory: what every stage writes and every later stage reads back (this module
alone knows the layout). The files a translation needs are the library's format
(`keras_transformer.model_dir`); the rest is the application's.

    <model_dir>/config.json         TransformerConfig (JSON)
    <model_dir>/settings.json       task, training and decoding settings (pipelines.settings)
    <model_dir>/spm.model           the shared SentencePiece vocabulary
    <model_dir>/checkpoints/        training checkpoints (checkpoints.py) and dev_metric.jsonl
    <model_dir>/logs/               TensorBoard's event files
    <model_dir>/workers/<task>/     another worker's checkpoints (multi-worker training)
    <model_dir>/clean/, cache/      each split's cleaned text and its token ids (prepare)
    <model_dir>/made_from/          what each stage's product was made from (stages/made_from.py)
    <model_dir>/final.weights.h5    the model used for evaluation and export (averaged)
    <model_dir>/average.ckpt-N+ckpt-M.weights.h5
                                    chosen checkpoints averaged (--average_checkpoints)
    <model_dir>/dev_choice.json     what --choose_on_dev chose, and the dev scores it chose by
    <model_dir>/plan.json           the steps a --time_budget bought (training/plan.py)
    <model_dir>/eval/               hypotheses and scores
    <model_dir>/export/<version>/   SavedModels, the layout TensorFlow Serving watches
    <model_dir>/.lock               held by the run writing the dir (lock.py)
    runs/<task>                     the model dir when --model_dir is not given
"""

import codecs
import json
import os
import pathlib
import re
from typing import Any

from keras_transformer.atomic_files import write_atomic
from keras_transformer.config import TransformerConfig
from keras_transformer.model_dir import (CONFIG_FILE, FINAL_WEIGHTS_FILE, SETTINGS_FILE,
                                         WEIGHTS_SUFFIX, read_config, read_settings,
                                         recorded_decoding)
from pipelines import Log
from pipelines.errors import ModelDirError
from pipelines.model_dir.files import write_json_atomic

CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_INDEX = "checkpoint"  # in CHECKPOINT_DIR: `checkpoint_paths`
DEV_METRIC_LOG = "dev_metric.jsonl"
"""In CHECKPOINT_DIR: one JSON object a line, `{"step": 400, "metric": "dev_f1", "value":
13.1}`, in step order; rewritten whole (atomically) at each evaluation (checkpoints.py)."""
LOCK_FILE = ".lock"
EVAL_INDEX_FILE = "index.json"  # in EVAL_DIR: every result with its scores
RUNS_DIR = "runs"  # where a model dir goes when no --model_dir is given: runs/<task>
LOGS_DIR = "logs"
WORKERS_DIR = "workers"
CLEAN_DIR = "clean"
CACHE_DIR = "cache"
MADE_FROM_DIR = "made_from"
EVAL_DIR = "eval"
EXPORT_DIR = "export"
CT2_EXPORT_DIR = "export_ct2"  # --format ctranslate2
DEV_CHOICE_FILE = "dev_choice.json"
PLAN_FILE = "plan.json"
CLEAN_FILES = ("source.txt", "target.txt", "manifest.json")
"""In CLEAN_DIR/<split>/: the cleaned text and what it was made from (data/text_io.py)."""
CACHE_SHARDS, CACHE_LENGTHS = "shards", "lengths.npy"
CACHE_SHARD_PLAN, CACHE_META = "plan.json", "meta.json"
"""In CACHE_DIR/<key>/: token ids, [pairs, 2] counts, how the shards were cut, and, written
last, the cache's description (data/token_cache.py); built in `building(CACHE_DIR/<key>)`."""


def building(path: pathlib.Path) -> pathlib.Path:
    """Where `path` is built before it is renamed into place: `.NAME.partial` beside it."""
    return path.with_name(f".{path.name}.partial")


def save_config(model_dir, config: TransformerConfig) -> None:
    write_atomic(pathlib.Path(model_dir) / CONFIG_FILE, config.to_json() + "\n")


def save_settings(model_dir, settings: dict[str, Any]) -> None:
    write_json_atomic(pathlib.Path(model_dir) / SETTINGS_FILE, settings)


def load_settings(model_dir) -> dict[str, Any]:
    """settings.json in the current format ({} if absent); `ModelDirError` if not a JSON object."""
    settings = read_settings(model_dir)
    return settings if settings.get("format") else _upgrade(settings)


def save_dev_choice(model_dir, chosen: dict[str, Any], grid: list[dict]) -> pathlib.Path:
    """Records the dev choice: the values chosen and every dev score tried (stages/choose.py)."""
    path = pathlib.Path(model_dir) / DEV_CHOICE_FILE
    write_json_atomic(path, {"chosen": chosen, "grid": grid})
    return path


def load_dev_choice(model_dir) -> dict[str, Any]:
    """The recorded dev choice ({"chosen": {setting: value}, "grid": [...]}), {} if none."""
    return _read_record(pathlib.Path(model_dir) / DEV_CHOICE_FILE,
                        "delete it, and the next average stage chooses again")


def _read_record(path: pathlib.Path, remedy: str) -> dict[str, Any]:
    """A JSON record of the model dir ({} if absent); `ModelDirError` with `remedy` if damaged."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as e:
        raise ModelDirError(f"{path}: unreadable ({e}); {remedy}") from None


def save_plan(model_dir, plan: dict[str, Any]) -> None:
    path = pathlib.Path(model_dir) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, plan)


def load_plan(model_dir) -> dict[str, Any]:
    """The recorded plan of a --time_budget run ({} if none)."""
    return _read_record(pathlib.Path(model_dir) / PLAN_FILE,
                        "restore it, or train a new model dir with --time_budget")


def _upgrade(old: dict[str, Any]) -> dict[str, Any]:
    """Settings from before format 2 (decoding values at the top level or in "decoding")."""
    decoding = recorded_decoding(old)
    upgraded = {k: old[k] for k in ("task", "task_options") if k in old}
    if decoding:
        upgraded["decoding"] = decoding
    return upgraded


def build_model(config: TransformerConfig, dtype: str | None = None):
    """A Transformer (weights made) for `config`, in `dtype` (default: the global dtype policy)."""
    from keras_transformer.model import Transformer

    return Transformer(config, dtype=dtype)


def checkpoint_dir(model_dir) -> pathlib.Path:
    return pathlib.Path(model_dir) / CHECKPOINT_DIR


def final_weights(model_dir) -> pathlib.Path:
    return pathlib.Path(model_dir) / FINAL_WEIGHTS_FILE


def average_weights(model_dir, checkpoints_chosen) -> pathlib.Path:
    """Where chosen checkpoints are averaged unless --average_output names a file."""
    return pathlib.Path(model_dir) / f"average.{'+'.join(checkpoints_chosen)}{WEIGHTS_SUFFIX}"


def weights_file(model_dir, checkpoint: str | None) -> pathlib.Path | None:
    """The NAME.weights.h5 file `checkpoint` names (as given or in the model dir), else None."""
    if not checkpoint or not checkpoint.endswith(WEIGHTS_SUFFIX):
        return None
    path = pathlib.Path(checkpoint)
    inside = pathlib.Path(model_dir) / path
    return inside if not path.exists() and inside.exists() else path


_PATH_LINE = re.compile(r'^all_model_checkpoint_paths:\s*"((?:[^"\\]|\\.)*)"\s*$', re.M)
_LATEST_LINE = re.compile(r'^model_checkpoint_path:\s*"', re.M)


def checkpoint_paths(checkpoint_dir) -> list[str]:
    """Complete checkpoints in `checkpoint_dir`, oldest first, as `tf.train.get_checkpoint_state`
    gives them ([] without an index), read without TensorFlow (the settings ask before it loads)."""
    try:
        with open(os.path.join(checkpoint_dir, CHECKPOINT_INDEX), "rb") as f:
            text = f.read().decode("ascii", "backslashreplace")
    except FileNotFoundError:
        return []
    if not _LATEST_LINE.search(text):  # TensorFlow reads such an index as no checkpoint
        return []
    paths = [codecs.escape_decode(m.encode("ascii", "backslashreplace"))[0].decode("utf-8")
             for m in _PATH_LINE.findall(text)]
    return [p if os.path.isabs(p) else os.path.join(str(checkpoint_dir), p) for p in paths]


def has_weights(model_dir) -> bool:
    """Whether training has written anything to decode with (a checkpoint or final weights)."""
    return final_weights(model_dir).is_file() or bool(checkpoint_paths(checkpoint_dir(model_dir)))


def load_final_model(model_dir, precision: str = "float32", checkpoint: str | None = None,
                     log: Log = print):
    """The model to decode with, in `precision`: final.weights.h5 (the averaged checkpoints),
    else the latest checkpoint (logged), or the named `checkpoint` ("ckpt-N", or a weights file:
    `weights_file`). `ModelDirError` if there is nothing to load or the weights are damaged."""
    config = read_config(model_dir)
    named = weights_file(model_dir, checkpoint)
    path = named or final_weights(model_dir)
    if (checkpoint is None or named) and path.is_file():
        model = build_model(config, dtype=precision)
        try:
            model.load_weights(path)
        except (OSError, ValueError, KeyError) as e:
            raise ModelDirError(f"{path}: cannot load ({e}); run the averaging stage again "
                                f"(pipelines/run.py --mode average --model_dir {model_dir})"
                                ) from None
        return model
    if named:
        raise ModelDirError(f"--checkpoint {checkpoint}: no such weights file (nor in {model_dir});"
                            f" average into it first (--mode average --average_output FILE)")
    saved = checkpoint_paths(checkpoint_dir(model_dir))
    if checkpoint is not None:
        named = [p for p in saved if pathlib.Path(p).name == checkpoint]
        if not named:
            raise ModelDirError(f"{checkpoint_dir(model_dir)}: no checkpoint {checkpoint!r} (have: "
                                f"{', '.join(pathlib.Path(p).name for p in saved) or 'none'})")
        saved = named
    elif saved:
        log(f"{path} is missing: using the latest checkpoint, {saved[-1]} (run --mode average "
            f"for the average of the last checkpoints)")
    if not saved:
        raise ModelDirError(f"{path}: no final weights and no checkpoint. Train first "
                            f"(pipelines/run.py --mode train,average --model_dir {model_dir}).")
    model = build_model(config, dtype="float32")
    from pipelines.model_dir.checkpoints import restore_weights

    restore_weights(model, saved[-1])
    if precision == "float32":
        return model
    cast = build_model(config, dtype=precision)
    cast.set_weights(model.get_weights())
    return cast
