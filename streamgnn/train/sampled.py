"""Figures of an online evaluation that scores a sample of the events, each with its sample size and a 95%
interval: a figure from a few hundred events is an estimate, and it says how good an estimate it is.

``EvalSample`` keeps a uniform reservoir of the scored events' per-event scores (Algorithm R: every scored
event equally likely to be kept, whatever the stream's length) for the learned model and each baseline alike,
rows aligned, so that all of them are compared on the same events. AP (each positive against its one
negative, pooled) gets a percentile bootstrap interval over events; MRR, a mean of per-event reciprocal
ranks, a normal-approximation interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .metrics import average_precision

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A figure from ``n`` sampled events and its 95% interval ``[low, high]`` (NaN: too few events)."""

    value: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        """``0.9812 [0.9790, 0.9833] (n=1,204)``."""
        return f"{self.value:.4f} [{self.low:.4f}, {self.high:.4f}] (n={self.n:,})"

    def as_dict(self) -> dict:
        return asdict(self)


def pooled_ap(pos: np.ndarray, neg: np.ndarray) -> float:
    """AP of positives against their negatives (NaN negatives skipped), pooled over the events."""
    neg = neg[~np.isnan(neg)]
    labels = np.r_[np.ones(len(pos), bool), np.zeros(len(neg), bool)]
    return average_precision(np.concatenate([pos, neg]), labels)


def ap_estimate(pos: np.ndarray, neg: np.ndarray, resamples: int = 200, seed: int = 0) -> Estimate:
    """Pooled AP with a percentile bootstrap interval (events resampled with replacement)."""
    n = len(pos)
    value = pooled_ap(pos, neg) if n else math.nan
    if n < 2:
        return Estimate(value, math.nan, math.nan, n)
    rng = np.random.default_rng(seed)
    draws = [pooled_ap(pos[i], neg[i]) for i in (rng.integers(0, n, n) for _ in range(resamples))]
    low, high = np.nanpercentile(draws, [2.5, 97.5])
    return Estimate(value, float(low), float(high), n)


def mean_estimate(values: np.ndarray) -> Estimate:
    """Mean (NaN values skipped) with a normal-approximation interval."""
    values = values[~np.isnan(values)]
    n = len(values)
    if n < 2:
        return Estimate(float(values.mean()) if n else math.nan, math.nan, math.nan, n)
    mean, half = float(values.mean()), Z95 * float(values.std(ddof=1)) / math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, n)


class EvalSample:
    """A uniform reservoir of at most ``capacity`` scored events: per model (the learned one and each
    baseline) the ``(pos, neg, rr)`` of the same events. ``seen`` counts every event offered."""

    def __init__(self, capacity: int = 20_000, seed: int = 0) -> None:
        self.capacity, self.seen = capacity, 0
        self._rng = np.random.default_rng(seed)
        self._rows: dict[str, np.ndarray] = {}  # name -> float64 [kept, 3]

    def add(self, scores: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Offer one step's scored events: ``{name: (pos, neg, rr)}``, the same events for every name."""
        if not scores:
            return
        rows = {name: np.column_stack([np.asarray(x, np.float64) for x in s]) for name, s in scores.items()}
        m = len(next(iter(rows.values())))
        kept = len(next(iter(self._rows.values()))) if self._rows else 0
        room = min(m, self.capacity - kept)
        for name, r in rows.items():  # fill first
            self._rows[name] = np.concatenate([self._rows.get(name, np.zeros((0, 3))), r[:room]])
        # then Algorithm R: the i-th event offered replaces a random kept one with probability capacity / i
        if room < m:
            index = self.seen + np.arange(room, m) + 1
            slot = (self._rng.random(m - room) * index).astype(np.int64)
            take = slot < self.capacity
            for name, r in rows.items():
                self._rows[name][slot[take]] = r[room:][take]
        self.seen += m

    def figures(self) -> dict[str, dict[str, Estimate]]:
        """``{name: {"ap": Estimate, "mrr": Estimate}}`` over the kept events."""
        return {
            name: {"ap": ap_estimate(r[:, 0], r[:, 1]), "mrr": mean_estimate(r[:, 2])}
            for name, r in self._rows.items()
        }
