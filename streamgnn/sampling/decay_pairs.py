"""Time-decayed pair features: how recently and how much *now* two nodes interact, not whether they ever did.

A link predictor trained against random negatives learns that a pair which met before is a positive,
since a random pair almost never has; it then ranks every pair that met long ago (DyGLib's and TGB's
*historical* negatives) above the pair that is about to meet. TPNet (Lu et al., NeurIPS 2024) reads
only time-decayed walk counts, where a pair that met long ago looks much like one that never met; these
features give the same view of the pair's own history and of its common neighbors: decayed counts per
direction, each endpoint's recency, decayed common neighbors and each endpoint's share of its recent
activity that went to the other, per time constant; and two scale-free ones measured in each endpoint's
own pace (its mean gap between its latest events), which hold across streams whatever their time unit.
Computed at query time from the store (``decay_kernels``), causal and batch-boundary invariant as the
other pair features; ``TGNConfig.pair_decayed`` turns them on.

>>> import numpy as np
>>> from streamgnn import EventBatch
>>> from streamgnn.store import TemporalGraphStore
>>> store = TemporalGraphStore()
>>> _ = store.ingest(EventBatch.from_columns(src=[1, 1, 2], dst=[2, 3, 3], t=[1.0, 2.0, 3.0], eid=[0, 1, 2]))
>>> feats = DecayPairs(neighbors=4, decays=(1.0,))
>>> u, v = store.node_index([1, 2])
>>> x = feats.read(store, np.array([u]), np.array([v]), np.array([4.0]))[0]
>>> round(float(x[0]), 4), float(x[1])  # one 1 -> 2 event 3 time units ago; no 2 -> 1 event
(0.0498, 0.0)
>>> round(float(x[4]), 4)  # common neighbor 3: exp(-2) from 1's side times exp(-1) from 2's
0.0498
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..store import GraphStore
from . import decay_kernels as D


class DecayPairs:
    """Decayed pair features over any ``GraphStore``: ``columns`` values per query (``decay_kernels``).

    ``neighbors``: the latest events of each endpoint that common neighbors, shares and pace are read
    from. ``decays``: time constants (the stream's time unit) of the decayed columns, one group each."""

    def __init__(self, neighbors: int = 20, decays: tuple[float, ...] = (86400.0,)) -> None:
        if not isinstance(neighbors, int) or neighbors < 1:
            raise ConfigError(f"decayed pair features need neighbors >= 1 (an int), got {neighbors!r}")
        taus = np.asarray(tuple(float(x) for x in decays), np.float64)
        if not len(taus) or not (np.isfinite(taus) & (taus > 0)).all():
            raise ConfigError(f"decayed pair features need finite time constants > 0, got {list(decays)}")
        self.neighbors, self.taus = neighbors, taus

    @classmethod
    def of(cls, config) -> DecayPairs:
        """The features a model config (``TGNConfig``) reads: its ``pair_neighbors`` and ``pair_decays``."""
        return cls(config.pair_neighbors, config.pair_decays)

    @staticmethod
    def width(config) -> int:
        """How many columns a model config's features have (the encoder's input)."""
        return D.TAU_COLS * len(config.pair_decays) + D.FREE_COLS

    @property
    def columns(self) -> int:
        return D.TAU_COLS * len(self.taus) + D.FREE_COLS

    def read(self, store: GraphStore, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``float64 [n, columns]`` of queries ``(src[i], dst[i], t[i])`` (internal ids, -1: unknown; flat
        arrays as ``pairs.pair_queries`` makes them): only events strictly before ``t[i]`` count."""
        out = np.empty((len(src), self.columns))
        view = store.view()
        D.decay_features(
            view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, src, dst, t,
            self.taus, self.neighbors, out,
        )  # fmt: skip
        return out
