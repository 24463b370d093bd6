"""Telling outages (retry with backoff, log once) from errors no retry can fix (raise), for both clients.

>>> backoff = Backoff("Kafka produce")
>>> backoff.failed(TimeoutError("no answer"), "send")  # logs a warning, returns the first delay
0.2
"""

from __future__ import annotations

import logging
import threading
import time

from ...errors import ConfigError, ConnectorError

log = logging.getLogger(__name__)


class Backoff:
    """Retry delays that double up to a cap, and clear logs: a warning when an outage starts (repeated
    every 30 s while it lasts) and one when it ends. Failures may be reported from several threads."""

    def __init__(self, what: str, first_s: float = 0.2, cap_s: float = 5.0) -> None:
        self.what, self.first_s, self.cap_s = what, first_s, cap_s
        self.failures = 0
        self.since = self.logged = 0.0
        self._lock = threading.Lock()

    def failed(self, exc: BaseException, doing: str = "") -> float:
        """Count a failure; returns how long to wait before retrying."""
        with self._lock:
            now = time.monotonic()
            if not self.failures:
                self.since = self.logged = now
            self.failures += 1
            first = self.failures == 1
            if first or now - self.logged >= 30:
                self.logged = now
                log.warning(
                    "%s: %s failed (%s: %s); is the broker reachable? Retrying with backoff (%d fails/%.0fs)",
                    self.what, doing or "request", type(exc).__name__, exc, self.failures, now - self.since,
                )  # fmt: skip
            return min(self.cap_s, self.first_s * 2 ** min(self.failures - 1, 16))

    def ok(self) -> None:
        with self._lock:
            if self.failures:
                log.warning(
                    "%s works again after %.1fs and %d failures",
                    self.what,
                    time.monotonic() - self.since,
                    self.failures,
                )
                self.failures = 0


def is_fatal(exc: BaseException) -> bool:
    """Errors that retrying will not fix: bad settings, failed authentication or authorization."""
    if isinstance(exc, ConnectorError | ConfigError):
        return True
    name = type(exc).__name__
    if any(word in name for word in ("Authorization", "Authentication", "Configuration")):
        return True
    text = str(exc)
    return any(word in text for word in ("AUTHORIZATION", "AUTHENTICATION", "_SSL"))


_CONFLUENT_TOO_LARGE = ("MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE")


def too_large(exc: BaseException) -> bool:
    """A message over the client's or the broker's size limit, as either client reports it."""
    from kafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

    if isinstance(exc, MessageSizeTooLargeError | RecordListTooLargeError):
        return True
    err = exc.args[0] if exc.args else None  # confluent: KafkaException(KafkaError)
    return callable(getattr(err, "name", None)) and err.name() in _CONFLUENT_TOO_LARGE
