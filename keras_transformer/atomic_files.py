"""Atomic file writes: a crash never leaves a half-written file (a temporary file beside the
final one, then a rename), and the result has the mode `open` would give it."""

import contextlib
import os
import pathlib
import tempfile
from typing import Iterator

PathLike = os.PathLike | str


def _temp_beside(path: pathlib.Path) -> pathlib.Path:
    """A fresh hidden file beside `path`, ending like it (some writers insist on an extension)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                               suffix=".tmp" + "".join(path.suffixes))
    mask = os.umask(0)  # read the umask: the mode `open` gives, which `tempfile` makes private
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    os.close(fd)
    return pathlib.Path(tmp)


@contextlib.contextmanager
def atomic_files(*paths: PathLike) -> Iterator[list[pathlib.Path]]:
    """Yields one temporary path per final path (``with atomic_files(a, b) as (ta, tb):``); renames
    each into place in order on success (the last marks the set complete), else deletes them."""
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
