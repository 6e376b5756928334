"""Tasks: which corpus, which direction, and the defaults that go with it.

* ``wmt14_ende`` / ``wmt14_enfr`` (`wmt`): WMT 2014 through TensorFlow Datasets.
* ``multi30k_ende`` (`multi30k`): Multi30k task 1, local files or a checked download.
* ``ptb_parsing`` (`parsing.task`): WSJ constituency parsing, scored with EVALB F1.
* ``text`` (`text_files`): any parallel files given by path.

`get_task(name, **options)` builds one; `Task` (`base`) lists every hook a stage calls.
"""
from pipelines.tasks.base import SPLITS, Task
from pipelines.tasks.registry import TASKS, get_task

__all__ = ["SPLITS", "TASKS", "Task", "get_task"]
