"""Foreground commands (``streamgnn broker``, ``streamgnn demo --serve``) run until Ctrl-C or SIGTERM: both
end them the same way, by a ``KeyboardInterrupt`` in the main thread, so their clean-up code runs once."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does (a service manager's stop, a
    ``kill``); the previous handler comes back after it."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def until_stopped(wait: Callable[[], object] = signal.pause) -> bool:
    """Block in ``wait`` (default: until a signal); True when Ctrl-C or SIGTERM ended it, False when ``wait``
    returned on its own (what it waited for has ended)."""
    with sigterm_as_interrupt():
        try:
            wait()
        except KeyboardInterrupt:
            return True
    return False
