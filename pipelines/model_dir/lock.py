"""One writer per model directory: an OS file lock (`fcntl.flock`) on `<model_dir>/.lock`, which
the kernel releases however the holder ends (kill -9 included). A second run stops at once, naming
the holder, whose record is written in place, not renamed, since the lock belongs to the inode."""

import contextlib
import datetime
import errno
import fcntl
import json
import os
import pathlib
import socket
import time
from typing import Iterator

from pipelines.errors import ModelDirError
from pipelines.model_dir.layout import LOCK_FILE


class ModelDirLocked(ModelDirError):
    """Another live run holds the model directory's lock."""


def holder(path: pathlib.Path, attempts: int = 10) -> dict:
    """The lock record at `path` ({} if unreadable), read again while the holder writes it."""
    for attempt in range(attempts):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(record, dict):
                return record
        if attempt + 1 < attempts:
            time.sleep(0.1)
    return {}


@contextlib.contextmanager
def hold(model_dir: os.PathLike | str, *, create: bool = True) -> Iterator[pathlib.Path | None]:
    """Holds `<model_dir>/.lock` for the duration of the block; yields its path (None, without
    a lock, for a missing directory with `create=False`). `ModelDirLocked` if another holds it."""
    directory = pathlib.Path(model_dir)
    created = not directory.is_dir()
    if created:
        if not create:
            yield None
            return
        directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    locked = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            record = holder(path)
            who = (f"pid {record.get('pid', '?')} on host {record.get('host', '?')}"
                   + (f" (since {record['since']})" if record.get("since") else ""))
            raise ModelDirLocked(
                f"{directory} is in use by another run, {who}: wait for it to finish or stop "
                f"it (a run that was killed releases the lock by itself), or give another "
                f"--model_dir") from None
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        yield path
    finally:
        if created and locked and [p.name for p in directory.iterdir()] == [LOCK_FILE]:
            # A (failed) run that made the directory and wrote nothing in it removes it.
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                directory.rmdir()
        os.close(fd)  # releases the lock
