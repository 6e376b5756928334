"""Tasks: which corpus, which direction, and the defaults that go with it.

* ``wmt14_ende`` / ``wmt14_enfr`` (`wmt`): WMT 2014 through TensorFlow Datasets.
* ``multi30k_ende`` (`multi30k`): Multi30k task 1, local files or a checked download.
* ``ptb_parsing`` (`parsing.task`): WSJ constituency parsing, scored with EVALB F1.
* ``text`` (`text_files`): any parallel files given by path.

`get_task(name, **options)` builds one; `Task` (`base`) lists every hook a stage calls.

The names are imported on first use (PEP 562 `__getattr__`), not when the package is: `base`
imports keras_transformer, hence Keras and TensorFlow, and the command line reads
`pipelines.tasks.parsing.forms` (a module of this package) before TensorFlow is imported.
"""
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipelines.tasks.base import SPLITS, Task
    from pipelines.tasks.registry import TASKS, get_task

__all__ = ["SPLITS", "TASKS", "Task", "get_task"]

_HOMES = {"SPLITS": "pipelines.tasks.base", "Task": "pipelines.tasks.base",
          "TASKS": "pipelines.tasks.registry", "get_task": "pipelines.tasks.registry"}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
