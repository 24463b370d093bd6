"""``KafkaSource``: topics in, time-ordered EventBatches out, effectively-once.

The facade over the parts of this package: a client adapter (``Consumer``) polled by a background thread,
a ``StreamDecoder`` that turns messages into rows and dead letters, and a ``PartitionMerge`` that hands
rows out in (time, partition, offset) order. See ``KafkaSource`` for the delivery contract.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...errors import ConnectorError, StreamGNNError
from ...events import DeadLetter, EventBatch
from .admin import missing_topic
from .consumer import TP, partition_key, split_key
from .dead_letters import DeadLetters
from .decoding import Schema, StreamDecoder
from .merge import PartitionMerge, join_rows
from .opening import check_sizes, open_consumer, start_offsets_of
from .producer import Producer
from .reach import DEFAULT_CONNECT_TIMEOUT_S
from .retry import Backoff, is_fatal
from .settings import check_backend, producer_settings

log = logging.getLogger(__name__)
_FIRST_BATCH = 1000  # events in the first batch with linger_s, before the caller's pace is known


@dataclass
class SourceStats:
    """Counters for monitoring and tests."""

    messages: int = 0  # messages decoded
    events: int = 0  # events handed to the caller
    dead_letters: int = 0  # dead letters produced (or logged, without a dead-letter topic)
    reported_dead_letters: int = 0  # of those, the ones callers reported (``report_dead_letters``)
    pauses: int = 0  # times backpressure paused fetching
    max_buffered_events: int = 0  # high-water mark of the decoded-but-undelivered buffer
    assignments: int = 0  # partition assignments received (1 without rebalances)
    retries: int = 0  # transient broker errors retried


@dataclass
class Origin:
    """Where each row of a delivered batch came from: ``keys[part[i]]`` (``"topic:partition"``) at
    ``offset[i]``."""

    keys: list[str] = field(default_factory=list)
    part: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class KafkaSource:
    """EventBatches from Kafka topics, decoded, validated, merged in time order, delivered effectively-once:
    an ``streamgnn.sources.EventSource`` whose positions are the partitions' offsets.

    Modes: ``topics`` + ``group_id`` joins a consumer group that spreads partitions over its members;
    ``partitions=["edges:0", ...]`` reads exactly those; ``topics`` without a group reads every partition.
    Messages are JSON lines or binary batches (``content-type`` header; JSON when absent, binary when the
    payload starts with the binary magic; a poll of messages that are each one valid JSON event is read as
    JSON without reading headers, see ``decoding``). A message that cannot be decoded, or an event that fails
    validation or does not fit the stream (id type, feature width: fixed by ``store`` where it has events,
    or by a saved ``schema()`` passed back as ``schema=``, else by the first events decoded), goes to
    ``dead_letter_topic`` with headers ``reason``, ``source-topic``, ``source-partition``,
    ``source-offset``; the stream goes on. A dead letter too large for that topic goes out cut short, with
    a ``payload-truncated`` header giving its original size.

    Partitions are merged into one stream ordered by (time, partition, offset): a row is handed out once
    no partition can still deliver an earlier one. Each partition is in time order, so a partition holds
    the others back at the latest time it delivered until the broker reports it read to its end offset
    (a slow fetch or a loaded host never frees it) and ``idle_partition_s`` passed without new data from
    it. Replaying a topic whose writers have finished is therefore exact with any ``idle_partition_s``:
    the same order whatever the fetches looked like, with or without a restart in between, so the same
    store. On a live stream ``idle_partition_s`` is the bounded wait for a partition that went quiet: the
    default 0 hands rows out as soon as every partition is read to its end (lowest latency, like Kafka
    Streams' ``max.task.idle.ms=0``); a value near the skew between your producers keeps a live stream in
    order too, adding up to that much latency after each quiet partition's last event. A restart resumes
    at the first message not wholly handed out; rows of it that were handed out come again and the store
    skips their event ids.

    ``linger_s`` bounds the latency a batch adds, as ``linger.ms`` does for a producer: a batch holds
    about what the caller processed in ``linger_s`` last time (never more than ``max_batch_events``), so
    the last event of a batch waits about ``linger_s`` for the caller to get through the ones before it.
    Smaller values mean smaller batches: lower latency, more per-batch overhead. None: always up to
    ``max_batch_events``.

    A background thread polls and decodes into a buffer of about ``max_buffered_events`` events (plus a
    poll of up to ``max_poll_messages`` messages per partition); when the caller lags, partitions are
    paused instead of memory growing, while polling goes on so the group membership survives slow
    processing. Fetching resumes once half the buffer is drained.

    ``start_offsets`` (or ``store=``, whose ``source_offsets`` came from a checkpoint) names where to
    resume each partition; the rest start from the group's committed offset, else where
    ``auto_offset_reset`` (``auto.offset.reset`` for confluent) says: ``"earliest"`` (default) or
    ``"latest"``. No offset is ever reset silently: one outside the partition's log (a topic recreated or
    truncated since the checkpoint, a broker that lost its data) raises ``OffsetOutOfRangeError`` naming
    the partition, the offset and the log's range. Other keyword arguments go to the client unchanged,
    except that a mistyped security setting is a ``ConfigError`` and no broker answering within
    ``connect_timeout_s`` a ``ConnectorError`` naming the addresses tried.

    >>> with KafkaSource("edges", bootstrap_servers="broker:9092", store=store) as source:  # doctest: +SKIP
    ...     for batch in source.stream(idle_timeout_s=0):  # what the topic holds now, then stop
    ...         store.ingest(batch)
    """

    replay = False  # positions are broker offsets, valid between batches

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
        schema: Schema | None = None,
        max_buffered_events: int = 500_000,
        max_batch_events: int = 200_000,
        commit_interval_s: float = 1.0,
        idle_partition_s: float = 0.0,
        linger_s: float | None = 1.0,
        max_poll_messages: int = 2000,
        poll_timeout_s: float = 0.1,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        producer_config: Mapping | None = None,
        **consumer_config,
    ) -> None:
        check_backend(backend)
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        check_sizes(self.topics, partitions, max_buffered_events, max_batch_events, max_poll_messages,
                     idle_partition_s, linger_s)  # fmt: skip
        self.linger_s = linger_s
        self._cap = max_batch_events if linger_s is None else min(max_batch_events, _FIRST_BATCH)
        self._handed_at: float | None = None  # when the last batch went to the caller, and its size
        self._handed_n = 0
        self.backend = backend
        self.group_id = group_id
        self.dead_letter_topic = dead_letter_topic
        self._bootstrap = bootstrap_servers
        self.max_buffered_events = max_buffered_events
        self.commit_interval_s = commit_interval_s
        self.max_poll_messages = max_poll_messages
        self.poll_timeout_s = poll_timeout_s
        self._explicit = [split_key(k) for k in partitions] if partitions else None
        self._merge = PartitionMerge(
            max_batch_events, idle_partition_s, start_offsets_of(store, start_offsets)
        )
        self._committed: dict[str, int] = {}
        self._health = Backoff(f"Kafka consumer ({backend})")
        self._stats = SourceStats()
        self._lock = threading.Lock()  # the merge, positions and ownership: shared with the client threads
        self._ready = threading.Condition(self._lock)
        self._consumer = open_consumer(
            backend, bootstrap_servers, group_id, dict(consumer_config), connect_timeout_s,
            self._acknowledged, self._failed,
        )  # fmt: skip
        try:
            dlq = self._open_dead_letters(consumer_config, producer_config, connect_timeout_s)
        except BaseException:
            self._consumer.close()  # its client threads and sockets would outlive this failed source
            raise
        self._letters = DeadLetters(dlq, dead_letter_topic)
        self._decoder = StreamDecoder(self._letters, store, schema)
        self._reassigned = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._last_origin = Origin()
        self._reported = 0  # dead letters callers sent through report_dead_letters
        self._closed = False
        self._ended = False  # stream(idle_timeout_s) found the end
        self._ends: dict[str, int] | None = None  # end offsets of the owned partitions, read by the poller

    def _open_dead_letters(
        self, consumer_config: Mapping, producer_config: Mapping | None, connect_timeout_s: float
    ) -> Producer | None:
        """The dead-letter topic's producer (None without one), set up like the consumer unless
        ``producer_config`` is given; one too large for the topic goes out cut short (``shrink_oversize``)."""
        if not self.dead_letter_topic:
            return None
        settings = (
            producer_settings(self.backend, consumer_config) if producer_config is None else producer_config
        )
        return Producer(
            self.backend, self._bootstrap, settings, shrink_oversize=True, connect_timeout_s=connect_timeout_s
        )

    @property
    def max_batch_events(self) -> int:
        return self._merge.max_batch_events

    @property
    def idle_partition_s(self) -> float:
        return self._merge.idle_partition_s

    @property
    def stats(self) -> SourceStats:
        """Counters so far (messages decoded, events handed out, dead letters, pauses, ...)."""
        self._stats.messages = self._decoder.messages
        self._stats.dead_letters = self._letters.count
        self._stats.reported_dead_letters = self._reported
        return self._stats

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
            raise missing_topic(
                self._bootstrap, self.dead_letter_topic, "--dead-letter-topic", "dead-letter topic"
            )
        parts = self._explicit
        if parts is None:
            parts = []
            for topic in self.topics:
                found = self._consumer.partitions_for(topic)
                if not found:
                    raise missing_topic(self._bootstrap, topic)
                parts += [(topic, p) for p in found]
            if self.group_id is not None:
                self._consumer.subscribe(self.topics, self._assigned, self._revoked)
                return
        known = {split_key(k): v for k, v in self._merge.positions.items()}
        with self._lock:
            self._merge.own([partition_key(*tp) for tp in parts], time.monotonic())
            self._stats.assignments += 1
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
        self._letters.close()

    def __enter__(self) -> KafkaSource:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ delivery
    def __iter__(self) -> Iterator[EventBatch]:
        return self.stream()

    def stream(self, idle_timeout_s: float | None = None) -> Iterator[EventBatch]:
        """Batches as they arrive. With ``idle_timeout_s``, the stream ends once every assigned partition
        has been read to the end offset the broker reports, everything is handed out, and no new data came
        for ``idle_timeout_s`` after that (0: end right there, a replay of what the topic holds now). A
        group join, a slow fetch or a slow host never counts as idle; nothing assigned never ends it."""
        self.start()
        quiet_since = None
        while True:
            batch = self.poll(1.0 if idle_timeout_s is None else min(idle_timeout_s, 0.1) or 0.01)
            if batch is not None:
                quiet_since = None
                yield batch
                continue
            if idle_timeout_s is None:
                continue
            at_end = self.at_end()
            now = time.monotonic()
            quiet_since = (quiet_since or now) if at_end else None
            if at_end and now - quiet_since >= idle_timeout_s:
                self._ended = True
                return

    def poll(self, timeout_s: float = 1.0) -> EventBatch | None:
        """The next batch, or None if nothing came within ``timeout_s``.

        A batch holds up to ``max_batch_events`` events, and with ``linger_s`` about what this caller
        processes in ``linger_s`` (measured between polls), so that no event waits in a batch much longer
        than that before the caller reaches it. Positions advance as the batch is handed out: ingest it
        before the next ``positions()``.
        """
        self.start()
        began = time.monotonic()
        self._measure_caller(began)
        deadline = began + timeout_s
        while True:
            with self._ready:
                while True:
                    if self._error is not None:
                        if isinstance(self._error, StreamGNNError):
                            raise self._error
                        raise ConnectorError(f"the Kafka source stopped: {self._error}") from self._error
                    pieces = self._merge.release(time.monotonic(), self._cap)
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
            batch = join_rows([b for _, b, _ in pieces])
            part = np.repeat(np.arange(len(pieces), dtype=np.int32), [len(b) for _, b, _ in pieces])
            offsets = np.concatenate([o for _, _, o in pieces])
            t = batch.t
            if len(t) > 1 and bool((t[1:] < t[:-1]).any()):
                # pieces come in partition order, rows in offset order: a stable sort by time gives the
                # (time, partition, offset) order, the same whatever batch boundaries the fetches made
                order = np.argsort(t, kind="stable")
                batch, part, offsets = batch.take(order), part[order], offsets[order]
            self._last_origin = Origin(keys, part, offsets)
            self._stats.events += len(batch)
            self._handed_at, self._handed_n = time.monotonic(), len(batch)
            return batch

    def _measure_caller(self, now: float) -> None:
        """Size the next batch to what the caller processed per second since the last one (``linger_s``)."""
        if self.linger_s is None or self._handed_at is None:
            return
        busy = max(now - self._handed_at, 1e-4)
        self._handed_at = None
        want = self._handed_n / busy * self.linger_s
        # grow at most 4x per batch (a fast batch says little about a big one), shrink at once
        self._cap = int(max(1, min(self.max_batch_events, want, 4 * self._cap)))

    def positions(self) -> dict[str, int]:
        """``{"topic:partition": next offset}`` for everything handed out: save it with the store.

        Dead letters sent so far are flushed first, so a checkpoint never covers an unsent one.
        """
        self._letters.flush()
        with self._lock:
            return dict(self._merge.positions)

    def lag(self) -> int | None:
        """Events of the owned partitions not handed out yet, buffered rows included: the messages between
        ``positions()`` and the broker's end offsets (read by the poller about every ``commit_interval_s``)
        times the events per message decoded so far (a binary message holds many); None before the first
        read. What a trainer sizes its work by (``train.driver.Budget``)."""
        with self._lock:
            if self._ends is None:
                return None
            positions, owned = self._merge.positions, self._merge.owned
            behind = sum(
                max(0, end - positions.get(key, 0)) for key, end in self._ends.items() if key in owned
            )
            decoded = self._stats.events + self._merge.buffered
        per_message = decoded / self._decoder.messages if self._decoder.messages else 1.0
        return round(behind * max(per_message, 1.0))

    def seek(self, positions: Mapping[str, int]) -> None:
        """Start each partition named in ``positions`` (``{"topic:partition": offset}``, from ``positions()``)
        at that offset, as ``start_offsets=`` does: only before the source starts reading."""
        if self._thread is not None or self._closed:
            raise ConnectorError("seek a KafkaSource before it starts reading (or pass start_offsets=)")
        offsets = start_offsets_of(None, positions)
        with self._lock:
            self._merge.positions.update(offsets)

    def at_end(self) -> bool:
        """Every assigned partition read to the end offset the broker reports and handed out (nothing
        assigned: False): the stream holds nothing more now. A group join or a slow fetch is not the end."""
        with self._lock:
            return self._merge.at_end()

    @property
    def ended(self) -> bool:
        """True once ``stream(idle_timeout_s)`` found every partition read to its end and quiet; a stream
        followed without an idle timeout never ends."""
        return self._ended

    def dead_letter_count(self) -> int:
        """Messages and events this source dead-lettered while decoding (its life), less those callers
        reported through ``report_dead_letters`` (the store's refusals, which their consumer counts)."""
        stats = self.stats
        return stats.dead_letters - stats.reported_dead_letters

    def schema(self) -> Schema:
        """The stream's schema as decoding fixed it so far: save it with ``positions()`` and pass it back as
        ``schema=`` on resuming (a store passed as ``store=`` carries its own)."""
        return self._decoder.schema

    def passed_dead_letters(self) -> int:
        """Dead letters decoding produced (this source's life) for messages before ``positions()``: the
        count to save with them, since a restart from them decodes every later message again."""
        with self._lock:
            return self._merge.letters_passed

    def assignment(self) -> set[str]:
        """The ``"topic:partition"`` keys this source reads now."""
        with self._lock:
            return set(self._merge.owned)

    def origin(self) -> Origin:
        """Where each row of the last delivered batch came from, for a caller that keeps rows past the next
        poll and reports about them later (``report_dead_letters(origins=)``)."""
        return self._last_origin

    def report_dead_letters(
        self, letters: Sequence[DeadLetter], origins: Sequence[tuple[str, int, int]] | None = None
    ) -> None:
        """Send dead letters about rows of the last delivered batch (e.g. ``store.ingest(...).dead_letters``)
        to the dead-letter topic, tagged with the source partition and offset of each row; or, with
        ``origins``, one ``(topic, partition, offset)`` per letter (rows of earlier batches)."""
        self._reported += len(letters)
        if origins is not None:
            for letter, (topic, part, offset) in zip(letters, origins, strict=True):
                self._letters.send(letter, topic, int(part), int(offset))
            return
        origin = self._last_origin
        for letter in letters:
            if 0 <= letter.index < len(origin.offset):
                topic, part = split_key(origin.keys[int(origin.part[letter.index])])
                self._letters.send(letter, topic, part, int(origin.offset[letter.index]))
            else:
                self._letters.send(letter, "", -1, -1)

    # ------------------------------------------------------------------ the poller thread
    def _run(self) -> None:
        next_commit = time.monotonic() + self.commit_interval_s
        try:
            while not self._stop.is_set():
                self._backpressure()
                if time.monotonic() >= next_commit:
                    self._commit()
                    self._read_ends()
                    next_commit = time.monotonic() + self.commit_interval_s
                began = time.monotonic()
                try:
                    fetched = self._consumer.poll(self.poll_timeout_s, self.max_poll_messages)
                except Exception as exc:  # noqa: BLE001 - classified below
                    if is_fatal(exc):
                        raise
                    self._stats.retries += 1
                    self._stop.wait(self._health.failed(exc, "poll"))
                    continue
                if fetched:
                    self._health.ok()
                else:  # paused partitions make poll() return at once: do not spin against the caller's thread
                    self._stop.wait(max(0.0, self.poll_timeout_s - (time.monotonic() - began)))
                chunks = [(f.offsets[0], self._decoder.decode(f)) for f in fetched]
                # let the client's messages die young: held through the next poll, thousands per poll
                # outlive the collector's young generations and bring on full collections (0.3-0.5 s
                # each with torch loaded; benchmarks/RESULTS.md)
                del fetched
                with self._lock:
                    owned = [split_key(k) for k in self._merge.owned]
                caught_up = {partition_key(*tp) for tp in self._consumer.caught_up(owned)}
                now = time.monotonic()
                with self._ready:
                    # rebalance callbacks run inside poll(), so ownership cannot change under us here
                    self._merge.caught_up = caught_up
                    for first, chunk in chunks:
                        self._merge.add(chunk, first, now)
                    self._stats.max_buffered_events = max(
                        self._stats.max_buffered_events, self._merge.buffered
                    )
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

    def _read_ends(self) -> None:
        """The owned partitions' end offsets for ``lag`` (poller thread). A failed read keeps the last ones:
        the stream goes on, its lag figure a second older."""
        with self._lock:
            owned = [split_key(k) for k in self._merge.owned]
        try:
            ends = self._consumer.end_offsets(owned) if owned else {}
        except Exception as exc:  # noqa: BLE001 - a transient broker error; the next read retries
            log.debug("reading end offsets failed: %s", exc)
            return
        with self._lock:
            self._ends = {partition_key(*tp): end for tp, end in ends.items()}

    def _backpressure(self) -> None:
        """Pause the partitions holding buffered rows once the buffer is full, resume all at half (see
        ``PartitionMerge.to_pause``)."""
        with self._lock:
            merge = self._merge
            want, owned, buffered = (
                merge.to_pause(time.monotonic(), self.max_buffered_events),
                set(merge.owned),
                merge.buffered,
            )
            paused = merge.paused
        if want and not paused:
            self._stats.pauses += 1
            log.info("consumer lags: %d events buffered, pausing %d partitions", buffered, len(want))
        elif paused and not want:
            log.info("buffer drained to %d events, resuming", buffered)
        pause, resume = want - paused, paused - want
        if self._reassigned:  # a rebalance may have reset the client's pause flags: state them all again
            self._reassigned = False
            pause, resume = want, owned - want
        if pause:
            self._consumer.set_paused([split_key(k) for k in sorted(pause)], True)
        if resume:
            self._consumer.set_paused([split_key(k) for k in sorted(resume)], False)
        with self._lock:
            if resume:
                merge.resumed(resume, time.monotonic())
            merge.paused = want

    def _commit(self, wait: bool = False) -> None:
        """Commit delivered positions of owned partitions that Kafka does not have yet. For monitoring and
        for the next owner after a rebalance; the checkpoint stays the source of truth."""
        if self.group_id is None:
            return
        with self._lock:
            todo = {
                split_key(k): v
                for k, v in self._merge.positions.items()
                if k in self._merge.owned and self._committed.get(k) != v
            }
        if not todo:
            return
        try:
            self._consumer.commit(todo, wait)
        except Exception as exc:  # noqa: BLE001 - retried at the next interval
            if is_fatal(exc):
                raise
            self._failed(exc, "offset commit")

    def _failed(self, exc: BaseException, doing: str) -> None:
        self._stats.retries += 1
        self._health.failed(exc, doing)

    def _acknowledged(self, offsets: dict[TP, int]) -> None:
        self._health.ok()
        with self._lock:
            self._committed.update({partition_key(*tp): o for tp, o in offsets.items()})

    # ------------------------------------------------------------------ rebalance hooks
    def _assigned(self, parts: list[TP]) -> dict[TP, int]:
        with self._lock:
            self._stats.assignments += 1
            self._reassigned = True
            keys = [partition_key(*tp) for tp in parts]
            self._merge.own(keys, time.monotonic())
            log.info("assigned %s", ", ".join(sorted(keys)) or "nothing")
            return {
                tp: self._merge.positions[k]
                for tp, k in zip(parts, keys, strict=True)
                if k in self._merge.positions
            }

    def _revoked(self, parts: list[TP]) -> dict[TP, int]:
        with self._lock:
            return {
                split_key(k): o for k, o in self._merge.disown(partition_key(*tp) for tp in parts).items()
            }
