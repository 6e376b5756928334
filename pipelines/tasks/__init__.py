"""Tasks: which corpus, which direction, and the defaults that go with it. `get_task(name,
**options)` builds one; `Task` (`base`) lists every hook a stage calls."""
from pipelines.tasks.base import SPLITS, Task
from pipelines.tasks.registry import TASKS, get_task

__all__ = ["SPLITS", "TASKS", "Task", "get_task"]
