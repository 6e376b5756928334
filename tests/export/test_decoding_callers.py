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

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

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
    task = recipe.task
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
    translator = export.make_translator(recipe, recipe.task, log=lambda _: None)
    translator.translate(["A cat sleeps."])
    translator.translate(["A cat sleeps."], beam_size=2, alpha=0.5, max_extra_length=10)
    stop_rules = {seen[0] for seen in searches}
    assert stop_rules == {"best_finished"} and all(seen[3] for seen in searches)
    assert json.loads(json.dumps(translator.functions.settings()))["stop_rule"] == "best_finished"


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


@pytest.mark.parametrize("stop_rule", ["exact", "best_finished"])
def test_evaluate_translate_the_loader_and_the_savedmodel_give_the_same_lines(
        model_dir, shared_data, tmp_path, monkeypatch, stop_rule):
    """One path: evaluate (by length buckets), the translate stage (in file order), the
    one-call loader and the exported SavedModel translate test_2016_flickr alike."""
    import keras_transformer
    import tensorflow_text  # noqa: F401  (the SavedModel's SentencePiece ops)
    from pipelines.model_dir import layout as md
    from pipelines.settings import resolver
    from pipelines.stages import evaluate, translate

    count = 48
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    settings = md.load_settings(copy)
    md.save_settings(copy, {**settings, "decoding": {**settings.get("decoding", {}),
                                                     "stop_rule": stop_rule}})
    monkeypatch.setenv("KT_DATA_DIR", str(shared_data))
    flags = {"model_dir": str(copy), "decode_jit_compile": False}
    evaluate.run_evaluate(resolver.resolve({**flags, "eval_split": "test",
                                            "eval_sentences": count}),
                          log=lambda _: None, out=io.StringIO())
    [hypotheses] = (copy / "eval").glob("*.hyp")
    evaluated = hypotheses.read_text(encoding="utf-8").splitlines()
    source = tmp_path / "test.en"
    lines = (shared_data / "multi30k" / "test_2016_flickr.en").read_text(
        encoding="utf-8").splitlines()[:count]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = io.StringIO()
    translate.run_translate(resolver.resolve({**flags, "input": str(source)}),
                            log=lambda _: None, out=out)
    loader = keras_transformer.load(copy)
    assert loader.search.stop_rule == stop_rule
    version = loader.export(tmp_path / "export")
    served = tf.saved_model.load(str(version)).signatures["serving_default"](
        source=tf.constant(lines))["translation"].numpy()
    assert len(evaluated) == count and any(evaluated)
    assert out.getvalue().splitlines() == evaluated
    assert loader.translate(lines) == evaluated
    assert [t.decode("utf-8") for t in served] == evaluated
