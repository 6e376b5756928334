"""The training progress bar counts the steps that will run: an epoch is --checkpoint_every
updates, but a run of fewer --train_steps stops before it ends (issue 43: 100 steps under
the default 1,000 showed `1000/1000`)."""
import re

import pytest
from tests.pipelines.run_helpers import TINY_MODEL, copy_prepared, run_command

pytestmark = pytest.mark.quick  # the quick tier (tests/tiers.py)


def test_the_bar_shows_the_steps_that_run(prepared, shared_data, tmp_path):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    result = run_command([f"--model_dir={model_dir}", *TINY_MODEL, "--mode=train",
                          "--train_steps=6", "--checkpoint_every=1000"], shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    bars = re.findall(r"^(\d+)/(\d+) - ", result.stderr, re.M)
    assert bars == [("6", "6")], result.stderr[-2000:]
    assert (model_dir / "checkpoints" / "ckpt-6.index").exists()
