"""A process that has imported TensorFlow once and forks a fresh `pipelines/run.py` per request.

Started by `tests.pipelines.run_helpers.run_command` (one per pytest worker): importing
TensorFlow, Keras and the package costs a CLI process about 3.5 s of CPU, which the suite
paid for each of its hundreds of runs. Forking is safe here because importing TensorFlow
starts no thread pool (the eager context is made on first use, in the child). Each request
is a JSON line on stdin (`argv`, `env`, `cwd`, `stdout`/`stderr` file paths, `timeout`); the
child runs the command line exactly as `run.py` does, with that environment, directory and
output files, and the answer is a JSON line (`returncode`, `timed_out`).

What a fresh interpreter decides at import (the Keras backend, TensorFlow's C++ log level)
is not requested here: `run_command` starts a real process for `--backend jax`, for
processes a test signals, and for environments that change those.
"""
import json
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:] = [ROOT] + [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(
    os.path.abspath(__file__))]
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402,F401
import tensorflow  # noqa: E402,F401
import tensorflow_text  # noqa: E402,F401

import cli.main  # noqa: E402,F401
import pipelines.stages  # noqa: E402,F401


def child(request) -> None:
    """Runs the command line of `request` in this (forked) process and exits with its status."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        with open(os.devnull) as devnull:
            os.dup2(devnull.fileno(), 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            with open(path, "w") as out:
                os.dup2(out.fileno(), fd)
        sys.argv = list(request["argv"])
        try:
            cli.main.main(cli.main.RUN)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 (reported as a process would report it)
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(request)
        deadline = time.monotonic() + request["timeout"]
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                timed_out = True
                break
            time.sleep(0.02)
        sys.stdout.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status),
                                     "timed_out": timed_out}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
