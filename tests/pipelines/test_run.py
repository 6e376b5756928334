"""`pipelines/run.py` end to end on the real Multi30k files: stages against the model dir,
resume, refusals, replicas."""
import json
import signal
import time

import pytest
import sacrebleu

from tests.pipelines.run_helpers import TINY, TINY_MODEL, copy_prepared, run_command, run_stages

pytestmark = pytest.mark.xdist_group("test_run")  # its module fixtures: one worker

LONG_SENTENCE = " ".join(["A man in a blue shirt is standing on a ladder ."] * 34)[:-2]  # 406 words


@pytest.fixture(scope="module")
def trained(prepared, tmp_path_factory, shared_data):
    """A tiny model trained for 40 steps and averaged (the flags are given only here)."""
    model_dir = copy_prepared(prepared, tmp_path_factory.mktemp("trained") / "model")
    run_stages("train,average", shared_data, model_dir=str(model_dir), **TINY, train_steps=40,
               checkpoint_every=20, average_last=2, extra_length=8)
    return model_dir


def test_settings_json_is_laid_out_by_the_settings_table(trained):
    """settings.json holds exactly the table's saved rows, at their paths, and its records
    (`table.SETTINGS_RECORDS`): no setting kept that the table does not declare."""
    from pipelines.settings import table

    settings = json.loads((trained / "settings.json").read_text())
    paths = {(key,) if not isinstance(value, dict) or key == "task_options"
             else (key, inner) for key, value in settings.items()
             for inner in (value if isinstance(value, dict) else [None])}
    paths = {tuple(p for p in path if p is not None) for path in paths}
    records = {(r,) if isinstance(r, str) else r for r in table.SETTINGS_RECORDS}
    declared = {row.saved for row in table.SETTINGS if row.saved
                and row.saved[0] != "task_options"} | {("task_options",)}
    assert paths - records == declared
    assert set(settings["task_options"]) <= {row.saved[1] for row in table.SETTINGS
                                             if row.saved[:1] == ("task_options",)}


def test_later_stages_read_everything_from_the_model_dir(trained, tmp_path, shared_data):
    """evaluate, translate and export with --model_dir alone (no --task, no config flags)
    decode with what the model was trained with, and translate answers as the SavedModel."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece ops of the SavedModel)

    settings = json.loads((trained / "settings.json").read_text())
    assert settings["task"] == "multi30k_ende" and settings["decoding"]["extra_length"] == 8
    assert settings["training"]["train_steps"] == 40
    sentences = ["A man rides a bike.", "Two dogs play in the snow.", LONG_SENTENCE, ""]
    (tmp_path / "input.en").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    ran = run_stages("evaluate,translate,export", shared_data, model_dir=str(trained),
                     eval_sentences=30, decode_jit_compile=False,
                     input=str(tmp_path / "input.en"))

    # evaluate: scores exactly the first 30 test sentences, and the scores are those of the
    # hypotheses it wrote.
    scores = json.loads((trained / "eval" / "test.first30.json").read_text())
    hypotheses = (trained / "eval" / "test.first30.hyp").read_text(encoding="utf-8").splitlines()
    references = (shared_data / "multi30k" / "test_2016_flickr.de").read_text(
        encoding="utf-8").splitlines()[:30]
    assert scores["sentences"] == len(hypotheses) == 30
    assert scores["decoding"]["extra_length"] == 8  # settings.json, not the paper's 50
    assert scores["sacrebleu"] == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert f"test sacrebleu: {scores['sacrebleu']:.2f}" in ran.out

    # stdout: evaluate's four BLEU lines, then one translation per input line, nothing else.
    lines = ran.out.split("\n")
    assert [line.split(":")[0] for line in lines[:4]] == [
        "test sacrebleu", "test sacrebleu_lowercase", "test tokenized_bleu",
        "test tokenized_bleu_lowercase"]
    translations = lines[4:-1]
    assert len(translations) == len(sentences) and lines[-1] == ""

    # export: the SavedModel gives the translate stage's output, the long sentence included.
    served = tf.saved_model.load(str(trained / "export" / "1")).signatures["serving_default"]
    out = served(source=tf.constant(sentences))["translation"].numpy()
    assert [t.decode("utf-8") for t in out] == translations
    assert "every op is registered" in ran.log  # the op check ran


def test_score_prints_the_length_penalised_log_probability(trained, tmp_path, shared_data):
    import numpy as np

    from keras_transformer.data import text
    from keras_transformer.decoding import score_ids
    from pipelines.data import vocab
    from pipelines.model_dir import layout as md

    sources = ["A man rides a bike.", "Two dogs play in the snow.", "A child."]
    targets = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Ein Kind."]
    (tmp_path / "src").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "tgt").write_text("".join(t + "\n" for t in targets), encoding="utf-8")
    files = {"input": str(tmp_path / "src"), "target": str(tmp_path / "tgt")}
    ran = run_stages("score", shared_data, model_dir=str(trained), **files)
    printed = [float(line) for line in ran.out.splitlines()]
    # The stage decodes in the precision recorded in the model dir (bfloat16 where the CPU has
    # it natively): the reference must too.
    precision = json.loads((trained / "settings.json").read_text())["decoding"]["precision"]
    model = md.load_final_model(trained, precision)
    tokenizer = vocab.load_tokenizer(trained / "spm.model")
    expected = score_ids(model, text.sentences_to_ids(tokenizer, sources, 128),
                         text.sentences_to_ids(tokenizer, targets, model.config.max_length),
                         alpha=0.6).numpy()
    assert len(printed) == 3 and np.all(np.array(printed) < 0)
    np.testing.assert_allclose(printed, expected, atol=1e-4)
    # A different length penalty is a decoding setting: it needs --override_saved.
    ran = run_stages("score", shared_data, model_dir=str(trained), **files, alpha=0,
                     override_saved=True)
    unpenalised = [float(line) for line in ran.out.splitlines()]
    assert all(u < p for u, p in zip(unpenalised, printed))  # the penalty divides by > 1


def test_dev_metric_scores_exactly_the_first_n_dev_sentences(trained, shared_data, monkeypatch):
    from pipelines.stages import evaluate as stages
    from pipelines.settings import resolver
    from pipelines.model_dir import layout as md

    monkeypatch.setenv("KT_DATA_DIR", str(shared_data))
    run = resolver.resolve({"model_dir": str(trained), "dev_metric_sentences": 200,
                           "extra_length": 2, "beam_size": 1, "override_saved": True})
    logged = []
    config = md.read_config(trained)
    evaluate = stages.dev_metric_evaluator(run, run.task, config.max_length,
                                           logged.append)
    score = evaluate(md.load_final_model(trained))
    assert evaluate.metric_name == "dev_sacrebleu"
    assert logged[-1] == f"\ndev sacrebleu {score:.2f} on 200 sentences"


@pytest.mark.parametrize("flag, saved", [
    ("--config_override=d_model=64", "{'d_ff': 64, 'd_model': 32, 'num_heads': 2, 'num_layers': 1}"),
    ("--config=base", "'multi30k_small'"),
    ("--accumulate_steps=2", "1"),
])
def test_resuming_with_a_changed_model_flag_is_refused(trained, shared_data, flag, saved):
    before = {p: p.read_bytes() for p in trained.rglob("*") if p.is_file()}
    result = run_command([f"--model_dir={trained}", flag, "--train_steps=60", "--mode=train"],
                         shared_data)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    name, _, value = flag[2:].partition("=")
    shown = "{'d_model': 64}" if name == "config_override" else (
        repr(value) if name == "config" else value)
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --{name} {shown} differs from {saved}, what {trained}/settings.json says "
        "this model was trained with; drop the flag to continue this model, or give a new "
        "--model_dir")
    assert {p: p.read_bytes() for p in trained.rglob("*") if p.is_file()} == before


def test_killed_run_resumes_at_its_checkpoint(prepared, tmp_path, shared_data):
    """Killed at a random step and run again, training ends where an uninterrupted run
    ends: every variable of the last checkpoint equal, with dropout (its random state is
    in the checkpoints)."""
    import numpy as np
    import tensorflow as tf

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
    resumed = [line for line in result.stderr.splitlines() if "resumed from" in line]
    assert resumed, result.stderr[-2000:]
    step = int(resumed[0].rsplit("step", 1)[1].replace(",", ""))
    assert 10 <= step < 60
    # it ends at the requested step, and every checkpoint the index names is complete
    state = index.read_text()
    assert 'model_checkpoint_path: "ckpt-60"' in state
    for path in tf.train.get_checkpoint_state(str(model_dir / "checkpoints")).all_model_checkpoint_paths:
        assert tf.train.load_checkpoint(path).get_variable_to_shape_map()
    whole = copy_prepared(prepared, tmp_path / "whole")
    result = run_command([f"--model_dir={whole}", *args[1:]], shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    resumed, uninterrupted = (tf.train.load_checkpoint(str(d / "checkpoints" / "ckpt-60"))
                              for d in (model_dir, whole))
    names = uninterrupted.get_variable_to_shape_map()
    assert any(name.startswith("random/") for name in names)  # the dropout layers' seeds
    for name in names:
        np.testing.assert_array_equal(resumed.get_tensor(name), uninterrupted.get_tensor(name),
                                      err_msg=name)


def test_mirrored_strategy_over_two_cpu_devices_trains(prepared, tmp_path, shared_data):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    result = run_command([f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=6",
                          "--checkpoint_every=3", "--num_cpu_devices=2", "--mode=train"],
                         shared_data)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "train: 2 replica(s)" in result.stderr
    assert 'model_checkpoint_path: "ckpt-6"' in (model_dir / "checkpoints" / "checkpoint").read_text()


@pytest.mark.quick
def test_xla_with_several_cpu_devices_is_refused_clearly(prepared, tmp_path, shared_data):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    result = run_command([f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=2",
                          "--num_cpu_devices=2", "--jit_compile", "--mode=train"], shared_data)
    assert result.returncode == 2
    assert "--jit_compile is not supported with several CPU devices" in result.stderr


def test_a_budget_that_does_not_fit_stops_before_training(prepared, tmp_path, shared_data):
    model_dir = copy_prepared(prepared, tmp_path / "model")
    args = [f"--model_dir={model_dir}", *TINY_MODEL, "--train_steps=2", "--checkpoint_every=1",
            "--mode=train"]
    result = run_command([*args, "--memory_limit_mb=50"], shared_data)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --batch_tokens: one step on the largest batch (8 x 128 / 128 "
                           "tokens) needs ") and "over the 50 MB of --memory_limit_mb" in last
    assert not (model_dir / "checkpoints").exists()
    result = run_command([*args, "--memory_limit_mb=20000"], shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "memory: the largest batch (8 x 128 / 128 tokens) peaks at" in result.stderr
    assert (model_dir / "checkpoints" / "ckpt-2.index").is_file()


def test_early_stop_then_average_of_the_best_by_dev_metric(prepared, tmp_path, shared_data,
                                                           monkeypatch):
    """--early_stop_patience and --keep_best_by dev_metric through run.py. With --lr_scale 0
    the weights never change, so every dev BLEU ties: the second evaluation does not improve
    (patience 1 stops at step 4), and the tie goes to the later checkpoint."""
    from pipelines.model_dir import checkpoints

    model_dir = copy_prepared(prepared, tmp_path / "model")
    ran = run_stages("train,average", shared_data, model_dir=str(model_dir), **TINY,
                     lr_scale=0, train_steps=40, checkpoint_every=2, dev_metric_every=2,
                     dev_metric_sentences=2, beam_size=1, extra_length=2, keep_checkpoints=1,
                     average_last=1, keep_best_by="dev_metric", early_stop_patience=1)
    metrics = checkpoints.read_metrics(model_dir / "checkpoints")
    assert list(metrics) == [2, 4] and metrics[2] == metrics[4]
    stops = [line for line in ran.log.splitlines() if "early stop" in line]
    assert stops == [f"train: early stop at step 4: the dev metric has not improved for 1 "
                     f"evaluation(s) (--early_stop_patience 1); the best, {metrics[2]:.2f}, "
                     f"was at step 2"]
    assert f"average: 1 checkpoint(s), the best by dev metric (ckpt-4 {metrics[4]:.2f})" in (
        ran.log)
    assert (model_dir / "final.weights.h5").is_file()
    # ckpt-2, the best when ckpt-4 was written, outlived --keep_checkpoints 1.
    assert [p.name for p in sorted((model_dir / "checkpoints").glob("ckpt-*.index"))] == [
        "ckpt-2.index", "ckpt-4.index"]

    # Training again (the same command, in-process here) does not go on past the plateau.
    import tensorflow as tf

    from pipelines.settings import resolver
    from pipelines.model_dir import layout as md
    from pipelines.training import train as train_lib

    monkeypatch.setenv("KT_DATA_DIR", str(shared_data))
    run, logged = resolver.resolve({"model_dir": str(model_dir)}), []
    assert (run.training.keep_best_by, run.training.early_stop_patience) == ("dev_metric", 1)
    train_lib.train(run.task, str(model_dir), md.read_config(model_dir), run.training,
                    strategy=tf.distribute.get_strategy(), log=logged.append)
    assert logged[-1].startswith("train: stopped early before, at step 4: the dev metric has "
                                 "not improved for 1 evaluation(s)")
    assert [p.name for p in sorted((model_dir / "checkpoints").glob("ckpt-*.index"))] == [
        "ckpt-2.index", "ckpt-4.index"]
