"""The partition router: a raw event topic in, the same events out, keyed and placed by graph partition.

Hash placement can be computed by any producer; LDG, Fennel and HDRF need the assignment state, so one
router job holds it (the Kafka Streams repartition pattern). It reads the raw topic with ``KafkaSource``
(time-ordered merge, dead letters), routes each batch (``routing.RoutingState``) and publishes each event
to output partition = graph partition, keyed by it, so consumers in one group each receive whole graph
partitions. With a vertex partitioner, binary output carries both endpoints' partitions
(``EventBatch.placement``): sharded trainers with ``ShardConfig(placement="stream")`` own each vertex
where the router put it.

Nothing lost, doubled or placed differently across a crash: the routing state and the input positions
are checkpointed together (atomically, verified), with the output topic's end offsets at that moment,
the stream's schema (id type, feature width: fixed by its first events, so a restarted router
dead-letters what an uninterrupted one does, not what the first events it meets again say) and the count
of dead letters decoding produced before those positions.
A restarted router reads back what its previous life published after those offsets, replays the input
from the checkpointed positions (the routing is a function of the events alone, so it recomputes the
same events in the same order per partition) and skips, per partition, the events already there.
One router per output topic. With a raw topic of several partitions the input order is the source's
time-ordered merge, as for the store.

    router = PartitionRouter("localhost:9092", "raw", "events", 8, partitioner="fennel",
                             checkpoint_dir="router-ckpt")
    router.run()  # forever; max_events=/idle_timeout_s= to stop
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import checkpoint
from ..codec import CONTENT_BINARY, CONTENT_JSON, decode, encode_binary, encode_json_lines
from ..configs import Config
from ..connectors.kafka import CONTENT_TYPE_HEADER, KafkaSource, Producer, TopicReader, create_topic
from ..connectors.kafka.decoding import Schema
from ..connectors.kafka.settings import consumer_settings, producer_settings
from ..errors import CheckpointError, ConfigError, ConnectorError
from ..events import EventBatch
from ..partition.config import PartitionerConfig
from ..partition.metrics import PartitionReport, PartitionTimeline
from ..store.config import check_lateness
from .routing import RoutingState, saved_partitioner

FORMATS = ("binary", "json")
BACKEND = "kafka-python"  # the client of every connection the router makes (its settings' spelling)
KIND = "partition-router"  # what its checkpoints are, in the container's manifest


@dataclass(frozen=True)
class RouterReport:
    events: int  # distinct input events routed (over the router's whole life)
    duplicates: int
    # a count (``dead_letters`` elsewhere are the records): those of decoding (undecodable, of another schema)
    # and of routing, over the router's life
    dead_letter_count: int
    published: int
    held: int  # events waiting for their vertex to be placed
    skipped_on_resume: int  # events found already published by a previous life, not sent again
    checkpoints: int
    seconds: float
    partitioning: PartitionReport


@dataclass(frozen=True)
class RouterConfig(Config):
    """A partition router's options, defined once: ``PartitionRouter``'s and the ``partition`` section of
    ``--config``'s. ``partitioner``: a method name, mapping or ``PartitionerConfig`` (stored as one;
    rebalancing needs the store's adjacency, which a router does not hold, so it is refused).
    ``checkpoint_dir``: where state and offsets go (None: no resume), every ``checkpoint_every`` input events
    and at the end. ``batch_size``: events per binary output message. ``allowed_lateness``: how far (stream
    time) an event may lag the newest routed one; a later one is a dead letter (inf: none is)."""

    partitioner: PartitionerConfig | str = field(default_factory=lambda: PartitionerConfig("fennel"))
    checkpoint_dir: str | None = None
    checkpoint_every: int = 100_000
    batch_size: int = 1000
    allowed_lateness: float = math.inf

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitioner", PartitionerConfig.parse(self.partitioner))
        if self.partitioner.rebalance.every_edges:
            raise ConfigError("the router cannot rebalance (it holds no adjacency); leave rebalance unset")
        if self.checkpoint_dir is not None:
            object.__setattr__(self, "checkpoint_dir", str(self.checkpoint_dir))  # (a Path given in Python)
        if min(self.checkpoint_every, self.batch_size) < 1:
            raise ConfigError("checkpoint_every and batch_size must be >= 1")
        check_lateness(self.allowed_lateness)


class PartitionRouter:
    """Routes ``in_topic`` into ``out_topic`` (created with ``num_partitions`` partitions if absent), as
    ``config`` (a ``RouterConfig``; default: its defaults) says. ``fmt``: output messages as binary batches
    of up to ``config.batch_size`` events, or JSON lines (the ``kafka`` section's format, with the topics).
    Other keyword arguments go to the Kafka clients (kafka-python spelling).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        in_topic: str,
        out_topic: str,
        num_partitions: int,
        config: RouterConfig | None = None,
        *,
        fmt: str = "binary",
        dead_letter_topic: str | None = None,
        **client_config,
    ) -> None:
        config = RouterConfig() if config is None else config
        options = sorted(set(client_config) & {f.name for f in dataclasses.fields(RouterConfig)})
        if options:
            raise ConfigError(
                f"{', '.join(options)}: a RouterConfig option, not a client setting: pass "
                f"PartitionRouter(..., RouterConfig({options[0]}=...))"
            )
        if fmt not in FORMATS:
            raise ConfigError(f"unknown output format {fmt!r}; use one of {FORMATS}")
        if in_topic == out_topic:
            raise ConfigError("the router cannot write to the topic it reads")
        self.config = config
        self.bootstrap, self.in_topic, self.out_topic = bootstrap_servers, in_topic, out_topic
        self.fmt, self.batch_size, self.checkpoint_every = fmt, config.batch_size, config.checkpoint_every
        self.dead_letter_topic = dead_letter_topic
        self.checkpoint_dir = None if config.checkpoint_dir is None else Path(config.checkpoint_dir)
        self.client_config = dict(client_config)
        self.state = RoutingState(config.partitioner, num_partitions, config.allowed_lateness)
        self.k = self.state.k
        self.positions: dict[str, int] = {}
        self.out_offsets: dict[int, int] = {}
        self.timeline = PartitionTimeline(every_edges=1)
        self.schema = Schema()  # the stream's id type and feature width, once its first events fixed them
        self.decode_dead_letter_count = 0  # dead letters of decoding, for the input before the positions
        self._decode_letters_saved = 0
        self._skip: dict[int, list[int]] = {}
        self._skipped = 0
        self._checkpoints = 0
        ctype = CONTENT_BINARY if fmt == "binary" else CONTENT_JSON
        self._headers = [(CONTENT_TYPE_HEADER, ctype.encode())]

    # ------------------------------------------------------------------ the run
    def run(self, max_events: int | None = None, idle_timeout_s: float | None = None, flush: bool = False
            ) -> RouterReport:  # fmt: skip
        """Route until ``max_events`` distinct input events have been routed (over the router's life,
        resumes included; whole input batches are routed, so it may pass the count) or the input is idle
        for ``idle_timeout_s``; with ``flush``, then place every waiting vertex and publish what was held.
        Checkpoints at the end."""

        start = time.perf_counter()
        create_topic(self.bootstrap, self.out_topic, self.k)
        self._resume()
        self._decode_letters_saved = self.decode_dead_letter_count
        since = self.state.counts["events"]
        with (
            Producer(BACKEND, self.bootstrap, self._producer_settings()) as out,
            KafkaSource(
                self.in_topic,
                bootstrap_servers=self.bootstrap,
                backend=BACKEND,
                start_offsets=self.positions,
                schema=self.schema,
                dead_letter_topic=self.dead_letter_topic,
                max_batch_events=min(10_000, self.checkpoint_every),
                producer_config=self._producer_settings(),
                **consumer_settings(BACKEND, self.client_config),
            ) as source,
        ):
            if not self.out_offsets:  # a first start: record where the output begins, before publishing
                self.out_offsets = self._end_offsets()
                self._save(source, out)
            while max_events is None or self.state.counts["events"] < max_events:
                batch = source.poll(1.0 if idle_timeout_s is None else idle_timeout_s)
                self.decode_dead_letter_count = self._decode_letters_saved + source.passed_dead_letters()
                if batch is None:
                    if idle_timeout_s is not None and source.assignment():
                        break
                    continue
                routed, letters = self.state.route(batch)
                source.report_dead_letters(letters)
                self._publish(out, routed)
                if self.state.counts["events"] - since >= self.checkpoint_every:
                    self._save(source, out)
                    since = self.state.counts["events"]
            if flush:
                self._publish(out, self.state.flush())
            self._save(source, out)
        return self.report(time.perf_counter() - start)

    def _producer_settings(self) -> dict:
        """The client settings a producer takes (security settings go to every client); it keeps one
        request in flight, so a retried send cannot overtake the next."""
        out = producer_settings(BACKEND, self.client_config)
        out.setdefault("max_in_flight_requests_per_connection", 1)
        return out

    def _publish(self, out, routed: dict[int, EventBatch]) -> None:
        for p, events in sorted(routed.items()):
            events = self._drop_published(p, events)
            if not len(events):
                continue
            if self.fmt == "binary":
                values = [encode_binary(piece) for piece in events.split(self.batch_size)]
            else:
                values = encode_json_lines(events).split(b"\n")[:-1]
            for value in values:
                out.send(self.out_topic, value, key=str(p).encode(), partition=p, headers=self._headers)

    def _drop_published(self, p: int, events: EventBatch) -> EventBatch:
        """Leave out the events a previous life published after the checkpoint (they come first)."""
        done = self._skip.get(p)
        if not done:
            return events
        n = min(len(done), len(events))
        if events.eid[:n].tolist() != done[:n]:
            raise ConnectorError(
                f"output partition {self.out_topic}:{p} holds events after the router's checkpoint that it "
                f"would not publish now ({done[:3]}... vs {events.eid[:3].tolist()}...): another writer, "
                "or a checkpoint of another router; give each router its own output topic"
            )
        del done[:n]
        self._skipped += n
        return events[n:]

    # ------------------------------------------------------------------ checkpoints
    def _save(self, source, out) -> None:
        """Checkpoint state, input positions and the output's end offsets together. Not while events a
        previous life published are still to be met again: the output ends are not accounted for yet."""
        out.flush()
        if any(self._skip.values()):
            return
        self.out_offsets = self._end_offsets()
        self.positions = source.positions()
        self.schema = source.schema()
        self.decode_dead_letter_count = self._decode_letters_saved + source.passed_dead_letters()
        if self.checkpoint_dir is None:
            self._record()
            return
        arrays, state = self.state.state()
        manifest = {
            "in_topic": self.in_topic,
            "out_topic": self.out_topic,
            "num_partitions": self.k,
            "state": state,
            "schema": self.schema.to_dict(),
            "decode_dead_letters": self.decode_dead_letter_count,  # (the manifest's key since it began)
            "source_offsets": self.positions,
            "output_offsets": {str(p): o for p, o in self.out_offsets.items()},
        }
        checkpoint.save(self.checkpoint_dir, KIND, arrays, manifest, keep=2)
        self._checkpoints += 1
        self._record()

    def _record(self) -> None:
        self.timeline.rows.append({"stream_time": None, **self.state.report().to_dict()})

    def _resume(self) -> None:
        if self.checkpoint_dir is None or not checkpoint.numbers(self.checkpoint_dir):
            return
        ckpt = checkpoint.load(self.checkpoint_dir, KIND)
        manifest, a = ckpt.manifest, ckpt.arrays
        try:
            want = (self.in_topic, self.out_topic, self.k, self.state.partitioner.config)
            have = (manifest["in_topic"], manifest["out_topic"], manifest["num_partitions"],
                    saved_partitioner(manifest["state"], str(ckpt.path)))  # fmt: skip
            if want != have:
                raise ConfigError(
                    f"the checkpoint in {self.checkpoint_dir} is of a router with other settings {have}; "
                    "use another checkpoint folder or the same settings"
                )
            lateness = self.state.admission.config.allowed_lateness  # (a setting of this run, not saved)
            self.state = RoutingState.from_state(a, manifest["state"], self.k, lateness, str(ckpt.path))
            self.positions = {str(k): int(v) for k, v in manifest["source_offsets"].items()}
            self.out_offsets = {int(p): int(o) for p, o in manifest["output_offsets"].items()}
            ids, held = manifest["state"]["id_kind"], self.state.held  # older checkpoints: what they tell
            older = {"string_ids": None if ids is None else ids == "str",
                     "feature_width": held.feature_dim if len(held) else -1}  # fmt: skip
            self.schema = Schema.from_dict(manifest.get("schema", older))
            self.decode_dead_letter_count = int(manifest.get("decode_dead_letters", 0))
        except ConfigError:  # other settings, or a config this version does not read: one line, named
            raise
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise CheckpointError(
                f"router checkpoint in {self.checkpoint_dir} is inconsistent: {exc!r}"
            ) from exc
        self._skip = {}
        for p, eids in self._read_back().items():
            last = int(self.state.last_eid[p])
            if last >= 0 and last in eids:  # the read began before the checkpoint's end of this partition
                eids = eids[eids.index(last) + 1 :]
            if eids:
                self._skip[p] = eids

    # ------------------------------------------------------------------ the output topic, read directly
    def _reader(self) -> TopicReader:
        return TopicReader(
            self.bootstrap, backend=BACKEND, config=consumer_settings(BACKEND, self.client_config)
        )

    def _end_offsets(self) -> dict[int, int]:
        with self._reader() as reader:
            return reader.end_offsets(self.out_topic, list(range(self.k)))

    def _read_back(self) -> dict[int, list[int]]:
        """Event ids in each output partition from the checkpointed offsets on, in order. Some brokers
        (Tansu) report an end offset inside the last record batch, so the read may begin a little before
        the checkpoint's true end; ``_resume`` drops that prefix by the last event id it published."""
        with self._reader() as reader:
            ends = reader.end_offsets(self.out_topic, list(range(self.k)))
            reader.assign(self.out_topic, {p: self.out_offsets.get(p, 0) for p in range(self.k)})
            out: dict[int, list[int]] = {p: [] for p in range(self.k)}
            for r in reader.read_to(ends):
                ctype = dict(r.headers).get(CONTENT_TYPE_HEADER)
                batch, _ = decode(r.value, ctype.decode() if ctype else None, "router output")
                out[r.partition] += batch.eid.tolist()
            return out

    # ------------------------------------------------------------------ metrics
    def report(self, seconds: float = 0.0) -> RouterReport:
        c = self.state.counts
        return RouterReport(
            events=c["events"], duplicates=c["duplicates"],
            dead_letter_count=c["dead_letters"] + self.decode_dead_letter_count,
            published=c["published"], held=len(self.state.held), skipped_on_resume=self._skipped,
            checkpoints=self._checkpoints, seconds=seconds, partitioning=self.state.report(),
        )  # fmt: skip

    def write_report(self, path: str | Path) -> None:
        r = self.report()
        checkpoint.write_atomic(Path(path), json.dumps(dataclasses.asdict(r), indent=1).encode())


__all__ = ["FORMATS", "PartitionRouter", "RouterConfig", "RouterReport"]
