"""How good a partitioning is, now and over stream time: cut, replication, balance, moves.

``partition_report(store)`` measures the store's current assignment; ``PartitionTimeline`` records a
report every so many edges as a stream is ingested and draws them (``plot(path)``, a PNG).

- edge cut: fraction of edges (both ends placed, repeated edges counted each time) whose ends lie in
  different partitions; for vertex partitioners only.
- replication factor: partitions holding a copy of a vertex, averaged over vertices with an edge, with
  every edge held where the partitioner places it (its own partition for HDRF/DBH, its source's for
  vertex partitioners, as the router sends it). 1.0: nothing replicated.
- balance: max over mean of the partitions' vertices (replicas for edge partitioners) and edges.

    >>> from streamgnn import EventBatch
    >>> from streamgnn.store import StoreConfig, TemporalGraphStore
    >>> store = TemporalGraphStore(StoreConfig(num_partitions=2, partitioner="ldg"))
    >>> events = EventBatch.from_columns(src=[1, 2, 3], dst=[2, 3, 4], t=[0.0, 1.0, 2.0], eid=[0, 1, 2])
    >>> _ = store.ingest(events)
    >>> partition_report(store).edge_cut
    0.3333333333333333
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from numba import njit

from ..errors import ConfigError
from .base import Partitioner


@njit(cache=True)
def replica_counts(src, dst, part, n, k):
    """(replicas per partition, vertices with an edge) when edge e lies in partition ``part[e]``."""
    words = (k + 63) // 64
    bits = np.zeros((n, words), np.uint64)
    for e in range(len(src)):
        p = part[e]
        if p < 0:
            continue
        bit = np.uint64(1) << np.uint64(p & 63)
        bits[src[e], p >> 6] |= bit
        bits[dst[e], p >> 6] |= bit
    per = np.zeros(k, np.int64)
    touched = 0
    for v in range(n):
        any_bit = False
        for p in range(k):
            if (bits[v, p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
                per[p] += 1
                any_bit = True
        touched += any_bit
    return per, touched


def _balance(loads: np.ndarray) -> float:
    mean = loads.mean() if len(loads) else 0.0
    return float(loads.max() / mean) if mean > 0 else 1.0


@dataclass(frozen=True)
class PartitionReport:
    method: str
    num_partitions: int
    vertices: int
    edges: int
    pending: int
    edge_cut: float | None
    replication_factor: float
    vertex_balance: float
    edge_balance: float
    vertices_moved: int
    moves_by_reason: dict = field(default_factory=dict)
    vertex_loads: list = field(default_factory=list)
    edge_loads: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def measure(
    partitioner: Partitioner, labels: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> PartitionReport:
    """The report for edges ``src -> dst`` (internal ids, in edge-id order) under ``labels``."""
    k, n = partitioner.num_partitions, len(labels)
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    part = partitioner.edge_partitions(labels, src, np.arange(len(src)))
    per, touched = replica_counts(src, dst, part, n, k)
    edge_loads = np.bincount(part[part >= 0], minlength=k)
    cut = None
    if partitioner.config.places_vertices:
        a, b = labels[src], labels[dst]
        ok = (a >= 0) & (b >= 0)
        cut = float((a != b)[ok].mean()) if ok.any() else 0.0
        vertex_loads = np.bincount(labels[labels >= 0], minlength=k)
    else:
        vertex_loads = per
    state = getattr(partitioner, "rebalance_state", None)
    return PartitionReport(
        method=partitioner.name,
        num_partitions=k,
        vertices=n,
        edges=len(src),
        pending=partitioner.pending,
        edge_cut=cut,
        replication_factor=float(per.sum() / touched) if touched else 1.0,
        vertex_balance=_balance(vertex_loads),
        edge_balance=_balance(edge_loads),
        vertices_moved=partitioner.moved,
        moves_by_reason={} if state is None else dict(state.by_reason),
        vertex_loads=vertex_loads.tolist(),
        edge_loads=edge_loads.tolist(),
    )


def partition_report(store) -> PartitionReport:
    """The report of a ``TemporalGraphStore``'s current partitioning (every stored edge counts)."""
    table = store.edges()
    return measure(store.partitioner, store.partition[: store.num_nodes], table.src, table.dst)


MAX_ROWS = 1_000  # timeline rows kept (see ``ThinningRows``)


class ThinningRows(list):
    """A list of timeline rows that never holds more than ``max_rows``: one past it, every other row
    between the first and the newest is dropped. A router appends a row per checkpoint for as long as it
    runs (weeks), so its timeline keeps the whole run's shape, older parts at coarser resolution, in
    bounded memory."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        super().__init__()
        if max_rows < 2:
            raise ConfigError(f"max_rows must be >= 2 (the first and the newest row), got {max_rows}")
        self.max_rows = max_rows

    def append(self, row: dict) -> None:
        super().append(row)
        if len(self) > self.max_rows:
            del self[1:-1:2]


class PartitionTimeline:
    """Reports over stream time: call ``record(store)`` after each batch; a row is kept each time the
    store has ``every_edges`` more edges than at the last row (each row costs a pass over the edges).
    ``rows`` holds at most ``max_rows`` (``ThinningRows``)."""

    def __init__(self, every_edges: int = 100_000, max_rows: int = MAX_ROWS) -> None:
        self.every_edges = every_edges
        self.rows = ThinningRows(max_rows)
        self._last = -every_edges

    def record(self, store, force: bool = False) -> PartitionReport | None:
        if not force and store.num_edges - self._last < self.every_edges:
            return None
        self._last = store.num_edges
        report = partition_report(store)
        self.rows.append({"stream_time": store.watermark, **report.to_dict()})
        return report

    def plot(self, path, title: str | None = None) -> None:
        """Cut (or replication factor), balance and the vertices of each partition (or, where a rebalancer
        moved some, vertices moved) against edges ingested, as a PNG. The cut panel draws what hashing
        would cut (``1 - 1/k`` of the edges) and the balance panel a perfect balance (1.0), so a reader sees
        what the partitioner buys (Agg; touches no global backend)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import EngFormatter, MaxNLocator

        rows = self.rows
        x = [r["edges"] for r in rows]
        k, method = (rows[-1]["num_partitions"], rows[-1]["method"]) if rows else (1, "")
        fig = Figure(figsize=(13, 3.8), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, 3)
        if rows and rows[0]["edge_cut"] is not None:
            axes[0].plot(x, [r["edge_cut"] for r in rows], marker=".", label=method)
            axes[0].axhline(1 - 1 / k, color="gray", linestyle="--", label=f"hashing (1 - 1/{k})")
            axes[0].set_ylim(0, 1)
            axes[0].set_ylabel("edge-cut fraction")
            axes[0].set_title("edges cut (lower is better)")
        else:
            axes[0].plot(x, [r["replication_factor"] for r in rows], marker=".", label=method)
            axes[0].axhline(1.0, color="gray", linestyle="--", label="no replicas (1.0)")
            axes[0].set_ylabel("replication factor")
            axes[0].set_title("vertex copies per vertex (lower is better)")
        axes[1].plot(x, [r["vertex_balance"] for r in rows], marker=".", label="vertices")
        axes[1].plot(x, [r["edge_balance"] for r in rows], marker=".", label="edges")
        axes[1].axhline(1.0, color="gray", linestyle="--", label="perfect balance")
        axes[1].set_ylabel("max / mean load")
        axes[1].set_title("load balance (1.0 is perfect)")
        if any(r["vertices_moved"] for r in rows):
            axes[2].plot(x, [r["vertices_moved"] for r in rows], marker=".", label="moved")
            axes[2].set_ylabel("vertices moved (total)")
            axes[2].set_title("vertices moved by rebalancing")
        else:  # nothing ever moved: a flat zero says less than where the vertices went
            for p in range(k if rows else 0):
                axes[2].plot(x, [r["vertex_loads"][p] for r in rows], label=f"partition {p}")
            axes[2].set_ylabel("vertices placed")
            axes[2].set_title("vertices per partition (none moved)")
        for ax in axes:
            ax.set_xlabel("edges ingested")
            ax.xaxis.set_major_locator(MaxNLocator(5))
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
        fig.suptitle(title or f"partitioning over the stream ({method})")
        fig.savefig(path, dpi=110)


__all__ = ["PartitionReport", "PartitionTimeline", "measure", "partition_report", "replica_counts"]
