"""Writing to Kafka: ``Producer`` (both clients behind one interface, resending through outages),
``EventProducer`` (EventBatches keyed by graph partition) and ``produce_dataset`` (a dataset into a topic).

>>> with EventProducer("localhost:9092", "edges", fmt="binary") as out:  # doctest: +SKIP
...     out.send(batch)
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...codec import (
    CONTENT_BINARY,
    CONTENT_JSON,
    MAGIC,
    decode_binary,
    encode_binary,
    encode_json_lines,
)
from ...errors import ConfigError, ConnectorError
from ...events import EventBatch, concat
from ...partition import hash_partition
from ...progress import IntervalLog, IntervalRate
from ...sources import IterableSource, ReplaySource
from ..files import JsonLinesSource
from .admin import create_topic, missing_topic
from .reach import DEFAULT_CONNECT_TIMEOUT_S, preflight, starting
from .retry import Backoff, is_fatal, too_large
from .settings import admin_settings, check_backend, check_security, settings_error

log = logging.getLogger(__name__)
RDKAFKA_LOG = logging.getLogger(
    "streamgnn.connectors.kafka.librdkafka"
)  # librdkafka's lines, into Python logging
CONTENT_TYPE_HEADER = "content-type"
TRUNCATED_HEADER = "payload-truncated"  # on a dead letter cut short to fit its topic: the original size
_DLQ_KEEP = 64 * 1024  # bytes of an oversized dead letter kept; if even that does not fit, none


class Producer:
    """Raw messages to any topic, through either client: the one producer the connectors share.

    A send that fails for a reason an outage explains is resent with backoff, so an outage costs time,
    never messages; one no resend can fix (a refused record, no authorization, a message over the size
    limit) raises ``ConnectorError`` at once. With ``shrink_oversize`` (dead-letter topics), a message too
    large for its topic goes out cut short, with a ``payload-truncated`` header giving its original size.
    ``config`` holds the client's own settings, in its own spelling; a mistyped security setting is a
    ``ConfigError``, and no broker answering within ``connect_timeout_s`` a ``ConnectorError`` naming the
    addresses tried.

    >>> with Producer("kafka-python", "localhost:9092", {"linger_ms": 5}) as p:  # doctest: +SKIP
    ...     p.send("edges", b'{"src":1,"dst":2,"t":0.0,"eid":0}', key=b"0")
    """

    def __init__(
        self,
        backend: str,
        bootstrap_servers: str,
        config: Mapping,
        *,
        shrink_oversize: bool = False,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        check_backend(backend)
        config = dict(config)
        preflight(backend, bootstrap_servers, config, connect_timeout_s)
        self.backend = backend
        self._bootstrap, self._config = bootstrap_servers, config
        self._connect_timeout_s = connect_timeout_s
        self._shrink_oversize = shrink_oversize
        self._failed: collections.deque = collections.deque()
        self._backoff = Backoff("Kafka produce")
        if backend == "kafka-python":
            from kafka import KafkaProducer
            from kafka.errors import KafkaConfigurationError

            try:
                with starting(backend, bootstrap_servers, config):
                    self._p = KafkaProducer(bootstrap_servers=bootstrap_servers, **config)
            except (KafkaConfigurationError, ValueError, TypeError, AssertionError):
                raise settings_error("kafka-python producer", config, KafkaProducer.DEFAULT_CONFIG) from None
        else:
            from confluent_kafka import KafkaException, Producer

            try:
                self._p = Producer({"bootstrap.servers": bootstrap_servers, "logger": RDKAFKA_LOG, **config})
            except (KafkaException, ValueError, TypeError):
                raise settings_error("confluent-kafka producer", config) from None

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic``, empty when it does not exist. Asks for all topics' metadata: asking for
        one topic by name lets brokers that auto-create topics (Tansu does) create it, and kafka-python's
        producer would block for ``max_block_ms`` waiting for it."""
        if self.backend == "confluent":
            with starting(self.backend, self._bootstrap, self._config):
                meta = self._p.list_topics(timeout=self._connect_timeout_s).topics.get(topic)
            return [] if meta is None or meta.error is not None else sorted(meta.partitions)
        from kafka import KafkaConsumer

        settings = {k: v for k, v in self._config.items() if k in KafkaConsumer.DEFAULT_CONFIG}
        with starting(self.backend, self._bootstrap, self._config):
            probe = KafkaConsumer(
                bootstrap_servers=self._bootstrap, **{**settings, "enable_auto_commit": False}
            )
        try:
            return sorted(probe.partitions_for_topic(topic) or ())
        finally:
            probe.close()

    def send(self, topic: str, value: bytes, *, key: bytes | None = None, partition: int | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> None:  # fmt: skip
        self._deliver((topic, value, key, partition, headers))

    def _deliver(self, args: tuple) -> None:
        """Send, retrying what an outage explains and refusing what no retry can fix."""
        while True:
            try:
                self._send(args)
                return
            except Exception as exc:  # noqa: BLE001 - client errors differ per backend; classified here
                if isinstance(exc, ConnectorError | TypeError | ValueError):
                    raise
                if self._futile(exc):
                    args = self._shrunk(args, exc)
                else:
                    time.sleep(self._backoff.failed(exc, "send"))

    def _futile(self, exc: BaseException) -> bool:
        """Errors resending cannot fix: a message over a size limit, a refused record, no authorization.
        kafka-python marks them; librdkafka reports an outage (timed-out messages) as not retriable too, so
        confluent errors are named."""
        if is_fatal(exc):
            return True
        if self.backend == "kafka-python":
            from kafka.errors import KafkaError

            return isinstance(exc, KafkaError) and not exc.retriable
        from confluent_kafka import KafkaError, KafkaException

        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        futile = (KafkaError.INVALID_RECORD, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                  KafkaError.CLUSTER_AUTHORIZATION_FAILED)  # fmt: skip
        return isinstance(err, KafkaError) and (err.fatal() or err.code() in futile or too_large(exc))

    def _shrunk(self, args: tuple, exc: BaseException) -> tuple:
        """A dead letter too large for its topic goes out cut short (so the source is not wedged), with a
        ``payload-truncated`` header giving the original size; any other futile error raises."""
        topic, value, key, partition, headers = args
        if not (self._shrink_oversize and too_large(exc) and value):
            hint = (
                "; send smaller messages (a lower batch_size) or raise the client's max_request_size / "
                "message.max.bytes and the topic's max.message.bytes"
                if too_large(exc)
                else ""
            )
            raise ConnectorError(
                f"Kafka refused a message for topic {topic!r} and resending cannot help "
                f"({type(exc).__name__}: {exc}){hint}"
            )
        original = dict(headers or ()).get(TRUNCATED_HEADER) or str(len(value)).encode()
        headers = [h for h in headers or () if h[0] != TRUNCATED_HEADER] + [(TRUNCATED_HEADER, original)]
        log.warning(
            "a dead letter of %s bytes is too large for %r; sending it cut short", original.decode(), topic
        )
        return topic, value[: _DLQ_KEEP if len(value) > _DLQ_KEEP else 0], key, partition, headers

    def _send(self, args: tuple) -> None:
        topic, value, key, partition, headers = args
        if self.backend == "kafka-python":
            future = self._p.send(topic, value=value, key=key, partition=partition, headers=headers)
            future.add_errback(lambda exc: self._failed.append((args, exc)))
            return
        from confluent_kafka import KafkaException

        def delivered(err, _msg) -> None:
            if err is not None:
                self._failed.append((args, KafkaException(err)))

        extra = {} if partition is None else {"partition": partition}
        while True:
            try:
                self._p.produce(topic, value=value, key=key, headers=headers, on_delivery=delivered, **extra)
                break
            except BufferError:  # local queue full: serve deliveries to make room
                self._p.poll(0.05)
        self._p.poll(0)

    def flush(self, timeout_s: float = 120.0) -> None:
        """Block until every message sent so far is acknowledged, resending failures with backoff."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if self.backend == "kafka-python":
                try:
                    self._p.flush(timeout=max(0.1, left))
                    pending = 0
                except Exception:  # noqa: BLE001 - timed out with messages still in flight
                    pending = 1
            else:
                pending = self._p.flush(max(0.1, left))
            if self._failed:
                args, exc = self._failed.popleft()
                if not self._futile(exc):
                    time.sleep(self._backoff.failed(exc, "delivery"))
                self._resend(args, exc)
                while self._failed:
                    self._resend(*self._failed.popleft())
            elif not pending:
                self._backoff.ok()
                return
            if time.monotonic() > deadline:
                raise ConnectorError(
                    f"messages still unacknowledged after {timeout_s:g}s; check that the broker is reachable"
                )

    def _resend(self, args: tuple, exc: BaseException) -> None:
        self._deliver(self._shrunk(args, exc) if self._futile(exc) else args)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self.backend == "kafka-python":
                self._p.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


FORMATS = ("json", "binary")


class EventProducer:
    """Writes EventBatches to a topic so that one graph partition's events share one topic partition.

    Each event goes to topic partition ``hash_partition(src, P)`` (the map the store and the consumers
    use; P is the topic's partition count), keyed by that number. ``fmt="json"`` sends one event per
    message; ``"binary"`` one message per topic partition per ``batch_size`` events. Producer settings
    pass through unchanged (kafka-python or confluent spelling, per ``backend``); ``connect_timeout_s``
    bounds the wait for a broker (see ``Producer``).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        fmt: str = "json",
        batch_size: int = 1000,
        backend: str = "kafka-python",
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        **producer_config,
    ) -> None:
        if fmt not in FORMATS:
            raise ConfigError(f"unknown message format {fmt!r}; use one of {FORMATS}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.topic, self.fmt, self.batch_size = topic, fmt, batch_size
        self._p = Producer(backend, bootstrap_servers, producer_config, connect_timeout_s=connect_timeout_s)
        try:
            self.num_partitions = len(self._p.partitions_for(topic))
            if not self.num_partitions:
                raise missing_topic(bootstrap_servers, topic)
        except BaseException:
            self._p.close()
            raise
        self._ctype = [(CONTENT_TYPE_HEADER, (CONTENT_JSON if fmt == "json" else CONTENT_BINARY).encode())]
        self.messages = 0

    def send(self, batch: EventBatch) -> int:
        """Queue ``batch`` (order kept within each partition); returns the number of messages.

        Everything is encoded before anything is sent, so a batch that cannot be encoded sends nothing."""
        if not len(batch):
            return 0
        parts = hash_partition(batch.src, self.num_partitions)
        messages = []
        for p in np.unique(parts).tolist():
            sub = batch.take(parts == p)
            if self.fmt == "json":
                values = encode_json_lines(sub).split(b"\n")[:-1]
            else:
                values = [encode_binary(piece) for piece in sub.split(self.batch_size)]
            messages += [(p, value) for value in values]
        for p, value in messages:
            self._p.send(self.topic, value, key=str(p).encode(), partition=p, headers=self._ctype)
        self.messages += len(messages)
        return len(messages)

    def flush(self, timeout_s: float = 120.0) -> None:
        """Block until everything sent is acknowledged (resending through outages)."""
        self._p.flush(timeout_s)

    def close(self) -> None:
        self._p.close()

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class ProduceReport:
    topic: str
    partitions: int
    events: int
    messages: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")


def events_source(name_or_path: str | Path) -> ReplaySource:
    """The batches of a shared dataset by name, or of a file of JSON lines (``.jsonl``/``.json``, whose
    unparseable lines become the source's ``dead_letters``, each naming its line) or one binary batch."""
    path = Path(name_or_path)
    if not path.is_file():
        if path.is_dir():
            raise ConfigError(
                f"{path} is a folder; give an events file (.jsonl/.json or binary) or a dataset"
            )
        if path.suffix or len(path.parts) > 1:  # meant as a file, not a dataset name
            raise ConfigError(f"no events file at {path}; give an existing .jsonl/.json or binary batch file")
        from ...datasets import load

        return IterableSource([load(str(name_or_path))])
    with path.open("rb") as f:
        binary = f.read(len(MAGIC)) == MAGIC
    return IterableSource([decode_binary(path.read_bytes(), str(path))]) if binary else JsonLinesSource(path)


def _load_events(source: str | Path | EventBatch) -> EventBatch:
    """Events already read, or a dataset or file as ``events_source`` reads it; a file with unparseable
    lines is refused here (the CLI reads it itself and dead-letters them)."""
    if isinstance(source, EventBatch):
        return source
    batches = events_source(source)
    events = concat(list(batches))
    letters = batches.dead_letters
    if letters:
        first = letters[0]
        raise ConfigError(
            f"{len(letters)} bad events in {source}, first at {first.where}: {first.reason}; fix the file"
        )
    return events


def produce_dataset(
    bootstrap: str,
    topic: str,
    name_or_path: str | Path | EventBatch,
    partitions: int | None,
    rate: float | None = None,
    fmt: str = "json",
    batch_size: int = 1000,
    backend: str = "kafka-python",
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    log_every_s: float = 0.0,
    **producer_config,
) -> ProduceReport:
    """Create ``topic`` with ``partitions`` partitions (None: keep an existing topic's count, 1 for a new
    one) and write a dataset (or event file, or events already read) into it, in time order, keyed by graph
    partition; ``rate`` caps events per second (None: as fast as possible). No broker answering within
    ``connect_timeout_s`` is a ``ConnectorError`` naming the addresses tried. With
    ``log_every_s`` > 0, one status line per interval (events sent, events/s, messages)."""
    if rate is not None and rate <= 0:
        raise ConfigError(f"rate must be > 0 events/s (or None for unthrottled), got {rate}")
    check_security(backend, producer_config)  # before it is translated for the admin client
    events = _load_events(name_or_path).sorted_by_time()
    admin = admin_settings(backend, producer_config)
    partitions = create_topic(bootstrap, topic, partitions, connect_timeout_s=connect_timeout_s, **admin)
    start = time.perf_counter()
    with EventProducer(
        bootstrap, topic, fmt=fmt, batch_size=batch_size, backend=backend,
        connect_timeout_s=connect_timeout_s, **producer_config,
    ) as out:  # fmt: skip
        window = batch_size * partitions  # about batch_size events per partition per window
        done, speed = 0, IntervalRate()
        log = IntervalLog(
            f"produce {topic}",
            lambda: (
                f"{done:,} of {len(events):,} events sent ({speed(done):,.0f} events/s), "
                f"{out.messages:,} messages"
            ),
            log_every_s,
        )
        try:
            for piece in events.split(window):
                out.send(piece)
                done += len(piece)
                if rate is not None:
                    ahead = done / rate - (time.perf_counter() - start)
                    if ahead > 0:
                        time.sleep(ahead)
            out.flush()
        finally:
            log.stop()
        messages = out.messages
    return ProduceReport(topic, partitions, len(events), messages, time.perf_counter() - start)
