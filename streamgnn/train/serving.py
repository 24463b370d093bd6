"""Serving-table refresh: the embeddings a stream's touched nodes have *now*, and how late they arrive.

The trainer reports the nodes each batch touched; every ``serve_every`` batches their rows are recomputed
as of just after the store's newest event (pending memory applied) and written to the ``EmbeddingTable``,
and every ``publish_every`` refreshes the table goes to the sink. A batch's embedding latency runs from its
arrival to the refresh that serves it (to the end of its step when nothing is served).

>>> import numpy as np
>>> from streamgnn.embeddings import EmbeddingTable
>>> from streamgnn.store import TemporalGraphStore
>>> from streamgnn.events import EventBatch
>>> store = TemporalGraphStore()
>>> _ = store.ingest(EventBatch.from_columns(src=[7], dst=[8], t=[1.0], eid=[0]))
>>> serving = Serving(EmbeddingTable(2), serve_every=1)
>>> serving.refresh(store, lambda nodes, t: np.full((len(nodes), 2), t, np.float32), np.arange(2))
>>> serving.table.embeddings([7, 8]).tolist() == [[1.0, 1.0]] * 2  # as of just after t=1
True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from ..embeddings import EmbeddingSink, EmbeddingTable, LatencyTracker
from ..store import TemporalGraphStore

Embed = Callable[[np.ndarray, float], np.ndarray]  # (internal ids, query time) -> float32 [n, dim]
CHUNK = 4096  # nodes embedded per call


class Serving:
    """The table (None: nothing served), its sink, the nodes waiting for a refresh and the latency record."""

    def __init__(
        self,
        table: EmbeddingTable | None,
        sink: EmbeddingSink | None = None,
        *,
        serve_every: int = 1,
        publish_every: int = 10,
    ) -> None:
        self.table = table
        self.sink = sink
        self.serve_every = serve_every
        self.publish_every = publish_every
        self.latency = LatencyTracker()
        self._touched: list[np.ndarray] = []
        self._waiting: list[tuple[float, int]] = []
        self._refreshes = 0

    @property
    def pending(self) -> bool:
        """Whether touched nodes or arrivals wait for a refresh."""
        return bool(self._touched or self._waiting)

    def after_step(
        self,
        store: TemporalGraphStore,
        embed: Embed,
        touched: np.ndarray,
        arrival: float,
        events: int,
        step: int,
        serve: bool = True,
    ) -> None:
        """Record a finished batch (``step`` batches so far) and refresh when one is due (``serve``: and
        allowed; otherwise its nodes and arrival wait for the next refresh)."""
        if self.table is None:
            self.latency.record(arrival, time.perf_counter(), events)
            return
        self._touched.append(touched)
        self._waiting.append((arrival, events))
        if serve and step % self.serve_every == 0:
            self.refresh(store, embed)

    def refresh(self, store: TemporalGraphStore, embed: Embed, nodes: np.ndarray | None = None) -> None:
        """Recompute the rows of ``nodes`` (internal ids; default: those touched since the last refresh) as
        of just after the store's newest event."""
        if self.table is None:
            return
        if nodes is None:
            nodes = np.unique(np.concatenate(self._touched)) if self._touched else np.zeros(0, np.int64)
        self._touched = []
        self._update(store, embed, nodes)
        now = time.perf_counter()
        for arrival, events in self._waiting:
            self.latency.record(arrival, now, events)
        self._waiting = []
        self._refreshes += 1
        if self.sink is not None and self._refreshes % self.publish_every == 0:
            self.table.publish(self.sink)

    def _update(self, store: TemporalGraphStore, embed: Embed, nodes: np.ndarray) -> None:
        """Write the rows of ``nodes`` to the table, ``CHUNK`` nodes per ``embed`` call."""
        if len(nodes) and math.isfinite(store.watermark):
            t_q = float(np.nextafter(store.watermark, math.inf))
            for lo in range(0, len(nodes), CHUNK):
                part = nodes[lo : lo + CHUNK]
                self.table.update(store.external_ids(part), embed(part, t_q), t_q)

    def publish(self) -> None:
        """Send the rows refreshed since the last publish, now, and flush the sink: while the stream is quiet
        they would wait for the next batch's publish (the jobs call this when their source is idle)."""
        if self.sink is None or self.table is None:
            return
        if self.table.publish(self.sink) and callable(getattr(self.sink, "flush", None)):
            self.sink.flush()

    def finish(self, store: TemporalGraphStore, embed: Embed) -> None:
        """End of a fit: serve what waits, publish the table and flush the sink."""
        if self.pending:
            self.refresh(store, embed)
        if self.sink is not None and self.table is not None:
            self.table.publish(self.sink)
            if callable(getattr(self.sink, "flush", None)):
                self.sink.flush()

    def state_dict(self) -> dict:
        """The table's rows and what waits for the next refresh or publish, as tensors and ints (for a
        checkpoint): restored, a resumed run serves and publishes what the interrupted one would have,
        where re-embedding every node at the resume would serve rows computed at another time."""
        rows = self.table.state_dict().items()
        touched = np.concatenate(self._touched) if self._touched else np.zeros(0, np.int64)
        return {
            "table": {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in rows},
            "touched": torch.from_numpy(touched.astype(np.int64)),
            "refreshes": self._refreshes,
        }

    def load_state_dict(self, state: dict) -> None:
        table = state["table"]
        self.table.load_state_dict(
            {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in table.items()}
        )
        self._touched = [state["touched"].numpy()]
        self._refreshes = int(state["refreshes"])

    def reset(self) -> None:
        """A new pass: forget waiting node ids (of the old store) and clear the table, whose rows would be
        served as current; the next refresh serves the new pass's rows."""
        self._touched, self._waiting = [], []
        if self.table is not None:
            self.table.clear()
