"""The dev choice (`--choose_on_dev`, pipelines/stages/choose.py): the average, alpha and beam
chosen by dev BLEU, recorded for every later stage, without reading the test split."""
import json

import pytest

from tests.pipelines.run_helpers import TINY, copy_prepared, run_stages

pytestmark = pytest.mark.xdist_group("test_choose")  # its module fixtures: one worker


@pytest.fixture(scope="module")
def checkpointed(prepared, tmp_path_factory, shared_data):
    """A tiny model trained for 40 steps, a checkpoint every 10, not yet averaged; its recipe
    chooses on dev."""
    model_dir = copy_prepared(prepared, tmp_path_factory.mktemp("choose") / "model")
    run_stages("train", shared_data, model_dir=str(model_dir), **{**TINY, "choose_on_dev": True},
               train_steps=40, checkpoint_every=10, average_last=3, extra_length=8)
    return model_dir


def test_the_choice_is_made_on_dev_and_recorded_for_later_stages(checkpointed, tmp_path,
                                                                  shared_data, monkeypatch):
    """Each average of the kept checkpoints at the recipe's alpha, then each alpha at the best
    average, then a wider beam at the best alpha, decode dev; the best (the recipe's on a tie)
    goes into settings.json with its origin, and the test split is never read. A rerun with no
    new checkpoint chooses nothing again; a flag's value is never chosen over."""
    import shutil

    from keras_transformer.model_dir import SETTINGS_FILE
    from pipelines.model_dir import layout as md
    from pipelines.settings import resolver
    from pipelines.stages import average, choose
    from pipelines.tasks.multi30k import Multi30kTask

    model_dir = shutil.copytree(checkpointed, tmp_path / "model")
    monkeypatch.setenv("KT_DATA_DIR", str(shared_data))
    read = []
    split_files = Multi30kTask.split_files

    def no_test(self, split, work_dir, **kw):
        read.append(split)
        assert split != "test", "the dev choice read the test split"
        return split_files(self, split, work_dir, **kw)

    monkeypatch.setattr(Multi30kTask, "split_files", no_test)
    options = resolver.resolve({"model_dir": str(model_dir)})
    logged = []
    average.run_average(options, log=logged.append)
    record = json.loads((model_dir / md.DEV_CHOICE_FILE).read_text())
    grid = [(row["average_last"], row["alpha"], row["beam_size"]) for row in record["grid"]]
    beam = options.decoding.beam.beam_size
    assert grid[0] == (3, 0.6, beam) and "dev" in read and "test" not in read
    assert {count for count, _, _ in grid} == {1, 3}  # 5 and 10: more than the 4 kept
    count = max((row for row in record["grid"] if row["alpha"] == 0.6),
                key=lambda row: row["score"])["average_last"]
    assert sorted(alpha for each, alpha, size in grid if each == count and size == beam) == [
        0.6, 1.0, 1.4]
    alpha = max(record["grid"][:-1], key=lambda row: row["score"])["alpha"]
    assert grid[-1] == (count, alpha, 8) and beam != 8
    best = max(record["grid"], key=lambda row: row["score"])
    assert record["chosen"] == {name: best[name] for name in choose.CHOSEN}
    later = resolver.resolve({"model_dir": str(model_dir)})
    assert (later.training.average_last, later.decoding.beam.alpha,
            later.decoding.beam.beam_size) == (best["average_last"], best["alpha"],
                                               best["beam_size"])
    assert json.loads((model_dir / SETTINGS_FILE).read_text())["decoding"]["alpha"] == (
        best["alpha"])
    assert {later.origins[name] for name in choose.CHOSEN} == {resolver.CHOSEN_ON_DEV}
    assert "final.weights.h5" in logged[-1] and f"average: {best['average_last']} " in "".join(
        logged)
    logged.clear()
    assert choose.choose_on_dev(later, log=logged.append) == record["chosen"]
    assert "up to date" in logged[0]
    # Chosen again (as after a new checkpoint): from where the first choice started.
    monkeypatch.setattr(choose.made_from, "up_to_date", lambda *args: None)
    assert choose.choose_on_dev(later, log=logged.append) == record["chosen"]
    assert json.loads((model_dir / md.DEV_CHOICE_FILE).read_text())["grid"] == record["grid"]
    unchosen = resolver.resolve({"model_dir": str(model_dir), "alpha": 0.6,
                                 "average_last": 3, "beam_size": 4})
    assert choose.wanted(unchosen) == ()  # each given by flag; off without the recipe's
    assert choose.wanted(resolver.resolve({"model_dir": str(model_dir),
                                           "choose_on_dev": False})) == ()


@pytest.mark.quick
def test_what_is_chosen(tmp_path):
    """Only with --choose_on_dev (the default job's recipe), only where the task has a dev
    split, never what a flag gives."""
    from pipelines.settings import resolver
    from pipelines.stages import choose

    def wanted(**flags):
        return choose.wanted(resolver.resolve({"model_dir": str(tmp_path / "m"), **flags}))

    assert wanted() == wanted(choose_on_dev=True) == ("average_last", "alpha", "beam_size")
    assert wanted(alpha=1.0) == ("average_last", "beam_size")
    assert wanted(choose_on_dev=False) == ()
    assert wanted(choose_on_dev=True, task="text", train_src="a", train_tgt="b") == ()
