"""Fine-tuning with `--init_from` through run.py (pipelines/settings/init_from.py): the new model
dir starts from the source's averaged weights, vocabulary and config, records where it came from,
resumes from its own checkpoints, refuses what cannot work, and learns the new corpus.

Corpus A (the source's) is the start of Multi30k's train set; corpus B (the fine-tuning one)
is test_2016_flickr, its first 800 pairs to train on and its last 200 held back.
"""
import gzip
import hashlib
import itertools
import json
import os
import shutil

import numpy as np
import pytest

from tests.pipelines.run_helpers import TINY, as_flags, run_command, run_stages

pytestmark = pytest.mark.xdist_group("test_init_from")  # its module fixtures: one worker

WARMUP = {"batch_tokens": 1024, "warmup_steps": 50}  # TINY's training part
SOURCE_STEPS = 100


def _write(path, lines):
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, shared_data):
    """{name: (english file, german file)} for "a" (3,000 train pairs), "b" (the first 800
    of test_2016_flickr) and "held" (its last 200)."""
    folder, files = tmp_path_factory.mktemp("corpora"), {}
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt",
                       encoding="utf-8") as f:
            train = list(itertools.islice(f, 3000))
        test = (shared_data / "multi30k" / f"test_2016_flickr.{lang}").read_text(
            encoding="utf-8").splitlines(True)
        assert len(test) == 1000
        for name, lines in (("a", train), ("b", test[:800]), ("held", test[800:])):
            files.setdefault(name, []).append(_write(folder / f"{name}.{lang}", lines))
    return {name: tuple(paths) for name, paths in files.items()}


def text_task(corpora, name):
    src, tgt = corpora[name]
    return {"task": "text", "train_src": str(src), "train_tgt": str(tgt)}


@pytest.fixture(scope="module")
def source(tmp_path_factory, corpora, shared_data):
    """A tiny model trained on corpus A and averaged (ckpt-50, ckpt-100)."""
    model_dir = tmp_path_factory.mktemp("source") / "model"
    run_stages("prepare,train,average", shared_data, model_dir=str(model_dir),
               **text_task(corpora, "a"), **TINY, train_steps=SOURCE_STEPS,
               checkpoint_every=50, average_last=2)
    return model_dir


def fine_tune(source, model_dir, corpora, shared_data, mode="prepare,train", **given):
    """`mode`'s stages (in this process) fine-tuning `source` on corpus B into `model_dir`."""
    return run_stages(mode, shared_data, model_dir=str(model_dir), init_from=str(source),
                      **text_task(corpora, "b"), **WARMUP, **given)


def weights(model_dir, checkpoint=None):
    from pipelines.model_dir import layout as md

    return md.load_final_model(model_dir, "float32", checkpoint).get_weights()


def test_starts_from_the_source_weights_vocabulary_and_config(source, corpora, tmp_path,
                                                              shared_data):
    """With --lr_scale 0 the weights never change: the new dir's checkpoint is the source's
    final weights exactly. The vocabulary is the source's file, never retrained."""
    new = tmp_path / "new"
    log = fine_tune(source, new, corpora, shared_data, lr_scale=0, train_steps=2,
                    checkpoint_every=1).log
    assert "vocab: training BPE" not in log
    assert (new / "spm.model").read_bytes() == (source / "spm.model").read_bytes()
    assert (new / "config.json").read_text() == (source / "config.json").read_text()
    final = source / "final.weights.h5"
    settings = json.loads((new / "settings.json").read_text())
    assert settings["init_from"] == {
        "model_dir": os.path.abspath(source), "optimizer": False, "step": 0,
        "weights_sha256": hashlib.sha256(final.read_bytes()).hexdigest()}
    assert settings["task_options"]["train_src"] == str(corpora["b"][0])
    coverage = [line for line in log.splitlines() if "byte fallback" in line]
    assert len(coverage) == 1 and coverage[0].startswith("vocab: "), coverage
    assert f"train: starting from {final}" in log
    started, trained = weights(source), weights(new, "ckpt-2")
    assert len(started) == len(trained)
    for a, b in zip(started, trained):
        np.testing.assert_array_equal(a, b)


def test_init_optimizer_goes_on_from_the_source_step(source, corpora, tmp_path, shared_data):
    """--init_optimizer restores Adam's state at the source's last step: the new dir's
    checkpoints are numbered on from there."""
    new = tmp_path / "new"
    log = fine_tune(source, new, corpora, shared_data, "train", init_optimizer=True,
                    train_steps=SOURCE_STEPS + 2, checkpoint_every=1).log
    assert f"Adam's moments and step {SOURCE_STEPS}" in log
    assert sorted(p.name for p in (new / "checkpoints").glob("ckpt-*.index")) == [
        f"ckpt-{SOURCE_STEPS + 1}.index", f"ckpt-{SOURCE_STEPS + 2}.index"]
    assert json.loads((new / "settings.json").read_text())["init_from"]["step"] == SOURCE_STEPS


def test_refusals(source, corpora, tmp_path):
    """What cannot work is refused before anything is written (the resolver, in-process)."""
    from pipelines.settings import resolver
    from pipelines.errors import UserError

    unaveraged = tmp_path / "unaveraged"
    shutil.copytree(source, unaveraged)
    (unaveraged / "final.weights.h5").unlink()
    elsewhere = tmp_path / "elsewhere"  # prepared from another source
    elsewhere.mkdir()
    (elsewhere / "settings.json").write_text(json.dumps({"format": 2, "init_from": {
        "model_dir": "/other/source", "weights_sha256": "0" * 64, "optimizer": False,
        "step": 0}}))
    new = tmp_path / "new"
    src, tgt = corpora["b"]
    for init_from, model_dir, given, message in [
        (new, new, {}, "is the --model_dir itself"),
        (tmp_path / "missing", new, {}, "no such model directory"),
        (unaveraged, new, {}, "no final.weights.h5 to start from"),
        (source, unaveraged, {}, "already holds a model trained without it"),
        (source, elsewhere, {}, "was started from /other/source; drop the flag"),
        (source, new, {"config": "big"}, "--config 'big' differs from 'small', the model of "
                                         "--init_from"),
        (source, new, {"vocab_size": 2000}, "--vocab_size 2000 differs from 1000"),
        (source, new, {"init_optimizer": True, "train_steps": 100},
         f"--train_steps 100: with --init_optimizer the step counter goes on from the "
         f"source's {SOURCE_STEPS}"),
        (source, new, {"init_optimizer": True, "train_steps": 300, "accumulate_steps": 2},
         "--accumulate_steps 2 differs from the source's 1"),
    ]:
        with pytest.raises(UserError) as error:
            resolver.resolve({"model_dir": str(model_dir), "init_from": str(init_from),
                             "task": "text", "train_src": str(src), "train_tgt": str(tgt),
                             **given})
        assert message in str(error.value)
    assert not new.exists()


@pytest.mark.quick
def test_a_refusal_is_one_line_and_exit_2(corpora, tmp_path, shared_data):
    result = run_command(["--mode=prepare,train", f"--model_dir={tmp_path / 'new'}",
                          f"--init_from={tmp_path / 'missing'}",
                          *as_flags({**text_task(corpora, "b"), **WARMUP})], shared_data)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --init_from {tmp_path / 'missing'}: no such model directory; give a trained "
        f"model dir (one with final.weights.h5)")
    assert not (tmp_path / "new").exists()


def test_training_files_edited_after_training_are_refused(corpora, tmp_path, shared_data):
    """A rerun after the training text was edited in place says so in one line (exit 2) and
    writes nothing, where it used to report the old tables and "nothing to do"; files only
    touched (the same text) resume as before."""
    src, tgt = (shutil.copy(path, tmp_path / path.name) for path in corpora["a"])
    model_dir = tmp_path / "model"
    given = dict(model_dir=str(model_dir), task="text", train_src=str(src), train_tgt=str(tgt),
                 **TINY, train_steps=10, checkpoint_every=10)
    run_stages("prepare,train", shared_data, **given)
    os.utime(src)  # touched, not changed
    assert "nothing to do" in run_stages("prepare,train", shared_data, **given).log
    lines = open(tgt, encoding="utf-8").readlines()
    _write(tgt, lines[:5] + ["Ein ganz anderer Satz.\n"] + lines[6:])
    def files():  # the lock file names its holder, whichever run that was
        return {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()
                and p.name != ".lock"}

    before = files()
    result = run_command(["--mode=prepare,train", *as_flags(given)], shared_data)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {src}, {tgt}: changed since the model in {model_dir} was trained on them; "
        f"train a new model dir on them (--model_dir NEW), or fine-tune this one (--init_from "
        f"{model_dir} --model_dir NEW)")
    assert files() == before


def test_report_coverage_warns_for_text_the_vocabulary_lacks(source, tmp_path):
    """Text in a script the source's vocabulary never saw is spelled in byte pieces: one
    warning line with the rate."""
    from pipelines.settings import init_from

    init = init_from.InitFrom(str(source), "0" * 64, False, 0)
    proto = (source / "spm.model").read_bytes()
    foreign = _write(tmp_path / "foreign.txt", ["東京の小さな犬が走る\n"] * 20)
    logged = []
    rate = init_from.report_coverage(init, proto, [foreign], logged.append)
    assert rate > 0.5 and len(logged) == 1
    assert logged[0].startswith("warning: vocab: ") and f"{rate:.2%}" in logged[0]


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory, source, corpora, shared_data):
    """Corpus B fine-tuning in two runs of the same command (30 then 60 steps); before the
    second, the source's final weights are gone, so it can only resume. Returns the model
    dir and the second run's log."""
    work = tmp_path_factory.mktemp("fine_tuned")
    copy = work / "source"
    shutil.copytree(source, copy)
    new = work / "new"
    given = {"checkpoint_every": 15, "average_last": 2}
    fine_tune(copy, new, corpora, shared_data, "prepare,train,average", train_steps=30, **given)
    (copy / "final.weights.h5").unlink()
    second = fine_tune(copy, new, corpora, shared_data, "prepare,train,average", train_steps=60,
                       **given)
    return new, second.log


def test_the_same_command_resumes_without_initialising_again(fine_tuned):
    new, log = fine_tuned
    assert "train: resumed from" in log and "at step 30" in log
    assert "train: starting from" not in log
    assert (new / "checkpoints" / "ckpt-60.index").is_file()


def held_back_score(model_dir, corpora) -> float:
    """Mean length-penalised log-probability of the held-back references (the score stage,
    in-process)."""
    import io

    from pipelines.settings import resolver

    from pipelines.stages import translate as stages

    src, tgt = corpora["held"]
    out = io.StringIO()
    run = resolver.resolve({"model_dir": str(model_dir), "input": str(src), "target": str(tgt)})
    assert stages.run_score(run, log=lambda _: None, out=out) == 200
    return float(np.mean([float(line) for line in out.getvalue().split()]))


def test_fine_tuning_improves_the_held_back_part(source, fine_tuned, corpora):
    """The held-back part of corpus B is more probable under the fine-tuned model than under
    the source it started from."""
    before = held_back_score(source, corpora)
    after = held_back_score(fine_tuned[0], corpora)
    assert after > before + 1.0, (before, after)
