"""Pair features of queries ``(u, v, t)`` read from the live store: what EdgeBank knows, and more.

Node embeddings say what each endpoint is like; whether *these two* met before, how often, how recently,
and whether their recent neighbors overlap is what the strongest temporal link predictors add (DyGFormer's
neighbor co-occurrence, and EdgeBank, which is the crudest such feature). The store already keeps every
event per node in time order, so the features are computed at query time from it (``pair_kernels``), with
nothing kept beside it: an event ingested a moment ago counts at once, and the features are the same
however the stream was cut into batches.

>>> import numpy as np
>>> from streamgnn import EventBatch
>>> from streamgnn.store import TemporalGraphStore
>>> store = TemporalGraphStore()
>>> _ = store.ingest(EventBatch.from_columns(src=[1, 1, 2], dst=[2, 2, 1], t=[1.0, 3.0, 4.0], eid=[0, 1, 2]))
>>> pairs = PairFeatures(store, neighbors=3, decays=(1.0,))
>>> u, v = store.node_index([1, 2])
>>> pairs.history(np.array([u]), np.array([v]), np.array([4.0]))[0].tolist()  # 2 x u->v, none v->u yet
[2.0, 0.0, 1.0, inf, 0.41766...]
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..store import GraphStore
from . import decay_kernels as D
from . import pair_kernels as K
from .decay_pairs import DecayPairs
from .walks import WalkFeatures

RECENCY_SCAN = 32  # recency ranks up to k are read from at most this many times k latest events


class PairFeatures:
    """Pair history and neighbor co-occurrence of query pairs over ``store`` (any ``GraphStore``).

    ``neighbors``: the latest ``k`` neighbors of each endpoint that co-occurrence compares. ``decays``: time
    constants (in the stream's time unit) of the exponentially decayed pair counts, one column each.
    ``endpoints``: two more history columns, the time since each endpoint's latest event with anyone.
    ``walks``: TPNet's temporal walk features too (``walk``), a cache over the store (``reset`` forgets it).
    ``decayed``: time-decayed pair features too (``DecayPairs``), read after the walk products.
    ``walk_neighbors``: with ``walks``, each endpoint's latest ``walk_neighbors`` neighbors (those
    co-occurrence counts, newest first) also get their walk products with both endpoints
    (``WalkFeatures.relative``, TPNet's relative encoding), read after the pair's own.
    ``recency``: two more history columns (last), each endpoint's recency rank of the other among its
    distinct partners (``pair_kernels.recency_ranks``: 1 = its latest partner), up to ``recency`` ranks
    read from at most ``RECENCY_SCAN`` times as many latest events (inf: beyond, or never met). A pair's
    time since its latest event cannot say how many other partners came between; the rank can.
    """

    def __init__(
        self,
        store: GraphStore,
        neighbors: int = 20,
        decays: tuple[float, ...] = (86400.0,),
        endpoints: bool = False,
        walks: WalkFeatures | None = None,
        decayed: DecayPairs | None = None,
        walk_neighbors: int = 0,
        recency: int = 0,
    ) -> None:
        if not isinstance(neighbors, int) or neighbors < 1:
            raise ConfigError(f"pair neighbors must be an int >= 1, got {neighbors!r}")
        if not isinstance(walk_neighbors, int) or not 0 <= walk_neighbors <= neighbors:
            raise ConfigError(f"walk neighbors must be an int in 0..{neighbors}, got {walk_neighbors!r}")
        if not isinstance(recency, int) or isinstance(recency, bool) or recency < 0:
            raise ConfigError(f"pair recency ranks must be an int >= 0 (0: off), got {recency!r}")
        if walk_neighbors and walks is None:
            raise ConfigError("walk neighbors read the walk state: they need walks")
        decays = tuple(float(x) for x in decays)
        if not all(x > 0 and np.isfinite(x) for x in decays):
            raise ConfigError(f"pair decay time constants must be finite and > 0, got {list(decays)}")
        self.store = store
        self.neighbors = neighbors
        self.decays = np.asarray(decays, np.float64)
        self.endpoints = endpoints
        self.walks = walks
        self.decayed = decayed
        self.walk_neighbors = walk_neighbors
        self.recency = recency

    @classmethod
    def of(cls, store: GraphStore, config) -> PairFeatures:
        """The features a model config (``TGNConfig``) reads over ``store`` (the trainer and the scorer)."""
        walks = None
        if config.pair_walks:
            walks = WalkFeatures(
                config.walk_hops, config.walk_dim, config.walk_decays, clock=config.walk_clock
            )
        decayed = DecayPairs.of(config) if config.pair_decayed else None
        return cls(
            store, config.pair_neighbors, config.pair_decays, config.pair_endpoints, walks, decayed,
            config.walk_neighbors if config.pair_walks else 0, config.pair_recency,
        )  # fmt: skip

    def nbytes(self) -> int:
        """The walk features' cache (the other features keep nothing beside the store)."""
        return 0 if self.walks is None else self.walks.nbytes()

    @property
    def history_dim(self) -> int:
        return K.HISTORY_FIXED + len(self.decays) + 2 * self.endpoints + 2 * bool(self.recency)

    def history(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``float64 [n, history_dim]``: u->v and v->u event counts before ``t``, time since the latest of
        each (inf: none), then a decayed count of both directions per time constant (then ``endpoints``'
        and ``recency``'s columns, where on). -1: unknown node."""
        src, dst, t = pair_queries(src, dst, t)
        out = np.empty((len(src), self.history_dim))
        view = self.store.view()
        K.pair_history(
            view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, src, dst, t,
            self.decays, out,
        )  # fmt: skip
        if self.endpoints:
            since = np.empty((len(src), 2))
            K.endpoint_since(
                view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, src, dst, t,
                since,
            )  # fmt: skip
            out[:, K.HISTORY_FIXED + len(self.decays) :][:, :2] = since
        if self.recency:
            met, ranks = (out[:, K.N_UV] + out[:, K.N_VU]) > 0, np.empty((len(src), 2))
            K.recency_ranks(
                view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, src, dst, t, met,
                self.recency, RECENCY_SCAN * self.recency, ranks,
            )  # fmt: skip
            out[:, -2:] = ranks
        return out

    def cooccurrence(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``float32 [n, 2, neighbors, 2]``: for u's (side 0) and v's (side 1) latest neighbors before
        ``t``, newest first, each one's occurrences in its own and in the other's sequence; (0, 0) pads."""
        src, dst, t = pair_queries(src, dst, t)
        out = np.empty((len(src), 2, self.neighbors, 2), np.float32)
        view = self.store.view()
        K.cooccurrence(
            view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, src, dst, t,
            self.neighbors, out,
        )  # fmt: skip
        return out

    def walk(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``float64 [n, channels, 2 (hops + 1), 2 (hops + 1)]``: ``WalkFeatures.products`` over the store."""
        src, dst, t = pair_queries(src, dst, t)
        return self.walks.products(self.store, src, dst, t)

    def relative(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``walk``'s products and ``WalkFeatures.relative``'s ``float32 [n, 2, walk_neighbors, width]``
        of both endpoints' latest ``walk_neighbors`` neighbors before ``t`` (newest first, as
        ``cooccurrence`` orders them; zeros pad)."""
        src, dst, t = pair_queries(src, dst, t)
        k, view = self.walk_neighbors, self.store.view()
        nbr = np.full((2, len(src), k), -1, np.int64)
        tim, lens = np.empty((len(src), k)), np.empty(len(src), np.int64)
        for side, nodes in enumerate((src, dst)):
            D.latest_events(
                view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, nodes, t, k,
                nbr[side], tim, lens,
            )  # fmt: skip
        return self.walks.relative(self.store, src, dst, t, nbr.transpose(1, 0, 2))

    def read(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, ...]:
        """Every raw feature ``PairEncoder`` reads, in one call (a sharded reader answers with one exchange):
        history, co-occurrence (then the walk products, the neighbors' relative ones and the decayed
        features, where on)."""
        parts = (self.history(src, dst, t), self.cooccurrence(src, dst, t))
        if self.walk_neighbors:
            parts = (*parts, *self.relative(src, dst, t))
        elif self.walks is not None:
            parts = (*parts, self.walk(src, dst, t))
        if self.decayed is not None:
            parts = (*parts, self.decayed.read(self.store, *pair_queries(src, dst, t)))
        return parts

    def reset(self) -> None:
        """Forget what is cached of the stream (the walk state); the next query reads the store afresh."""
        if self.walks is not None:
            self.walks.reset()


def pair_queries(src, dst, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queries ``(u, v, t)`` as every pair reader takes them: flat int64 ids, float64 times broadcast to
    them (a scalar time is every query's), refused when the counts of sources and destinations differ."""
    src, dst = np.asarray(src, np.int64).reshape(-1), np.asarray(dst, np.int64).reshape(-1)
    t = np.broadcast_to(np.asarray(t, np.float64), src.shape).reshape(-1)
    if len(dst) != len(src):
        raise ConfigError(f"pair queries need as many destinations as sources: {len(src)} != {len(dst)}")
    return src, dst, np.ascontiguousarray(t)
