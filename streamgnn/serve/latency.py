"""Arrival-to-queryable latency per event, summarized as percentiles without keeping every event."""

from __future__ import annotations

import math

import numpy as np


class LatencyTracker:
    """Latencies recorded per group of events that became queryable together (a batch), weighted by size.

    A batch's events share one arrival instant (when the source handed them over) and one queryable
    instant (when the table refresh holding them finished), so one (latency, count) pair per batch gives
    exact per-event percentiles.
    """

    def __init__(self) -> None:
        self._latency: list[float] = []
        self._count: list[int] = []

    def record(self, arrival_s: float, queryable_s: float, events: int) -> None:
        if events > 0:
            self._latency.append(queryable_s - arrival_s)
            self._count.append(events)

    @property
    def events(self) -> int:
        return int(sum(self._count))

    def percentile(self, q: float) -> float:
        """The latency (seconds) that ``q`` percent of events stayed within (NaN before any event)."""
        if not self._latency:
            return math.nan
        lat = np.asarray(self._latency)
        order = np.argsort(lat, kind="stable")
        cum = np.cumsum(np.asarray(self._count)[order])
        rank = max(1, math.ceil(q / 100.0 * cum[-1]))
        return float(lat[order][np.searchsorted(cum, rank)])
