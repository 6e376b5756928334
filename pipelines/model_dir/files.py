"""Atomic file writes (a crash never leaves a half-written file), input manifests (a manifest
records each input's path, size and mtime, so a derived file is reused exactly while its inputs
are unchanged) and line counts."""

import contextlib
import json
import os
import pathlib
import tempfile
from typing import Any, Iterator, Sequence

PathLike = os.PathLike | str


def _umask_mode(full: int) -> int:
    """`full` (0o666) under the umask: the mode `open` gives, which `tempfile` makes private."""
    mask = os.umask(0)
    os.umask(mask)
    return full & ~mask


def _temp_beside(path: pathlib.Path) -> pathlib.Path:
    """A fresh hidden file in `path`'s directory (same file system), ending like `path` (some
    writers insist on their extension), with the umask's mode (others may read the result)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                               suffix=".tmp" + "".join(path.suffixes))
    os.fchmod(fd, _umask_mode(0o666))
    os.close(fd)
    return pathlib.Path(tmp)


@contextlib.contextmanager
def atomic_files(*paths: PathLike) -> Iterator[list[pathlib.Path]]:
    """Yields one temporary path per final path, e.g. ``with atomic_files(a, b) as (ta, tb):``;
    on success renames each into place in order (the last marks the set complete), on any
    error deletes them all."""
    finals = [pathlib.Path(p) for p in paths]
    temps = [_temp_beside(p) for p in finals]
    try:
        yield temps
        for tmp, final in zip(temps, finals):
            os.replace(tmp, final)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)


def write_atomic(path: PathLike, data: bytes | str) -> None:
    """Writes `data` (str as UTF-8) to `path` through a temporary file and a rename."""
    with atomic_files(path) as (tmp,):
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


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
    rows = []
    for path in map(pathlib.Path, paths):
        stat = path.stat()
        rows.append([str(path.resolve()), stat.st_size, stat.st_mtime_ns])
    return rows


def read_manifest(path: PathLike, version: int, inputs: Any) -> dict | None:
    """The manifest at `path` if its `version` and `inputs` (`input_identity`) match, else None."""
    manifest = read_json(path)
    if manifest is None or manifest.get("version") != version or manifest.get("inputs") != inputs:
        return None
    return manifest


def count_lines(path: PathLike) -> int:
    """Number of lines as tf.data and ``text_io.iter_lines`` count them (a last line without LF
    counts)."""
    with open(path, "rb") as f:
        return sum(1 for _ in f)
