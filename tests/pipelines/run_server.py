"""A process that has imported TensorFlow once and forks a fresh `pipelines/run.py` (or
`export/run.py`, the other front of `cli.main`) per request.

Started by `tests.pipelines.run_helpers` (one per pytest worker): importing TensorFlow,
Keras and the package costs a CLI process about 3.5 s of CPU, and leaving it about 1 s more,
which the suite paid for each of its hundreds of runs. Forking is safe here because the
server has one thread, checked before every fork: importing TensorFlow starts no thread pool
(the eager context is made on first use, in the child), and numpy's OpenBLAS, which starts
one at import, is told to use one thread (the children's numpy multiplies nothing that
matters; their TensorFlow makes its own pools).

It listens on the Unix socket named by its argument. A request is one message: a JSON line
(`argv`, `env`, `cwd`) with three file descriptors, the child's stdin, stdout and stderr
(`socket.send_fds`), so the child writes where a process started by the test would. The
answer on the same connection is two JSON lines: `{"pid"}` when the child starts (a test
signals that process itself), then `{"returncode"}` (negative: killed by that signal) when
it ends. A connection closed before its child ends kills the child; the server ends, and
kills what it started, when its stdin closes (its pytest worker ended).

What a fresh interpreter decides at import (the Keras backend, XLA's flags) is not requested
here: `run_helpers` starts a real process for `--backend jax` and for environments that change
those. TensorFlow's C++ log level is 3 here, as a run sets it itself when the user set none:
a request with the level 3 or none runs as such a run does (without one, `cli.startup` reads
none and filters the libraries' lines out of stderr, `cli.quiet`).
"""
import json
import os
import selectors
import signal
import socket
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:] = [ROOT] + [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["OPENBLAS_NUM_THREADS"] = "1"  # else numpy's import starts a pool thread

import keras  # noqa: E402,F401
import tensorflow  # noqa: E402,F401
import tensorflow_text  # noqa: E402,F401

import cli.main  # noqa: E402
import pipelines.stages.average  # noqa: E402,F401
import pipelines.stages.evaluate  # noqa: E402,F401
import pipelines.stages.export  # noqa: E402,F401
import pipelines.stages.modes  # noqa: E402,F401
import pipelines.stages.train  # noqa: E402,F401
import pipelines.stages.translate  # noqa: E402,F401
from tests.pipelines.forked_python import FORKED  # noqa: E402

FRONTS = dict(zip(FORKED, (cli.main.RUN, cli.main.EXPORT)))
"""The scripts a request may run (its argv[0], from the checkout's root), and their fronts."""


def front(argv0: str) -> str:
    """The `cli.main` front of the script `argv0` names."""
    return next(name for script, name in FRONTS.items()
                if os.path.normpath(argv0).endswith(os.path.normpath(script)))


def child(request, fds) -> None:
    """Runs the command line of `request` in this (forked) process and exits with its status,
    as `python pipelines/run.py` (or `export/run.py`) started with those descriptors would:
    its exit functions run (`cli.quiet` forwards the last lines of stderr in one): its
    `SystemExit` leaves `serve` and the interpreter, as it would leave a script."""
    code = 1
    try:
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
        # A Python process starts with Ctrl-C raising KeyboardInterrupt and SIGTERM killing it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        try:
            cli.main.main(front(sys.argv[0]))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 (reported as a process would report it)
        import traceback

        traceback.print_exc()
    _flush()
    sys.exit(code)


def _check_single_thread() -> None:
    """Raises RuntimeError unless this process has one thread (Linux's /proc/self/task): a
    fork copies only the calling thread, so a lock another one held would stay held."""
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in threads]
        raise RuntimeError(f"run_server: {len(threads)} threads before a fork ({names}); "
                           f"forking would copy only this one")


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    running = {}  # pid -> the connection that asked for it
    while True:
        for key, _ in selector.select(timeout=0.01):
            if key.data == "stdin" and not sys.stdin.readline():
                for pid in running:
                    os.kill(pid, signal.SIGKILL)
                return
            if key.data == "listener":
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
                _check_single_thread()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    child(json.loads(message), fds)
                for fd in fds:
                    os.close(fd)
                running[pid] = connection
                selector.register(connection, selectors.EVENT_READ, pid)
                connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            elif isinstance(key.data, int) and not key.fileobj.recv(1):
                os.kill(key.data, signal.SIGKILL)  # its test gave up on it
                selector.unregister(key.fileobj)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            connection = running.pop(pid)
            try:
                connection.sendall(json.dumps(
                    {"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            except OSError:
                pass
            try:
                selector.unregister(connection)
            except KeyError:  # unregistered when its test gave up
                pass
            connection.close()


if __name__ == "__main__":
    serve(sys.argv[1])
