"""The model dir as a library format: `save` writes one, `load` reads one back as a `Translator`
(also every model dir `pipelines/run.py` writes, whose other files are its own):

    config.json         the `TransformerConfig`
    final.weights.h5    the weights to translate with
    spm.model           the SentencePiece model, source and target
    settings.json       {"format": 2, "decoding": {beam_size, alpha, extra_length, stop_rule,
                        max_input_length, precision}, "spm_sha256", "vocab_size", ...}
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from typing import Any

from keras_transformer import native_logs
from keras_transformer.atomic_files import atomic_files, write_atomic
from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import BeamSearch
from keras_transformer.errors import ModelDirError

CONFIG_FILE = "config.json"
SETTINGS_FILE = "settings.json"
VOCAB_FILE = "spm.model"
WEIGHTS_SUFFIX = ".weights.h5"
FINAL_WEIGHTS_FILE = "final" + WEIGHTS_SUFFIX
SETTINGS_FORMAT = 2
PRECISIONS = ("float32", "bfloat16")
HOOKED_TASKS = {"ptb_parsing": "its decoding builds trees under a constraint"}
"""Tasks whose decoding needs the application's code: `load` refuses their model dirs."""


def read_config(model_dir) -> TransformerConfig:
    """config.json's `TransformerConfig`; `ModelDirError` if missing or not one."""
    path = pathlib.Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        raise ModelDirError(f"{path}: no model config. Train first (pipelines/run.py "
                            f"--mode train --model_dir {model_dir}), or save a model there "
                            f"(keras_transformer.save).")
    try:
        return TransformerConfig.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError) as e:
        raise ModelDirError(f"{path}: not a valid TransformerConfig ({e}); restore it or "
                            f"train a new model dir") from None


def read_settings(model_dir) -> dict[str, Any]:
    """settings.json as written ({} if absent); `ModelDirError` if not a JSON object."""
    path = pathlib.Path(model_dir) / SETTINGS_FILE
    try:
        settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as e:
        raise ModelDirError(f"{path}: unreadable ({e}); restore it from a backup or delete "
                            f"it to start the model dir's settings anew") from None
    if not isinstance(settings, dict):
        raise ModelDirError(f"{path}: not a JSON object; restore it or delete it")
    return settings


def recorded_decoding(settings: dict[str, Any]) -> dict[str, Any]:
    """The decoding settings a model dir recorded (older layouts: at the top level)."""
    decoding = {k: settings[k] for k in ("beam_size", "alpha", "extra_length") if k in settings}
    decoding.update(settings.get("decoding") or {})
    return decoding


def save(model_dir, model, spm_proto: bytes, search: BeamSearch = BeamSearch(), *,
         max_input_length: int | None = None, precision: str = "float32") -> pathlib.Path:
    """Writes `model` (a `Transformer`), its SentencePiece model and its decoding settings as a
    model dir that `load` and `pipelines/run.py` read; returns it. `search`, `max_input_length`
    (EOS included; default: the model's) and `precision` are `load`'s defaults."""
    if precision not in PRECISIONS:
        raise ModelDirError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    model_dir = pathlib.Path(model_dir)
    write_atomic(model_dir / VOCAB_FILE, bytes(spm_proto))
    write_atomic(model_dir / CONFIG_FILE, model.config.to_json() + "\n")
    with atomic_files(model_dir / FINAL_WEIGHTS_FILE) as (weights,):
        model.save_weights(weights)
    decoding = {**dataclasses.asdict(search), "max_input_length": max_input_length,
                "precision": precision}
    settings = {**read_settings(model_dir), "format": SETTINGS_FORMAT, "decoding": decoding,
                "spm_sha256": hashlib.sha256(bytes(spm_proto)).hexdigest(),
                "vocab_size": model.config.vocab_size}
    write_atomic(model_dir / SETTINGS_FILE, json.dumps(settings, indent=2, sort_keys=True) + "\n")
    return model_dir


@native_logs.quiet()
def load(model_dir, **decoding):
    """The model dir's `Translator` with the recorded decoding settings, which a keyword
    (`beam_size=8`, `alpha`, `extra_length`, `stop_rule`, `max_input_length`, `precision`)
    overrides; `ModelDirError` for a missing, damaged or changed file, or a `HOOKED_TASKS` task."""
    from keras_transformer.model import Transformer
    from keras_transformer.serving.translator import Translator

    model_dir = pathlib.Path(model_dir)
    settings = read_settings(model_dir)
    task = settings.get("task")
    if task in HOOKED_TASKS:
        raise ModelDirError(f"{model_dir}: task {task}: {HOOKED_TASKS[task]}, which the "
                            f"library alone cannot; translate with pipelines/run.py --mode "
                            f"translate, or serve its export")
    unknown = set(decoding) - {*BeamSearch.__dataclass_fields__, "max_input_length",
                               "precision"}
    if unknown:
        raise TypeError(f"load() got unknown decoding settings: {', '.join(sorted(unknown))}")
    trained_mixed = (settings.get("training") or {}).get("mixed_precision")
    chosen = {"precision": "bfloat16" if trained_mixed else "float32",
              **recorded_decoding(settings), **decoding}
    config = read_config(model_dir)
    check_vocabulary(model_dir, settings.get("spm_sha256"))
    if not (model_dir / VOCAB_FILE).is_file():
        raise ModelDirError(f"{model_dir / VOCAB_FILE}: no SentencePiece model; restore the "
                            f"model dir's spm.model")
    weights = model_dir / FINAL_WEIGHTS_FILE
    if not weights.is_file():
        raise ModelDirError(f"{weights}: no final weights; average the last checkpoints "
                            f"(pipelines/run.py --mode average --model_dir {model_dir}) or "
                            f"save a model there (keras_transformer.save)")
    model = Transformer(config, dtype=chosen.pop("precision"))
    try:
        model.load_weights(weights)
    except (OSError, ValueError, KeyError) as e:
        raise ModelDirError(f"{weights}: cannot load ({e}); average or save it again") from None
    search = BeamSearch(**{k: v for k, v in chosen.items() if k in BeamSearch.__dataclass_fields__})
    return Translator(model, (model_dir / VOCAB_FILE).read_bytes(), search,
                      max_input_length=chosen.get("max_input_length"))


def check_vocabulary(model_dir, sha256: str | None) -> None:
    """`ModelDirError` if spm.model is not the vocabulary the model dir recorded (`sha256`)."""
    path = pathlib.Path(model_dir) / VOCAB_FILE
    if sha256 and path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
        raise ModelDirError(f"{path} is not the vocabulary this model was prepared with "
                            f"(sha256 differs from {SETTINGS_FILE}'s spm_sha256 {sha256[:12]}); "
                            f"restore the original spm.model")
