"""Running `pipelines/run.py` (or `export/run.py`) in a subprocess, on the real Multi30k files,
with a tiny model."""
import atexit
import json
import os
import pathlib
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from tests.pipelines import forked_python

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUN = ROOT / "pipelines" / "run.py"
TINY_MODEL = ["--config_override=num_layers=1", "--config_override=d_model=32",
              "--config_override=d_ff=64", "--config_override=num_heads=2",
              "--vocab_size=1000", "--batch_tokens=1024", "--warmup_steps=50",
              "--nochoose_on_dev"]  # the dev choice decodes dev 6 times: tests/.../test_choose.py


def run_command(args, data_dir=None, timeout=600, wait=True, env_data_dir=True, env=None,
                script=RUN, cwd=ROOT, stdin="", user_env=False):
    """Starts `script` (run.py, or export/run.py) with `args`; returns the CompletedProcess,
    or if not `wait` the running process (stdout and stderr together on its `stdout`).

    The run is a fork of `run_server` (TensorFlow imported once), unless it needs a fresh
    interpreter (`forked_python.forkable`: a backend, --verbose, or an `env` that a process
    reads at import).

    `env_data_dir`: point $KT_DATA_DIR at `data_dir` (else remove it from the environment).
    `stdin`: the text the run reads (a run not waited for reads none). `user_env`: no TF C++
    log level, as a user's shell sets none (the run filters the libraries' lines itself);
    else the level 3.
    """
    changed = set(env or ())
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    if user_env:
        env.pop("TF_CPP_MIN_LOG_LEVEL")
    env.pop("KT_DATA_DIR", None)
    if env_data_dir:
        env["KT_DATA_DIR"] = str(data_dir)
    command = [sys.executable, str(script), *args]
    if not forked_python.forkable([os.path.relpath(script, ROOT), *args], env, changed):
        if not wait:
            return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                              input=stdin, timeout=timeout)
    if not wait:
        read, write = os.pipe()
        with open(os.devnull) as devnull:
            process = ForkedRun(command, env, cwd, (devnull.fileno(), write, write))
        os.close(write)
        process.stdout = open(read, errors="replace")
        return process
    with tempfile.TemporaryDirectory() as folder:
        paths = [pathlib.Path(folder, name) for name in ("stdin", "stdout", "stderr")]
        paths[0].write_text(stdin)
        with open(paths[0]) as given, open(paths[1], "w") as out, open(paths[2], "w") as err:
            process = ForkedRun(command, env, cwd, (given.fileno(), out.fileno(),
                                                    err.fileno()))
        timed_out = process.wait(timeout, raise_timeout=False) is None
        if timed_out:
            process.kill()
            process.wait()
        stdout, stderr = (path.read_text(errors="replace") for path in paths[1:])
    if timed_out:
        raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


_server = None


def server_socket() -> str:
    """The socket of this test process's `run_server`, started on first use (it ends when
    this process does: its stdin closes)."""
    global _server
    if _server is None or _server[0].poll() is not None:
        folder = tempfile.mkdtemp(prefix="kt-run-server-")
        atexit.register(shutil.rmtree, folder, True)
        path = os.path.join(folder, "socket")
        server = subprocess.Popen([sys.executable, str(HERE / "run_server.py"), path], cwd=ROOT,
                                  stdin=subprocess.PIPE, env=dict(os.environ,
                                                                  TF_CPP_MIN_LOG_LEVEL="3"))
        while not os.path.exists(path):
            if server.poll() is not None:
                raise RuntimeError(f"run_server.py ended with status {server.returncode}")
            time.sleep(0.05)
        _server = server, path
    return _server[1]


class ForkedRun:
    """`pipelines/run.py` (or export/run.py) forked by `run_server` in `cwd` with the
    descriptors `fds` (stdin, stdout, stderr): the part of `subprocess.Popen` the tests use
    (pid, poll, wait, communicate, send_signal, kill, returncode), the pid being the run's own
    process."""

    def __init__(self, command, env, cwd, fds):
        self.args, self.returncode, self.stdout = command, None, None
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(server_socket())
        socket.send_fds(self._socket, [json.dumps({"argv": command[1:], "env": env,
                                                   "cwd": str(cwd)}).encode()], list(fds))
        self._received = b""
        self.pid = self._answer(None)["pid"]

    def poll(self):
        return self.wait(0, raise_timeout=False)

    def wait(self, timeout=None, raise_timeout=True):
        if self.returncode is None:
            answer = self._answer(timeout)
            if answer is not None:
                self.returncode = answer["returncode"]
                self._socket.close()
            elif raise_timeout:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout=None):
        """The rest of stdout (stderr is in it) and None, once the run ended."""
        output = self.stdout.read() if self.stdout else None
        self.wait(timeout)
        return output, None

    def send_signal(self, sig):
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def _answer(self, timeout):
        """The server's next answer line, or None if none came within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._received:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._socket], [], [], left)[0]:
                return None
            chunk = self._socket.recv(4096)
            if not chunk:
                raise RuntimeError("run_server.py ended before the run did")
            self._received += chunk
        line, self._received = self._received.split(b"\n", 1)
        return json.loads(line)


def copy_prepared(prepared_dir, model_dir):
    """A model dir that starts with the vocabulary and token caches already built."""
    shutil.copytree(prepared_dir, model_dir)
    return model_dir


def options_block(log: str) -> str:
    """The run log's "options:" block(s): each "options:" line and the indented lines that
    continue it (`pipelines.settings.describe.describe_origins`)."""
    block, inside = [], False
    for line in log.splitlines():
        inside = line.startswith("options:") or (inside and line.startswith("  "))
        if inside:
            block.append(line)
    return "\n".join(block)
