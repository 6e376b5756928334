"""Every caller decodes with the resolved strategy: evaluate, the dev metric, translate, the
attention plot, the export's serving functions, score and the Keras API all honour the model
dir's stop rule, beam, alpha and the task's decoding constraint."""
import io
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import DecodingConstraint

SAVED = {"beam_size": 3, "alpha": 0.5, "extra_length": 10, "stop_rule": "best_finished"}


class AllowAll(DecodingConstraint):
    """A constraint that allows every token: the task's, as the search sees it."""

    def initial_state(self, source_ids, beam_size, max_steps):
        return {"unused": tf.zeros([tf.shape(source_ids)[0], beam_size, 1])}

    def allowed(self, ids, step, state, max_lengths, vocab_size):
        return tf.ones(tf.concat([tf.shape(ids), [vocab_size]], 0), tf.bool), state


@pytest.fixture
def searches(monkeypatch):
    """What every beam search of this test ran with: (stop rule, beam, alpha, constrained)."""
    from keras_transformer.decoding import entry

    seen = []
    real = entry.beam_search

    def spy(step_fn, start, cache, search, *args):
        seen.append((search.stop_rule, search.beam_size, search.alpha,
                     isinstance(cache, dict) and "constraint" in cache))
        return real(step_fn, start, cache, search, *args)

    monkeypatch.setattr(entry, "beam_search", spy)
    return seen


@pytest.fixture
def recipe_of(model_dir, tmp_path, shared_data, monkeypatch):
    """`flags -> Recipe` of a copy of the trained model dir whose settings.json says
    `SAVED`, for a task with a decoding constraint."""
    from pipelines.model_dir import layout as md
    from pipelines.settings import resolver
    from pipelines.tasks.multi30k import Multi30kTask

    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    md.save_settings(copy, {"format": 2, "task": "multi30k_ende", "decoding": SAVED})
    monkeypatch.setenv("KT_DATA_DIR", str(shared_data))
    monkeypatch.setattr(Multi30kTask, "decoding_constraint", lambda self, proto: AllowAll())
    return lambda **flags: resolver.resolve({"model_dir": str(copy), **flags})


EXPECTED = ("best_finished", SAVED["beam_size"], SAVED["alpha"], True)


def test_evaluate_and_the_dev_metric(recipe_of, searches):
    from pipelines.model_dir import layout as md
    from pipelines.stages import evaluate

    recipe = recipe_of(eval_sentences=4, dev_metric_sentences=4)
    evaluate.run_evaluate(recipe, log=lambda _: None, out=io.StringIO())
    assert searches and set(searches) == {EXPECTED}
    searches.clear()
    task = recipe.make_task()
    model = md.load_final_model(recipe.model_dir)
    evaluate.dev_metric_evaluator(recipe, task, model.config.max_length, log=lambda _: None)(model)
    assert searches and set(searches) == {EXPECTED}


def test_translate_the_attention_plot_and_the_export(recipe_of, searches, tmp_path):
    from pipelines.stages import export, translate

    source = tmp_path / "in.en"
    source.write_text("A dog runs.\nTwo men play football.\n", encoding="utf-8")
    recipe = recipe_of(input=str(source), plot_attention=str(tmp_path / "attention.png"))
    out = io.StringIO()
    translate.run_translate(recipe, log=lambda _: None, out=out)
    assert len(out.getvalue().splitlines()) == 2
    assert searches and set(searches) == {EXPECTED}  # the serving function and the plot
    assert (tmp_path / "attention.png").is_file()
    searches.clear()
    translator = export.make_translator(recipe, recipe.make_task(), log=lambda _: None)
    translator.translate(tf.constant(["A cat sleeps."]))
    translator.translate_with_options(tf.constant(["A cat sleeps."]), tf.constant(2),
                                      tf.constant(0.5), tf.constant(1), tf.constant(10),
                                      tf.constant([""]))
    stop_rules = {seen[0] for seen in searches}
    assert stop_rules == {"best_finished"} and all(seen[3] for seen in searches)
    assert json.loads(json.dumps(translator.settings()))["stop_rule"] == "best_finished"


def test_score_uses_the_saved_alpha(recipe_of, tmp_path, monkeypatch):
    import keras_transformer.decoding as decoding
    from pipelines.stages import translate

    alphas = []
    real = decoding.score_ids
    monkeypatch.setattr(decoding, "score_ids", lambda *args, alpha, **kwargs: (
        alphas.append(alpha), real(*args, alpha=alpha, **kwargs))[1])
    (tmp_path / "in.en").write_text("A dog runs.\n", encoding="utf-8")
    (tmp_path / "out.de").write_text("Ein Hund rennt.\n", encoding="utf-8")
    recipe = recipe_of(input=str(tmp_path / "in.en"), target=str(tmp_path / "out.de"))
    translate.run_score(recipe, log=lambda _: None, out=io.StringIO())
    assert alphas == [SAVED["alpha"]]


@pytest.mark.quick
def test_the_keras_api(trained_model, searches):
    from keras_transformer import BeamSearch, translate

    search = BeamSearch(beam_size=3, alpha=0.5, stop_rule="best_finished")
    translate(trained_model, np.array([[5, 6, 7, 3]]), search, constraint=AllowAll())
    assert searches == [EXPECTED]
