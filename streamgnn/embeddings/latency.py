"""Arrival-to-queryable latency per event, summarized as percentiles in a fixed-size sketch.

A trainer or service runs for weeks: one record per batch would grow without bound, so latencies go into
a DDSketch (Datadog's quantile sketch): every percentile it answers is within ``RELATIVE_ACCURACY`` of
the exact per-event one, and it never holds more than ``BIN_LIMIT`` buckets, however long the stream.
"""

from __future__ import annotations

import math

from ddsketch import LogCollapsingLowestDenseDDSketch

RELATIVE_ACCURACY = 0.01  # a reported percentile is within 1% of the exact one
# Buckets kept at most. At 1% accuracy, 2048 buckets cover 1 µs to beyond a day without collapsing; past
# that the lowest buckets merge (only the smallest latencies lose accuracy, never p50 or p99).
BIN_LIMIT = 2048


class LatencyTracker:
    """Latencies recorded per group of events that became queryable together (a batch), weighted by size.

    A batch's events share one arrival instant (when the source handed them over) and one queryable
    instant (when the table refresh holding them finished), so one (latency, count) entry per batch gives
    per-event percentiles; the sketch keeps counts per latency bucket instead of the entries.
    """

    def __init__(self) -> None:
        self._sketch = LogCollapsingLowestDenseDDSketch(RELATIVE_ACCURACY, bin_limit=BIN_LIMIT)

    def record(self, arrival_s: float, queryable_s: float, events: int) -> None:
        if events > 0:
            # (a clock step backwards would make a negative latency; none is shorter than zero)
            self._sketch.add(max(0.0, queryable_s - arrival_s), events)

    @property
    def events(self) -> int:
        return int(self._sketch.count)

    def percentile(self, q: float) -> float:
        """The latency (seconds) that ``q`` percent of events stayed within, to ``RELATIVE_ACCURACY``
        (NaN before any event)."""
        if not self._sketch.count:
            return math.nan
        return float(self._sketch.get_quantile_value(q / 100.0))
