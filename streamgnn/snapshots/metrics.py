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


TASK_METRICS = {"regression": ("mse",), "classification": ("accuracy",), "link": ("auc", "ap", "mrr")}
TASK_NAMES = {
    "regression": "node regression",
    "classification": "node classification",
    "link": "link prediction",
}


def plot_metrics(
    metrics: list[SnapshotMetrics],
    task: str,
    path: str | Path,
    title: str | None = None,
    baselines: dict[str, list[SnapshotMetrics]] | None = None,
) -> Path:
    """The task's metrics and the loss per snapshot, as a PNG (Agg; touches no global backend). Each
    baseline (a name and its metrics per snapshot, e.g. ``evaluate_links``'s) is drawn dashed beside the
    model in its metric's colour, so a reader sees where the model beats a memorization rule."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    path = Path(path)
    fig = Figure(figsize=(11, 6), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    colors = {name: f"C{i}" for i, name in enumerate(TASK_METRICS[task])}
    for phase, marker in (("train", "o"), ("test", "s"), ("online", ".")):
        ms = [m for m in metrics if m.phase == phase]
        if not ms:
            continue
        x = [m.index for m in ms]
        for name in TASK_METRICS[task]:
            values = [getattr(m, name) for m in ms]
            top.plot(x, values, marker=marker, color=colors[name], label=f"model {name.upper()} ({phase})")
        bottom.plot(x, [m.loss for m in ms], marker=marker, label=phase)
    for (base, ms), style in zip((baselines or {}).items(), ("--", ":", "-."), strict=False):
        x = [m.index for m in ms]
        for name in TASK_METRICS[task]:
            values = [getattr(m, name) for m in ms]
            top.plot(x, values, linestyle=style, color=colors[name], label=f"{base} {name.upper()}")
    top.set_ylabel("metric per snapshot")
    if task != "regression":
        top.set_ylim(0.0, 1.0)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # beside: lines stay visible
    top.grid(alpha=0.3)
    top.set_title(title or f"snapshot {TASK_NAMES[task]}: metrics per snapshot")
    bottom.set_ylabel("training loss")
    bottom.set_xlabel("snapshot (in stream time order)")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    bottom.grid(alpha=0.3)
    bottom.set_title("loss per snapshot", fontsize="medium")
    fig.savefig(path, dpi=110)
    return path
