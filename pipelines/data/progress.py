"""Progress lines for long passes, so they do not look hung (docs/data.md#wmt-sized-corpora)."""

import contextlib
import threading
import time
from typing import Callable, Iterator

from pipelines import Log
from pipelines.durations import format_duration

DEFAULT_INTERVAL = 15.0
"""Seconds between progress lines: well within the 30 s a user waits before worrying."""
PLAIN_INTERVAL = 60.0
"""Seconds between the lines of training and decoding where stderr is no terminal (a log file):
their Keras bars would say nothing until the end."""


def format_count(value: float) -> str:
    """A short rate or count: ``0.24 -> "0.2"``, ``27412.3 -> "27,412"``, ``1.44e6 -> "1.44M"``."""
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value < 10 and not float(value).is_integer():
        return f"{value:.1f}"
    return f"{value:,.0f}"


class Progress:
    """Reports ``done`` of ``total`` ``unit``s (None: unknown) as ``label: ...`` lines, at most
    one every ``interval`` seconds. ``already`` (work a killed run left done) counts as done but
    not in the rate, so a resumed run's ETA stays honest."""

    def __init__(self, label: str, total: float | None, unit: str, log: Log, *, already: float = 0,
                 interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.unit, self.log = label, total, unit, log
        self.interval, self.clock = interval, clock
        self.already = self.done = already
        self.start = self.last = clock()

    def elapsed(self) -> float:
        """Seconds since the start."""
        return self.clock() - self.start

    def seconds_to_next(self) -> float:
        """Seconds until the next line is due (0 if it is due now)."""
        return max(0.0, self.last + self.interval - self.clock())

    def update(self, done: float, extra: dict[str, float] | None = None) -> None:
        """Record ``done`` units in all; log a line if ``interval`` has passed (none once done).
        ``extra``: other counts of this run whose rate is shown, e.g. ``{"tokens": 1.2e6}``."""
        self.done = done
        if (not self.total or done < self.total) and self.clock() - self.last >= self.interval:
            self.log(self.line(extra))
            self.last = self.clock()

    def finish(self, extra: dict[str, float] | None = None) -> None:
        """Log the final line (done, rate over this run, time taken)."""
        self.log(self.line(extra, final=True))

    def line(self, extra: dict[str, float] | None = None, *, final: bool = False) -> str:
        """``label: done / total unit (pct), rate unit/s[, rate extra/s], ETA t`` (or ``in t``)."""
        elapsed = max(self.elapsed(), 1e-9)
        rate = (self.done - self.already) / elapsed
        text = f"{self.label}: {format_count(self.done)}"
        if self.total:
            share = 100 * self.done / self.total
            text += f" / {format_count(self.total)} {self.unit} ({share:.1f}%)"
        else:
            text += f" {self.unit}"
        text += f", {format_count(rate)} {self.unit}/s"
        for name, count in (extra or {}).items():
            text += f", {format_count(count / elapsed)} {name}/s"
        if final:
            return text + f", in {format_duration(elapsed)}"
        if self.total and rate > 0:
            text += f", ETA {format_duration((self.total - self.done) / rate)}"
        return text


@contextlib.contextmanager
def heartbeat(label: str, log: Log, *, interval: float = DEFAULT_INTERVAL) -> Iterator[None]:
    """Log ``label: still running (t)`` every ``interval`` s while the body runs (silent work)."""
    stop = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not stop.wait(interval):
            log(f"{label}: still running ({format_duration(time.monotonic() - start)})")

    thread = threading.Thread(target=beat, name=f"heartbeat {label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
