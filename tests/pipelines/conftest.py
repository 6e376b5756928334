"""Fixtures shared by the command-line tests: one prepared Multi30k model dir per test run."""
import pytest

from tests.once import build_once
from tests.pipelines.run_helpers import TINY_MODEL, run_command


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, shared_data):
    """A model dir after `--mode prepare` with the tiny test settings (copy it to use it).

    Prepared with the README's form, `--data_dir` naming the folder that holds multi30k/;
    once for the whole run, whichever xdist worker asks first (`tests.once`).
    """
    def prepare(folder):
        model_dir = folder / "model"
        result = run_command(["--mode=prepare", f"--model_dir={model_dir}",
                              f"--data_dir={shared_data}", *TINY_MODEL], shared_data,
                             env_data_dir=False)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "padding" in result.stderr  # the bucket table, a log
        assert result.stdout == ""  # prepare has no results

    return build_once(tmp_path_factory, "prepared", prepare) / "model"
