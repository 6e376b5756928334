"""`pipelines/run.py --task ptb_parsing` end to end on the WSJ sample: train, decode, F1."""
import json

from tests.pipelines.run_helpers import TINY_MODEL, run_command


def test_short_parsing_run_prints_dev_f1(tmp_path, shared_data):
    sample = shared_data / "ptb_sample"
    model_dir = tmp_path / "parser"
    result = run_command(
        ["--task=ptb_parsing", f"--train_trees={sample / 'train.mrg'}",
         f"--dev_trees={sample / 'dev.mrg'}", f"--test_trees={sample / 'dev.mrg'}",
         f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=30", "--checkpoint_every=15",
         "--average_last=2", "--eval_split=dev", "--eval_sentences=12", "--beam_size=2",
         "--extra_length=20", "--mode=prepare,train,average,evaluate"], shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "dev f1:" in result.stdout
    scores = json.loads((model_dir / "eval" / "dev.json").read_text())
    assert scores["sentences"] == 12 and 0.0 <= scores["f1"] <= 100.0
    assert 0 <= scores["repaired"] <= 12
