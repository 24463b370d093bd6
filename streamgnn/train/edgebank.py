"""EdgeBank (Poursafaei et al., NeurIPS 2022): predict a link iff the pair was seen before. No parameters.

The baseline every learned temporal link predictor must beat to be worth its cost. ``window=None`` is
EdgeBank with unlimited memory; ``window_ratio=r`` is the time-window variant: a pair counts as seen only if
its latest interaction lies within ``r`` times the time span seen so far (``newest - oldest`` event time) of
the newest event (TGB's ``fixed_time_window`` with ``time_window_ratio``, the span measured as the stream
goes). Pairs are directed, as in the paper. Scores are 1 or 0, so AP/AUC/MRR treat its ties as ties.

It is a ``LinkModel``: the trainer scores it on the very positives and negatives it scores the learned model
on (``TrainConfig.baselines``), so their metrics are comparable at a glance. Its memory is the store's edges
at ``attach`` (history, a restored checkpoint) plus every batch it observes; a checkpoint keeps the time
span. Sharded, each rank observes every batch whole (the window spans the whole stream) but keeps only the
pairs of the sources it owns (``holds``): those of the rows it scores, and those its shard holds, so a
resumed rank's bank answers its rows as before.

>>> import numpy as np
>>> bank = EdgeBank()
>>> bank.observe(np.array([0, 1]), np.array([2, 2]), np.array([1.0, 5.0]), None)
>>> bank.seen(np.array([0, 2, -1, 0]), np.array([2, 0, 2, 1])).tolist()  # directed; -1: an unknown node
[1.0, 0.0, 0.0, 0.0]
>>> recent = EdgeBank(window_ratio=0.5)
>>> recent.observe(np.array([0, 1]), np.array([2, 2]), np.array([1.0, 5.0]), None)
>>> recent.seen(np.array([0, 1]), np.array([2, 2])).tolist()  # seen since 5 - 0.5 * (5 - 1) = 3
[0.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..errors import ConfigError
from ..store import TemporalGraphStore
from .protocol import Candidates, JointTerm, StepInput

_MERGE_MIN = 4096  # newest pairs kept in a small sorted side array, merged into the main one when it grows


class EdgeBank:
    """Directed pairs seen so far with the time each was last seen; ``window_ratio`` for the windowed kind."""

    trainable = False
    out_dim = None

    def __init__(
        self, window_ratio: float | None = None, holds: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> None:
        if window_ratio is not None and not window_ratio > 0:
            raise ConfigError(f"EdgeBank window_ratio must be > 0 (or None: unlimited), got {window_ratio}")
        self.window_ratio = window_ratio
        self.holds = holds  # bool mask of the sources whose pairs it keeps (a sharded rank's); None: all
        self.reset_state()

    def reset_state(self) -> None:
        self._keys = np.zeros(0, np.int64)  # sorted src << 32 | dst
        self._last = np.zeros(0, np.float64)  # last time each pair was seen
        self._new_keys = np.zeros(0, np.int64)  # the same for pairs added since the last merge
        self._new_last = np.zeros(0, np.float64)
        self._t_min, self._t_max = math.inf, -math.inf

    # ------------------------------------------------------------------ memory
    def nbytes(self) -> dict[str, int]:
        """Bytes of the pairs it holds and the time each was last seen (the unmerged side arrays too)."""
        return {"pairs": sum(a.nbytes for a in (self._keys, self._last, self._new_keys, self._new_last))}

    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        if not len(src):
            return
        self._t_min = min(self._t_min, float(np.min(t)))  # the span of every event, held or not
        self._t_max = max(self._t_max, float(np.max(t)))
        src, dst, t = np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(t, np.float64)
        if self.holds is not None:
            held = self.holds(src)
            src, dst, t = src[held], dst[held], t[held]
        # only the batch is sorted; it is merged into the side arrays, and they into the main ones, in
        # linear time (re-sorting the side arrays with every batch cost a sort of up to _MERGE_MIN pairs)
        keys, last = _latest((src << 32) | dst, t)
        self._new_keys, self._new_last = _merged(self._new_keys, self._new_last, keys, last)
        if len(self._new_keys) > max(_MERGE_MIN, len(self._keys) // 8):
            self._keys, self._last = _merged(self._keys, self._last, self._new_keys, self._new_last)
            self._new_keys, self._new_last = self._new_keys[:0], self._new_last[:0]

    def seen(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """1.0 where ``(src, dst)`` was seen (within the window), else 0.0; any shape, ``-1`` never seen."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        ok = (src >= 0) & (dst >= 0)
        keys = (np.where(ok, src, 0) << 32) | np.where(ok, dst, 0)
        last = np.maximum(
            _lookup(self._keys, self._last, keys), _lookup(self._new_keys, self._new_last, keys)
        )
        since = -math.inf
        if self.window_ratio is not None and math.isfinite(self._t_max):
            since = self._t_max - self.window_ratio * (self._t_max - self._t_min)
        return (ok & (last > -math.inf) & (last >= since)).astype(np.float64)

    def attach(self, store: TemporalGraphStore) -> None:
        """Start from the pairs the store holds (history, or a restored checkpoint's stream)."""
        self.reset_state()
        edges = store.edges()
        self.observe(edges.src, edges.dst, edges.t, None)

    # ------------------------------------------------------------------ the LinkModel protocol
    def prepare(self, batch: StepInput, candidates: Candidates | None, train_neg: np.ndarray | None):
        return batch, candidates

    def score(self, prepared) -> tuple[np.ndarray, np.ndarray | None]:
        batch, cand = prepared
        s = batch.rows
        src = batch.src[s]
        pos = self.seen(src, batch.dst[s])
        ap = np.column_stack([pos, self.seen(src, cand.neg[s, 0])])
        ranked = np.column_stack([pos, self.seen(src[:, None], cand.neg[s])]) if cand.rank else None
        return ap, ranked

    def train(self, prepared, keep: np.ndarray, joint: Sequence[JointTerm]) -> float:
        """Nothing to learn (``trainable`` is False: the loop never trains it)."""
        return math.nan

    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> np.ndarray:
        raise ConfigError("EdgeBank embeds no nodes: it has nothing to serve")

    def embedded(self, prepared) -> None:
        return None  # (no embeddings)

    def state(self) -> tuple:
        return (self._keys, self._last, self._new_keys, self._new_last, self._t_min, self._t_max)

    def load_state(self, state: tuple) -> None:
        # Arrays are replaced, never written in place, so sharing them with a saved state is safe.
        self._keys, self._last, self._new_keys, self._new_last, self._t_min, self._t_max = state

    def state_dict(self) -> dict:
        """The time span seen: the pairs are the store's edges, which ``attach`` rebuilds from a restored
        store, but a sharded rank's store holds only its shard's edges, and deletes remove some."""
        return {"span": torch.tensor([self._t_min, self._t_max], dtype=torch.float64)}

    def load_state_dict(self, state: dict) -> None:
        if "span" in state:  # (a checkpoint from before the span was kept: ``attach``'s span)
            self._t_min, self._t_max = (float(x) for x in state["span"])


# how plots and printed summaries name each ``TrainConfig.baselines`` entry
BASELINE_LABELS = {"edgebank": "EdgeBank", "edgebank_tw": "EdgeBank (time window)"}


def make_baseline(name: str, config, holds: Callable[[np.ndarray], np.ndarray] | None = None) -> EdgeBank:
    """The baseline ``TrainConfig.baselines`` names: "edgebank" or "edgebank_tw" (``holds``: see
    ``EdgeBank``)."""
    if name == "edgebank":
        return EdgeBank(holds=holds)
    if name == "edgebank_tw":
        return EdgeBank(window_ratio=config.edgebank_window_ratio, holds=holds)
    raise ConfigError(f"unknown baseline {name!r}: use 'edgebank' or 'edgebank_tw'")


def _latest(keys: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct sorted ``keys`` with the largest ``last`` of each (none: a rank's batch with no source it
    holds)."""
    order = np.lexsort((last, keys))
    keys, last = keys[order], last[order]
    end = np.ones(len(keys), bool)
    end[:-1] = keys[1:] != keys[:-1]
    return keys[end], last[end]


def _merged(
    keys: np.ndarray, last: np.ndarray, more: np.ndarray, more_last: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The union of two sets of distinct sorted ``keys`` (``last`` of each) with the largest ``last`` of a
    key both hold, in new arrays (a saved ``state`` shares the old ones): the pairs already held updated,
    the others inserted at their places."""
    at = np.searchsorted(keys, more)
    held = at < len(keys)
    held[held] = keys[at[held]] == more[held]
    last = last.copy()
    last[at[held]] = np.maximum(last[at[held]], more_last[held])
    fresh = ~held
    return np.insert(keys, at[fresh], more[fresh]), np.insert(last, at[fresh], more_last[fresh])


def _lookup(keys: np.ndarray, last: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``last`` of each query key in sorted ``keys``, ``-inf`` where absent."""
    if not len(keys):
        return np.full(query.shape, -math.inf)
    at = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return np.where(keys[at] == query, last[at], -math.inf)
