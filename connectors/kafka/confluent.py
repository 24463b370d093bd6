"""The confluent-kafka (librdkafka) client behind the ``Consumer`` interface (``backend="confluent"``).

librdkafka insists on a group id, so a source without a group gets a private one it never commits to;
under a cooperative assignor it leaves incremental assignment to the rebalance callbacks.
"""

from __future__ import annotations

import contextlib
import logging
import uuid

from ...errors import ConnectorError
from .consumer import TP, Fetched, OnAssign, OnCommit, OnFailure, OnRevoke, content_type
from .producer import RDKAFKA_LOG
from .settings import settings_error

log = logging.getLogger(__name__)


class ConfluentConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str | None,
        config: dict,
        committed: OnCommit,
        failed: OnFailure,
    ) -> None:
        from confluent_kafka import Consumer, KafkaException

        # librdkafka insists on a group id; a private one, never committed to, stands in for "no group".
        conf = {
            "group.id": group_id or f"streamgnn-anon-{uuid.uuid4().hex}",
            "logger": RDKAFKA_LOG,
            **config,
        }
        conf["bootstrap.servers"] = bootstrap_servers
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
        meta = self.c.list_topics(timeout=10).topics.get(topic)
        return [] if meta is None or meta.error is not None else sorted(meta.partitions)

    def subscribe(self, topics: list[str], assigned: OnAssign, revoked: OnRevoke) -> None:
        from confluent_kafka import OFFSET_INVALID, TopicPartition

        cooperative = self.cooperative

        def unassign(consumer, partitions) -> None:
            if cooperative:
                consumer.incremental_unassign(partitions)
            else:
                consumer.unassign()

        def on_assign(consumer, partitions) -> None:
            parts = [(tp.topic, tp.partition) for tp in partitions]
            offsets = assigned(parts)
            tps = [TopicPartition(t, p, offsets.get((t, p), OFFSET_INVALID)) for t, p in parts]
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
        from confluent_kafka import OFFSET_INVALID, TopicPartition

        self.c.assign([TopicPartition(t, p, offsets.get((t, p), OFFSET_INVALID)) for t, p in parts])

    def poll(self, timeout_s: float, max_messages: int) -> list[Fetched]:
        from confluent_kafka import KafkaException

        by_part: dict[TP, Fetched] = {}
        # take what is already fetched at once; block only when nothing is (consume() otherwise waits
        # for a full batch until the timeout)
        messages = self.c.consume(max_messages, 0) or self.c.consume(max_messages, timeout_s)
        for m in messages:
            err = m.error()
            if err is not None:  # an event, not a message: the ones around it are still delivered
                if err.fatal():
                    raise ConnectorError(f"Kafka consumer failed for good: {err.str()}")
                self.failed(KafkaException(err), "fetch")
                continue
            key = (m.topic(), m.partition())
            f = by_part.get(key)
            if f is None:
                f = by_part[key] = Fetched(key[0], key[1], [], [], [])
            f.offsets.append(m.offset())
            f.values.append(m.value())
            f.ctypes.append(content_type(m.headers()))
        return list(by_part.values())

    def caught_up(self, parts: list[TP]) -> set[TP]:
        """Partitions fetched up to the high watermark of their last fetch response."""
        from confluent_kafka import KafkaException, TopicPartition

        out = set()
        with contextlib.suppress(KafkaException):
            for tp in self.c.position([TopicPartition(t, p) for t, p in parts]):
                low, high = self.c.get_watermark_offsets(tp, cached=True)
                if high >= 0 and (tp.offset >= high or (tp.offset < 0 and low == high)):
                    out.add((tp.topic, tp.partition))
        return out

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
