"""Running the stages on the real Multi30k files with a tiny model: in this process through
the Stage interface (`run_stages`), or where the process is under test (exit status, stdout
and stderr, signals) `pipelines/run.py` (or `export/run.py`) in a fresh interpreter."""
import dataclasses
import io
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUN = ROOT / "pipelines" / "run.py"
TINY = {"config_override": {"num_layers": 1, "d_model": 32, "d_ff": 64, "num_heads": 2},
        "vocab_size": 1000, "batch_tokens": 1024, "warmup_steps": 50,
        "choose_on_dev": False}  # the dev choice decodes dev 6 times: tests/.../test_choose.py
"""The tiny model's settings, by flag name (as `cli.flags.given` makes them)."""


def as_flags(given: dict) -> list[str]:
    """Settings by flag name as the command line's flags."""
    flags = []
    for name, value in given.items():
        if name == "config_override":
            flags += [f"--config_override={key}={item}" for key, item in value.items()]
        elif isinstance(value, bool):
            flags.append(f"--{'' if value else 'no'}{name}")
        else:
            flags.append(f"--{name}={value}")
    return flags


TINY_MODEL = as_flags(TINY)


@dataclasses.dataclass
class Ran:
    """What stages run in this process gave: `out`, the results the command line prints on
    stdout; `log`, its log lines (stderr); `done`, each stage's return value by name."""

    out: str
    log: str
    done: dict


def run_stages(modes: str, env_data_dir=None, **given) -> Ran:
    """The stages `modes` ("train,average") in this process, through the Stage interface, as
    the command line runs them: on the recipe of the flags `given` (by name, as
    `cli.flags.given` makes them) for this CPU, with $KT_DATA_DIR at `env_data_dir` (None: not
    set). A user error raises (`pipelines.errors.UserError`)."""
    import keras

    from pipelines import RunLog
    from pipelines.settings import device_policy, resolver
    from pipelines.stages import modes as stage_modes

    device = device_policy.detect(1, "tensorflow")
    out, lines = io.StringIO(), []
    context = stage_modes.Context(log=RunLog(lines.append), out=out)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("KT_DATA_DIR", raising=False)
        if env_data_dir is not None:
            patch.setenv("KT_DATA_DIR", str(env_data_dir))
        recipe = resolver.resolve(given, device=device)
        keras.utils.set_random_seed(recipe.training.seed)
        _, done = stage_modes.run_stages(
            [stage_modes.STAGES[name] for name in modes.split(",")], recipe, context,
            lambda: resolver.resolve(given, device=device))
    return Ran(out.getvalue(), "\n".join(lines), done)


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
