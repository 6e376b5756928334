"""`pipelines/run.py` end to end on the real Multi30k files: stages, resume, replicas."""
import json
import signal
import time

import pytest

from tests.pipelines.run_helpers import TINY_MODEL, copy_prepared, run_command


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, shared_data):
    model_dir = tmp_path_factory.mktemp("prepared") / "model"
    result = run_command(["--mode=prepare", f"--model_dir={model_dir}", *TINY_MODEL],
                         shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "padding" in result.stdout or "total" in result.stdout  # the bucket table
    return model_dir


def test_end_to_end_run_writes_a_complete_model_dir(prepared, tmp_path, shared_data):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    result = run_command([f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=40",
                          "--checkpoint_every=20", "--average_last=2", "--eval_sentences=40",
                          "--extra_length=8", "--mode=train,average,evaluate"], shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name in ("config.json", "settings.json", "spm.model", "final.weights.h5",
                 "checkpoints/checkpoint", "eval/test.hyp", "eval/test.json"):
        assert (model_dir / name).exists(), name
    config = json.loads((model_dir / "config.json").read_text())
    assert config["d_model"] == 32 and config["vocab_size"] == 1000
    hypotheses = (model_dir / "eval" / "test.hyp").read_text().splitlines()
    assert len(hypotheses) == 40
    scores = json.loads((model_dir / "eval" / "test.json").read_text())
    assert 0.0 <= scores["sacrebleu"] <= 100.0
    assert scores["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "sacrebleu" in result.stdout and "tok:13a" in result.stdout

    # translate (with the attention picture) and export against the same model dir
    sentences = tmp_path / "input.en"
    sentences.write_text("A man rides a bike.\nTwo dogs play in the snow.\n", encoding="utf-8")
    result = run_command([f"--model_dir={model_dir}", "--mode=translate,export",
                          f"--input={sentences}", f"--output={tmp_path / 'out.de'}",
                          f"--plot_attention={tmp_path / 'attention.png'}", "--extra_length=8"],
                         shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len((tmp_path / "out.de").read_text(encoding="utf-8").splitlines()) == 2
    assert (tmp_path / "attention.png").read_bytes()[:4] == b"\x89PNG"
    assert (model_dir / "export" / "1" / "saved_model.pb").is_file()


def test_killed_run_resumes_at_its_checkpoint(prepared, tmp_path, shared_data):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    args = [f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=60",
            "--checkpoint_every=10", "--mode=train"]
    process = run_command(args, shared_data, wait=False)
    index = model_dir / "checkpoints" / "checkpoint"
    deadline = time.time() + 300
    while not index.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert process.poll() is None, "training ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    result = run_command(args, shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    resumed = [line for line in result.stdout.splitlines() if "resumed from" in line]
    assert resumed, result.stdout[-2000:]
    step = int(resumed[0].rsplit("step", 1)[1].replace(",", ""))
    assert 10 <= step < 60
    # it ends at the requested step, and every checkpoint the index names is complete
    state = index.read_text()
    assert 'model_checkpoint_path: "ckpt-60"' in state
    import tensorflow as tf

    for path in tf.train.get_checkpoint_state(str(model_dir / "checkpoints")).all_model_checkpoint_paths:
        assert tf.train.load_checkpoint(path).get_variable_to_shape_map()


def test_mirrored_strategy_over_two_cpu_devices_trains(prepared, tmp_path, shared_data):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    result = run_command([f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=6",
                          "--checkpoint_every=3", "--num_cpu_devices=2", "--mode=train"],
                         shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "train: 2 replica(s)" in result.stdout
    assert 'model_checkpoint_path: "ckpt-6"' in (model_dir / "checkpoints" / "checkpoint").read_text()


def test_xla_with_several_cpu_devices_is_refused_clearly(prepared, tmp_path, shared_data):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    result = run_command([f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=2",
                          "--num_cpu_devices=2", "--jit_compile", "--mode=train"], shared_data)
    assert result.returncode == 2
    assert "--jit_compile is not supported with several CPU devices" in result.stderr
