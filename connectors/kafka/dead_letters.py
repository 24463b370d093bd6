"""Dead letters to a topic: the message (or the offending row), the reason and its origin, in headers.

Headers: ``reason``, ``source-topic``, ``source-partition``, ``source-offset``, ``where``, and ``eid`` and
``content-type`` where known. Only the reason and the origin go out with the payload, never a client
setting, so credentials cannot leak through a dead-letter topic. Without a topic, dead letters are logged.

>>> letters = DeadLetters(None)  # no topic: each letter is a warning in the log
>>> letters.send(DeadLetter("missing 'eid'", "edges:0@7", b"{}"), "edges", 0, 7)
>>> letters.count
1
"""

from __future__ import annotations

import logging

from ...events import DeadLetter
from .producer import CONTENT_TYPE_HEADER, Producer

log = logging.getLogger(__name__)
_MAX_REASON = 2000


class DeadLetters:
    """Sends dead letters through ``producer`` (which shrinks oversized ones) to ``topic``, or logs them."""

    def __init__(self, producer: Producer | None, topic: str | None = None) -> None:
        self.producer, self.topic = producer, topic
        self.count = 0  # dead letters sent (or logged)
        self._dirty = False

    def send(
        self, letter: DeadLetter, topic: str, partition: int, offset: int, ctype: str | None = None
    ) -> None:
        self.count += 1
        if self.producer is None:
            log.warning("dead letter from %s:%d@%d: %s", topic, partition, offset, letter.reason)
            return
        payload = letter.payload
        value = payload.encode(errors="surrogateescape") if isinstance(payload, str) else (payload or b"")
        headers = [
            ("reason", letter.reason[:_MAX_REASON].encode(errors="replace")),
            ("source-topic", topic.encode()),
            ("source-partition", str(partition).encode()),
            ("source-offset", str(offset).encode()),
            ("where", letter.where[:_MAX_REASON].encode(errors="replace")),
        ]
        if letter.eid is not None:
            headers.append(("eid", str(letter.eid).encode()))
        if ctype is not None:
            headers.append((CONTENT_TYPE_HEADER, ctype.encode("latin-1", errors="replace")))
        self.producer.send(self.topic, bytes(value), headers=headers)
        self._dirty = True

    def flush(self) -> None:
        """Wait until every dead letter sent so far is acknowledged (before a checkpoint covers it)."""
        if self.producer is not None and self._dirty:
            self._dirty = False
            self.producer.flush()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
