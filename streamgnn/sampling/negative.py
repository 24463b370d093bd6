"""Negative destinations for temporal link prediction, after Poursafaei et al. (NeurIPS 2022) and TGB.

Random negatives are easy: most pairs never interact. *Historical* negatives are destinations the
source did link to before, just not now, which punishes a model that merely remembers past pairs;
*inductive* ones are destinations never seen in the history, which tests generalization to new nodes.
Both fall back to random where a source has too few. ``EvalNegatives`` fixes ``N`` negatives per
positive once, seeded, and stores them as ``.npy``: every run and every model is then ranked against
the same candidates, so MRR is comparable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from .. import checkpoint
from ..errors import ConfigError
from .negative_kernels import draw_negatives
from .rng import key_of
from .types import int_ids

STRATEGIES = ("random", "historical", "inductive")
KIND = "eval-negatives"  # the checkpoint kind ``EvalNegatives.save`` writes
_MAX_ID = 1 << 31
_LOW = (1 << 32) - 1


class NegativeSampler:
    """Draws negative destinations for positive ``(src, dst)`` pairs.

    ``dst_pool``: the destinations negatives come from (e.g. every destination of the stream); observed
    destinations join it. The history (``observe``) holds the pairs seen so far, e.g. the training
    events. Node ids must lie in ``[0, 2**31)`` (internal ids always do; ``-1`` pads the results).
    Draws depend only on ``seed``, the call counter (or an explicit ``key``) and the inputs.
    """

    def __init__(self, dst_pool, *, seed: int = 0) -> None:
        self.pool = np.unique(_node_ids("dst_pool", dst_pool))
        if not len(self.pool):
            raise ConfigError("dst_pool is empty: there is nothing to draw negatives from")
        self.seed = seed
        self.calls = 0
        self._pairs = np.zeros(0, np.int64)  # sorted unique src << 32 | dst
        self._seen_dst = np.zeros(0, np.int64)  # sorted unique

    def extend_pool(self, dst) -> None:
        """Add destinations that may be drawn from now on (new items appearing mid-stream)."""
        self.pool = _merge(self.pool, _node_ids("dst", dst))

    def observe(self, src, dst) -> None:
        """Add pairs to the history (call after each training batch: they become "seen before").

        Their destinations join the pool, so a historical negative is always a pool destination."""
        src, dst = _node_ids("src", src), _node_ids("dst", dst)
        if len(src) != len(dst):
            raise ConfigError(f"src has {len(src)} ids but dst has {len(dst)}")
        self._pairs = _merge(self._pairs, (src << 32) | dst)
        self._seen_dst = _merge(self._seen_dst, dst)
        self.pool = _merge(self.pool, dst)

    def nbytes(self) -> int:
        """Bytes held: the pool and the history."""
        return self.pool.nbytes + self._pairs.nbytes + self._seen_dst.nbytes

    def _runs(self, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inside = (src >= 0) & (src < _MAX_ID)
        s = np.where(inside, src, 0)
        lo = np.searchsorted(self._pairs, s << 32)
        hi = np.where(inside, np.searchsorted(self._pairs, (s + 1) << 32), lo)
        return lo, hi

    def sample(
        self,
        src,
        dst,
        *,
        num: int = 1,
        strategy: Literal["random", "historical", "inductive"] = "random",
        frac: float = 1.0,
        groups=None,
        key: int | None = None,
    ) -> np.ndarray:
        """``int64[n, num]`` distinct negatives per positive ``(src[i], dst[i])``, ``-1`` where none remain.

        ``strategy`` picks where ``frac * num`` of them come from (the rest, and any shortfall, are
        random): ``floor(frac * num)`` per positive, plus one more with the probability of the fraction left
        over, so that a single negative (``num=1``) is a ``frac`` mix over positives rather than all random.
        Negatives never include a destination that ``src[i]`` has as a positive in the same group:
        ``groups`` labels the events (default: the whole call is one group, i.e. one batch; TGB uses the
        timestamp).
        """
        src, dst = int_ids("src", src), int_ids("dst", dst)
        n = len(src)
        if len(dst) != n:
            raise ConfigError(f"src has {n} ids but dst has {len(dst)}")
        if strategy not in STRATEGIES:
            raise ConfigError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if (
            not isinstance(num, int | np.integer)
            or isinstance(num, bool)
            or num < 1
            or not (0.0 <= frac <= 1.0)
        ):
            raise ConfigError(f"need an int num >= 1 and 0 <= frac <= 1, got num={num!r}, frac={frac!r}")
        if key is None:
            key = self.calls
            self.calls += 1
        excl, excl_lo, excl_hi = _positives_now(src, dst, groups)
        n_first = np.zeros(n, np.int64)
        if strategy != "random":
            whole, part = divmod(frac * num, 1.0)
            n_first += int(whole)
            if part:  # its own stream, apart from the kernel's draws: an integral frac * num draws as before
                n_first += np.random.default_rng([key_of(self.seed, key), 1]).random(n) < part
        if strategy == "historical":
            cand = self._pairs & _LOW
            cand_lo, cand_hi = self._runs(src)
        else:
            cand = (
                np.setdiff1d(self.pool, self._seen_dst, assume_unique=True)
                if strategy == "inductive"
                else self.pool
            )
            cand_lo, cand_hi = np.zeros(n, np.int64), np.full(n, len(cand), np.int64)
        out = np.empty((n, num), np.int64)
        draw_negatives(
            cand, cand_lo, cand_hi, n_first, self.pool, excl, excl_lo, excl_hi, key_of(self.seed, key), out
        )
        return out


def _node_ids(name: str, values) -> np.ndarray:
    ids = int_ids(name, values)
    if len(ids) and (ids.min() < 0 or ids.max() >= _MAX_ID):
        raise ConfigError(f"{name}: node ids must lie in [0, 2**31); map external ids to internal ones")
    return ids


def _merge(sorted_unique: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Insert ``new`` into a sorted unique array in O(len + new log new), not a full re-sort."""
    new = np.unique(new)
    if not len(sorted_unique):
        return new
    pos = np.searchsorted(sorted_unique, new)
    fresh = (pos == len(sorted_unique)) | (sorted_unique[np.minimum(pos, len(sorted_unique) - 1)] != new)
    if not fresh.any():  # late in a stream most batches bring nothing new: no copy of the whole array
        return sorted_unique
    return np.insert(sorted_unique, pos[fresh], new[fresh])


def _positives_now(src: np.ndarray, dst: np.ndarray, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event, the run of ``excl`` holding the destinations of its (group, src) positives."""
    n = len(src)
    labels = None if groups is None else np.asarray(groups)
    if labels is not None and labels.shape != (n,):
        raise ConfigError(f"groups must hold one label per event ({n}), got shape {labels.shape}")
    g = np.zeros(n, np.int64) if labels is None else np.unique(labels, return_inverse=True)[1]
    _, cell = np.unique(np.stack([g.reshape(-1), src]), axis=1, return_inverse=True)
    cell = cell.reshape(-1)
    order = np.argsort(cell, kind="stable")
    sorted_cell = cell[order]
    return dst[order], np.searchsorted(sorted_cell, cell, "left"), np.searchsorted(sorted_cell, cell, "right")


@dataclass(frozen=True)
class EvalNegatives:
    """``N`` fixed negatives per positive event: ``neg[i]`` belongs to the event with id ``eid[i]``.

    ``-1`` pads rows where fewer than ``N`` candidates exist. Stored as one int64 ``.npy`` of shape
    ``[n, 1 + N]`` (event id, then the negatives), loaded without pickle.
    """

    eid: np.ndarray  # int64[n]
    neg: np.ndarray  # int64[n, N]

    def __post_init__(self) -> None:
        if self.neg.ndim != 2 or len(self.neg) != len(self.eid):
            raise ConfigError(f"need a row of negatives per event id: {len(self.eid)} ids, {self.neg.shape}")
        if len(np.unique(self.eid)) != len(self.eid):
            raise ConfigError("eid must be unique: it is the key negatives are looked up by")

    @classmethod
    def generate(
        cls,
        src,
        dst,
        t,
        eid,
        *,
        dst_pool,
        history: tuple[np.ndarray, np.ndarray] | None = None,
        num: int = 100,
        strategy: Literal["random", "historical", "inductive"] = "historical",
        frac: float = 0.5,
        seed: int = 0,
    ) -> EvalNegatives:
        """TGB's protocol: for each positive, ``round(frac * num)`` negatives from ``strategy`` (half
        historical by default), the rest random, none of them a positive of the source at the same time.

        ``history`` is the ``(src, dst)`` of the training events. Depends only on the arguments.
        """
        eid = int_ids("eid", eid)
        if len(eid) != len(np.atleast_1d(src)):
            raise ConfigError(f"eid has {len(eid)} ids for {len(np.atleast_1d(src))} events: one per event")
        sampler = NegativeSampler(dst_pool, seed=seed)
        if history is not None:
            sampler.observe(*history)
        neg = sampler.sample(src, dst, num=num, strategy=strategy, frac=frac, groups=t, key=0)
        return cls(eid, neg)

    @property
    def num(self) -> int:
        return self.neg.shape[1]

    def lookup(self, eid) -> np.ndarray:
        """``int64[len(eid), N]``: the stored negatives of these events."""
        eid = int_ids("eid", eid)
        order = np.argsort(self.eid, kind="stable")
        pos = np.minimum(np.searchsorted(self.eid, eid, sorter=order), max(len(order) - 1, 0))
        found = order[pos] if len(order) else pos
        missing = self.eid[found] != eid if len(order) else np.ones(len(eid), bool)
        if missing.any():
            raise ConfigError(f"no evaluation negatives for event ids {eid[missing][:5].tolist()}")
        return self.neg[found]

    def save(self, path: str | Path) -> Path:
        """Write the negatives as a checkpoint container (``streamgnn.checkpoint``, kind
        ``eval-negatives``: verified on load) under the folder ``path``; returns the checkpoint's folder."""
        return checkpoint.save(Path(path), KIND, {"eid": self.eid, "neg": self.neg}, {}, keep=1)

    @classmethod
    def load(cls, path: str | Path) -> EvalNegatives:
        """The negatives ``save`` wrote under ``path``, or an ``.npy`` table of earlier versions (int64
        ``[n, 1 + N]``: event id, then its negatives)."""
        path = Path(path)
        if path.is_dir():
            arrays = checkpoint.load(path, KIND).arrays
            eid, neg = arrays["eid"], arrays["neg"]
        else:
            table = np.load(path, allow_pickle=False)
            if table.ndim != 2 or table.shape[1] < 2:
                raise ConfigError(
                    f"{path}: expected an int64 [n, 1 + N] table, got {table.dtype} {table.shape}"
                )
            eid, neg = table[:, 0], table[:, 1:]
        if eid.dtype != np.int64 or neg.dtype != np.int64 or neg.ndim != 2:
            raise ConfigError(f"{path}: expected int64 event ids and an int64 [n, N] table of negatives")
        return cls(np.ascontiguousarray(eid), np.ascontiguousarray(neg))
