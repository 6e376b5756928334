"""One writer per model directory: an OS file lock on `<model_dir>/.lock`.

Two runs writing the same model dir would interleave checkpoints and settings, so every run
that writes takes this lock first, and a second one stops at once naming the holder. The lock
is `fcntl.flock`: the kernel releases it when the holder ends, however it ends (kill -9
included), so there is never a stale lock to clean up. The file only records who holds it
(pid, host, start time) for that message.

The record is written in place, not through `pipelines.model_dir.files`' rename: the lock belongs
to the file's inode, and renaming a new file over it would hand a second run a fresh,
unlocked inode. Readers therefore tolerate a record being written (they retry briefly).
flock works on local file systems and on NFS (Linux emulates it with byte-range locks).
"""

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

LOCK_FILE = ".lock"


class ModelDirLocked(ModelDirError):
    """Another live run holds the model directory's lock."""


def holder(path: pathlib.Path, attempts: int = 10) -> dict:
    """The record of the lock at `path` ({} if none is readable): the holder writes it just
    after taking the lock, so an empty or partial one is read again a few times."""
    for attempt in range(attempts):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(record, dict):
                return record
        except (OSError, ValueError):
            pass
        if attempt + 1 < attempts:
            time.sleep(0.1)
    return {}


@contextlib.contextmanager
def hold(model_dir: os.PathLike | str, *, create: bool = True) -> Iterator[pathlib.Path | None]:
    """Holds `<model_dir>/.lock` for the duration of the block; yields its path.

    Args:
        model_dir: the model directory the run writes.
        create: make the directory if it does not exist (prepare and train start one).
            Otherwise a missing directory holds nothing to protect: nothing is created, no
            lock is taken (yields None) and the stage reports what is missing.
    Raises:
        ModelDirLocked: another process holds the lock (the message names its pid and host).
    """
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
            # A run that made the directory and wrote nothing in it (a failed one) leaves
            # no directory holding only its lock.
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                directory.rmdir()
        os.close(fd)  # releases the lock
