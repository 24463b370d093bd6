"""Marker events: the positive signal that everything produced before them was delivered.

One marker per topic partition (its source hashes there), later than every event and with an eid far from
theirs: once a partition's marker arrived, everything produced into that partition before it was delivered,
and any duplicate came before it. This replaces "wait a while, then nothing more came", which races with a
slow broker."""

from __future__ import annotations

import numpy as np

from streamgnn.events import EventBatch
from streamgnn.partition import hash_partition

MARKER_EID = 10**9  # markers' eids: MARKER_EID + topic partition, far from the events'


def markers(partitions: int, after: float) -> EventBatch:
    """One marker event for each of ``partitions`` topic partitions, later than ``after``."""
    candidates = np.arange(10**6, 10**6 + 64 * partitions)
    parts = hash_partition(candidates, partitions)
    src = np.array([candidates[parts == p][0] for p in range(partitions)])
    return EventBatch.from_columns(
        src=src, dst=src, t=np.full(partitions, after + 1.0), eid=MARKER_EID + np.arange(partitions)
    )


def without_markers(eids: np.ndarray) -> np.ndarray:
    return eids[eids < MARKER_EID]
