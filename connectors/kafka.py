"""Kafka in and out: ``KafkaSource`` turns topics into EventBatches, ``EventProducer`` writes them keyed
by graph partition, ``produce_dataset`` loads a dataset into a topic.

Delivery is effectively-once. The source tracks, per partition, the offset after the last message it
handed out (``positions()``); saving those offsets inside the store checkpoint and seeking to them on
restart replays exactly what the checkpoint lacks, and the store skips replayed event ids. Offsets are
also committed to Kafka, for lag monitoring and for the next owner after a rebalance, but the checkpoint
wins wherever it names a partition.

Two clients are supported with the same behaviour: ``backend="kafka-python"`` (default, pure Python) and
``backend="confluent"`` (librdkafka, where ``confluent-kafka`` is installed). Client settings, TLS and SASL
included, pass through unchanged in each client's own spelling (``security_protocol`` for kafka-python,
``security.protocol`` for confluent). Settings are never logged, and dead letters carry only the reason
and the message's topic, partition and offset, so credentials cannot leak through either.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..codec import (
    CONTENT_BINARY,
    CONTENT_JSON,
    MAGIC,
    decode,
    decode_binary,
    decode_json_lines,
    encode_binary,
    encode_json_lines,
)
from ..errors import ConfigError, ConnectorError
from ..events import DeadLetter, EventBatch
from ..partition import hash_partition

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")  # librdkafka's own lines, into Python logging

BACKENDS = ("kafka-python", "confluent")
CONTENT_TYPE_HEADER = "content-type"
TRUNCATED_HEADER = "payload-truncated"  # on a dead letter cut short to fit its topic: the original size
_DLQ_KEEP = 64 * 1024  # bytes of an oversized dead letter kept; if even that does not fit, none
_BOM = b"\xef\xbb\xbf"
_UNFIXED = -1  # a feature width not known yet (None means: no features)
_MAX_REASON = 2000


def partition_key(topic: str, partition: int) -> str:
    """The ``"topic:partition"`` key used in ``positions()`` and checkpoint manifests."""
    return f"{topic}:{partition}"


def _split_key(key: str) -> tuple[str, int]:
    topic, sep, part = key.rpartition(":")
    if not sep or not part.isdigit():
        raise ConfigError(f"offset key {key!r} is not 'topic:partition' (e.g. 'edges:0')")
    return topic, int(part)


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown Kafka backend {backend!r}; use one of {BACKENDS}")
    if backend not in available_backends():
        raise ConfigError(
            "backend='confluent' needs confluent-kafka: `pip install 'streamgnn[confluent]'`, "
            "or use backend='kafka-python'"
        )


def available_backends() -> list[str]:
    """The installed clients, kafka-python first."""
    return [b for b in BACKENDS if b == "kafka-python" or importlib.util.find_spec("confluent_kafka")]


class _Backoff:
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


# ---------------------------------------------------------------------------------------------- admin


def create_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int = 1,
    *,
    compacted: bool = False,
    timeout_s: float = 30.0,
    **admin_config,
) -> None:
    """Create ``topic`` with ``partitions`` partitions (kafka-python admin settings pass through).

    An existing topic with the same partition count is fine; a different count raises ``ConfigError``,
    since keying by graph partition depends on it. ``compacted`` keeps only the latest value per key.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    if partitions < 1:
        raise ConfigError(f"a topic needs at least 1 partition, got {partitions}")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **admin_config)
    try:
        configs = {"cleanup.policy": "compact"} if compacted else {}
        with contextlib.suppress(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
        deadline = time.monotonic() + timeout_s
        while True:
            found = admin.describe_topics([topic])[0]
            have = len(found.get("partitions") or ())
            if found.get("error_code", 0) == 0 and have:
                break
            if time.monotonic() > deadline:
                raise ConnectorError(
                    f"topic {topic!r} did not appear within {timeout_s:g}s; is the broker healthy?"
                )
            time.sleep(0.1)
        if have != partitions:
            raise ConfigError(
                f"topic {topic!r} exists with {have} partitions, not {partitions}; use another topic name "
                "or the existing partition count"
            )
    finally:
        admin.close()


# ---------------------------------------------------------------------------------------------- clients


def _settings_error(client: str, config: Mapping, known: Mapping | None = None) -> ConfigError:
    """A client rejected its settings. Its own message can quote values, passwords included, so name
    only keys: the unknown ones where the client's setting names are known, else all of them."""
    unknown = sorted(k for k in config if known is not None and k not in known)
    if unknown:
        return ConfigError(f"unknown {client} settings {unknown}; check their spelling")
    return ConfigError(
        f"invalid {client} settings among {sorted(config)}; check their values (not shown: may be secret)"
    )


def _producer_settings(backend: str, consumer_config: Mapping) -> dict:
    """The connection and security settings of a consumer config that a producer of the same client takes."""
    if backend == "kafka-python":
        from kafka import KafkaProducer

        return {k: v for k, v in consumer_config.items() if k in KafkaProducer.DEFAULT_CONFIG}
    shared = ("security.", "ssl.", "sasl.", "client.", "socket.", "broker.", "reconnect.", "api.version")
    return {k: v for k, v in consumer_config.items() if k.startswith(shared)}


# librdkafka's connection and security settings in kafka-python's spelling, for create_topic's admin client
_ADMIN_SPELLING = {
    "security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password", "client.id": "client_id",
}  # fmt: skip


def _admin_settings(backend: str, producer_config: Mapping) -> dict:
    """The settings of a producer config that ``create_topic``'s (kafka-python) admin client takes, so it
    reaches a secured cluster the way the producer does."""
    from kafka import KafkaAdminClient

    if backend == "kafka-python":
        return {k: v for k, v in producer_config.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
    out = {_ADMIN_SPELLING[k]: v for k, v in producer_config.items() if k in _ADMIN_SPELLING}
    if "security_protocol" in out:
        out["security_protocol"] = str(out["security_protocol"]).upper()  # librdkafka takes any case
    return out


class _Producer:
    """Both clients' producers behind one interface; a failed send is resent, so an outage loses nothing."""

    def __init__(
        self, backend: str, bootstrap_servers: str, config: Mapping, *, shrink_oversize: bool = False
    ) -> None:
        _check_backend(backend)
        self.backend = backend
        self._bootstrap, self._config = bootstrap_servers, dict(config)
        self._shrink_oversize = shrink_oversize
        self._failed: collections.deque = collections.deque()
        self._backoff = _Backoff("Kafka produce")
        if backend == "kafka-python":
            from kafka import KafkaProducer
            from kafka.errors import KafkaConfigurationError

            try:
                self._p = KafkaProducer(bootstrap_servers=bootstrap_servers, **config)
            except (KafkaConfigurationError, ValueError, TypeError, AssertionError):
                raise _settings_error("kafka-python producer", config, KafkaProducer.DEFAULT_CONFIG) from None
        else:
            from confluent_kafka import KafkaException, Producer

            try:
                self._p = Producer({"bootstrap.servers": bootstrap_servers, "logger": _RDKAFKA_LOG, **config})
            except (KafkaException, ValueError, TypeError):
                raise _settings_error("confluent-kafka producer", config) from None

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic``, empty when it does not exist. Asks for all topics' metadata: asking for
        one topic by name lets brokers that auto-create topics (Tansu does) create it, and kafka-python's
        producer would block for ``max_block_ms`` waiting for it."""
        if self.backend == "confluent":
            meta = self._p.list_topics(timeout=10).topics.get(topic)
            return [] if meta is None or meta.error is not None else sorted(meta.partitions)
        from kafka import KafkaConsumer

        settings = {k: v for k, v in self._config.items() if k in KafkaConsumer.DEFAULT_CONFIG}
        probe = KafkaConsumer(bootstrap_servers=self._bootstrap, **{**settings, "enable_auto_commit": False})
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
        if _is_fatal(exc):
            return True
        if self.backend == "kafka-python":
            from kafka.errors import KafkaError

            return isinstance(exc, KafkaError) and not exc.retriable
        from confluent_kafka import KafkaError, KafkaException

        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        futile = (KafkaError.INVALID_RECORD, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                  KafkaError.CLUSTER_AUTHORIZATION_FAILED)  # fmt: skip
        return isinstance(err, KafkaError) and (err.fatal() or err.code() in futile or _too_large(exc))

    def _shrunk(self, args: tuple, exc: BaseException) -> tuple:
        """A dead letter too large for its topic goes out cut short (so the source is not wedged), with a
        ``payload-truncated`` header giving the original size; any other futile error raises."""
        topic, value, key, partition, headers = args
        if not (self._shrink_oversize and _too_large(exc) and value):
            hint = (
                "; send smaller messages (a lower batch_size) or raise the client's max_request_size / "
                "message.max.bytes and the topic's max.message.bytes"
                if _too_large(exc)
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


_CONFLUENT_TOO_LARGE = ("MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE")


def _too_large(exc: BaseException) -> bool:
    """A message over the client's or the broker's size limit, as either client reports it."""
    from kafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

    if isinstance(exc, MessageSizeTooLargeError | RecordListTooLargeError):
        return True
    err = exc.args[0] if exc.args else None  # confluent: KafkaException(KafkaError)
    return callable(getattr(err, "name", None)) and err.name() in _CONFLUENT_TOO_LARGE


@dataclass
class _Fetched:
    """One partition's messages from one poll, in offset order."""

    topic: str
    partition: int
    offsets: list[int]
    values: list[bytes | None]
    ctypes: list[str | None]


_TP = tuple[str, int]
_OnAssign = Callable[[list[_TP]], dict[_TP, int]]  # records ownership, returns offsets to seek to
_OnRevoke = Callable[[list[_TP]], dict[_TP, int]]  # drops buffered data, returns delivered offsets to commit
_OnCommit = Callable[[dict[_TP, int]], None]  # hears which offsets Kafka acknowledged
_OnFailure = Callable[[BaseException, str], None]  # hears of errors the client reports on its own thread


def _content_type(headers) -> str | None:
    for k, v in headers or ():
        if k == CONTENT_TYPE_HEADER or k.lower() == CONTENT_TYPE_HEADER:
            return None if v is None else bytes(v).decode("latin-1")
    return None


class _KafkaPythonConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str | None,
        config: dict,
        committed: _OnCommit,
        failed: _OnFailure,
    ) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaConfigurationError

        try:
            self.c = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=group_id, **config)
        except (KafkaConfigurationError, ValueError, TypeError, AssertionError):
            raise _settings_error("kafka-python consumer", config, KafkaConsumer.DEFAULT_CONFIG) from None
        self.committed, self.failed = committed, failed

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(self.c.partitions_for_topic(topic) or ())

    def subscribe(self, topics: list[str], assigned: _OnAssign, revoked: _OnRevoke) -> None:
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

    def assign(self, parts: list[tuple[str, int]], offsets: dict[tuple[str, int], int]) -> None:
        from kafka import TopicPartition

        self.c.assign([TopicPartition(t, p) for t, p in parts])
        for (t, p), offset in offsets.items():
            self.c.seek(TopicPartition(t, p), offset)

    def poll(self, timeout_s: float, max_messages: int) -> list[_Fetched]:
        self._unstick_resumed()
        out = []
        for tp, records in self.c.poll(timeout_ms=int(timeout_s * 1000), max_records=max_messages).items():
            if records:
                out.append(
                    _Fetched(
                        tp.topic, tp.partition, [r.offset for r in records], [r.value for r in records],
                        [_content_type(r.headers) for r in records],
                    )
                )  # fmt: skip
        return out

    def _unstick_resumed(self) -> None:
        """Work around kafka-python 3.0.x (KAFKA-7548 port): records parked while their partition was paused
        are restored only when the in-line record set is None, but a drained one is left in place, so a
        resumed partition is never fetched again. Clear the drained set so the parked records come back."""
        fetcher = getattr(self.c, "_fetcher", None)
        current = getattr(fetcher, "_next_partition_records", None)
        if current is not None and not current and getattr(fetcher, "_paused_partition_records", None):
            fetcher._next_partition_records = None

    def caught_up(self, parts: list[_TP]) -> set[_TP]:
        """Partitions fetched up to the high watermark of their last fetch response."""
        from kafka import TopicPartition
        from kafka.errors import IllegalStateError

        out = set()
        for t, p in parts:
            tp = TopicPartition(t, p)
            high = self.c.highwater(tp)
            with contextlib.suppress(IllegalStateError):
                position = None if high is None else self.c.position(tp, timeout_ms=0)
                if position is not None and position >= high:
                    out.add((t, p))
        return out

    def set_paused(self, parts: list[_TP], paused: bool) -> None:
        from kafka import TopicPartition

        tps = [TopicPartition(t, p) for t, p in parts]
        if paused:
            self.c.pause(*tps)
        else:
            self.c.resume(*tps)

    def commit(self, offsets: dict[_TP, int], wait: bool) -> None:
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


def _kp_offsets(offsets: dict[tuple[str, int], int]) -> dict:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    return {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}


class _ConfluentConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str | None,
        config: dict,
        committed: _OnCommit,
        failed: _OnFailure,
    ) -> None:
        from confluent_kafka import Consumer, KafkaException

        # librdkafka insists on a group id; a private one, never committed to, stands in for "no group".
        conf = {
            "group.id": group_id or f"streamgnn-anon-{uuid.uuid4().hex}",
            "logger": _RDKAFKA_LOG,
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
            raise _settings_error("confluent-kafka consumer", config) from None
        self.failed = failed

    def partitions_for(self, topic: str) -> list[int]:
        meta = self.c.list_topics(timeout=10).topics.get(topic)
        return [] if meta is None or meta.error is not None else sorted(meta.partitions)

    def subscribe(self, topics: list[str], assigned: _OnAssign, revoked: _OnRevoke) -> None:
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

    def assign(self, parts: list[tuple[str, int]], offsets: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import OFFSET_INVALID, TopicPartition

        self.c.assign([TopicPartition(t, p, offsets.get((t, p), OFFSET_INVALID)) for t, p in parts])

    def poll(self, timeout_s: float, max_messages: int) -> list[_Fetched]:
        from confluent_kafka import KafkaException

        by_part: dict[tuple[str, int], _Fetched] = {}
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
                f = by_part[key] = _Fetched(key[0], key[1], [], [], [])
            f.offsets.append(m.offset())
            f.values.append(m.value())
            f.ctypes.append(_content_type(m.headers()))
        return list(by_part.values())

    def caught_up(self, parts: list[_TP]) -> set[_TP]:
        """Partitions fetched up to the high watermark of their last fetch response."""
        from confluent_kafka import KafkaException, TopicPartition

        out = set()
        with contextlib.suppress(KafkaException):
            for tp in self.c.position([TopicPartition(t, p) for t, p in parts]):
                low, high = self.c.get_watermark_offsets(tp, cached=True)
                if high >= 0 and (tp.offset >= high or (tp.offset < 0 and low == high)):
                    out.add((tp.topic, tp.partition))
        return out

    def set_paused(self, parts: list[_TP], paused: bool) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(t, p) for t, p in parts]
        if paused:
            self.c.pause(tps)
        else:
            self.c.resume(tps)

    def commit(self, offsets: dict[_TP, int], wait: bool) -> None:
        """Commit; success reaches ``committed`` through librdkafka's on_commit callback."""
        from confluent_kafka import TopicPartition

        self.c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=not wait
        )

    def close(self) -> None:
        self.c.close()


def _is_fatal(exc: BaseException) -> bool:
    """Errors that retrying will not fix: bad settings, failed authentication or authorization."""
    if isinstance(exc, ConnectorError | ConfigError):
        return True
    name = type(exc).__name__
    if any(word in name for word in ("Authorization", "Authentication", "Configuration")):
        return True
    text = str(exc)
    return any(word in text for word in ("AUTHORIZATION", "AUTHENTICATION", "_SSL"))


# ---------------------------------------------------------------------------------------------- source


@dataclass
class SourceStats:
    """Counters for monitoring and tests."""

    messages: int = 0  # messages decoded
    events: int = 0  # events handed to the caller
    dead_letters: int = 0  # dead letters produced (or logged, without a dead-letter topic)
    pauses: int = 0  # times backpressure paused fetching
    max_buffered_events: int = 0  # high-water mark of the decoded-but-undelivered buffer
    assignments: int = 0  # partition assignments received (1 without rebalances)
    retries: int = 0  # transient broker errors retried


@dataclass
class _Chunk:
    """One partition's decoded events from one poll, and the offset to resume from after them."""

    key: str
    batch: EventBatch
    origin: np.ndarray  # source offset of each row
    next_offset: int
    running_t: np.ndarray = field(init=False)  # running max of t: rows before a time form a prefix

    def __post_init__(self) -> None:
        self.running_t = np.maximum.accumulate(self.batch.t) if len(self.batch) else self.batch.t

    @property
    def weight(self) -> int:  # an all-dead-letter chunk still takes a slot, so the bound holds
        return max(1, len(self.batch))


@dataclass
class _Origin:
    """Where each row of the last delivered batch came from."""

    keys: list[str] = field(default_factory=list)
    part: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _concat(batches: list[EventBatch]) -> EventBatch:
    """Batches of one stream as one; rows without a weight get 1.0 when others carry one (the codec's rule
    within a payload, and what the store assumes for unweighted edges)."""
    batches = [b for b in batches if len(b)]
    if len(batches) <= 1:
        return batches[0] if batches else EventBatch.empty()
    weight = None
    if any(b.weight is not None for b in batches):
        weight = np.concatenate(
            [np.ones(len(b), np.float32) if b.weight is None else b.weight for b in batches]
        )

    def col(name: str) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in batches])

    features = None if batches[0].features is None else col("features")
    return EventBatch(col("kind"), col("src"), col("dst"), col("t"), col("eid"), weight, features)


class KafkaSource:
    """EventBatches from Kafka topics, decoded, validated, merged in time order, delivered effectively-once.

    Modes: ``topics`` + ``group_id`` joins a consumer group that spreads partitions over its members;
    ``partitions=["edges:0", ...]`` reads exactly those; ``topics`` without a group reads every partition.
    Messages are JSON lines or binary batches (``content-type`` header; JSON when absent, binary when the
    payload starts with the binary magic). A message that cannot be decoded, or an event that fails
    validation or does not fit the stream (id type, feature width: fixed by ``store`` where it has events,
    else by the first events decoded), goes to ``dead_letter_topic`` with headers ``reason``,
    ``source-topic``, ``source-partition``, ``source-offset``; the stream goes on. A dead letter too large
    for that topic goes out cut short, with a ``payload-truncated`` header giving its original size.

    Partitions are merged into one stream ordered by (time, partition, offset): a row is handed out once
    no partition can still deliver an earlier one (each partition is in time order; one read up to its
    high watermark, or silent for ``idle_partition_s``, holds nothing back). The order is then the same
    whatever the fetches looked like, so replaying a topic, with or without a restart in between, builds
    the same store. A restart resumes at the first message not wholly handed out; rows of it that were
    handed out come again and the store skips their event ids.

    A background thread polls and decodes into a buffer of about ``max_buffered_events`` events (plus a
    poll of up to ``max_poll_messages`` messages per partition); when the caller lags, partitions are
    paused instead of memory growing, while polling goes on so the group membership survives slow
    processing. Fetching resumes once half the buffer is drained.

    ``start_offsets`` (or ``store=``, whose ``source_offsets`` came from a checkpoint) names where to
    resume each partition; the rest start from the group's committed offset or ``auto_offset_reset``
    (``earliest`` unless given). Other keyword arguments go to the client unchanged.
    """

    def __init__(
        self,
        topics: str | Sequence[str] = (),
        *,
        bootstrap_servers: str,
        group_id: str | None = None,
        partitions: Sequence[str] | None = None,
        backend: str = "kafka-python",
        dead_letter_topic: str | None = None,
        start_offsets: Mapping[str, int] | None = None,
        store=None,
        max_buffered_events: int = 500_000,
        max_batch_events: int = 200_000,
        commit_interval_s: float = 1.0,
        idle_partition_s: float = 1.0,
        max_poll_messages: int = 2000,
        poll_timeout_s: float = 0.1,
        producer_config: Mapping | None = None,
        **consumer_config,
    ) -> None:
        _check_backend(backend)
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics and not partitions:
            raise ConfigError("name what to read: topics=['edges'] or partitions=['edges:0', 'edges:1']")
        if min(max_buffered_events, max_batch_events, max_poll_messages) < 1:
            raise ConfigError("max_buffered_events, max_batch_events and max_poll_messages must be >= 1")
        self.backend = backend
        self.group_id = group_id
        self.dead_letter_topic = dead_letter_topic
        self.max_buffered_events = max_buffered_events
        self.max_batch_events = max_batch_events
        self.commit_interval_s = commit_interval_s
        self.idle_partition_s = idle_partition_s
        self.max_poll_messages = max_poll_messages
        self.poll_timeout_s = poll_timeout_s
        self._explicit = [_split_key(k) for k in partitions] if partitions else None
        offsets = dict(store.source_offsets) if store is not None and start_offsets is None else {}
        offsets.update(start_offsets or {})
        for key, off in offsets.items():
            _split_key(key)
            if int(off) < 0:
                raise ConfigError(f"start offset for {key} is {off}; offsets are >= 0")
        self._positions: dict[str, int] = {k: int(v) for k, v in offsets.items()}
        self._committed: dict[str, int] = {}
        self._health = _Backoff(f"Kafka consumer ({backend})")
        self.stats = SourceStats()
        self._lock = threading.Lock()  # the buffer, positions and ownership: shared with the client threads
        self._ready = threading.Condition(self._lock)

        config = dict(consumer_config)
        if backend == "kafka-python":
            if config.get("enable_auto_commit"):
                raise ConfigError(
                    "enable_auto_commit must stay False: KafkaSource commits what it has delivered"
                )
            config["enable_auto_commit"] = False
            config.setdefault("auto_offset_reset", "earliest")
            self._consumer = _KafkaPythonConsumer(
                bootstrap_servers, group_id, config, self._acknowledged, self._failed
            )
        else:
            if str(config.get("enable.auto.commit", "false")).lower() == "true":
                raise ConfigError(
                    "enable.auto.commit must stay false: KafkaSource commits what it has delivered"
                )
            config["enable.auto.commit"] = False
            config.setdefault("auto.offset.reset", "earliest")
            self._consumer = _ConfluentConsumer(
                bootstrap_servers, group_id, config, self._acknowledged, self._failed
            )
        self._dlq: _Producer | None = None
        if dead_letter_topic:
            settings = (
                _producer_settings(backend, consumer_config) if producer_config is None else producer_config
            )
            try:
                self._dlq = _Producer(backend, bootstrap_servers, settings, shrink_oversize=True)
            except BaseException:
                self._consumer.close()  # its client threads and sockets would outlive this failed source
                raise
        self._dlq_dirty = False

        self._queues: dict[str, collections.deque[_Chunk]] = {}  # per partition, in offset order
        self._buffered = 0
        self._owned: set[str] = set()
        self._seen_t: dict[str, float] = {}  # per partition: the latest event time decoded so far
        self._last_data: dict[str, float] = {}  # per partition: when data last arrived (or it was assigned)
        self._caught_up: set[str] = set()  # partitions read up to their high watermark
        self._paused: set[str] = set()
        self._reassigned = False
        self._handed: dict[str, tuple[int, int]] = {}  # per partition: (offset, rows) of a message half out
        # the stream's id type and feature width: a store that has seen events fixes them, or the first events
        # decoded do, so they do not depend on where this process resumes
        kind = None if store is None else store.ids.kind
        self._string_ids: bool | None = None if kind is None else kind == "str"
        width = None if store is None else store.edge_feature_dim
        width = store.node_feature_dim if width is None and store is not None else width
        self._width: int | None = _UNFIXED if width is None else width
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._last_origin = _Origin()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KafkaSource:
        """Subscribe or assign and start the background poller (iteration does this on its own)."""
        if self._closed:
            raise ConnectorError("this KafkaSource is closed; create a new one")
        if self._thread is not None:
            return self
        try:
            self._subscribe_or_assign()
        except BaseException:
            self.close()
            raise
        self._thread = threading.Thread(target=self._run, name="streamgnn-kafka-source", daemon=True)
        self._thread.start()
        return self

    def _subscribe_or_assign(self) -> None:
        if self.dead_letter_topic and not self._consumer.partitions_for(self.dead_letter_topic):
            raise ConfigError(
                f"dead-letter topic {self.dead_letter_topic!r} does not exist; create it first "
                f"(streamgnn.connectors.kafka.create_topic)"
            )
        parts = self._explicit
        if parts is None:
            parts = []
            for topic in self.topics:
                found = self._consumer.partitions_for(topic)
                if not found:
                    raise ConfigError(f"topic {topic!r} does not exist; create it first (create_topic)")
                parts += [(topic, p) for p in found]
            if self.group_id is not None:
                self._consumer.subscribe(self.topics, self._assigned, self._revoked)
                return
        known = {_split_key(k): v for k, v in self._positions.items()}
        with self._lock:
            self._owned = {partition_key(*tp) for tp in parts}
            self._last_data = dict.fromkeys(self._owned, time.monotonic())
            self.stats.assignments += 1
        self._consumer.assign(parts, {tp: known[tp] for tp in parts if tp in known})

    def close(self) -> None:
        """Stop polling, commit what was delivered, flush dead letters and close the clients."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        else:
            self._consumer.close()
        if self._dlq is not None:
            self._dlq.close()

    def __enter__(self) -> KafkaSource:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ delivery
    def __iter__(self) -> Iterator[EventBatch]:
        return self.stream()

    def stream(self, idle_timeout_s: float | None = None) -> Iterator[EventBatch]:
        """Batches as they arrive; ends after ``idle_timeout_s`` without new data (never, if None). The idle
        clock only ends the stream while partitions are assigned: a group join can take seconds."""
        self.start()
        while True:
            batch = self.poll(idle_timeout_s if idle_timeout_s is not None else 1.0)
            if batch is not None:
                yield batch
            elif idle_timeout_s is not None and self.assignment():
                return

    def poll(self, timeout_s: float = 1.0) -> EventBatch | None:
        """The next batch (up to ``max_batch_events`` events), or None if nothing came within ``timeout_s``.

        Positions advance as the batch is handed out: ingest it before the next ``positions()``.
        """
        self.start()
        deadline = time.monotonic() + timeout_s
        while True:
            with self._ready:
                while True:
                    if self._error is not None:
                        raise ConnectorError(f"the Kafka source stopped: {self._error}") from self._error
                    pieces = self._release(time.monotonic())
                    if pieces is not None:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stop.is_set():
                        return None
                    # new data notifies; the wait is short because a partition going idle also frees rows
                    self._ready.wait(min(left, 0.05))
            if not pieces:
                continue  # only dead letters: positions moved on, nothing to hand out
            keys = [key for key, _, _ in pieces]
            batch = _concat([b for _, b, _ in pieces])
            part = np.repeat(np.arange(len(pieces), dtype=np.int32), [len(b) for _, b, _ in pieces])
            offsets = np.concatenate([o for _, _, o in pieces])
            t = batch.t
            if len(t) > 1 and bool((t[1:] < t[:-1]).any()):
                # pieces come in partition order, rows in offset order: a stable sort by time gives the
                # (time, partition, offset) order, the same whatever batch boundaries the fetches made
                order = np.argsort(t, kind="stable")
                batch, part, offsets = batch.take(order), part[order], offsets[order]
            self._last_origin = _Origin(keys, part, offsets)
            self.stats.events += len(batch)
            return batch

    def _frontier(self, now: float) -> float:
        """Rows earlier than this time are complete: no partition can still deliver an earlier one.

        A partition read up to its high watermark, or idle for ``idle_partition_s`` (and not paused), does
        not hold the frontier back; any other holds it at the latest time it has delivered, since its
        later rows cannot be earlier (each partition is in time order)."""
        frontier = np.inf
        for key in self._owned:
            if key in self._caught_up:
                continue
            if key not in self._paused and now - self._last_data.get(key, now) > self.idle_partition_s:
                continue
            frontier = min(frontier, self._seen_t.get(key, -np.inf))
        return frontier

    def _release(self, now: float) -> list[tuple[str, EventBatch, np.ndarray]] | None:
        """Take the rows before the frontier (caller holds the lock): ``(key, rows, offsets)`` per partition
        in key order, ``[]`` if only dead-letter chunks moved positions on, None if nothing is ready.

        With more than ``max_batch_events`` ready, the earliest by (time, partition, offset) go first,
        so the sequence of batches is the same time-ordered stream whatever the fetches looked like."""
        if not self._buffered:
            return None
        frontier = self._frontier(now)
        ready: dict[str, int] = {}
        for key, queue in self._queues.items():
            n = 0
            for chunk in queue:
                cut = int(np.searchsorted(chunk.running_t, frontier, side="left"))
                n += cut
                if cut < len(chunk.batch):
                    break
            if n or (queue and not len(queue[0].batch)):
                ready[key] = n
        if not ready:
            return None
        if sum(ready.values()) > self.max_batch_events:
            ready = self._earliest(ready)
        pieces = []
        for key in sorted(ready):
            rows, offsets = self._pop_rows(key, ready[key])
            if len(rows):
                pieces.append((key, rows, offsets))
        return pieces

    def _earliest(self, ready: dict[str, int]) -> dict[str, int]:
        """How many of each partition's ready rows are among the first ``max_batch_events`` of all of them,
        by (time, partition, offset)."""
        keys = sorted(ready)
        times = []
        for key in keys:
            parts, need = [], ready[key]
            for chunk in self._queues[key]:
                if need <= 0:
                    break
                parts.append(chunk.batch.t[:need])
                need -= len(parts[-1])
            times.append(np.concatenate(parts) if parts else np.zeros(0))
        owner = np.repeat(np.arange(len(keys)), [len(t) for t in times])
        first = owner[np.argsort(np.concatenate(times), kind="stable")[: self.max_batch_events]]
        counts = np.bincount(first, minlength=len(keys))
        return {key: int(c) for key, c in zip(keys, counts, strict=True) if c}

    def _pop_rows(self, key: str, n: int) -> tuple[EventBatch, np.ndarray]:
        """Remove the first ``n`` rows of a partition's queue (and dead-letter chunks up to them); the
        position moves to the first row not taken, or past the last chunk emptied."""
        queue = self._queues[key]
        rows, offsets = [], []
        while queue and (n or not len(queue[0].batch)):
            chunk = queue[0]
            take = min(n, len(chunk.batch))
            self._buffered -= chunk.weight
            if take == len(chunk.batch):
                queue.popleft()
                rows.append(chunk.batch)
                offsets.append(chunk.origin)
                self._positions[key] = chunk.next_offset
                self._handed.pop(key, None)
            else:
                message = int(chunk.origin[take])
                done = int(np.count_nonzero(chunk.origin[:take] == message))
                before = self._handed.get(key)
                self._handed[key] = (message, done + (before[1] if before and before[0] == message else 0))
                rows.append(chunk.batch[:take])
                offsets.append(chunk.origin[:take])
                chunk.batch, chunk.origin, chunk.running_t = (
                    chunk.batch[take:],
                    chunk.origin[take:],
                    chunk.running_t[take:],
                )
                self._buffered += chunk.weight
                # a restart or the next owner reads this message again, rows already handed out included
                # (the store skips their event ids); this source skips them itself (see _handed)
                self._positions[key] = message
            n -= take
        return _concat(rows), (np.concatenate(offsets) if offsets else np.zeros(0, np.int64))

    def positions(self) -> dict[str, int]:
        """``{"topic:partition": next offset}`` for everything handed out: save it with the store.

        Dead letters sent so far are flushed first, so a checkpoint never covers an unsent one.
        """
        if self._dlq is not None and self._dlq_dirty:
            self._dlq_dirty = False
            self._dlq.flush()
        with self._lock:
            return dict(self._positions)

    def assignment(self) -> set[str]:
        """The ``"topic:partition"`` keys this source reads now."""
        with self._lock:
            return set(self._owned)

    def report_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Send dead letters about rows of the last delivered batch (e.g. ``store.ingest(...).dead_letters``)
        to the dead-letter topic, tagged with the source partition and offset of each row."""
        origin = self._last_origin
        for letter in letters:
            if 0 <= letter.index < len(origin.offset):
                topic, part = _split_key(origin.keys[int(origin.part[letter.index])])
                self._dead_letter(letter, topic, part, int(origin.offset[letter.index]))
            else:
                self._dead_letter(letter, "", -1, -1)

    # ------------------------------------------------------------------ the poller thread
    def _run(self) -> None:
        next_commit = time.monotonic() + self.commit_interval_s
        try:
            while not self._stop.is_set():
                self._backpressure()
                if time.monotonic() >= next_commit:
                    self._commit()
                    next_commit = time.monotonic() + self.commit_interval_s
                began = time.monotonic()
                try:
                    fetched = self._consumer.poll(self.poll_timeout_s, self.max_poll_messages)
                except Exception as exc:  # noqa: BLE001 - classified below
                    if _is_fatal(exc):
                        raise
                    self.stats.retries += 1
                    self._stop.wait(self._health.failed(exc, "poll"))
                    continue
                if fetched:
                    self._health.ok()
                else:  # paused partitions make poll() return at once: do not spin against the caller's thread
                    self._stop.wait(max(0.0, self.poll_timeout_s - (time.monotonic() - began)))
                chunks = [(f.offsets[0], self._decode(f)) for f in fetched]
                with self._lock:
                    owned = [_split_key(k) for k in self._owned]
                caught_up = {partition_key(*tp) for tp in self._consumer.caught_up(owned)}
                now = time.monotonic()
                with self._ready:
                    # rebalance callbacks run inside poll(), so ownership cannot change under us here
                    self._caught_up = caught_up
                    for first, chunk in chunks:
                        if chunk.key not in self._owned:
                            continue
                        handed = self._handed.get(chunk.key)
                        if handed and len(chunk.batch) and chunk.origin[0] == handed[0]:  # read again
                            skip = min(handed[1], int(np.count_nonzero(chunk.origin == handed[0])))
                            chunk = _Chunk(
                                chunk.key, chunk.batch[skip:], chunk.origin[skip:], chunk.next_offset
                            )
                        # where this partition's stream began: a rebalance that drops the buffer seeks
                        # back here, since the client keeps its fetch position otherwise
                        self._positions.setdefault(chunk.key, first)
                        self._queues.setdefault(chunk.key, collections.deque()).append(chunk)
                        self._buffered += chunk.weight
                        self._last_data[chunk.key] = now
                        if len(chunk.batch):
                            self._seen_t[chunk.key] = max(
                                self._seen_t.get(chunk.key, -np.inf), chunk.running_t[-1]
                            )
                    self.stats.max_buffered_events = max(self.stats.max_buffered_events, self._buffered)
                    self._ready.notify_all()
            self._commit(wait=True)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            log.error("Kafka source stopped: %s: %s", type(exc).__name__, exc)
            with self._ready:
                self._error = exc
                self._ready.notify_all()
        finally:
            with contextlib.suppress(Exception):
                self._consumer.close()

    def _backpressure(self) -> None:
        """Pause the partitions holding buffered rows once the buffer is full, resume all at half.

        One exception keeps the merge alive: when no buffered row is before the frontier, the partitions
        the frontier waits for fetch on, since nothing could be released (and drained) otherwise."""
        with self._lock:
            buffered, owned = self._buffered, set(self._owned)
            frontier = self._frontier(time.monotonic())
            holding = {k for k, q in self._queues.items() if q}
            stuck = not any(
                len(q[0].batch) and q[0].running_t[0] < frontier for q in self._queues.values() if q
            )
            if stuck:
                holding -= {k for k in owned if self._seen_t.get(k, -np.inf) <= frontier}
        if buffered >= self.max_buffered_events:
            want = holding & owned
        elif buffered <= self.max_buffered_events // 2:
            want = set()
        else:
            want = self._paused & holding
        if want and not self._paused:
            self.stats.pauses += 1
            log.info("consumer lags: %d events buffered, pausing %d partitions", buffered, len(want))
        elif self._paused and not want:
            log.info("buffer drained to %d events, resuming", buffered)
        pause, resume = want - self._paused, self._paused - want
        if self._reassigned:  # a rebalance may have reset the client's pause flags: state them all again
            self._reassigned = False
            pause, resume = want, owned - want
        if pause:
            self._consumer.set_paused([_split_key(k) for k in sorted(pause)], True)
        if resume:
            self._consumer.set_paused([_split_key(k) for k in sorted(resume)], False)
            now = time.monotonic()  # a resumed partition gets a fresh idle allowance
            with self._lock:
                self._last_data.update(dict.fromkeys(resume, now))
        self._paused = want

    def _commit(self, wait: bool = False) -> None:
        """Commit delivered positions of owned partitions that Kafka does not have yet. For monitoring and
        for the next owner after a rebalance; the checkpoint stays the source of truth."""
        if self.group_id is None:
            return
        with self._lock:
            todo = {
                _split_key(k): v
                for k, v in self._positions.items()
                if k in self._owned and self._committed.get(k) != v
            }
        if not todo:
            return
        try:
            self._consumer.commit(todo, wait)
        except Exception as exc:  # noqa: BLE001 - retried at the next interval
            if _is_fatal(exc):
                raise
            self._failed(exc, "offset commit")

    def _failed(self, exc: BaseException, doing: str) -> None:
        self.stats.retries += 1
        self._health.failed(exc, doing)

    def _acknowledged(self, offsets: dict[_TP, int]) -> None:
        self._health.ok()
        with self._lock:
            self._committed.update({partition_key(*tp): o for tp, o in offsets.items()})

    # ------------------------------------------------------------------ rebalance hooks
    def _assigned(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        with self._lock:
            self.stats.assignments += 1
            self._reassigned = True
            seek = {}
            now = time.monotonic()
            for tp in parts:
                key = partition_key(*tp)
                self._owned.add(key)
                self._last_data[key] = now
                if key in self._positions:
                    seek[tp] = self._positions[key]
            log.info("assigned %s", ", ".join(sorted(partition_key(*tp) for tp in parts)) or "nothing")
            return seek

    def _revoked(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        keys = {partition_key(*tp) for tp in parts}
        with self._lock:
            for key in keys:
                self._buffered -= sum(c.weight for c in self._queues.pop(key, ()))
                self._seen_t.pop(key, None)  # the next owner may have moved on; learn it again
            self._owned -= keys
            self._caught_up -= keys
            return {_split_key(k): self._positions[k] for k in keys if k in self._positions}

    # ------------------------------------------------------------------ decoding
    def _decode(self, f: _Fetched) -> _Chunk:
        """Decode one partition's messages; dead letters go out before the chunk becomes visible."""
        pieces: list[tuple[EventBatch, np.ndarray]] = []
        run: list[int] = []
        for i, (value, ctype) in enumerate(zip(f.values, f.ctypes, strict=True)):
            if value and (ctype == CONTENT_JSON or (ctype is None and value[:4] != MAGIC)):
                run.append(i)
                continue
            if run:
                pieces += self._decode_json_run(f, run)
                run = []
            pieces += self._decode_one(f, i)
        if run:
            pieces += self._decode_json_run(f, run)
        self.stats.messages += len(f.offsets)
        # every piece passed _mismatch(), so they share id type and feature width and concatenate
        batch = _concat([b for b, _ in pieces])
        origin = np.concatenate([o for _, o in pieces]) if pieces else np.zeros(0, np.int64)
        return _Chunk(partition_key(f.topic, f.partition), batch, origin, f.offsets[-1] + 1)

    def _decode_json_run(self, f: _Fetched, run: list[int]) -> list[tuple[EventBatch, np.ndarray]]:
        """Fast path: consecutive JSON messages decoded as one payload; any trouble means one by one."""
        values = [f.values[i] for i in run]
        joined = b"\n".join(values)
        if _BOM not in joined:  # a byte-order mark is only skipped at the start of a payload
            batch, letters = decode_json_lines(joined, f"{f.topic}:{f.partition}")
            if not letters and self._mismatch(batch) is None:
                offsets = np.array([f.offsets[i] for i in run], np.int64)
                if len(batch) == len(values) and joined.count(b"\n") == len(values) - 1:
                    return [(batch, offsets)]  # one event per message, the usual case
                rows = [v.count(b"\n") + 1 - v.endswith(b"\n") for v in values]
                if sum(rows) == len(batch):
                    return [(batch, np.repeat(offsets, rows))]
        return [piece for i in run for piece in self._decode_one(f, i)]

    def _decode_one(self, f: _Fetched, i: int) -> list[tuple[EventBatch, np.ndarray]]:
        value, offset = f.values[i], f.offsets[i]
        where = f"{f.topic}:{f.partition}@{offset}"
        if not value:
            letters = [DeadLetter("empty message (no payload); send an encoded EventBatch", where, value)]
            batch = EventBatch.empty()
        else:
            batch, letters = decode(value, f.ctypes[i], where)
            reason = self._mismatch(batch)
            if reason is not None:
                letters = [*letters, DeadLetter(reason, where, value)]
                batch = EventBatch.empty()
        for letter in letters:
            self._dead_letter(letter, f.topic, f.partition, offset, f.ctypes[i])
        return [(batch, np.full(len(batch), offset, np.int64))] if len(batch) else []

    def _mismatch(self, batch: EventBatch) -> str | None:
        """Why ``batch`` cannot join this stream, or None; what the store did not fix, the first events do."""
        if not len(batch):
            return None
        if self._string_ids is not None and batch.string_ids != self._string_ids:
            have, want = ("str", "int") if batch.string_ids else ("int", "str")
            return f"node ids are {have} but this stream uses {want} ids; use one id type per stream"
        width = batch.feature_dim
        if self._width != _UNFIXED and width != self._width:
            have = "no features" if width is None else f"{width} features"
            want = "no features" if self._width is None else f"{self._width} features"
            return f"events carry {have} but this stream carries {want}; use one feature width per stream"
        self._string_ids = batch.string_ids
        self._width = width
        return None

    def _dead_letter(self, letter: DeadLetter, topic: str, partition: int, offset: int,
                     ctype: str | None = None) -> None:  # fmt: skip
        self.stats.dead_letters += 1
        if self._dlq is None:
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
        self._dlq.send(self.dead_letter_topic, bytes(value), headers=headers)
        self._dlq_dirty = True


# ---------------------------------------------------------------------------------------------- producing


FORMATS = ("json", "binary")


class EventProducer:
    """Writes EventBatches to a topic so that one graph partition's events share one topic partition.

    Each event goes to topic partition ``hash_partition(src, P)`` (the map the store and the consumers
    use; P is the topic's partition count), keyed by that number. ``fmt="json"`` sends one event per
    message; ``"binary"`` one message per topic partition per ``batch_size`` events. Producer settings
    pass through unchanged (kafka-python or confluent spelling, per ``backend``).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        fmt: str = "json",
        batch_size: int = 1000,
        backend: str = "kafka-python",
        **producer_config,
    ) -> None:
        if fmt not in FORMATS:
            raise ConfigError(f"unknown message format {fmt!r}; use one of {FORMATS}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.topic, self.fmt, self.batch_size = topic, fmt, batch_size
        self._p = _Producer(backend, bootstrap_servers, producer_config)
        try:
            self.num_partitions = len(self._p.partitions_for(topic))
            if not self.num_partitions:
                raise ConfigError(f"topic {topic!r} does not exist; create it first (create_topic)")
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


def _load_events(name_or_path: str | Path) -> EventBatch:
    """A shared dataset by name, or a file of JSON lines (``.jsonl``/``.json``) or one binary batch."""
    path = Path(name_or_path)
    if not path.is_file():
        if path.suffix or len(path.parts) > 1:  # meant as a file, not a dataset name
            raise ConfigError(f"no events file at {path}; give an existing .jsonl/.json or binary batch file")
        from ..datasets import load

        return load(str(name_or_path))
    data = path.read_bytes()
    if data[:4] == MAGIC:
        return decode_binary(data, str(path))
    batch, letters = decode_json_lines(data, str(path))
    if letters:
        first = letters[0]
        raise ConfigError(
            f"{len(letters)} bad events in {path}, first at {first.where}: {first.reason}; fix the file"
        )
    return batch


def produce_dataset(
    bootstrap: str,
    topic: str,
    name_or_path: str | Path,
    partitions: int,
    rate: float | None = None,
    fmt: str = "json",
    batch_size: int = 1000,
    backend: str = "kafka-python",
    **producer_config,
) -> ProduceReport:
    """Create ``topic`` with ``partitions`` partitions and write a dataset (or event file) into it, in time
    order, keyed by graph partition; ``rate`` caps events per second (None: as fast as possible)."""
    if rate is not None and rate <= 0:
        raise ConfigError(f"rate must be > 0 events/s (or None for unthrottled), got {rate}")
    events = _load_events(name_or_path).sorted_by_time()
    create_topic(bootstrap, topic, partitions, **_admin_settings(backend, producer_config))
    start = time.perf_counter()
    with EventProducer(
        bootstrap, topic, fmt=fmt, batch_size=batch_size, backend=backend, **producer_config
    ) as out:
        window = batch_size * partitions  # about batch_size events per partition per window
        done = 0
        for piece in events.split(window):
            out.send(piece)
            done += len(piece)
            if rate is not None:
                ahead = done / rate - (time.perf_counter() - start)
                if ahead > 0:
                    time.sleep(ahead)
        out.flush()
        messages = out.messages
    return ProduceReport(topic, partitions, len(events), messages, time.perf_counter() - start)
