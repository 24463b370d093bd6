"""Labels that arrive on a stream, and the chronological 70/15/15 split they are scored on.

A label is a value attached to a node (a Wikipedia editor banned after an edit) or to an edge (the sign of
a Bitcoin rating) at a time. What predicts it may only read the stream strictly before that time
(``features``, ``embed``): a label never leaks into its own inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..events import EventBatch


@dataclass(frozen=True)
class Labels:
    """``n`` labels in time order: ``node`` (external ids; an edge label's source), ``t``, ``y`` (int64
    classes, float64 values, or ``[n, C]`` rows of a distribution: node affinity) and, for edge labels,
    ``dst``; ``origin``, where each was read (a file's line, a message's offset: what a dead letter about
    it names), when it was read from records. ``other_end``: for a node label read from an edge event
    (JODIE's label column: the editor's state at this edit), that edge's other end (the page); what a
    head may read beside the node's own state (``embed_at_labels(other_end=True)``), never a feature of
    the baselines'. None for edge labels (their other end is ``dst``) and labels sent on their own."""

    node: np.ndarray
    t: np.ndarray
    y: np.ndarray
    dst: np.ndarray | None = None
    origin: np.ndarray | None = None
    other_end: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.node)
        if self.dst is not None and self.other_end is not None:
            raise ConfigError("Labels.other_end is a node label's: an edge label's other end is its dst")
        columns = {"t": self.t, "y": self.y}
        optional = (("dst", self.dst), ("origin", self.origin), ("other_end", self.other_end))
        columns.update({k: v for k, v in optional if v is not None})
        for name, column in columns.items():
            rows_of_vectors = name == "y" and np.ndim(column) == 2  # a distribution per label (affinity)
            if (np.ndim(column) != 1 and not rows_of_vectors) or len(column) != n:
                raise ConfigError(f"Labels.{name} has shape {np.shape(column)}, need ({n},) like Labels.node")
        if n and np.any(np.diff(self.t) < 0):
            raise ConfigError("Labels must be sorted by time (t non-decreasing)")
        if not np.all(np.isfinite(np.asarray(self.t, np.float64))):
            raise ConfigError("Labels.t holds a NaN or infinite time")

    def __len__(self) -> int:
        return len(self.node)

    @property
    def on_edges(self) -> bool:
        return self.dst is not None

    @classmethod
    def of_events(cls, events: EventBatch, y: np.ndarray, *, on_edges: bool) -> Labels:
        """One label per event of a time-ordered batch (a dataset's label column): the edge's, or its
        source node's at the event's time (JODIE's "banned after this edit"), the event's destination
        kept as its ``other_end``."""
        if on_edges:
            return cls(events.src, events.t, np.asarray(y), events.dst)
        return cls(events.src, events.t, np.asarray(y), other_end=events.dst)

    def take(self, rows) -> Labels:
        dst, origin, other = (None if c is None else c[rows] for c in (self.dst, self.origin, self.other_end))
        return Labels(self.node[rows], self.t[rows], self.y[rows], dst, origin, other)


@dataclass(frozen=True)
class LabelSplit:
    """Row indices of the labels in each part, and the part boundaries (times): train is ``t <=
    val_time``, validation ``t <= test_time``, test the rest, as the link task's ``ChronologicalSplit``."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    val_time: float
    test_time: float

    @classmethod
    def by_time(
        cls, labels: Labels, stream_t: np.ndarray | None = None, *, val: float = 0.15, test: float = 0.15
    ) -> LabelSplit:
        """Boundaries at the ``1 - val - test`` and ``1 - test`` quantiles of ``stream_t`` (the events'
        times, so the link model trains on the same period the labels do), or of the labels' own times."""
        if not (val > 0 and test > 0 and val + test < 1):
            raise ConfigError(f"need 0 < val, 0 < test and val + test < 1, got val={val}, test={test}")
        times = labels.t if stream_t is None else stream_t
        if not len(times):
            raise ConfigError("cannot split an empty stream")
        val_time, test_time = np.quantile(times, [1 - val - test, 1 - test])
        part = np.where(labels.t <= val_time, 0, np.where(labels.t <= test_time, 1, 2))
        where = np.flatnonzero
        return cls(where(part == 0), where(part == 1), where(part == 2), float(val_time), float(test_time))
