"""SnapshotStream: a spec's schedule walked over a growing store, each snapshot cut once it is final.

A snapshot at ``t`` is final once no event at or before ``t`` can still arrive: the store dead-letters
events older than its watermark minus ``allowed_lateness``, so that holds as soon as the watermark passes
``t + lateness``. ``ready()`` cuts every scheduled snapshot that is final now; ``finish()`` cuts the rest at
the end of a stream (through the first scheduled time after the last event, so every event is in some
snapshot). With a target, snapshots come out labelled, and only once their label is known.

``live_snapshots(source, store, spec)`` is the live loop: it ingests the source's batches into the store and
yields snapshots as they become final, so a model can train while events arrive. ``state()`` holds the
position (builder, schedule, labeler and how many source events were consumed) for checkpoints.

    >>> from streamgnn import EventBatch
    >>> from streamgnn.store import StoreConfig, TemporalGraphStore
    >>> from streamgnn.snapshots import SnapshotSpec
    >>> store = TemporalGraphStore(StoreConfig(allowed_lateness=1.0))
    >>> batches = [EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[0.5, 3.5], eid=[0, 1])]
    >>> [(s.t, s.num_edges) for s in live_snapshots(batches, store, SnapshotSpec(every=1.0))]
    [(1.0, 1), (2.0, 1), (3.0, 1), (4.0, 2)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..events import EventBatch
from ..sources import EventSource, as_source
from ..store import TemporalGraphStore
from .builder import SnapshotBuilder
from .snapshot import Snapshot
from .spec import SnapshotSpec
from .targets import NextLinks, NodeTarget


class SnapshotStream:
    """Cuts ``spec``'s snapshots of ``store`` as they become final; ``target`` labels them."""

    def __init__(
        self,
        store: TemporalGraphStore,
        spec: SnapshotSpec,
        *,
        target: NodeTarget | NextLinks | None = None,
        lateness: float | None = None,
        builder: SnapshotBuilder | None = None,
    ) -> None:
        self.store, self.spec, self.target = store, spec, target
        self.lateness = store.config.allowed_lateness if lateness is None else float(lateness)
        if not self.lateness >= 0:
            raise ConfigError(f"lateness must be >= 0, got {lateness!r}")
        self.builder = builder or SnapshotBuilder(store, spec, arrivals=isinstance(target, NextLinks))
        self.labeler = None if target is None else target.labeler()
        self.first: float | None = None  # the schedule's first time, fixed by the first event seen
        self.next = 0  # index of the next snapshot to cut
        self.consumed = 0  # source events ingested by ``iterate`` (a replayed source skips them on resume)

    def _time(self, index: int) -> float | None:
        if self.spec.times is not None:
            return self.spec.time_at(index, 0.0)
        if self.first is None:
            earliest = self.builder.earliest()
            if earliest is None:
                return None
            self.first = self.spec.first_time(earliest)
        return self.spec.time_at(index, self.first)

    def _cut(self, until: float, inclusive: bool) -> Iterator[Snapshot]:
        while (t := self._time(self.next)) is not None and (t < until or (inclusive and t <= until)):
            snap = self.builder.advance(t)
            self.next += 1
            yield from ([snap] if self.labeler is None else self.labeler.push(snap))

    def ready(self) -> Iterator[Snapshot]:
        """Every scheduled snapshot that is final now: time < watermark - lateness."""
        yield from self._cut(self.store.watermark - self.lateness, inclusive=False)

    def finish(self, until: float | None = None) -> Iterator[Snapshot]:
        """The stream has ended: cut the rest, through ``until`` (default: the first scheduled time after
        the last event). Snapshots whose label lies beyond the end are never yielded."""
        if until is None:
            if self.spec.times is not None:
                until = math.inf
            else:
                self._time(self.next)  # fixes the schedule's start if nothing was cut yet
                last, first = self.store.watermark, self.first
                steps = (
                    0 if first is None or last < first else math.floor((last - first) / self.spec.every) + 1
                )
                until = last if first is None else first + steps * self.spec.every
        yield from self._cut(until, inclusive=True)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        arrays, values = self.builder.state()
        out = {f"builder.{k}": v for k, v in arrays.items()}
        lab_values = None
        if self.labeler is not None:
            lab_arrays, lab_values = self.labeler.state()
            out.update({f"labeler.{k}": v for k, v in lab_arrays.items()})
        values = {"builder": values, "labeler": lab_values, "first": self.first, "next": self.next,
                  "consumed": self.consumed, "lateness": self.lateness}  # fmt: skip
        return out, values

    @classmethod
    def from_state(
        cls,
        store: TemporalGraphStore,
        arrays: dict[str, np.ndarray],
        values: dict,
        *,
        target: NodeTarget | NextLinks | None = None,
        where: str = "snapshot stream",
    ) -> SnapshotStream:
        """The stream as ``state()`` saw it, over ``store`` restored from the same checkpoint (``where``:
        named by a refusal)."""
        builder_arrays = {k[8:]: v for k, v in arrays.items() if k.startswith("builder.")}
        builder = SnapshotBuilder.from_state(store, builder_arrays, values["builder"], where)
        stream = cls(store, builder.spec, target=target, lateness=values["lateness"], builder=builder)
        if stream.labeler is not None:
            if values["labeler"] is None:
                raise ConfigError("the checkpoint has no labeler state: it was saved without a target")
            lab = {k[8:]: v for k, v in arrays.items() if k.startswith("labeler.")}
            stream.labeler = type(stream.labeler).from_state(stream.labeler.target, lab, values["labeler"])
        stream.first, stream.next, stream.consumed = (
            values["first"],
            int(values["next"]),
            int(values["consumed"]),
        )
        return stream

    def save(self, root: str | Path, source_offsets: dict[str, int] | None = None, keep: int = 2) -> Path:
        """Checkpoint the stream with its store (and the source's offsets) under ``root``, atomically: its
        ``state()`` arrays as tensors in the tensor state, as a snapshot trainer's checkpoint holds them."""
        from .. import checkpoint as container
        from ..train import checkpoint

        arrays, values = self.state()
        return checkpoint.save(
            Path(root), self.next, self.store, dict(source_offsets or {}), container.as_tensors(arrays),
            {"stream": values}, keep, "snapshot-stream",
        )  # fmt: skip

    @classmethod
    def load(cls, root: str | Path, *, target: NodeTarget | NextLinks | None = None) -> SnapshotStream:
        """The stream and its store as the newest checkpoint under ``root`` holds them."""
        from .. import checkpoint as container
        from ..train import checkpoint

        ckpt = checkpoint.load(Path(root), kind="snapshot-stream")
        arrays = container.as_arrays(ckpt.state)
        return cls.from_state(
            ckpt.store, arrays, ckpt.manifest["stream"], target=target, where=str(ckpt.path)
        )


def live_snapshots(
    source: EventSource | Iterable[EventBatch],
    store: TemporalGraphStore,
    spec: SnapshotSpec | None = None,
    *,
    target: NodeTarget | NextLinks | None = None,
    lateness: float | None = None,
    stream: SnapshotStream | None = None,
    idle_timeout_s: float | None = None,
) -> Iterator[Snapshot]:
    """Feed ``source`` into ``store`` and yield each snapshot as soon as it is final; at the source's end,
    the rest. A ``KafkaSource`` is read with ``stream(idle_timeout_s)`` and gets the store's dead letters
    back (``report_dead_letters``). Pass ``stream`` (e.g. ``SnapshotStream.from_state``) instead of ``spec``
    to resume: a ``replay`` source (a file) is then replayed from its start and its first ``stream.consumed``
    events are skipped; a Kafka source seeks to the offsets in the store's checkpoint."""
    if (spec is None) == (stream is None):
        raise ConfigError("give a spec for a new stream or a stream to resume, not both")
    if stream is None:
        stream = SnapshotStream(store, spec, target=target, lateness=lateness)
        if math.isinf(stream.lateness):
            raise ConfigError(
                "the store accepts events of any lateness (StoreConfig.allowed_lateness=inf), so no snapshot "
                "would ever be final while the source runs: set allowed_lateness, or pass lateness= (events "
                "later than it then show up in the next snapshot, not in the one they belong to)"
            )
    from ..connectors.kafka import KafkaSource

    source = as_source(source)
    skip = stream.consumed if source.replay else 0
    batches = source.stream(idle_timeout_s) if isinstance(source, KafkaSource) else source
    yield from stream.ready()  # a resumed stream may owe snapshots that were final at the checkpoint
    for batch in batches:
        cut = min(skip, len(batch))
        skip -= cut
        batch = batch[cut:]
        if not len(batch):
            continue
        report = store.ingest(batch)
        stream.consumed += len(batch)
        if report.dead_letters:
            source.report_dead_letters(report.dead_letters)
        yield from stream.ready()
    yield from stream.finish()
