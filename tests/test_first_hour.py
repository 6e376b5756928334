"""A new user's first commands: help at once, a missing backend named with its install
command, no TensorFlow C++ log lines unless asked, a readable options line, a distribution
name of our own (issue: the first hour of a new user)."""
import os
import re
import subprocess
import sys

import pytest

from tests.pipelines.run_helpers import ROOT, RUN

EXPORT = ROOT / "export" / "run.py"
CPP_LOG_LINE = re.compile(r"^([IWEF]\d{4} |WARNING: All log messages before absl)", re.M)
"""A line TensorFlow's C++ logging writes (glog/absl format)."""


def run(args, script=RUN, shim=None, **env):
    """A CLI in a subprocess, as a user runs it: TF_CPP_MIN_LOG_LEVEL not set. `shim`: a
    directory put first on PYTHONPATH (modules that fail to import)."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment.update(env)
    if shim is not None:
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(shim)] + [p for p in [environment.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, env=environment, cwd=ROOT, timeout=600)


def failing_imports(tmp_path, *names):
    """A directory of packages that raise ImportError when imported."""
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    return tmp_path


@pytest.mark.parametrize("script", [RUN, EXPORT], ids=["pipelines", "export"])
@pytest.mark.parametrize("flag", ["--help", "--helpfull"])
def test_help_exits_0_before_tensorflow_is_imported(tmp_path, script, flag):
    """With TensorFlow unimportable, help still prints: it never imports TensorFlow."""
    result = run([flag], script=script, shim=failing_imports(tmp_path, "tensorflow"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "  --model_dir: " in result.stdout and "  --[no]verbose: " in result.stdout
    assert ("--verbosity: " in result.stdout) == (flag == "--helpfull")  # absl's own flags


def test_a_missing_backend_is_one_line_naming_its_extra(tmp_path):
    result = run(["--backend", "jax", "--model_dir", str(tmp_path / "m")],
                 shim=failing_imports(tmp_path, "jax"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f'{RUN}: error: --backend jax needs jax, which is not installed: '
        f'pip install -e ".[jax]"']
    assert not (tmp_path / "m").exists()  # before any work


def test_no_cpp_log_lines_unless_verbose(tmp_path, shared_data):
    """A one-line error stays the last of three short lines (options, stage, error); with
    --verbose TensorFlow's lines and every option with its origin are shown."""
    args = ["--mode", "evaluate", "--model_dir", str(tmp_path / "none")]
    quiet = run(args, KT_DATA_DIR=str(shared_data))
    assert quiet.returncode == 2
    assert not CPP_LOG_LINE.search(quiet.stderr), quiet.stderr
    lines = quiet.stderr.strip().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("error: ") and "config.json" in lines[-1]
    options = lines[0]
    assert options.startswith("options: ") and len(options) < 400
    assert "train_steps=1000" in options and "keep_checkpoints" not in options  # a default
    verbose = run(args + ["--verbose"], KT_DATA_DIR=str(shared_data))
    assert verbose.returncode == 2
    assert CPP_LOG_LINE.search(verbose.stderr)
    assert "keep_checkpoints 20 (default)" in verbose.stderr
    # The user's own TF_CPP_MIN_LOG_LEVEL wins.
    chosen = run(args, KT_DATA_DIR=str(shared_data), TF_CPP_MIN_LOG_LEVEL="0")
    assert CPP_LOG_LINE.search(chosen.stderr)


def test_the_distribution_has_a_name_of_its_own():
    """`keras-transformer` on the package index is another project: ours installs as
    `keras-transformer-nmt` (import name `keras_transformer`), as the README says."""
    name = subprocess.run([sys.executable, "setup.py", "--name"], capture_output=True,
                          text=True, cwd=ROOT, check=True).stdout.strip().splitlines()[-1]
    assert name == "keras-transformer-nmt"
    assert f"`{name}`" in (ROOT / "README.md").read_text(encoding="utf-8")
