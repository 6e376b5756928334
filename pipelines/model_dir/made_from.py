"""What a stage's product was made from: `<model_dir>/made_from/<stage>.json`.

average, evaluate and export record their inputs (files by path, size and modification time,
settings by value) beside what they wrote; rerun with the same inputs, a stage finds its
record (`up_to_date`) and does not do its work again.
"""
from __future__ import annotations

import pathlib

from pipelines.model_dir import layout as md
from pipelines.model_dir.files import input_identity, read_manifest, write_json_atomic
from pipelines.settings.options import Recipe

VERSION = 1
"""Format of the records."""


def _path(options: Recipe, name: str) -> pathlib.Path:
    return pathlib.Path(options.model_dir) / "made_from" / f"{name}.json"


def up_to_date(options: Recipe, name: str, inputs: dict) -> dict | None:
    """The record of stage `name`'s last product if it was made from `inputs` and still
    exists: a rerun with nothing changed then does not do the work again."""
    found = read_manifest(_path(options, name), VERSION, inputs)
    return found if found is not None and pathlib.Path(found["product"]).exists() else None


def record(options: Recipe, name: str, inputs: dict, product, **extra) -> None:
    write_json_atomic(_path(options, name), {"version": VERSION, "inputs": inputs,
                                                    "product": str(product), **extra})


def weights_identity(options: Recipe) -> list:
    """What the model decoded with is made from: the final weights (or the named checkpoint)
    and the checkpoint state (a newer checkpoint may be used where no final weights are)."""
    name, state = options.evaluation.checkpoint, md.checkpoint_dir(options.model_dir)
    weights = md.final_weights(options.model_dir) if name is None else state / f"{name}.index"
    return input_identity([p for p in (weights, state / "checkpoint") if p.exists()])
