"""Link-prediction metrics (AP, AUC, MRR) and their running windows over a stream.

AP and AUC follow scikit-learn's definitions exactly (tied scores form one threshold; AUC counts a tie
as half a win), so figures are comparable with published TGN numbers without depending on sklearn.
MRR ranks each positive among its own negatives, ties counting half, as TGB does.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, astuple, dataclass

import numpy as np
import torch


def average_precision(scores, labels) -> float:
    """Area under the precision-recall curve as a step function over distinct score thresholds."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels, bool)
    n_pos = int(labels.sum())
    if n_pos == 0 or n_pos == len(labels):
        return math.nan
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    last = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]  # end of each tie group
    tp = np.cumsum(labels)[last]
    precision = tp / (last + 1)
    return float(np.sum(np.diff(np.r_[0, tp]) * precision) / n_pos)


def roc_auc(scores, labels) -> float:
    """Probability that a random positive outscores a random negative (ties: half), via average ranks."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels, bool)
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    avg_rank = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # 1-based, averaged within ties
    ranks = np.empty(len(scores))
    ranks[order] = avg_rank
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def reciprocal_ranks(pos, neg, valid=None) -> np.ndarray:
    """``1 / rank`` of ``pos[i]`` among ``neg[i, :]`` (where ``valid``); NaN for a row with no negative."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    valid = np.ones(neg.shape, bool) if valid is None else np.asarray(valid, bool)
    above = ((neg > pos[:, None]) & valid).sum(1)
    ties = ((neg == pos[:, None]) & valid).sum(1)
    rr = 1.0 / (1.0 + above + 0.5 * ties)
    return np.where(valid.any(1), rr, np.nan)


@dataclass(frozen=True)
class LinkMetrics:
    """AP and AUC of positives against one negative each, MRR against many; ``events``: positives scored."""

    ap: float
    auc: float
    mrr: float
    events: int

    def as_dict(self) -> dict:
        return asdict(self)


def link_metrics(pos, neg, rr) -> LinkMetrics:
    """Pooled metrics: ``pos``/``neg`` scores (NaN negatives are skipped), ``rr`` reciprocal ranks."""
    pos, neg, rr = (np.asarray(x, np.float64) for x in (pos, neg, rr))
    neg = neg[~np.isnan(neg)]
    scores = np.concatenate([pos, neg])
    labels = np.r_[np.ones(len(pos), bool), np.zeros(len(neg), bool)]
    rr = rr[~np.isnan(rr)]
    return LinkMetrics(
        average_precision(scores, labels),
        roc_auc(scores, labels),
        float(rr.mean()) if len(rr) else math.nan,
        len(pos),
    )


def batch_mean_metrics(batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> LinkMetrics:
    """TGN's convention: AP and AUC averaged over batches (one negative per positive), MRR over events."""
    per_batch = [link_metrics(*b) for b in batches if len(b[0])]
    rr = np.concatenate([b[2] for b in batches]) if batches else np.zeros(0)
    rr = rr[~np.isnan(rr)]
    return LinkMetrics(
        _nanmean([m.ap for m in per_batch]),
        _nanmean([m.auc for m in per_batch]),
        float(rr.mean()) if len(rr) else math.nan,
        sum(m.events for m in per_batch),
    )


def losses_to_baselines(model: str, metrics: LinkMetrics, baselines: dict[str, LinkMetrics]) -> list[str]:
    """One line per metric (AP, MRR) on which ``model`` scores below a baseline, e.g. for a run summary."""
    flags = []
    for name, base in baselines.items():
        for metric in ("ap", "mrr"):
            ours, theirs = getattr(metrics, metric), getattr(base, metric)
            if ours < theirs:  # (False when either is NaN: nothing to compare)
                flags.append(f"{model} loses to {name} on {metric.upper()}: {ours:.4f} < {theirs:.4f}")
    return flags


def _nanmean(values: list[float]) -> float:
    arr = np.asarray(values, np.float64)
    arr = arr[~np.isnan(arr)]
    return float(arr.mean()) if len(arr) else math.nan


@dataclass(frozen=True)
class WindowMetrics:
    """Metrics of one window of the stream: ``end_events`` scored so far, stream times ``t_start..t_end``."""

    end_events: int
    t_start: float
    t_end: float
    ap: float
    auc: float
    mrr: float
    loss: float
    events: int
    events_per_s: float  # wall-clock throughput over the window (not part of the deterministic record)


MAX_WINDOWS = 10_000  # closed windows kept (at the default 10k events a window: the last 100M scored)
_SUMMED = ("ap", "auc", "mrr")


class RunningMetrics:
    """Collects per-batch scores and closes a window every ``window_events`` scored positives.

    A window's metrics are defined as the offline protocol's (``batch_mean_metrics``: AP and AUC averaged
    over its batches, MRR over its events), so online and offline figures compare directly. Windows close
    only at batch ends, so a window never splits a batch. ``state_dict`` holds the open window too, so a
    resumed run closes the same windows with the same values.

    A stream never ends, so only the last ``max_windows`` closed windows are kept (``windows``, for plots
    and monitoring; ``closed`` counts them all); ``summary`` covers every closed window through running
    event-weighted sums, so it does not depend on the cap.
    """

    def __init__(self, window_events: int, max_windows: int = MAX_WINDOWS) -> None:
        self.window_events = window_events
        self.windows: deque[WindowMetrics] = deque(maxlen=max_windows)
        self.closed = 0
        self.scored = 0
        self._totals = {name: [0.0, 0.0] for name in _SUMMED}  # name -> [sum of events * value, events]
        self._reset_open()

    def _reset_open(self) -> None:
        self._pos: list[np.ndarray] = []
        self._neg: list[np.ndarray] = []
        self._rr: list[np.ndarray] = []
        self._loss_sum = 0.0
        self._loss_batches = 0
        self._t = [math.inf, -math.inf]
        self._seconds = 0.0

    @property
    def open_events(self) -> int:
        return sum(len(p) for p in self._pos)

    def add(self, pos, neg, rr, t, loss: float, seconds: float) -> WindowMetrics | None:
        """Record one batch; returns the window it closed, if any."""
        self._pos.append(np.asarray(pos, np.float64))
        self._neg.append(np.asarray(neg, np.float64))
        self._rr.append(np.asarray(rr, np.float64))
        if len(t):
            self._t = [min(self._t[0], float(np.min(t))), max(self._t[1], float(np.max(t)))]
        if not math.isnan(loss):
            self._loss_sum += loss
            self._loss_batches += 1
        self._seconds += seconds
        self.scored += len(pos)
        return self.close() if self.open_events >= self.window_events else None

    def close(self) -> WindowMetrics | None:
        """Close the open window (e.g. at the end of the stream); None if it holds nothing."""
        n = self.open_events
        if not n and not self._loss_batches:
            return None
        m = batch_mean_metrics(list(zip(self._pos, self._neg, self._rr, strict=True)))
        loss = self._loss_sum / self._loss_batches if self._loss_batches else math.nan
        rate = n / self._seconds if self._seconds > 0 else math.nan
        window = WindowMetrics(self.scored, self._t[0], self._t[1], m.ap, m.auc, m.mrr, loss, n, rate)
        self._add_window(window)
        self._reset_open()
        return window

    def _add_window(self, window: WindowMetrics) -> None:
        self.windows.append(window)
        self.closed += 1
        for name, total in self._totals.items():
            value = getattr(window, name)
            if window.events and not math.isnan(value):
                total[0] += window.events * value
                total[1] += window.events

    def summary(self) -> LinkMetrics:
        """Event-weighted mean over every closed window, kept or not (the open one is not included)."""

        def mean(name: str) -> float:
            weighted, weight = self._totals[name]
            return weighted / weight if weight else math.nan

        return LinkMetrics(mean("ap"), mean("auc"), mean("mrr"), self.scored - self.open_events)

    def state_dict(self) -> dict:
        """Plain lists and float64 tensors only, so it loads with ``torch.load(weights_only=True)``."""
        return {
            "window_events": self.window_events,
            "scored": self.scored,
            "windows": [list(astuple(w)) for w in self.windows],
            "closed": self.closed,
            "totals": {name: list(total) for name, total in self._totals.items()},
            "pos": _cat(self._pos),
            "neg": _cat(self._neg),
            "rr": _cat(self._rr),
            "sizes": [len(p) for p in self._pos],
            "loss": [self._loss_sum, self._loss_batches],
            "t": list(self._t),
            "seconds": self._seconds,
        }

    def load_state_dict(self, state: dict) -> None:
        self.window_events = int(state["window_events"])
        self.scored = int(state["scored"])
        self.windows.clear()
        self.closed = 0
        self._totals = {name: [0.0, 0.0] for name in _SUMMED}
        for w in state["windows"]:  # (a checkpoint from before the totals were kept holds every window)
            self._add_window(WindowMetrics(*w))
        if "totals" in state:
            self.closed = int(state["closed"])
            self._totals = {name: [float(x) for x in total] for name, total in state["totals"].items()}
        self._reset_open()
        if len(state["pos"]):
            # One batch per saved size (a checkpoint from before sizes were kept: the open window as one).
            cuts = np.cumsum(state.get("sizes", [len(state["pos"])]))[:-1]
            self._pos, self._neg, self._rr = (
                list(np.split(state[k].numpy().copy(), cuts)) for k in ("pos", "neg", "rr")
            )
        self._loss_sum, self._loss_batches = float(state["loss"][0]), int(state["loss"][1])
        self._t = [float(x) for x in state["t"]]
        self._seconds = float(state["seconds"])


def _cat(parts: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0))
