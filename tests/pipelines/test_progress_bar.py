"""The training progress bar counts the steps that will run: an epoch is --checkpoint_every
updates, but a run of fewer --train_steps stops before it ends (issue 43: 100 steps under
the default 1,000 showed `1000/1000`). Without a terminal (a log file, a notebook) lines say
the step and the ETA at least once a minute, and metrics read as numbers."""
import re

import pytest
from tests.pipelines.run_helpers import TINY_MODEL, copy_prepared, run_command

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)


def test_the_bar_shows_the_steps_that_run(prepared, shared_data, tmp_path):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    result = run_command([f"--model_dir={model_dir}", *TINY_MODEL, "--mode=train",
                          "--train_steps=6", "--checkpoint_every=1000"], shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    # No terminal here: the epoch's line and its metrics, not Keras' bar.
    assert "train: steps 0 to 6 of 6" in result.stderr, result.stderr[-2000:]
    assert re.findall(r"^train: step (\d+): loss \d", result.stderr, re.M) == ["6"]
    assert (model_dir / "checkpoints" / "ckpt-6.index").exists()


def test_without_a_terminal_lines_give_the_step_the_eta_and_readable_metrics(monkeypatch):
    import keras
    import numpy as np

    from pipelines.training import callbacks as cb

    monkeypatch.setattr(cb, "PLAIN_INTERVAL", 0.0)  # a line each batch instead of a minute
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    logged = []
    x, y = np.ones((12, 2), "float32"), np.full((12, 1), 2450.0, "float32")
    model.fit(x, y, batch_size=2, epochs=2, steps_per_epoch=3, verbose=2,
              callbacks=[cb.StepProgbar(6, log=logged.append)])
    assert logged[0] == "train: steps 0 to 3 of 6"
    progress = [line for line in logged if "ETA" in line]
    assert progress and all(re.fullmatch(r"train: \d / 6 steps \([\d.]+%\), [\d.,]+ steps/s, ETA \S+", line)
                            for line in progress), progress
    epochs = [line for line in logged if line.startswith("train: step ")]
    assert [line.split(":")[1] for line in epochs] == [" step 3", " step 6"]
    assert all(re.fullmatch(r"train: step \d: loss [\d,]+", line) for line in epochs), epochs
    assert [cb.readable(v) for v in (2450.0005, 42060.0, 3.55921, 0.00055234)] == [
        "2,450", "42,060", "3.559", "0.0005523"]
