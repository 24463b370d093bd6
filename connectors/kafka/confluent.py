"""The confluent-kafka (librdkafka) client behind the ``Consumer`` interface (``backend="confluent"``).

librdkafka insists on a group id, so a source without a group gets a private one it never commits to;
under a cooperative assignor it leaves incremental assignment to the rebalance callbacks. The client
never resets an offset on its own (``auto.offset.reset`` is ``error`` inside): a partition with no saved
or committed offset starts where ``start`` says, and one whose offset the log no longer holds is an
``OffsetOutOfRangeError``. A partition is read to its end when librdkafka says so (a partition-EOF event)
and no message came after it.
"""

from __future__ import annotations

import logging
import operator
import uuid
from collections.abc import Sequence

import numpy as np

from ...errors import ConnectorError
from .consumer import (
    TP,
    Fetched,
    OnAssign,
    OnCommit,
    OnFailure,
    OnRevoke,
    content_type,
    out_of_range,
)
from .producer import RDKAFKA_LOG
from .reach import starting
from .settings import settings_error

log = logging.getLogger(__name__)


class ConfluentConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str | None,
        config: dict,
        start: str,
        committed: OnCommit,
        failed: OnFailure,
        connect_timeout_s: float = 10.0,
    ) -> None:
        from confluent_kafka import Consumer, KafkaException

        # librdkafka insists on a group id; a private one, never committed to, stands in for "no group".
        conf = {
            "group.id": group_id or f"streamgnn-anon-{uuid.uuid4().hex}",
            "logger": RDKAFKA_LOG,
            **config,
        }
        conf.update({"bootstrap.servers": bootstrap_servers, "auto.offset.reset": "error",
                     "enable.partition.eof": True})  # fmt: skip
        self.start, self.grouped = start, group_id is not None
        self._bootstrap, self._settings, self._timeout_s = bootstrap_servers, config, connect_timeout_s
        self._next: dict[TP, int] = {}  # the offset after the last message handed out (or the seek target)
        self._at_end: set[TP] = set()  # partitions whose last word was a partition-EOF event
        self._topics: set[str] = set()  # every topic ever assigned (one: no need to read messages' topics)
        # librdkafka leaves assigning to the rebalance callbacks, incrementally under a cooperative assignor
        self.cooperative = "cooperative" in str(conf.get("partition.assignment.strategy", ""))
        user_on_commit = conf.get("on_commit")

        def on_commit(err, partitions) -> None:
            if err is None:
                committed({(tp.topic, tp.partition): tp.offset for tp in partitions if tp.error is None})
            else:
                failed(KafkaException(err), "offset commit")
            if user_on_commit is not None:
                user_on_commit(err, partitions)

        conf["on_commit"] = on_commit
        user_error_cb = conf.get("error_cb")

        def on_error(err) -> None:  # connection trouble librdkafka retries on its own
            failed(KafkaException(err), "connection")
            if user_error_cb is not None:
                user_error_cb(err)

        conf["error_cb"] = on_error
        try:
            self.c = Consumer(conf)
        except (KafkaException, ValueError, TypeError):
            raise settings_error("confluent-kafka consumer", config) from None
        self.failed = failed

    def partitions_for(self, topic: str) -> list[int]:
        with starting("confluent", self._bootstrap, self._settings):
            meta = self.c.list_topics(timeout=self._timeout_s).topics.get(topic)
        return [] if meta is None or meta.error is not None else sorted(meta.partitions)

    def subscribe(self, topics: list[str], assigned: OnAssign, revoked: OnRevoke) -> None:
        cooperative = self.cooperative

        def unassign(consumer, partitions) -> None:
            if cooperative:
                consumer.incremental_unassign(partitions)
            else:
                consumer.unassign()

        def on_assign(consumer, partitions) -> None:
            parts = [(tp.topic, tp.partition) for tp in partitions]
            tps = self._starts(parts, assigned(parts))
            if cooperative:
                consumer.incremental_assign(tps)
            else:
                consumer.assign(tps)

        def on_revoke(consumer, partitions) -> None:
            offsets = revoked([(tp.topic, tp.partition) for tp in partitions])
            if offsets:
                try:
                    self.commit(offsets, wait=True)
                except Exception as exc:  # noqa: BLE001 - the next owner then replays a little
                    log.warning("commit on revocation failed (%s); the next owner may replay events", exc)
            unassign(consumer, partitions)

        def on_lost(consumer, partitions) -> None:
            revoked([(tp.topic, tp.partition) for tp in partitions])
            unassign(consumer, partitions)

        self.c.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def assign(self, parts: list[TP], offsets: dict[TP, int]) -> None:
        self.c.assign(self._starts(parts, offsets))

    def _starts(self, parts: list[TP], offsets: dict[TP, int]) -> list:
        """Where each partition starts: its saved offset, else the group's committed one, else ``start``."""
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

        missing = [TopicPartition(t, p) for t, p in parts if (t, p) not in offsets]
        found = {}
        if missing and self.grouped:
            found = {(tp.topic, tp.partition): tp.offset for tp in self.c.committed(missing, timeout=10)}
        policy = OFFSET_BEGINNING if self.start == "earliest" else OFFSET_END
        self._topics.update(topic for topic, _ in parts)
        out = []
        for tp in parts:
            offset = offsets.get(tp, found.get(tp, -1))
            self._at_end.discard(tp)
            self._next.pop(tp, None)
            if offset >= 0:
                self._next[tp] = offset
            out.append(TopicPartition(*tp, offset if offset >= 0 else policy))
        return out

    def poll(self, timeout_s: float, max_messages: int) -> list[Fetched]:
        from confluent_kafka import KafkaError, KafkaException

        by_part: dict[TP, Fetched] = {}
        # take what is already fetched at once; block only when nothing is (consume() otherwise waits
        # for a full batch until the timeout)
        messages = self.c.consume(max_messages, 0) or self.c.consume(max_messages, timeout_s)
        # (Message.error through map() leaves an exception set on EOF events in confluent-kafka 2.16)
        if all(m.error() is None for m in messages):
            return self._messages(messages)
        eof: dict[TP, int] = {}  # partition -> how many of its messages came before its EOF event
        for m in messages:
            err = m.error()
            if err is not None:  # an event, not a message: the ones around it are still delivered
                tp = (m.topic(), m.partition())
                if err.code() == KafkaError._PARTITION_EOF:
                    eof[tp] = len(by_part[tp].offsets) if tp in by_part else 0
                    self._next.setdefault(tp, m.offset())
                elif err.code() == KafkaError._AUTO_OFFSET_RESET:  # out of range: no reset allowed
                    self._out_of_range(tp, self._next.get(tp, m.offset()))
                elif err.fatal():
                    raise ConnectorError(f"Kafka consumer failed for good: {err.str()}")
                else:
                    self.failed(KafkaException(err), "fetch")
                continue
            key = (m.topic(), m.partition())
            f = by_part.get(key)
            if f is None:
                f = by_part[key] = Fetched(key[0], key[1], [], [], [])
            f.offsets.append(m.offset())
            f.values.append(m.value())
            f.ctypes.append(content_type(m.headers()))
        for key, f in by_part.items():
            self._next[key] = f.offsets[-1] + 1
            if eof.get(key) != len(f.offsets):  # a message after the last EOF: there was more
                self._at_end.discard(key)
        self._at_end.update(
            tp for tp, before in eof.items() if before == len(by_part[tp].offsets if tp in by_part else ())
        )
        return list(by_part.values())

    def _messages(self, messages: list) -> list[Fetched]:
        """A poll of messages only (no events), grouped by partition: column by column, the usual case."""
        from confluent_kafka import Message

        n = len(messages)
        if not n:
            return []
        parts = list(map(Message.partition, messages))
        topics = None if len(self._topics) == 1 else list(map(Message.topic, messages))
        offsets, values = list(map(Message.offset, messages)), list(map(Message.value, messages))
        ctypes = _ContentTypes(messages)
        if parts.count(parts[0]) == n and (topics is None or topics.count(topics[0]) == n):
            out = [Fetched(messages[0].topic(), parts[0], offsets, values, ctypes)]
        else:  # group by partition, keeping each one's offset order
            topics = topics or list(map(Message.topic, messages))
            keys = np.unique(np.array(topics, dtype=object), return_inverse=True)[1] * (1 << 32)
            keys += np.array(parts, np.int64)
            order = np.argsort(keys, kind="stable")
            out = []
            for idx in np.split(order, np.flatnonzero(np.diff(keys[order])) + 1):
                rows = idx.tolist()
                pick = operator.itemgetter(*rows) if len(rows) > 1 else lambda col, i=rows[0]: (col[i],)
                out.append(
                    Fetched(topics[rows[0]], int(parts[rows[0]]), list(pick(offsets)), list(pick(values)),
                            _ContentTypes(list(pick(messages))))
                )  # fmt: skip
        for f in out:  # messages, so more than the last EOF said
            key = (f.topic, f.partition)
            self._next[key] = f.offsets[-1] + 1
            self._at_end.discard(key)
        return out

    def end_offsets(self, parts: list[TP]) -> dict[TP, int]:
        from confluent_kafka import TopicPartition

        return {tp: int(self.c.get_watermark_offsets(TopicPartition(*tp), timeout=10.0)[1]) for tp in parts}

    def caught_up(self, parts: list[TP]) -> set[TP]:
        """Partitions whose last word was a partition-EOF event (no message after it)."""
        from confluent_kafka import TopicPartition

        for tp in parts:
            position = self._next.get(tp)
            if position is None:
                continue
            _, high = self.c.get_watermark_offsets(TopicPartition(*tp), cached=True)
            if 0 <= high < position:  # the broker says the log ends before us
                self._out_of_range(tp, position)
        return self._at_end.intersection(parts)

    def _out_of_range(self, tp: TP, position: int) -> None:
        """Raise ``OffsetOutOfRangeError`` if the broker confirms that ``position`` is outside the log."""
        from confluent_kafka import TopicPartition

        low, high = self.c.get_watermark_offsets(TopicPartition(*tp), timeout=10, cached=False)
        if not low <= position <= high:
            raise out_of_range(tp, position, low, high)

    def set_paused(self, parts: list[TP], paused: bool) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(t, p) for t, p in parts]
        if paused:
            self.c.pause(tps)
        else:
            self.c.resume(tps)

    def commit(self, offsets: dict[TP, int], wait: bool) -> None:
        """Commit; success reaches ``committed`` through librdkafka's on_commit callback."""
        from confluent_kafka import TopicPartition

        self.c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=not wait
        )

    def close(self) -> None:
        self.c.close()


class _ContentTypes(Sequence):
    """The messages' content types, read from their headers only when the decoder asks: confluent-kafka's
    ``headers()`` costs more than decoding the message, and a poll of plain JSON events never needs it."""

    def __init__(self, messages: list) -> None:
        self._messages = messages
        self._read: dict[int, str | None] = {}

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i not in self._read:
            self._read[i] = content_type(self._messages[i].headers())
        return self._read[i]
