"""Per-snapshot metrics of the snapshot trainer (and of the baselines scored the same way), and their plot.

Link metrics reuse the online trainer's definitions (``streamgnn.train.metrics``): AUC and AP pool each
snapshot's positives against all their negatives, MRR ranks each positive among its own negatives (the
``NextLinks`` layout: ``q`` negatives per positive, in positive order).

    >>> import numpy as np
    >>> m = link_snapshot_metrics(np.array([2.0, 0.5, 1.0]), np.array([1.0, 0.0, 0.0]), t=1.0, loss=0.3)
    >>> m.auc, m.mrr
    (1.0, 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..train.metrics import link_metrics, reciprocal_ranks


@dataclass(frozen=True)
class SnapshotMetrics:
    """One scored snapshot: ``loss`` and the task's metrics (NaN where they do not apply)."""

    index: int
    t: float
    phase: str  # "train", "test" (offline) or "online"
    loss: float
    mse: float = math.nan
    accuracy: float = math.nan
    auc: float = math.nan
    ap: float = math.nan
    mrr: float = math.nan


@dataclass
class SnapshotTrainResult:
    """Every scored snapshot, the wall time, the last checkpoint written and ``summary``: the mean of each
    metric per phase (``test_mse``, ``online_auc``...)."""

    metrics: list[SnapshotMetrics]
    seconds: float
    checkpoint: Path | None = None
    summary: dict = field(default_factory=dict)

    def mean(self, name: str, phase: str | None = None) -> float:
        values = [getattr(m, name) for m in self.metrics if phase is None or m.phase == phase]
        values = [v for v in values if not math.isnan(v)]
        return float(np.mean(values)) if values else math.nan


def link_snapshot_metrics(logits: np.ndarray, labels: np.ndarray, t: float, loss: float) -> SnapshotMetrics:
    """AUC and AP of positives against all their negatives, MRR of each against its own (NextLinks layout)."""
    pos = labels == 1
    n_pos = int(pos.sum())
    if not n_pos:
        return SnapshotMetrics(-1, t, "", loss)
    neg = logits[~pos].reshape(n_pos, -1)  # the layout of NextLinks: q negatives per positive, in order
    m = link_metrics(logits[pos], neg.reshape(-1), reciprocal_ranks(logits[pos], neg))
    return SnapshotMetrics(-1, t, "", loss, auc=m.auc, ap=m.ap, mrr=m.mrr)


def plot_metrics(metrics: list[SnapshotMetrics], task: str, path: str | Path) -> Path:
    """Loss and the task's metric per snapshot, as a PNG (Agg; touches no global backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(9, 5), tight_layout=True)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    names = {"regression": ("mse",), "classification": ("accuracy",), "link": ("auc", "ap", "mrr")}
    for phase in ("train", "test", "online"):
        ms = [m for m in metrics if m.phase == phase]
        if not ms:
            continue
        x = [m.index for m in ms]
        for name in names[task]:
            top.plot(x, [getattr(m, name) for m in ms], marker=".", label=f"{name} ({phase})")
        bottom.plot(x, [m.loss for m in ms], marker=".", label=phase)
    top.set_ylabel("metric per snapshot")
    top.legend(loc="best")
    top.grid(alpha=0.3)
    bottom.set_ylabel("loss")
    bottom.set_xlabel("snapshot")
    bottom.grid(alpha=0.3)
    fig.savefig(path, dpi=110)
    return path
