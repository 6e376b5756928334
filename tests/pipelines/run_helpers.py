"""Running `pipelines/run.py` (or `export/run.py`) in a subprocess, on the real Multi30k files,
with a tiny model."""
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUN = ROOT / "pipelines" / "run.py"
TINY_MODEL = ["--config_override=num_layers=1", "--config_override=d_model=32",
              "--config_override=d_ff=64", "--config_override=num_heads=2",
              "--vocab_size=1000", "--batch_tokens=1024", "--warmup_steps=50",
              "--nochoose_on_dev"]  # the dev choice decodes dev 6 times: tests/.../test_choose.py


def run_command(args, data_dir=None, timeout=600, wait=True, env_data_dir=True, env=None,
                script=RUN, cwd=ROOT, stdin="", user_env=False):
    """Runs `script` (run.py, or export/run.py) with `args` in a fresh interpreter; returns
    the CompletedProcess, or if not `wait` the running process (stdout and stderr together on
    its `stdout`).

    `env_data_dir`: point $KT_DATA_DIR at `data_dir` (else remove it from the environment).
    `stdin`: the text the run reads (a run not waited for reads none). `user_env`: no TF C++
    log level, as a user's shell sets none (the run filters the libraries' lines itself);
    else the level 3.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    if user_env:
        env.pop("TF_CPP_MIN_LOG_LEVEL")
    env.pop("KT_DATA_DIR", None)
    if env_data_dir:
        env["KT_DATA_DIR"] = str(data_dir)
    command = [sys.executable, str(script), *args]
    if not wait:
        return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          input=stdin, timeout=timeout)


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
