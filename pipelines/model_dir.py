"""The model directory: what every stage writes and every later stage reads back.

    <model_dir>/config.json         TransformerConfig (JSON)
    <model_dir>/settings.json       task, decoding defaults and the flags of the training run
    <model_dir>/spm.model           the shared SentencePiece vocabulary
    <model_dir>/checkpoints/        periodic training checkpoints (see pipelines/checkpoints.py)
    <model_dir>/final.weights.h5    the model used for evaluation and export (averaged)
    <model_dir>/eval/               hypotheses and scores
    <model_dir>/export/<version>/   SavedModels, the layout TensorFlow Serving watches
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from keras_transformer import Transformer, TransformerConfig
from pipelines.vocab import write_atomic

CONFIG_FILE = "config.json"
SETTINGS_FILE = "settings.json"
VOCAB_FILE = "spm.model"
FINAL_WEIGHTS_FILE = "final.weights.h5"
CHECKPOINT_DIR = "checkpoints"
EVAL_DIR = "eval"
EXPORT_DIR = "export"


class ModelDirError(ValueError):
    """A model directory is missing something a stage needs."""


def write_text_atomic(path: os.PathLike | str, text: str) -> None:
    """Writes UTF-8 `text` through a temporary file and a rename (see `vocab.write_atomic`)."""
    write_atomic(path, text.encode("utf-8"))


def save_config(model_dir, config: TransformerConfig) -> None:
    write_text_atomic(pathlib.Path(model_dir) / CONFIG_FILE, config.to_json() + "\n")


def load_config(model_dir) -> TransformerConfig:
    path = pathlib.Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        raise ModelDirError(f"{path}: no model config. Train first (pipelines/run.py "
                            f"--mode train --model_dir {model_dir}).")
    try:
        return TransformerConfig.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError) as e:
        raise ModelDirError(f"{path}: not a valid TransformerConfig: {e}") from e


def save_settings(model_dir, settings: dict[str, Any]) -> None:
    write_text_atomic(pathlib.Path(model_dir) / SETTINGS_FILE,
                      json.dumps(settings, indent=2, sort_keys=True) + "\n")


def load_settings(model_dir) -> dict[str, Any]:
    path = pathlib.Path(model_dir) / SETTINGS_FILE
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def build_model(config: TransformerConfig, dtype: str | None = None) -> Transformer:
    """A built (weights created) Transformer for `config`, in `dtype` (default: the global
    dtype policy)."""
    model = Transformer(config, dtype=dtype)
    model.build()
    return model


def load_final_model(model_dir, dtype: str | None = None) -> Transformer:
    """The evaluation/export model: config.json with final.weights.h5.

    `dtype` "bfloat16" gives an inference copy with bfloat16 weights and compute (logits and
    attention softmax stay float32): where the CPU multiplies bfloat16 natively, beam search
    reads half the bytes per step and runs about 1.7x faster than float32 (both without XLA).
    """
    path = pathlib.Path(model_dir) / FINAL_WEIGHTS_FILE
    if not path.is_file():
        raise ModelDirError(f"{path}: no final weights. Run the training and averaging stages "
                            f"first (pipelines/run.py --mode train,average --model_dir {model_dir}).")
    model = build_model(load_config(model_dir), dtype=dtype)
    model.load_weights(path)
    return model
