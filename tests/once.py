"""Building a fixture's files once for the whole test run, whichever xdist worker asks first.

Each pytest-xdist worker has its own session fixtures: a session fixture that trains or
prepares a model dir would run once per worker. `build_once` builds it once, in the run's
temporary root that every worker shares, under a file lock (the other workers wait for it,
then read it). What it builds is read-only for the tests: a test that writes copies it.
"""
import fcntl
import pathlib
import shutil


def shared_root(tmp_path_factory, worker_id: str) -> pathlib.Path:
    """The temporary root of this test run: shared by its xdist workers (each has its own
    folder below it: xdist's documented recipe for a session fixture built once, with its
    `worker_id` fixture, "master" without workers), else the session's own."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


def build_once(tmp_path_factory, worker_id: str, name: str, build) -> pathlib.Path:
    """`<shared root>/<name>`, a new folder filled by `build(path)` the first time any worker asks for it.

    A build that failed (raised) leaves no `.done` mark: the next asker builds it anew (and
    fails the same way, with the same message).
    """
    root = shared_root(tmp_path_factory, worker_id)
    path, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                if path.exists():
                    shutil.rmtree(path)
                path.mkdir(parents=True)
                build(path)
                done.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path
