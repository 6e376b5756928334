"""An output file a rerun resumes: F is written as `.F.partial` a chunk at a time, each chunk
recorded in `.F.partial.json`, then renamed to F; after Ctrl-C or a kill the same command goes
on from the next input line; an error removes both."""

import contextlib
import os
import pathlib
from typing import Callable, Iterator

from pipelines.model_dir.files import read_json, write_json_atomic


@contextlib.contextmanager
def resumable(path, made_from: dict | None) -> Iterator[tuple[Callable, int]]:
    """Yields (`write(lines, answered)`, the input lines a previous run answered), then renames
    the partial file to `path`; `made_from`: the run's JSON-able key (None: not resumable)."""
    path = pathlib.Path(path)
    partial = path.with_name(f".{path.name}.partial")
    record = path.with_name(f".{path.name}.partial.json")
    found = read_json(record) if made_from is not None and partial.exists() else None
    done = 0
    if found and found.get("made_from") == made_from and \
            partial.stat().st_size >= found["bytes"]:
        done = found["lines"]
        os.truncate(partial, found["bytes"])  # a chunk written after the record: again
    else:
        partial.unlink(missing_ok=True)
        record.unlink(missing_ok=True)
    with open(partial, "a", encoding="utf-8", newline="\n") as file:

        def write(lines: list[str], answered: int) -> None:
            file.writelines(lines)
            file.flush()
            if made_from is not None:
                os.fsync(file.fileno())
                write_json_atomic(record, {"made_from": made_from, "lines": answered,
                                           "bytes": file.tell()})

        try:
            yield write, done
        except BaseException as e:
            # Kept for the rerun after Ctrl-C; an error leaves nothing behind.
            if made_from is None or not isinstance(e, KeyboardInterrupt):
                partial.unlink(missing_ok=True)
                record.unlink(missing_ok=True)
            raise
    os.replace(partial, path)
    record.unlink(missing_ok=True)