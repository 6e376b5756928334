"""Running `pipelines/run.py` in a subprocess, on the real Multi30k files, with a tiny model."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUN = ROOT / "pipelines" / "run.py"
TINY_MODEL = ["--config_override=num_layers=1", "--config_override=d_model=32",
              "--config_override=d_ff=64", "--config_override=num_heads=2",
              "--vocab_size=1000", "--batch_tokens=1024", "--warmup_steps=50"]


def run_command(args, data_dir, timeout=600, wait=True, env_data_dir=True, env=None):
    """Starts run.py with `args`; returns the CompletedProcess (or the Popen if not wait).

    A run waited for is a fork of `run_server` (TensorFlow imported once), unless it needs
    a fresh interpreter: another backend, or an `env` that a process reads at import.

    `env_data_dir`: point $KT_DATA_DIR at `data_dir` (else remove it from the environment).
    """
    fresh = env is not None and bool(set(env) & IMPORT_TIME_ENV)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    env.pop("KT_DATA_DIR", None)
    if env_data_dir:
        env["KT_DATA_DIR"] = str(data_dir)
    command = [sys.executable, str(RUN), *args]
    if not wait:
        return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    if fresh or _backend(args) != "tensorflow":
        return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    return _forked(command, env, timeout)


IMPORT_TIME_ENV = {"KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS", "PYTHONPATH",
                   "TF_CONFIG"}
"""Environment variables a process reads when it imports: a run given one of them gets a
fresh interpreter, not a fork of `run_server`'s."""
_server = None


def _backend(args) -> str:
    from cli import startup

    return startup.early_flag(["run.py", *args], "backend", "tensorflow")


def _forked(command, env, timeout) -> subprocess.CompletedProcess:
    """`command` run by a fork of `run_server` (one per test process, started on first use):
    the CompletedProcess `subprocess.run` would give, without importing TensorFlow again."""
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, str(HERE / "run_server.py")], cwd=ROOT,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    with tempfile.TemporaryDirectory() as folder:
        out, err = pathlib.Path(folder, "stdout"), pathlib.Path(folder, "stderr")
        _server.stdin.write(json.dumps({
            "argv": command[1:], "env": env, "cwd": str(ROOT), "stdout": str(out),
            "stderr": str(err), "timeout": timeout}) + "\n")
        _server.stdin.flush()
        answer = json.loads(_server.stdout.readline())
        stdout, stderr = (path.read_text(errors="replace") for path in (out, err))
    if answer["timed_out"]:
        raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
    return subprocess.CompletedProcess(command, answer["returncode"], stdout, stderr)


def copy_prepared(prepared_dir, model_dir):
    """A model dir that starts with the vocabulary and token caches already built."""
    shutil.copytree(prepared_dir, model_dir)
    return model_dir
