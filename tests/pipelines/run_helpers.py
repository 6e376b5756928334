"""Running `pipelines/run.py` in a subprocess, on the real Multi30k files, with a tiny model."""
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "pipelines" / "run.py"
TINY_MODEL = ["--config_override=num_layers=1", "--config_override=d_model=32",
              "--config_override=d_ff=64", "--config_override=num_heads=2",
              "--vocab_size=1000", "--batch_tokens=1024", "--warmup_steps=50"]


def run_command(args, data_dir, timeout=600, wait=True, env_data_dir=True, env=None):
    """Starts run.py with `args`; returns the CompletedProcess (or the Popen if not wait).

    `env_data_dir`: point $KT_DATA_DIR at `data_dir` (else remove it from the environment).
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    env.pop("KT_DATA_DIR", None)
    if env_data_dir:
        env["KT_DATA_DIR"] = str(data_dir)
    command = [sys.executable, str(RUN), *args]
    if not wait:
        return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def copy_prepared(prepared_dir, model_dir):
    """A model dir that starts with the vocabulary and token caches already built."""
    shutil.copytree(prepared_dir, model_dir)
    return model_dir
