"""The jobs under the command line, a sub-package each: settings, data, training, evaluation,
stages, the model directory and the tasks (the parser among them)."""
from typing import Callable

Log = Callable[[str], None]
"""Where progress and reports go: `print` by default, stderr in the CLIs."""


class RunLog:
    """A run's `Log`: every line goes to `sink`, and what several stages of the run read (a
    cleaned split, the vocabulary, a token cache) is reported once, whether the run made it
    or found it (`report`)."""

    def __init__(self, sink: Log):
        self.sink, self.reported = sink, set()

    def __call__(self, message: str) -> None:
        self.sink(message)


def report(log: Log, subject, message: str) -> None:
    """`message` about `subject` (its path): once a run when `log` is a `RunLog`, else always."""
    if isinstance(log, RunLog):
        if subject in log.reported:
            return
        log.reported.add(subject)
    log(message)
