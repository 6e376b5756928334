"""The one settings table (`pipelines.settings.table`): every flag of both command lines is
a row, each default is written once, and a preset's recipe is the long command it replaces."""
import re
import subprocess
import sys

import pytest

from pipelines.settings import table
from tests.pipelines.run_helpers import ROOT

ABSL_MODULES = ("absl.", "tensorflow", "keras")
"""Modules whose flags are absl's own (--verbosity, --logtostderr, ...), not ours."""


def helpfull(script: str) -> dict[str, set[str]]:
    """{module: flag names} of `script --helpfull` (aliases included)."""
    text = subprocess.run([sys.executable, str(ROOT / script), "--helpfull"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True).stdout
    modules, module = {}, None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            module = line[:-1]
        elif module and (match := re.match(r"^  --(?:\[no\])?(\w+):", line)):
            modules.setdefault(module, set()).add(match.group(1))
    return modules


@pytest.mark.parametrize("script, front", [("pipelines/run.py", table.RUN),
                                           ("export/run.py", table.EXPORT)])
def test_every_flag_is_a_row_of_the_table(script, front):
    """The flags `--helpfull` lists outside absl's own modules are exactly the front's rows
    and their aliases: no flag is defined anywhere else, none twice."""
    ours = {module: names for module, names in helpfull(script).items()
            if not module.startswith(ABSL_MODULES)}
    rows = table.rows(front)
    expected = {row.name for row in rows} | {alias for row in rows
                                             for alias_front, alias in row.aliases
                                             if alias_front == front}
    assert set().union(*ours.values()) == expected, ours
    assert sum(len(names) for names in ours.values()) == len(expected)  # one module each
    assert len(table.TABLE) == len(table.SETTINGS)  # no name twice in the table


@pytest.mark.quick
def test_each_default_is_written_once():
    """A row's default lives in its `default` field, and the help shows it from there; no
    help text states a default of its own."""
    for row in table.SETTINGS:
        assert "(default" not in row.help.lower(), row.name
        if row.default is not None and row.option:
            shown = ",".join(row.default) if isinstance(row.default, tuple) else row.default
            assert row.help_text().endswith(f"{shown})"), row.name


@pytest.mark.quick
def test_the_bounds_are_the_table_s():
    """Numeric rows are checked against their bounds before anything runs."""
    from pipelines.errors import ConfigError

    for row in table.SETTINGS:
        if row.at_least is not None:
            with pytest.raises(ConfigError, match=f"--{row.name} .*: must be >= "):
                table.check_bounds({row.name: row.at_least - 1})
            table.check_bounds({row.name: row.at_least})


PTB = {"task": "ptb_parsing", "config": "parsing_wsj_sample",
       "train_trees": "{D}/train.mrg", "dev_trees": "{D}/dev.mrg"}
PTB_LONG = {"target_form": "read_xx", "batch_tokens": 2048, "warmup_steps": 800,
            "train_steps": 6400, "checkpoint_every": 400, "dev_metric_every": 800,
            "dev_metric_sentences": 0, "keep_best_by": "dev_metric", "beam_size": 4,
            "eval_split": "dev"}
"""The 13-flag parser command the README gave before presets carried their recipes."""
MULTI30K_QUALITY_LONG = {
    "train_steps": 8000, "batch_tokens": 8192, "warmup_steps": 2000,
    "lr_scale": 2.5298221281347035, "adam_epsilon": 1e-8, "mixed_precision": False,
    "jit_compile": True, "checkpoint_every": 125, "average_last": 10, "beam_size": 5,
    "alpha": 1.0}
"""The flags the published protocol's script passed before the preset carried them."""


@pytest.mark.parametrize("short, long", [
    (PTB, {**PTB, **PTB_LONG}),
    ({"config": "multi30k_quality"},
     {"config": "multi30k_quality", **MULTI30K_QUALITY_LONG}),
])
def test_a_preset_brings_its_recipe(short, long, tmp_path, shared_data):
    """`--config parsing_wsj_sample` (and multi30k_quality) alone resolves to every value
    the earlier long command gave; a flag still wins over the recipe."""
    from pipelines.settings import resolver

    def resolve(given):
        given = {k: v.format(D=shared_data / "ptb_sample") if isinstance(v, str) else v
                 for k, v in given.items()}
        return resolver.resolve({"model_dir": str(tmp_path / "m"), **given})

    brought = resolve(short)
    assert brought == resolve(long)
    assert brought.origins["train_steps"] == f"preset {short['config']}"
    flag = resolve({**short, "train_steps": 7})
    assert flag.training.train_steps == 7 and flag.origins["train_steps"] == "flag"


def test_the_config_help_lists_every_preset():
    """--help names the presets (the table is read before Keras loads, so the list is
    written out: this test keeps it whole)."""
    from keras_transformer.config import PRESETS

    help_text = table.TABLE["config"].help
    named = set(re.findall(r"\b[\w]+\b", help_text))
    for run in re.findall(r"\b([A-E])(\d)-\1(\d)\b", help_text):
        named.update(f"{run[0]}{i}" for i in range(int(run[1]), int(run[2]) + 1))
    assert set(PRESETS) <= named, sorted(set(PRESETS) - named)


@pytest.mark.quick
def test_training_options_has_a_typed_field_per_training_row():
    """`TrainingOptions` is written out (typed fields); it names exactly the table's training
    rows, each with its row's type, plus the memory limit and the dtype policy."""
    import dataclasses
    import typing

    from pipelines.settings.options import TrainingOptions

    types = {"integer": int, "float": float, "bool": bool, "enum": str, "string": str}
    hints = typing.get_type_hints(TrainingOptions)
    rows = {name: types[row.type] for name, row in table.saved_rows().items()
            if row.saved[0] == "training"}
    fields = [f.name for f in dataclasses.fields(TrainingOptions)]
    assert fields == [*rows, "memory_limit_mb", "precision_policy"]
    assert {name: hints[name] for name in rows} == rows
