"""The model directory: what every stage writes and every later stage reads back.

    <model_dir>/config.json         TransformerConfig (JSON)
    <model_dir>/settings.json       task, training and decoding settings (pipelines.options)
    <model_dir>/spm.model           the shared SentencePiece vocabulary
    <model_dir>/checkpoints/        periodic training checkpoints (see pipelines/checkpoints.py)
    <model_dir>/final.weights.h5    the model used for evaluation and export (averaged)
    <model_dir>/eval/               hypotheses and scores
    <model_dir>/export/<version>/   SavedModels, the layout TensorFlow Serving watches

This module is the one place that knows the layout; it reads and writes these files and
builds the model from them.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

from keras_transformer import Transformer, TransformerConfig
from pipelines.errors import ModelDirError
from pipelines.files import write_atomic, write_json_atomic

CONFIG_FILE = "config.json"
SETTINGS_FILE = "settings.json"
VOCAB_FILE = "spm.model"
FINAL_WEIGHTS_FILE = "final.weights.h5"
CHECKPOINT_DIR = "checkpoints"
EVAL_DIR = "eval"
EXPORT_DIR = "export"


def save_config(model_dir, config: TransformerConfig) -> None:
    write_atomic(pathlib.Path(model_dir) / CONFIG_FILE, config.to_json() + "\n")


def load_config(model_dir) -> TransformerConfig:
    path = pathlib.Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        raise ModelDirError(f"{path}: no model config. Train first (pipelines/run.py "
                            f"--mode train --model_dir {model_dir}).")
    try:
        return TransformerConfig.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError) as e:
        raise ModelDirError(f"{path}: not a valid TransformerConfig ({e}); restore it or "
                            f"train a new model dir") from None


def save_settings(model_dir, settings: dict[str, Any]) -> None:
    write_json_atomic(pathlib.Path(model_dir) / SETTINGS_FILE, settings)


def load_settings(model_dir) -> dict[str, Any]:
    """settings.json in the current format ({} if there is none yet).

    Raises:
        ModelDirError: the file is not a JSON object.
    """
    path = pathlib.Path(model_dir) / SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelDirError(f"{path}: unreadable ({e}); restore it from a backup or delete "
                            f"it to start the model dir's settings anew") from None
    if not isinstance(settings, dict):
        raise ModelDirError(f"{path}: not a JSON object; restore it or delete it")
    return settings if settings.get("format") else _upgrade(settings)


def _upgrade(old: dict[str, Any]) -> dict[str, Any]:
    """Settings written before format 2: decoding values at the top level (or in "decoding"),
    the training flags in "training"."""
    decoding = {k: old[k] for k in ("beam_size", "alpha", "extra_length") if k in old}
    decoding.update(old.get("decoding") or {})
    upgraded = {k: old[k] for k in ("task", "task_options") if k in old}
    if decoding:
        upgraded["decoding"] = decoding
    return upgraded


def build_model(config: TransformerConfig, dtype: str | None = None) -> Transformer:
    """A built (weights created) Transformer for `config`, in `dtype` (default: the global
    dtype policy)."""
    model = Transformer(config, dtype=dtype)
    model.build()
    return model


def load_final_model(model_dir, precision: str = "float32") -> Transformer:
    """The evaluation/export model: config.json with final.weights.h5.

    `precision` "bfloat16" gives an inference copy with bfloat16 weights and compute (logits
    and attention softmax stay float32): where the CPU multiplies bfloat16 natively, beam
    search reads half the bytes per step and runs about 1.7x faster than float32.
    """
    path = pathlib.Path(model_dir) / FINAL_WEIGHTS_FILE
    if not path.is_file():
        raise ModelDirError(f"{path}: no final weights. Run the training and averaging stages "
                            f"first (pipelines/run.py --mode train,average --model_dir {model_dir}).")
    model = build_model(load_config(model_dir), dtype=precision)
    model.load_weights(path)
    return model
