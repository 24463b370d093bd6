"""What a running job shows: progress bars that show in any terminal, and one status line per interval.

``progress_bar``: tqdm sized to the terminal, or to 100 columns where the terminal reports no width
(``docker run -t``, some CI and serial consoles say 0 columns, and a bar sized to 0 columns prints nothing).

``IntervalLog``: every long-running job (produce, ingest, train, serve, the partition router) prints one
line per ``--log-every`` seconds saying what it is doing (events/s, lag, AP/MRR, dead letters), and one
more when it stops, so a container's log reads as a time series:

    >>> rate = IntervalRate()
    >>> log = IntervalLog("demo", lambda: f"{rate(0):,.0f} events/s", every_s=60)
    >>> log.stop()  # doctest: +ELLIPSIS
    ... [demo] 0 events/s
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable

from tqdm import tqdm


def progress_bar(**kw) -> tqdm:
    """``tqdm(**kw)`` that follows the terminal's width when it has one, else 100 columns."""
    if shutil.get_terminal_size((0, 0)).columns > 0:
        return tqdm(dynamic_ncols=True, **kw)
    return tqdm(ncols=100, nrows=20, **kw)  # both: a 0-row terminal hides the bar too


class IntervalLog:
    """Prints ``line()`` every ``every_s`` seconds from a daemon thread (``every_s=0``: never), and once
    more at ``stop()``: each job says what it is doing in one line per interval."""

    def __init__(self, name: str, line: Callable[[], str], every_s: float) -> None:
        self.name, self.line, self.every_s = name, line, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"streamgnn-log-{name}", daemon=True)
        if every_s > 0:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.emit()

    def emit(self) -> None:
        try:
            text = self.line()
        except Exception as exc:  # a log line must never stop the job it describes
            text = f"(status unavailable: {type(exc).__name__}: {exc})"
        print(f"{time.strftime('%H:%M:%S')} [{self.name}] {text}", flush=True)

    def stop(self) -> None:
        if self.every_s > 0 and not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.emit()


class IntervalRate:
    """``rate(count)``: how fast ``count`` grew since the previous call (per second), for a status line
    that shows the current speed rather than the average since the start."""

    def __init__(self, count: int = 0) -> None:
        self._then, self._count = time.monotonic(), count

    def __call__(self, count: int) -> float:
        now = time.monotonic()
        rate = (count - self._count) / max(now - self._then, 1e-9)
        self._then, self._count = now, count
        return rate
