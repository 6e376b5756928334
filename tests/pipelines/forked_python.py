"""`python` for the commands a test runs in a shell (`tests/test_doc_commands.py`):
`python pipelines/run.py ...` and `python export/run.py ...` become forks of `run_server`
(TensorFlow imported once), started with this process's stdin, stdout, stderr, directory and
environment; every other command line runs the real interpreter.

`install(folder, socket)` writes the `python` that runs this file. A run that `forkable`
refuses runs the real interpreter: `run_server` imported TensorFlow with the level 3 that a
run sets itself where the user set none, and the environment its pytest worker had. This
process waits for the fork's status and exits with it; if it ends first (Ctrl-C, a timeout),
its connection closes and the server kills the fork.
"""
import json
import os
import socket
import sys

SERVER = "KT_RUN_SERVER"
"""The environment variable naming `run_server`'s socket."""
FORKED = ("pipelines/run.py", "export/run.py")
"""The scripts that are forked (`run_server.FRONTS` runs their fronts)."""


def install(folder, server_socket: str) -> dict:
    """Writes `folder`/python; returns the environment entries that put it first on PATH."""
    path = os.path.join(folder, "python")
    with open(path, "w") as out:
        out.write(f"#!{sys.executable}\nimport runpy\n"
                  f"runpy.run_path({os.path.abspath(__file__)!r}, run_name='__main__')\n")
    os.chmod(path, 0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}", SERVER: server_socket}


IMPORT_TIME_ENV = frozenset({"KERAS_BACKEND", "XLA_FLAGS", "PYTHONPATH", "TF_CONFIG",
                             "CUDA_VISIBLE_DEVICES", "TF_ENABLE_ONEDNN_OPTS"})
"""Environment variables a process reads when it imports (besides TensorFlow's C++ log
level, below): a run that sets one gets a fresh interpreter, not a fork of `run_server`."""


def forkable(args, env, changed) -> bool:
    """The one rule for whether `python ARGS` may be a fork of `run_server`: a forked script,
    TensorFlow's C++ log level in `env` unset or 3 (the server's), no `--verbose` (which
    lowers it) or `--backend`, and none of `IMPORT_TIME_ENV` among the `changed` names
    (those the caller set beyond the environment the server was started with)."""
    return (bool(args) and os.path.normpath(args[0]) in FORKED
            and env.get("TF_CPP_MIN_LOG_LEVEL") in (None, "3")
            and not any(arg.startswith(("--verbose", "--backend")) for arg in args[1:])
            and not IMPORT_TIME_ENV & set(changed))


def main() -> None:
    args = sys.argv[1:]
    # A shell's environment: any import-time variable it holds counts as set here.
    if SERVER not in os.environ or not forkable(args, os.environ, set(os.environ)):
        os.execv(sys.executable, [sys.executable, *args])
    env = {key: value for key, value in os.environ.items() if key != SERVER}
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(os.environ[SERVER])
    socket.send_fds(connection, [json.dumps({"argv": args, "env": env,
                                             "cwd": os.getcwd()}).encode()], [0, 1, 2])
    answers = connection.makefile("rb")
    answers.readline()  # {"pid"}: the fork started
    line = answers.readline()  # this process ending first closes the connection: the
    if not line:  # server then kills the fork
        sys.exit("run_server.py ended before the run did")
    code = json.loads(line)["returncode"]
    sys.exit(code if code >= 0 else 128 - code)  # killed by a signal: as a shell reports it


if __name__ == "__main__":
    main()
