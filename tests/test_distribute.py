"""model.fit under MirroredStrategy (2 logical CPUs) equals one replica on the same batch."""
import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("distribute_check.py")


@pytest.mark.quick
def test_mirrored_strategy_matches_one_replica():
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                            timeout=300, cwd=SCRIPT.parents[1])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    one_eval, two_eval = report["eval_loss"]
    assert two_eval == pytest.approx(one_eval, rel=1e-5)
    one_fit, two_fit = report["fit_loss"]
    assert two_fit == pytest.approx(one_fit, rel=1e-5)
    assert report["max_weight_change"] > 1e-3  # training really moved the weights...
    assert report["max_weight_diff"] < 1e-5    # ...and identically under 2 replicas
