"""The task names a user can give (`--task`) and how each is built."""

import dataclasses
import types
from typing import Callable, Mapping

from pipelines.errors import DataError
from pipelines.tasks.base import Task
from pipelines.tasks.multi30k import multi30k_ende
from pipelines.tasks.text_files import text
from pipelines.tasks.wmt import wmt14_ende, wmt14_enfr


def ptb_parsing(**options) -> Task:
    """Penn Treebank WSJ constituency parsing (Section 6.3); see `pipelines.tasks.parsing.task`.

    Imported on use: the parsing code (and nltk) is only loaded for this task.
    """
    from pipelines.tasks.parsing.task import ptb_parsing as factory

    return factory(**options)


TASKS: Mapping[str, Callable[..., Task]] = types.MappingProxyType({
    "wmt14_ende": wmt14_ende, "wmt14_enfr": wmt14_enfr, "multi30k_ende": multi30k_ende,
    "ptb_parsing": ptb_parsing, "text": text})

_OVERRIDABLE = frozenset(f.name for f in dataclasses.fields(Task) if f.name != "name")


def get_task(name: str, **options) -> Task:
    """Build the task ``name`` with ``options``; ``None`` options are ignored.

    Options are the factory's own (``data_dir``, ``manual_dir``, ``train_src`` ...) or any
    ``Task`` field to override a default (``vocab_size``, ``max_source_length``, ``decoding``).
    """
    if name not in TASKS:
        raise DataError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    options = {k: v for k, v in options.items() if v is not None}
    overrides = {k: options.pop(k) for k in list(options) if k in _OVERRIDABLE}
    try:
        task = TASKS[name](**options)
    except TypeError as e:
        raise DataError(f"task {name}: unsupported option(s) {sorted(options)}: {e}") from None
    return dataclasses.replace(task, **overrides) if overrides else task
