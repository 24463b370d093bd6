"""Labels as a stream beside the events: a JSON-lines file or a Kafka topic of label records, decoded by
``admit.decode_labels`` (each bad record a dead letter naming the file's line, or the message's topic,
partition and offset, and the field at fault).

A feed hands out the labels that arrived since it was last asked (``take(until)``; a file, read in time
order, only those up to ``until``), and the dead letters its decoding made. Where a label goes next (held
until the events reach its time, refused as late or for a node no event has) is the job's
(``jobs.labelled``). ``position()`` and ``seek`` let a checkpoint resume a feed where it was.

Labels travel apart from the events (their own file or topic) because they come from elsewhere and
later: a ban decided after the edit, a chargeback days after its payment.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ConnectorError
from ..events import DeadLetter
from .admit import decode_labels
from .labels import Labels
from .task import Classification, Task

SYNC_S = 0.5  # seconds between two reads of a label topic to its end (each asks the broker for its ends)


def empty_labels(task: Task) -> Labels:
    """No labels, of ``task``'s dtypes."""
    y = np.zeros((0, *task.label_shape), np.int64 if isinstance(task, Classification) else np.float64)
    dst = np.zeros(0, np.int64) if task.on_edges else None
    return Labels(np.zeros(0, np.int64), np.zeros(0), y, dst, np.zeros(0, dtype=object))


def merge(a: Labels, b: Labels) -> Labels:
    """The labels of both, in time order (stable: ``a``'s first among equal times)."""
    if not len(b):
        return a
    if not len(a):
        return b
    order = np.argsort(np.concatenate([a.t, b.t]), kind="stable")
    dst = None if a.dst is None else np.concatenate([a.dst, b.dst])[order]
    origin = None if a.origin is None or b.origin is None else np.concatenate([a.origin, b.origin])[order]
    node, t, y = (np.concatenate([x, z])[order] for x, z in ((a.node, b.node), (a.t, b.t), (a.y, b.y)))
    return Labels(node, t, y, dst, origin)


class FileLabels:
    """The labels of a JSON-lines file, decoded when the job starts, handed out in time order."""

    def __init__(self, path: str | Path, task: Task) -> None:
        self.path = Path(path)
        try:
            text = self.path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"task.labels_file {self.path}: {exc.strerror or exc}") from None
        self.labels, self._letters = decode_labels(text, task, where=str(self.path))
        self.next = 0

    def take(self, until: float) -> tuple[Labels, list[DeadLetter]]:
        """The labels at ``t <= until`` not handed out yet, and the file's dead letters (once)."""
        hi = int(np.searchsorted(self.labels.t, until, side="right"))
        out = self.labels.take(slice(self.next, max(hi, self.next)))
        self.next = max(hi, self.next)
        letters, self._letters = self._letters, []
        return out, letters

    def waiting(self) -> int:
        """Labels of the file not handed out yet (the events have not reached them)."""
        return len(self.labels) - self.next

    def position(self) -> dict:
        return {"next": self.next}

    def seek(self, position: dict) -> None:
        """Continue after the labels a checkpoint had taken (its dead letters were counted then)."""
        self.next, self._letters = int(position["next"]), []

    def close(self) -> None:
        pass


class KafkaLabels:
    """The labels of a Kafka topic, every partition from its start (or a checkpoint's offsets); each
    message holds one or more JSON lines. ``take`` reads to the topic's end at most every ``SYNC_S``."""

    def __init__(self, topic: str, bootstrap: str, task: Task, *, sync_s: float = SYNC_S) -> None:
        from ..connectors.kafka import TopicReader

        self.topic, self.task, self.sync_s = topic, task, sync_s
        self.reader = TopicReader(bootstrap)
        self.partitions = self.reader.partitions(topic)
        if not self.partitions:
            self.reader.close()
            raise ConnectorError(f"task.labels_topic {topic!r} does not exist at {bootstrap}")
        self.reader.assign(topic, {p: None for p in self.partitions})
        self._synced = -float("inf")

    def take(self, until: float) -> tuple[Labels, list[DeadLetter]]:
        """Every label that arrived since the last read (any time), and the dead letters among them."""
        now = time.monotonic()
        if now - self._synced < self.sync_s:
            return empty_labels(self.task), []
        self._synced = now
        ends = self.reader.end_offsets(self.topic, self.partitions)
        labels, letters = empty_labels(self.task), []
        for r in self.reader.read_to(ends):
            where = f"{self.topic}/{r.partition}@{r.offset}"
            got, bad = decode_labels(r.value or b"", self.task, where=where)
            labels = merge(labels, got)
            letters += bad
        return labels, letters

    def waiting(self) -> int:
        """None held back: every label read is handed out."""
        return 0

    def position(self) -> dict:
        return {str(p): o for p, o in self.reader.positions().items()}

    def seek(self, position: dict) -> None:
        """Read on from a checkpoint's offsets (a partition it does not name: from the start)."""
        self.reader.assign(self.topic, {p: position.get(str(p)) for p in self.partitions})

    def close(self) -> None:
        self.reader.close()
