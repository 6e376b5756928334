"""Data pipelines and the command line: tasks, vocabulary, tf.data input, training stages."""
from typing import Callable

Log = Callable[[str], None]
"""Where progress and reports go: `print` by default, stderr in the CLIs."""
