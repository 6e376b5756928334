"""The jobs under the command line, a sub-package each: settings, data, training, evaluation,
stages, the model directory and the tasks (the parser among them)."""
from typing import Callable

Log = Callable[[str], None]
"""Where progress and reports go: `print` by default, stderr in the CLIs."""
