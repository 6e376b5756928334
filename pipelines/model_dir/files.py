"""Atomic JSON, input manifests (a derived file is reused exactly while its inputs' path, size
and mtime are unchanged) and line counts."""

import hashlib
import json
import os
import pathlib
from typing import Any, Sequence

from keras_transformer.atomic_files import write_atomic

PathLike = os.PathLike | str


def file_sha256(path: PathLike, digest=None):
    """`digest` (default: a new sha256) updated with the bytes of `path`, read in 1 MiB blocks."""
    digest = digest or hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest


def write_json_atomic(path: PathLike, value: Any) -> None:
    """`value` as indented, key-sorted JSON, written atomically."""
    write_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_json(path: PathLike, default: Any = None) -> Any:
    """The JSON value in `path`, or `default` where it is missing or unreadable."""
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def input_identity(paths: Sequence[PathLike]) -> list[list]:
    """What derived files depend on: every input's resolved path, size and mtime."""
    stats = [(path, path.stat()) for path in map(pathlib.Path, paths)]
    return [[str(path.resolve()), stat.st_size, stat.st_mtime_ns] for path, stat in stats]


def read_manifest(path: PathLike, version: int, inputs: Any) -> dict | None:
    """The manifest at `path` if its `version` and `inputs` (`input_identity`) match, else None."""
    manifest = read_json(path)
    if manifest is None or manifest.get("version") != version or manifest.get("inputs") != inputs:
        return None
    return manifest


def count_lines(path: PathLike) -> int:
    """Lines as tf.data and ``text_io.iter_lines`` count them (a last line without LF counts)."""
    with open(path, "rb") as f:
        return sum(1 for _ in f)
