"""The task names a user can give (`--task`) and how each is built."""

import dataclasses
import inspect
import types
from typing import Callable, Mapping

from pipelines.errors import DataError
from pipelines.tasks.base import Task
from pipelines.tasks.multi30k import multi30k_ende
from pipelines.tasks.text_files import text
from pipelines.tasks.wmt import wmt14_ende, wmt14_enfr


def ptb_parsing(data_dir: str | None = None, train_trees: str | None = None,
                dev_trees: str | None = None, test_trees: str | None = None,
                target_form: str | None = None) -> Task:
    """WSJ parsing (`pipelines.tasks.parsing.task`), imported on use: nltk loads for it only."""
    from pipelines.tasks.parsing.task import ptb_parsing as factory

    return factory(data_dir, train_trees, dev_trees, test_trees,
                   **({} if target_form is None else {"target_form": target_form}))


TASKS: Mapping[str, Callable[..., Task]] = types.MappingProxyType({
    "wmt14_ende": wmt14_ende, "wmt14_enfr": wmt14_enfr, "multi30k_ende": multi30k_ende,
    "ptb_parsing": ptb_parsing, "text": text})

_OVERRIDABLE = frozenset(f.name for f in dataclasses.fields(Task) if f.name != "name")
TEST_FILES = ("test_src", "test_tgt")
"""Test files any translation task scores when given (`Task.test_files`)."""


def task_options(name: str) -> list[str]:
    """The options (flags) task `name` takes for its data: its factory's parameters."""
    return [p.name for p in inspect.signature(TASKS[name]).parameters.values()
            if p.kind is p.POSITIONAL_OR_KEYWORD]


def get_task(name: str, **options) -> Task:
    """Build the task ``name`` with ``options`` (``None`` ones ignored): the factory's own,
    ``test_src``/``test_tgt`` for any translation task, or ``Task`` fields to override."""
    if name not in TASKS:
        raise DataError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    options = {k: v for k, v in options.items() if v is not None}
    overrides = {k: options.pop(k) for k in list(options) if k in _OVERRIDABLE}
    takes = task_options(name)
    if "test_src" not in takes and "test_trees" not in takes and set(TEST_FILES) & set(options):
        if not set(TEST_FILES) <= set(options):
            raise DataError("--test_src and --test_tgt go together: give both files (one "
                            "sentence a line, line by line parallel)")
        overrides["test_files"] = tuple(options.pop(k) for k in TEST_FILES)
    try:
        task = TASKS[name](**options)
    except TypeError:
        unknown = sorted(set(options) - set(takes)) or sorted(options)
        raise DataError(f"task {name} takes no {', '.join('--' + k for k in unknown)}; its "
                        f"data flags are {', '.join('--' + k for k in takes)}") from None
    return dataclasses.replace(task, **overrides) if overrides else task
