"""The jobs under the command line: settings, data, training, evaluation, stages, tasks ..."""
from typing import Callable

Log = Callable[[str], None]
"""Where progress and reports go: `print` by default, stderr in the CLIs."""


class RunLog:
    """A run's `Log` to `sink`, which reports what several stages read only once (`report`)."""

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
