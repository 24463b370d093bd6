"""The kafka-python client behind the ``Consumer`` interface (``backend="kafka-python"``, the default).

Rebalance hooks run on kafka-python's IO thread, so they must not block: revoked offsets are committed
asynchronously and awaited there. The client never resets an offset on its own (``auto_offset_reset`` is
``"none"`` inside): a partition with no saved or committed offset starts where ``start`` says, and one whose
offset the log no longer holds is an ``OffsetOutOfRangeError``, never a silent jump.
"""

from __future__ import annotations

import contextlib
import logging
import operator

from ...errors import ConnectorError
from .consumer import TP, Fetched, OnAssign, OnCommit, OnFailure, OnRevoke, content_types, out_of_range
from .reach import starting
from .settings import settings_error

log = logging.getLogger(__name__)


class KafkaPythonConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str | None,
        config: dict,
        start: str,
        committed: OnCommit,
        failed: OnFailure,
    ) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaConfigurationError

        try:
            with starting("kafka-python", bootstrap_servers, config):
                self.c = KafkaConsumer(
                    bootstrap_servers=bootstrap_servers, group_id=group_id, **config, auto_offset_reset="none"
                )
        except (KafkaConfigurationError, ValueError, TypeError, AssertionError):
            raise settings_error("kafka-python consumer", config, KafkaConsumer.DEFAULT_CONFIG) from None
        fetcher = getattr(self.c, "_fetcher", None)
        if not all(hasattr(fetcher, a) for a in ("_next_partition_records", "_paused_partition_records")):
            self.c.close(autocommit=False)
            raise ConnectorError(_UNTESTED)
        self.start, self.committed, self.failed = start, committed, failed

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(self.c.partitions_for_topic(topic) or ())

    def subscribe(self, topics: list[str], assigned: OnAssign, revoked: OnRevoke) -> None:
        from kafka import TopicPartition
        from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener

        consumer, assigned_hook, revoked_hook = self.c, assigned, revoked

        class Listener(AsyncConsumerRebalanceListener):
            # Runs on kafka-python's IO thread, which must not block: commit asynchronously and await it.
            async def on_partitions_revoked(self, revoked):
                offsets = revoked_hook([(tp.topic, tp.partition) for tp in revoked])
                if offsets:
                    try:
                        await consumer.commit_async(_kp_offsets(offsets))
                    except Exception as exc:  # noqa: BLE001 - the next owner then replays a little
                        log.warning("commit on revocation failed (%s); the next owner may replay events", exc)

            async def on_partitions_assigned(self, assigned):
                for (topic, part), offset in assigned_hook(
                    [(tp.topic, tp.partition) for tp in assigned]
                ).items():
                    consumer.seek(TopicPartition(topic, part), offset)

            async def on_partitions_lost(self, lost):
                revoked_hook([(tp.topic, tp.partition) for tp in lost])

        self.c.subscribe(topics, listener=Listener())

    def assign(self, parts: list[TP], offsets: dict[TP, int]) -> None:
        from kafka import TopicPartition

        self.c.assign([TopicPartition(t, p) for t, p in parts])
        for (t, p), offset in offsets.items():
            self.c.seek(TopicPartition(t, p), offset)

    def poll(self, timeout_s: float, max_messages: int) -> list[Fetched]:
        from kafka.errors import LogTruncationError, NoOffsetForPartitionError, OffsetOutOfRangeError

        self._unstick_resumed()
        out = []
        try:
            fetched = self.c.poll(timeout_ms=int(timeout_s * 1000), max_records=max_messages)
        except NoOffsetForPartitionError as exc:  # nothing saved or committed: start where ``start`` says
            parts = list(exc.args[0]) if exc.args else []
            (self.c.seek_to_beginning if self.start == "earliest" else self.c.seek_to_end)(*parts)
            return []
        except (OffsetOutOfRangeError, LogTruncationError) as exc:
            offsets = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
            tp, position = next(iter(offsets.items()), (None, -1))
            if tp is None:
                raise ConnectorError(f"kafka-python: {exc}; the topic was recreated or truncated") from None
            low = self.c.beginning_offsets([tp], timeout_ms=10_000).get(tp)
            end = self.c.end_offsets([tp], timeout_ms=10_000).get(tp)
            offset = int(getattr(position, "offset", position))
            raise out_of_range((tp.topic, tp.partition), offset, low, end) from None
        for tp, records in fetched.items():
            if records:
                offsets, values = list(map(_OFFSET, records)), list(map(_VALUE, records))
                ctypes = content_types(list(map(_HEADERS, records)))
                out.append(Fetched(tp.topic, tp.partition, offsets, values, ctypes))
        return out

    def _unstick_resumed(self) -> None:
        """Work around kafka-python 3.0.12 (its KAFKA-7548 port): records parked while their partition was
        paused are restored only when the in-line record set is None, but a drained one is left in place,
        so a resumed partition is never fetched again. Clear the drained set so the parked records come
        back. The attributes were checked at construction (see ``_UNTESTED``)."""
        fetcher = self.c._fetcher
        current = fetcher._next_partition_records
        if current is not None and not current and fetcher._paused_partition_records:
            fetcher._next_partition_records = None

    def end_offsets(self, parts: list[TP]) -> dict[TP, int]:
        from kafka import TopicPartition

        ends = self.c.end_offsets([TopicPartition(t, p) for t, p in parts], timeout_ms=10_000)
        return {(tp.topic, tp.partition): int(end) for tp, end in ends.items()}

    def caught_up(self, parts: list[TP]) -> set[TP]:
        """Partitions whose position reached the high watermark of their last fetch response."""
        from kafka import TopicPartition
        from kafka.errors import IllegalStateError

        out = set()
        for t, p in parts:
            tp = TopicPartition(t, p)
            high = self.c.highwater(tp)
            position = None
            with contextlib.suppress(IllegalStateError):
                position = None if high is None else self.c.position(tp, timeout_ms=0)
            if position is None:
                continue
            if position > high:  # the broker says the log ends before us: ask it once more to be sure
                end = self.c.end_offsets([tp], timeout_ms=10_000).get(tp)
                if end is not None and position > end:
                    low = self.c.beginning_offsets([tp], timeout_ms=10_000).get(tp)
                    raise out_of_range((t, p), position, low, end)
            if position >= high:
                out.add((t, p))
        return out

    def set_paused(self, parts: list[TP], paused: bool) -> None:
        from kafka import TopicPartition

        tps = [TopicPartition(t, p) for t, p in parts]
        if paused:
            self.c.pause(*tps)
        else:
            self.c.resume(*tps)

    def commit(self, offsets: dict[TP, int], wait: bool) -> None:
        """Commit; ``committed`` hears of success. Without ``wait`` errors are only logged (and retried)."""
        if wait:
            self.c.commit(_kp_offsets(offsets), timeout_ms=10_000)
            self.committed(offsets)
            return

        def done(_offsets, result) -> None:
            if isinstance(result, Exception):
                self.failed(result, "offset commit")
            else:
                self.committed(offsets)

        self.c.commit_async(_kp_offsets(offsets), callback=done)

    def close(self) -> None:
        self.c.close(autocommit=False)


_OFFSET, _VALUE, _HEADERS = (operator.attrgetter(name) for name in ("offset", "value", "headers"))


_UNTESTED = (
    "this kafka-python lacks the fetcher state KafkaSource's pause/resume workaround needs (tested with "
    "kafka-python 3.0.12, whose resumed partitions are otherwise never fetched again): install "
    "kafka-python==3.0.12, or use backend='confluent'"
)


def _kp_offsets(offsets: dict[TP, int]) -> dict:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    return {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
