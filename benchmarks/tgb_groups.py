"""Where TGB's MRR is won and lost: each test edge grouped by the source's history with the true
destination, and simple heuristics ranked on the same edges against the same negatives (``bench quality
--protocol tgb --tgb-groups``).

A test edge is a **repeat** when its source linked to the true destination before (an earlier batch), else
**new**; a repeat's **recency rank** is 1 + the number of distinct destinations the source linked to since it
last linked to the true one (1: the destination it linked to last). The heuristics, ranked like TGB's
``Evaluator`` (a tie with the positive counts half):

- ``recency``: destinations by the time the source last linked to them; the ones it never linked to after
  those, by their recent popularity (links in the last ``POPULAR_WINDOW`` events, any source).
- ``frequency``: by how often the source linked to them; the never-linked ones by the same popularity.
- ``edgebank``: TGB's EdgeBank (unlimited memory): 1 if the source ever linked to it, else 0.

Each sees only earlier batches, as the model does in the stricter view (``mrr_tgb_batch``: a batch is
scored, then observed), whose ranks it is compared with. Dense per-source tables: the dataset's sources
times destinations must fit ``MAX_CELLS``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch

POPULAR_WINDOW = 2_000  # events: a destination's "recent popularity" counts its links among the last these
MAX_CELLS = 100_000_000  # sources x destinations held densely
HEURISTICS = ("recency", "frequency", "edgebank")
GROUPS = ("repeat_rank_1", "repeat_rank_2", "repeat_rank_3", "repeat_rank_4_10", "repeat_rank_over_10", "new")


def group_of(repeat: bool, rank: int) -> str:
    """The group name of an edge (its recency rank read only for repeats)."""
    if not repeat:
        return "new"
    if rank <= 3:
        return f"repeat_rank_{rank}"
    return "repeat_rank_4_10" if rank <= 10 else "repeat_rank_over_10"


def reciprocal_rank(pos: np.ndarray, neg: np.ndarray) -> float:
    """1 / rank of the positive among the negatives on a lexicographic key (rows: key parts, most
    significant first), ties counted half: TGB's ``Evaluator``'s rule."""
    above = np.zeros(neg.shape[1], bool)
    equal = np.ones(neg.shape[1], bool)
    for p, n in zip(pos, neg, strict=True):
        above |= equal & (n > p)
        equal &= n == p
    return 1.0 / (1.0 + above.sum() + 0.5 * equal.sum())


class History:
    """Per source, when it last linked to each destination and how often; per destination its recent
    popularity (links among the last ``window`` events). ``observe`` a batch after its edges are scored."""

    def __init__(self, events: EventBatch, window: int = POPULAR_WINDOW) -> None:
        self.sources = np.unique(events.src)
        self.dests = np.unique(events.dst)
        if len(self.sources) * len(self.dests) > MAX_CELLS:
            raise ConfigError(
                f"--tgb-groups: {len(self.sources):,} sources x {len(self.dests):,} destinations is over "
                f"{MAX_CELLS:,} cells"
            )
        self.last = np.full((len(self.sources), len(self.dests)), -np.inf)
        self.count = np.zeros((len(self.sources), len(self.dests)), np.int64)
        self.popular = np.zeros(len(self.dests), np.int64)
        self.window, self.recent = window, deque()

    def index(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row (source) and column (destination) indices; a destination never in the stream is -1."""
        col = np.searchsorted(self.dests, dst).clip(max=len(self.dests) - 1)
        return np.searchsorted(self.sources, src), np.where(self.dests[col] == dst, col, -1)

    def observe(self, batch: EventBatch) -> None:
        rows, cols = self.index(batch.src, batch.dst)
        np.maximum.at(self.last, (rows, cols), batch.t)
        np.add.at(self.count, (rows, cols), 1)
        np.add.at(self.popular, cols, 1)
        self.recent.extend(cols.tolist())
        while len(self.recent) > self.window:
            self.popular[self.recent.popleft()] -= 1

    def edge(self, src: int, dst: int, negatives: np.ndarray) -> tuple[str, dict[str, float]]:
        """One test edge's group and each heuristic's reciprocal rank against ``negatives``."""
        (row,), cols = self.index(np.array([src]), np.concatenate([[dst], negatives]))
        ok = cols >= 0
        last = np.where(ok, self.last[row, cols.clip(0)], -np.inf)
        count = np.where(ok, self.count[row, cols.clip(0)], 0)
        popular = np.where(ok, self.popular[cols.clip(0)], -1)
        seen = last > -np.inf
        repeat = bool(seen[0])
        rank = int((self.last[row] > last[0]).sum()) + 1
        keys = {
            "recency": np.stack([seen, np.where(seen, last, popular)]),
            "frequency": np.stack([count, np.where(seen, 0, popular)]),
            "edgebank": seen[None].astype(float),
        }
        return group_of(repeat, rank), {k: reciprocal_rank(v[:, :1], v[:, 1:]) for k, v in keys.items()}


class Diagnosis:
    """Collects, per test edge, its group, our reciprocal rank and the heuristics' (``History``)."""

    def __init__(self, events: EventBatch, before: np.ndarray, window: int = POPULAR_WINDOW) -> None:
        self.history = History(events, window)
        self.history.observe(events.take(before))
        self.rows: list[tuple[str, float, dict[str, float]]] = []

    def batch(self, batch: EventBatch, negatives: list[np.ndarray], ours: list[float]) -> None:
        """Score ``batch``'s edges (``ours``: the model's reciprocal ranks), then observe the batch."""
        for s, d, n, rr in zip(batch.src, batch.dst, negatives, ours, strict=True):
            group, heur = self.history.edge(int(s), int(d), np.asarray(n, np.int64))
            self.rows.append((group, rr, heur))
        self.history.observe(batch)

    def table(self) -> dict[str, dict]:
        """Per group (and ``all``): the edge count, their share, our MRR and each heuristic's."""
        out = {}
        for name in (*GROUPS, "repeat", "all"):
            mine = [r for r in self.rows if name in ("all", r[0]) or (name == "repeat" and r[0] != "new")]
            row = {"edges": len(mine), "share": len(mine) / max(len(self.rows), 1)}
            row["ours"] = float(np.mean([r[1] for r in mine])) if mine else float("nan")
            for h in HEURISTICS:
                row[h] = float(np.mean([r[2][h] for r in mine])) if mine else float("nan")
            out[name] = row
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """Per-edge values in test order (for ``np.savez``): group, ours and each heuristic's rr."""
        cols = {"group": np.array([r[0] for r in self.rows]), "ours": np.array([r[1] for r in self.rows])}
        cols.update({h: np.array([r[2][h] for r in self.rows]) for h in HEURISTICS})
        return cols
