"""Reading a topic directly, outside ``KafkaSource``: its partitions' end offsets (a job's lag, where the
router's output begins) and its records from chosen offsets (the embeddings service's table, the router's
read-back of what it published, the demo's count), with either client.

Outside this package no module imports a Kafka client (the import contract in pyproject.toml), so a job
reads its topics through the client it was given, and a client's quirks are handled once: librdkafka's
position is the offset after the last message it gave, which a compacted tail leaves short of the end, so
the confluent reader takes a partition-EOF event as "read to the end" (``read_to``).

>>> from streamgnn.connectors.kafka import TopicReader  # a broker to read from: tests/test_kafka_reading.py
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ...errors import ConnectorError
from .producer import RDKAFKA_LOG
from .settings import check_backend, prepare, settings_error


@dataclass(frozen=True)
class Record:
    """One message as a reader hands it out; ``headers`` as the clients give them, ``(name, bytes)`` pairs;
    ``timestamp`` in milliseconds (None: the broker gave none)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int | None


class TopicReader:
    """One client reading chosen partitions of one topic, without a consumer group (nothing is committed);
    an offset the log no longer holds (retention) reads on from the earliest one it does.

    ``assign`` then ``poll`` until ``positions()`` reach the ``end_offsets`` taken when reading began
    (``read_to``); ``end_offsets`` alone needs no assignment. ``config``: client settings in the client's
    own spelling (connection, security)."""

    def __init__(self, bootstrap: str, *, backend: str = "kafka-python", config: dict | None = None) -> None:
        check_backend(backend)
        config = dict(config or {})
        prepare(backend, config)
        self.backend = backend
        self._tps: dict[int, object] = {}  # the assigned partitions, by id
        self._pos: dict[int, int] = {}
        self._at_end: set[int] = set()  # (confluent) partitions whose last word was a partition-EOF event
        if backend == "kafka-python":
            from kafka import KafkaConsumer
            from kafka.errors import KafkaConfigurationError

            try:
                self._c = KafkaConsumer(**{"auto_offset_reset": "earliest", **config},
                                        bootstrap_servers=bootstrap, enable_auto_commit=False)  # fmt: skip
            except (KafkaConfigurationError, ValueError, TypeError, AssertionError):
                raise settings_error("kafka-python consumer", config, KafkaConsumer.DEFAULT_CONFIG) from None
        else:
            from confluent_kafka import Consumer, KafkaException

            try:  # librdkafka insists on a group id: a private one, never committed to
                self._c = Consumer({"group.id": f"streamgnn-reader-{uuid.uuid4().hex}", "logger": RDKAFKA_LOG,
                                    "auto.offset.reset": "earliest", **config, "bootstrap.servers": bootstrap,
                                    "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
            except (KafkaException, ValueError, TypeError):
                raise settings_error("confluent-kafka consumer", config) from None

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._c.close()

    def _tp(self, topic: str, partition: int, offset: int | None = None):
        if self.backend == "kafka-python":
            from kafka import TopicPartition

            return TopicPartition(topic, partition)
        from confluent_kafka import TopicPartition

        return (
            TopicPartition(topic, partition) if offset is None else TopicPartition(topic, partition, offset)
        )

    def partitions(self, topic: str, timeout_s: float = 10.0) -> list[int]:
        """Partition ids of ``topic``, empty while it does not exist (asking never creates it)."""
        if self.backend == "kafka-python":
            return sorted(self._c.partitions_for_topic(topic) or ())
        meta = self._c.list_topics(timeout=timeout_s).topics.get(topic)
        return [] if meta is None or meta.error is not None else sorted(meta.partitions)

    def end_offsets(self, topic: str, partitions: list[int] | None = None, timeout_s: float = 10.0) -> dict:
        """``{partition: end offset}`` now (all of ``topic``'s partitions by default)."""
        parts = self.partitions(topic, timeout_s) if partitions is None else list(partitions)
        if self.backend == "kafka-python":
            ends = self._c.end_offsets([self._tp(topic, p) for p in parts])
            return {tp.partition: int(o) for tp, o in ends.items()}
        return {
            p: int(self._c.get_watermark_offsets(self._tp(topic, p), timeout=timeout_s)[1]) for p in parts
        }

    def assign(self, topic: str, starts: dict[int, int | None]) -> None:
        """Read ``starts``' partitions of ``topic``, each from its offset (None: the beginning)."""
        self._tps = {p: self._tp(topic, p) for p in starts}
        self._at_end = set()
        if self.backend == "kafka-python":
            self._c.assign(list(self._tps.values()))
            for p, tp in self._tps.items():
                if starts[p] is None:
                    self._c.seek_to_beginning(tp)
                else:
                    self._c.seek(tp, starts[p])
            self._pos = {p: self._c.position(tp) for p, tp in self._tps.items()}
            return
        from confluent_kafka import OFFSET_BEGINNING

        low = {p: self._c.get_watermark_offsets(self._tp(topic, p), timeout=10.0)[0] for p in starts}
        self._pos = {p: low[p] if o is None else o for p, o in starts.items()}
        self._c.assign([self._tp(topic, p, OFFSET_BEGINNING if o is None else o) for p, o in starts.items()])

    def positions(self) -> dict[int, int]:
        """``{partition: the offset after what was read}`` of the assigned partitions."""
        return dict(self._pos)

    def poll(self, timeout_s: float = 1.0, max_records: int = 10_000) -> list[Record]:
        """The records that arrived within ``timeout_s``, in offset order within each partition."""
        if self.backend == "kafka-python":
            fetched = self._c.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
            out = [Record(r.topic, r.partition, r.offset, r.key, r.value, list(r.headers or ()), r.timestamp)
                   for records in fetched.values() for r in records]  # fmt: skip
            # the client's position passes what compaction removed, where the records' offsets cannot
            self._pos = {p: self._c.position(tp) for p, tp in self._tps.items()}
            return out
        return self._confluent_poll(timeout_s, max_records)

    def _confluent_poll(self, timeout_s: float, max_records: int) -> list[Record]:
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError

        out = []
        for m in self._c.consume(max_records, timeout_s):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:  # read to the end offset it carries
                    self._pos[m.partition()] = max(self._pos.get(m.partition(), 0), m.offset())
                    self._at_end.add(m.partition())
                elif err.fatal():
                    raise ConnectorError(f"Kafka reader failed for good: {err.str()}")
                continue
            kind, ms = m.timestamp()
            stamp = None if kind == TIMESTAMP_NOT_AVAILABLE else ms
            headers = list(m.headers() or ())
            out.append(Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(), headers, stamp))
            self._pos[m.partition()] = m.offset() + 1
            self._at_end.discard(m.partition())
        return out

    def read_to(self, ends: dict[int, int], timeout_s: float = 1.0) -> list[Record]:
        """Every record of the assigned partitions up to ``ends`` (offsets taken before: what was there).

        Some brokers (Tansu) report an end offset inside the last record batch; a fetch returns whole
        batches, and kafka-python's position passes the batch it returned, so the read still ends past it;
        librdkafka's is the last message's, so the confluent reader also waits for the partition-EOF
        event that follows the last message fetched."""
        out: list[Record] = []
        while not self._read_to(ends):
            out += self.poll(timeout_s)
        return out

    def _read_to(self, ends: dict[int, int]) -> bool:
        reached = all(self._pos.get(p, 0) >= end for p, end in ends.items())
        return reached and (self.backend == "kafka-python" or self._at_end.issuperset(ends))


def read_topic(
    bootstrap: str, topic: str, *, starts: dict[int, int] | None = None, backend: str = "kafka-python",
    config: dict | None = None,
) -> list[Record]:  # fmt: skip
    """Every record of ``topic`` now: from ``starts`` (partition -> offset; default every partition from
    its beginning) to the end offsets when the read began."""
    with TopicReader(bootstrap, backend=backend, config=config) as reader:
        parts = reader.partitions(topic) if starts is None else sorted(starts)
        ends = reader.end_offsets(topic, parts)
        reader.assign(topic, {p: None if starts is None else starts[p] for p in parts})
        return reader.read_to(ends)
