"""`--time_budget` (pipelines/training/plan.py, pipelines/tasks/corpus_recipe.py): the recipe a
budget picks, the steps its plan buys, the refused budget, and the plan kept by a resumed run and
a copied model dir."""
import json
import shutil

import numpy as np
import pytest

from pipelines.durations import parse_duration
from pipelines.tasks import corpus_recipe
from tests.pipelines.run_helpers import TINY_MODEL, run_command

pytestmark = pytest.mark.xdist_group("test_plan")  # its module fixtures: one worker

MULTI30K = corpus_recipe.CorpusSize(29_000, 39_522, 13.0)


@pytest.mark.quick
def test_durations():
    assert [parse_duration(t) for t in ("90s", "30m", "2h", "1h30m", " 2H ")] == [
        90, 1800, 7200, 5400, 7200]
    assert [parse_duration(t) for t in ("", "2x", "0s", "h", "-5m")] == [None] * 5


@pytest.mark.quick
def test_the_budget_picks_the_recipe_and_its_steps_follow():
    """Below an hour the quick recipe (small model, 10 checkpoints, warm-up 40%), from an hour
    the long one (the tiny model, 64 checkpoints, warm-up a quarter, peak rate 0.005); the
    measured 8,000-update run is the long recipe's own at 8,000 steps."""
    from keras_transformer.learning_rate import scale_for_peak

    quick, long = corpus_recipe.sized(MULTI30K, 1800), corpus_recipe.sized(MULTI30K, 7200)
    assert (quick.preset, long.preset, quick.vocab_size, long.vocab_size) == (
        "small", "tiny", 8000, 8000)
    assert corpus_recipe.sized(MULTI30K).recipe == quick.recipe  # the plan sets the steps
    assert corpus_recipe.QUICK.for_steps(3000) == {
        "train_steps": 3000, "warmup_steps": 1200, "checkpoint_every": 300}
    assert corpus_recipe.LONG.for_steps(8000) == {
        "train_steps": 8000, "warmup_steps": 2000, "checkpoint_every": 125,
        "lr_scale": scale_for_peak(0.005, 128, 2000)}
    assert long.recipe["lr_scale"] == pytest.approx(2.5298, abs=1e-4)
    assert corpus_recipe.LONG.for_steps(5000)["train_steps"] == 4992  # 64 x 78
    # Passes a budget may buy: 136 of the long recipe's 8,192 tokens (29,000 x 17.9 tokens).
    assert corpus_recipe.max_steps(corpus_recipe.LONG, MULTI30K) == 8617


@pytest.mark.quick
def test_a_corpus_under_a_thousand_pairs_gets_a_warning_of_what_to_expect():
    warning = corpus_recipe.small_corpus_warning(corpus_recipe.CorpusSize(600, 2000, 12.0))
    assert warning.startswith("train: warning: 600 pairs is a very small corpus")
    assert "13.0 BLEU" in warning and "--init_from" in warning
    assert corpus_recipe.small_corpus_warning(corpus_recipe.CorpusSize(1000, 2000, 12.0)) is None


class _Task:
    """What `make_plan` reads of a text task."""

    def __init__(self, budget, family=corpus_recipe.QUICK, max_steps=10**6, size=MULTI30K):
        self.budget, self.family, self.max_steps, self.size = budget, family, max_steps, size


@pytest.mark.quick
def test_the_plan_fits_the_budget_and_says_the_shortest_that_works():
    from pipelines.errors import ConfigError
    from pipelines.training import plan as planning

    probe = planning.Probe(step=0.5, first_step=10.0, sentence=0.01)
    plan = planning.make_plan(_Task(1800), probe, elapsed=40.0, sentences=(1014, 1000))
    step = 0.5 * planning.STEP_OVERHEAD  # the loop's step against the probe's
    after = planning.FIXED_SECONDS + 0.01 * (1014 * planning.DEV_DECODES + 1000)
    checkpoint = 1.0 + step * 1014 * 18 / 2048 / 3
    rest = 40.0 + 10.0 + after + 10 * checkpoint
    fits = (1800 - rest) / step
    want = corpus_recipe.QUICK.for_steps(fits)
    if want["train_steps"] > fits:  # whole checkpoints, never past the budget
        want = corpus_recipe.QUICK.for_steps(fits - 10 * 10)
    assert plan.settings == want and want["train_steps"] <= fits
    assert plan.eta == pytest.approx(rest + step * plan.settings["train_steps"])
    assert 1800 - step * 10 * 10 < plan.eta <= 1800 and not plan.capped
    capped = planning.make_plan(_Task(1800, max_steps=1000), probe, 40.0, (1014, 1000))
    assert capped.capped and capped.settings["train_steps"] == 1000
    assert capped.eta == pytest.approx(rest + 1000 * step)  # the ETA of the shorter run
    with pytest.raises(ConfigError) as refused:
        planning.make_plan(_Task(120), probe, 40.0, (1014, 1000))
    shortest = parse_duration(str(refused.value).rsplit("about ", 1)[1].replace(" ", ""))
    assert rest + 100 * step < shortest < (rest + 100 * step) * 1.1 + 60
    assert "--time_budget 2m 00s: too short for the quick recipe" in str(refused.value)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, shared_data):
    """3,000 pairs of Multi30k's train set as the user's own files, and its dev set."""
    import gzip
    import itertools

    folder = tmp_path_factory.mktemp("own")
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt",
                       encoding="utf-8") as f:
            (folder / f"train.{lang}").write_text("".join(itertools.islice(f, 3000)),
                                                  encoding="utf-8")
        shutil.copy(shared_data / "multi30k" / f"val.{lang}", folder / f"val.{lang}")
    return folder


def _args(corpus, model_dir, budget):
    return [f"--model_dir={model_dir}", "--task=text", f"--train_src={corpus / 'train.en'}",
            f"--train_tgt={corpus / 'train.de'}", f"--time_budget={budget}", *TINY_MODEL,
            "--mode=prepare,train"]


def test_a_budget_too_short_is_refused_before_anything_is_written(corpus, tmp_path,
                                                                 shared_data):
    result = run_command(_args(corpus, tmp_path / "model", "15s"), shared_data)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --time_budget 15s: too short for the quick recipe here")
    assert "the shortest budget that works is about" in last
    assert not (tmp_path / "model").exists()


def test_the_plan_is_recorded_kept_on_resume_and_trains_a_copy_alike(corpus, tmp_path,
                                                                     shared_data):
    """The plan's steps (here the corpus's 12 passes: a tiny model is fast) go into plan.json
    and settings.json with their origin; the same command resumes without a second probe, and
    a copy of the dir as planned trains the same weights."""
    model_dir = tmp_path / "model"
    result = run_command(_args(corpus, model_dir, "10m"), shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads((model_dir / "plan.json").read_text())
    settings = json.loads((model_dir / "settings.json").read_text())
    assert plan["capped"] and settings["training"]["train_steps"] == (
        plan["settings"]["train_steps"])
    assert settings["task_options"]["time_budget"] == "10m"
    assert "plan: probe:" in result.stderr and "ETA" in result.stderr
    assert "plan: the run took" in result.stderr
    again = run_command(_args(corpus, model_dir, "10m"), shared_data)
    assert again.returncode == 0 and "plan: probe:" not in again.stderr
    assert "nothing to do" in again.stderr
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy, ignore=shutil.ignore_patterns("checkpoints", ".lock"))
    copied = run_command(_args(corpus, copy, "10m"), shared_data)
    assert copied.returncode == 0 and "plan: probe:" not in copied.stderr
    steps = plan["settings"]["train_steps"]
    assert f"steps 0 -> {steps:,}" in copied.stderr
    import h5py  # noqa: F401  (Keras' weights files)
    from pipelines.model_dir import layout as md

    first, second = (md.load_final_model(d) for d in (model_dir, copy))
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
