"""What a stage's product was made from (`<model_dir>/made_from/<stage>.json`): files by path
relative to the model dir and sha256, settings by value; rerun with the same inputs, even in a
`cp -r` copy of the model dir, a stage finds its record and skips its work."""

import pathlib

from pipelines.model_dir import layout as md
from pipelines.model_dir.files import file_sha256, read_manifest, write_json_atomic
from pipelines.settings.options import Recipe

VERSION = 2  # format of the records


def _path(options: Recipe, name: str) -> pathlib.Path:
    return pathlib.Path(options.model_dir) / md.MADE_FROM_DIR / f"{name}.json"


def relative(options: Recipe, path) -> str:
    """`path` relative to the model dir when it lies inside it, else resolved."""
    path, root = pathlib.Path(path).resolve(), pathlib.Path(options.model_dir).resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def content_identity(options: Recipe, paths) -> list[list]:
    """Each file as [path relative to the model dir, size, sha256 of its bytes]."""
    return [[relative(options, path), path.stat().st_size, file_sha256(path).hexdigest()]
            for path in map(pathlib.Path, paths)]


def up_to_date(options: Recipe, name: str, inputs: dict) -> dict | None:
    """The record of stage `name`'s product if made from `inputs` and still there, else None."""
    found = read_manifest(_path(options, name), VERSION, inputs)
    if found is None:
        return None
    product = pathlib.Path(options.model_dir) / found["product"]
    return dict(found, product=str(product)) if product.exists() else None


def record(options: Recipe, name: str, inputs: dict, product, **extra) -> None:
    write_json_atomic(_path(options, name), {"version": VERSION, "inputs": inputs,
                                             "product": relative(options, product), **extra})


def weights_identity(options: Recipe) -> list:
    """What the decoded model is made from: its weights file and the checkpoint state."""
    name, state = options.evaluation.checkpoint, md.checkpoint_dir(options.model_dir)
    weights = (md.weights_file(options.model_dir, name)
               or (md.final_weights(options.model_dir) if name is None
                   else state / f"{name}.index"))
    return content_identity(options, [p for p in (weights, state / md.CHECKPOINT_INDEX)
                                      if p.exists()])
