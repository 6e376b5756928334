"""An output file that a rerun resumes: `--mode translate --output F` writes F's lines to
`.F.partial` beside it, a chunk at a time, and renames it to F when every line is done;
after each chunk `.F.partial.json` records what the lines are made from (the input, the
model's weights, the settings) and how far they go (input lines, bytes). Stopped (Ctrl-C, a
kill), the same command again keeps the recorded chunks and goes on from the next input
line; anything else made them, and it starts afresh. An error (bad input) removes them. F
itself is never half-written."""

import contextlib
import os
import pathlib
from typing import Callable, Iterator

from pipelines.model_dir.files import read_json, write_json_atomic


@contextlib.contextmanager
def resumable(path, made_from: dict | None) -> Iterator[tuple[Callable, int]]:
    """Yields (`write(lines, done)`: appends one chunk's lines, `done` the input lines
    answered so far; the number of input lines a previous run already answered). On success
    renames the partial file to `path`. `made_from`: JSON-able key of the run (None: not
    resumable, e.g. the input is stdin)."""
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
            # Kept for the rerun after Ctrl-C (or a kill, which runs nothing here); an error
            # (bad input) leaves nothing behind, as the atomic writers do.
            if made_from is None or not isinstance(e, KeyboardInterrupt):
                partial.unlink(missing_ok=True)
                record.unlink(missing_ok=True)
            raise
    os.replace(partial, path)
    record.unlink(missing_ok=True)