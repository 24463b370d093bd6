"""Simple stream features of each label's node or edge, computed online and causally: only events strictly
before the label's time are counted (events at the same time as a label, the labelled edge itself
included, are not), so a label never leaks into the features that predict it.

Per node: ``degree`` (events it took part in), ``activity`` (those events decayed by ``exp(-age / tau)``),
``recency`` (time since its last event) and ``unseen`` (no event yet). Per edge: both ends' node features
(``src_``, ``dst_``), the pair's past events (``pair_count``) and, when the events carry weights (ratings),
the "reputation" features: the rater's past mean rating given and the ratee's past mean rating received,
each with a flag for "none yet" (a node with no history reads 0 and the flag).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..events import EventBatch
from .labels import Labels

NODE = ("degree", "activity", "recency", "unseen")
REPUTATION = ("rater_mean_given", "rater_gave_none", "ratee_mean_received", "ratee_received_none")


@dataclass(frozen=True)
class StreamFeatures:
    """``x`` float32 ``[n_labels, len(names)]``, one row per label."""

    x: np.ndarray
    names: tuple[str, ...]

    def select(self, names: tuple[str, ...]) -> np.ndarray:
        """The columns ``names`` (e.g. ``REPUTATION``)."""
        missing = [n for n in names if n not in self.names]
        if missing:
            raise ConfigError(f"no stream feature {missing[0]!r}; there are {', '.join(self.names)}")
        return self.x[:, [self.names.index(n) for n in names]]


class _State:
    """What the sweep remembers per node (dense codes) and per pair."""

    def __init__(self, n: int, tau: float) -> None:
        self.tau = tau
        self.degree = [0] * n
        self.activity = [0.0] * n
        self.last = [math.nan] * n
        self.given = [[0.0, 0] for _ in range(n)]  # [sum, count] of weights on edges out of a node
        self.received = [[0.0, 0] for _ in range(n)]
        self.pairs: dict[tuple[int, int], int] = {}

    def touch(self, node: int, t: float) -> None:
        last = self.last[node]
        decay = 1.0 if math.isnan(last) else math.exp(-(t - last) / self.tau)
        self.activity[node] = self.activity[node] * decay + 1.0
        self.degree[node] += 1
        self.last[node] = t

    def apply(self, s: int, d: int, t: float, w: float | None) -> None:
        self.touch(s, t)
        if d != s:
            self.touch(d, t)
        self.pairs[(s, d)] = self.pairs.get((s, d), 0) + 1
        if w is not None:
            self.given[s][0] += w
            self.given[s][1] += 1
            self.received[d][0] += w
            self.received[d][1] += 1

    def node(self, node: int, t: float) -> list[float]:
        last = self.last[node]
        if math.isnan(last):
            return [0.0, 0.0, 0.0, 1.0]
        age = t - last
        activity = self.activity[node] * math.exp(-age / self.tau)
        return [math.log1p(self.degree[node]), math.log1p(activity), math.log1p(max(age, 0.0)), 0.0]

    def reputation(self, s: int, d: int) -> list[float]:
        (gs, gn), (rs, rn) = self.given[s], self.received[d]
        return [gs / gn if gn else 0.0, float(gn == 0), rs / rn if rn else 0.0, float(rn == 0)]


def stream_features(events: EventBatch, labels: Labels, *, tau: float = 86400.0) -> StreamFeatures:
    """The features of every label from ``events`` (time-ordered edge additions) strictly before it
    (module docstring); ``tau``: the activity's decay time, in the stream's time unit (default a day of
    seconds). Reputation features only when ``events.weight`` is set and the labels are on edges."""
    if not tau > 0:
        raise ConfigError(f"tau must be > 0, got {tau}")
    if len(events) and np.any(np.diff(events.t) < 0):
        raise ConfigError("events must be sorted by time (EventBatch.sorted_by_time())")
    ends = [events.src, events.dst, labels.node] + ([labels.dst] if labels.on_edges else [])
    _, codes = np.unique(np.concatenate(ends), return_inverse=True)
    n_ev, n_lab = len(events), len(labels)
    src, dst = codes[:n_ev].tolist(), codes[n_ev : 2 * n_ev].tolist()
    node = codes[2 * n_ev : 2 * n_ev + n_lab].tolist()
    other = codes[2 * n_ev + n_lab :].tolist() if labels.on_edges else None
    times = events.t.tolist()
    weight = events.weight.tolist() if events.weight is not None else None
    rated = weight is not None and labels.on_edges
    state = _State(int(codes.max()) + 1 if len(codes) else 0, float(tau))
    before = np.searchsorted(events.t, labels.t, side="left").tolist()  # events strictly before each label
    rows, e = [], 0
    for i, t in enumerate(labels.t.tolist()):
        while e < before[i]:
            state.apply(src[e], dst[e], times[e], None if weight is None else weight[e])
            e += 1
        row = state.node(node[i], t)
        if other is not None:
            s, d = node[i], other[i]
            row += state.node(d, t) + [math.log1p(state.pairs.get((s, d), 0))]
            if rated:
                row += state.reputation(s, d)
        rows.append(row)
    if not labels.on_edges:
        names = NODE
    else:
        names = tuple(f"src_{n}" for n in NODE) + tuple(f"dst_{n}" for n in NODE) + ("pair_count",)
        names += REPUTATION if rated else ()
    x = np.asarray(rows, np.float32).reshape(n_lab, len(names))
    return StreamFeatures(x, names)
