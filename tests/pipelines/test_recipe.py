"""The recipe is resolved once: every default is written in one place, and the merge is one
short function that reads in order."""
import ast
import dataclasses
import inspect

import pytest
from keras_transformer import (PRESETS, BeamSearch, LabelSmoothedCrossEntropy, NoamSchedule,
                               Sampling, TransformerConfig)
from keras_transformer.learning_rate import BATCH_TOKENS
from pipelines.settings import options, resolver, table
from pipelines.settings.recipes import PRESET_RECIPES
from pipelines.tasks import TASKS, Task, get_task
from pipelines.training.train import compile_model

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)


def _keyword_defaults(function) -> dict:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


PAPER_SOURCES = {
    "the settings table": {row.name: row.default for row in table.SETTINGS
                           if row.default is not None},
    "BeamSearch": dataclasses.asdict(BeamSearch()),
    "Sampling": dataclasses.asdict(Sampling()),
    "TransformerConfig": dataclasses.asdict(TransformerConfig()),
    "the library's API": {"warmup_steps": _keyword_defaults(NoamSchedule)["warmup_steps"],
                          "label_smoothing": LabelSmoothedCrossEntropy().label_smoothing,
                          "batch_tokens": BATCH_TOKENS},
    "compile_model": _keyword_defaults(compile_model),
    **{f"{cls.__name__}": {f.name: f.default for f in dataclasses.fields(cls)
                           if f.default is not dataclasses.MISSING and f.default is not None}
       for cls in (options.DataOptions, options.ModelOptions, options.DecodingOptions,
                   options.EvalOptions, options.ExportOptions, options.IOOptions,
                   options.TrainingOptions, options.Recipe, Task)},
}
"""Every place a default below the task layer is written, by source."""
ALIASES = {("Sampling", "topk"): "sampling_topk", ("Sampling", "topp"): "sampling_topp",
           ("Sampling", "temperature"): "sampling_temperature",
           ("DecodingOptions", "precision"): "decode_precision",
           ("EvalOptions", "split"): "eval_split", ("EvalOptions", "sentences"): "eval_sentences",
           ("EvalOptions", "jit_compile"): "decode_jit_compile",
           ("ExportOptions", "jit_compile"): "export_jit_compile",
           ("ExportOptions", "version"): "export_version",
           ("ExportOptions", "overwrite"): "overwrite_export",
           ("ModelOptions", "preset"): "config", ("IOOptions", "terms_file"): "terms"}
"""Fields that are a setting under another name (the table's)."""


def test_no_setting_has_two_defaults():
    """A setting's paper (or tool) default is written once: no two sources of defaults give
    one setting, under any of its names, two different values."""
    seen: dict[str, tuple[str, object]] = {}
    clashes = []
    for source, defaults in PAPER_SOURCES.items():
        for name, value in defaults.items():
            key = ALIASES.get((source, name), name)
            if key in seen and seen[key][1] != value:
                clashes.append(f"{key}: {seen[key][0]} says {seen[key][1]!r}, "
                               f"{source} {value!r}")
            seen.setdefault(key, (source, value))
    assert not clashes, clashes


def test_a_task_or_preset_gives_each_setting_once():
    """Within one layer, one value a setting: a preset's recipe repeats nothing of its
    architecture (train_steps, label_smoothing live in the recipe only), and a task's recipe
    repeats none of its fields."""
    architecture = {f.name for f in dataclasses.fields(TransformerConfig)}
    for name, recipe in PRESET_RECIPES.items():
        assert name in PRESETS, name
        assert not set(recipe) & architecture, name
        assert set(recipe) <= set(table.TABLE), name  # settings the run knows
    assert PRESET_RECIPES["D3"] == {"label_smoothing": 0.0}
    assert PRESET_RECIPES["big"] == {"train_steps": 300_000}  # the paper's big: 300K steps
    for name in TASKS:
        task = get_task(name)
        fields = {f.name for f in dataclasses.fields(task)} | set(dataclasses.asdict(
            task.decoding))
        assert not set(task.recipe) & fields, name
        assert set(task.recipe) <= set(table.TABLE), name
        # The task is built once, so its own preset cannot say what the task is.
        assert not set(PRESET_RECIPES.get(task.preset, {})) & set(options.TASK_OPTIONS), name
    assert not {"train_steps", "label_smoothing"} & architecture


def test_the_merge_is_one_short_function_that_reads_in_order():
    """`resolve` is at most 60 lines with no nested function: the layers, merged once."""
    tree = ast.parse(inspect.getsource(resolver.resolve))
    function = tree.body[0]
    assert function.end_lineno - function.lineno + 1 <= 60
    nested = [node.name for node in ast.walk(function)
              if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not function]
    assert nested == []
    merge = ast.parse(inspect.getsource(resolver.fill)).body[0]
    assert merge.end_lineno - merge.lineno + 1 <= 60


def test_layers_merge_in_order_with_their_origins():
    """From the highest layer down, each setting keeps the first value given (None: none)."""
    values, origins = {}, {}
    for layer in (("flag", {"c": 300}), ("task", {"b": 20, "c": None}),
                  ("paper", {"a": 1, "b": 2, "c": 3})):
        resolver.fill(values, origins, layer)
    assert values == {"a": 1, "b": 20, "c": 300}
    assert origins == {"a": "paper", "b": "task", "c": "flag"}


def test_a_resolution_builds_its_task_once(monkeypatch, tmp_path):
    """One Task a resolution, the preset's target form included; a second one only for the test
    files a trained dir scores for this run."""
    built = []

    def counting(name, **task_options):
        built.append((name, task_options))
        return get_task(name, **task_options)

    monkeypatch.setattr(resolver, "get_task", counting)
    recipe = resolver.resolve({"model_dir": str(tmp_path / "m")})
    assert [name for name, _ in built] == ["multi30k_ende"] and recipe.task is recipe.scored_task
    built.clear()
    recipe = resolver.resolve({"model_dir": str(tmp_path / "p"), "task": "ptb_parsing",
                               "config": "parsing_wsj_sample"})
    assert built == [("ptb_parsing", {"target_form": "read_xx"})]
    assert recipe.origins["target_form"] == "preset parsing_wsj_sample"
    assert recipe.data.task_options == {"target_form": "read_xx"}
