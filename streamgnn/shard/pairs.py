"""Pair features of queries ``(u, v, t)`` over shards, in global ids: ``sampling.PairFeatures``' interface.

A query is read by the owner of its source ``u``, which holds every event of ``u`` (an edge is kept by the
owners of both endpoints): the pair's history (u->v and v->u counts, times, decayed counts: every u-v event
is in u's block), the time since u's latest event and u's latest neighbors are read from this rank's shard,
in the same time order one store holds them, so the values are one store's to the bit.

Exact (``exchange`` given): v's half, the time since v's latest event and v's latest ``k`` neighbors (the
co-occurrence encoding compares them with u's), lives with v's owner. Each ``read`` sends the distinct
``(v, t)`` queries to their owners and gets both back in one ``all_to_all`` round (the replies' sizes are
known, so it costs three ``torch.distributed`` calls), through the trainer's ``Collectives`` as the
sampler's queries go; co-occurrence is then counted here.

Walk features (``TGNConfig.pair_walks``), exact: ``ShardWalks`` keeps each vertex's walk rows with its
owner and advances them collectively (``ShardWalks.sync``): the new events travel with the queries, the
rows of their endpoints in one more ``all_to_all``, and v's rows come back with v's neighbors, so the
products are one store's to the bit too.

Decayed features (``TGNConfig.pair_decayed``), exact: v's latest events come back with their times beside
v's neighbors (the same reply), the pair's decayed counts are read from u's shard (which holds every u-v
event), and ``decay_kernels.decay_features_of`` computes the rest from both halves: one store's values.

Communication-free (no ``exchange``): v's half is read from this rank's shard too, which holds only v's
events with this rank's vertices when another rank owns v. So "v's latest event" is v's latest event with
a vertex of this rank, and "v's latest neighbors" are its latest neighbors among this rank's vertices and
their partners; u's half and the pair's history stay exact. The walk features are ``WalkFeatures`` over the
shard: the walks made of events this rank holds (every walk's last event at u is there, not the earlier
ones elsewhere), with a row for every vertex the shard's ids reach (not divided over ranks). The decayed
features likewise read v's half from this rank's shard.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import ConfigError
from ..sampling import decay_kernels as D
from ..sampling import pair_kernels as K
from ..sampling.pairs import PairFeatures, pair_queries
from ..store import TemporalGraphStore
from ..train.tgn_access import distinct_queries
from .comm import Collectives
from .ownership import GlobalIndex
from .walks import ShardWalks


class ShardPairs:
    """Pair features of queries whose sources this rank owns (``read``, ``history``, ``cooccurrence``)."""

    def __init__(
        self, shard: TemporalGraphStore, config, index: GlobalIndex, exchange: Collectives | None
    ) -> None:
        exact = exchange is not None
        self.local = PairFeatures.of(
            shard, dataclasses.replace(config, pair_walks=False) if exact else config
        )
        self.walks = ShardWalks(shard, config, index, exchange) if exact and config.pair_walks else None
        self.index, self.exchange = index, exchange

    @property
    def store(self) -> TemporalGraphStore:
        return self.local.store

    @store.setter
    def store(self, shard: TemporalGraphStore) -> None:  # a checkpoint replaced the shard
        self.local.store = shard
        if self.walks is not None:
            self.walks.store = shard
        self.reset()

    def reset(self) -> None:
        """Forget the walk state (every rank alike: the next ``read`` rebuilds it from the shards)."""
        self.local.reset()
        if self.walks is not None:
            self.walks.reset()

    def nbytes(self) -> int:
        """This rank's walk state (the other features keep nothing beside the shard)."""
        if self.walks is not None:
            return self.walks.nbytes()
        return 0 if self.local.walks is None else self.local.walks.nbytes()

    def history(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``PairFeatures.history``'s columns (``read`` gives both parts with one exchange: prefer it)."""
        return self.read(src, dst, t)[0]

    def cooccurrence(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> np.ndarray:
        return self.read(src, dst, t)[1]

    def read(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(history, cooccurrence)`` (and the walk products) of global-id queries (-1: unknown), as
        ``PairFeatures.read`` gives them over one store. Exact mode is a collective: every rank calls it,
        with or without queries."""
        src, dst, t = pair_queries(src, dst, t)
        foreign = src[(src >= 0) & ~self.index.owned(src)]
        if self.exchange is not None and len(foreign):
            raise ConfigError(
                f"a sharded pair query is read by its source's owner: rank {self.exchange.rank} does not own "
                f"sources {foreign[:5].tolist()}"
            )
        shard, pairs = self.local.store, self.local
        u, v = self._local(src), self._local(dst)
        if self.exchange is None:
            return pairs.read(u, v, t)
        history = pairs.history(u, v, t)
        since_v, seq_v, tim_v, len_v, *rows_v = self._remote(dst, t)
        if pairs.endpoints:
            history[:, -1] = since_v
        seq_u, tim_u, len_u = self._latest(u, t)
        seq_u = self._global(seq_u)
        cooc = np.empty((len(src), 2, pairs.neighbors, 2), np.float32)
        K.cooccurrence_of(seq_u, len_u, seq_v, len_v, cooc)
        parts = (history, cooc)
        if self.walks is not None:
            parts = (*parts, self.walks.products(src, dst, t, tuple(rows_v)))
        if pairs.decayed is not None:  # the pair counts from here (u's shard holds every u-v event)
            out, view = np.empty((len(src), pairs.decayed.columns)), shard.view()
            D.decay_features_of(
                view.start, view.deg, view.pool, view.edge_t, view.edge_del, u, v, t, pairs.decayed.taus,
                np.stack([src, dst]), np.stack([seq_u, seq_v]), np.stack([tim_u, tim_v]),
                np.stack([len_u, len_v]), out,
            )  # fmt: skip
            parts = (*parts, out)
        return parts

    def _local(self, gids: np.ndarray) -> np.ndarray:
        """Shard ids of ``gids`` (-1: unknown here)."""
        shard = self.local.store
        if not shard.num_nodes or not len(gids):
            return np.full(len(gids), -1, np.int64)
        return shard.node_index(gids, strict=False).astype(np.int64)

    def _latest(self, nodes: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each shard vertex's latest events before ``t``: their neighbors' shard ids and times
        (``[n, k]``, newest first), and how many."""
        k, view = self.local.neighbors, self.local.store.view()
        seqs, tims = np.full((len(nodes), k), -1, np.int64), np.zeros((len(nodes), k))
        lens = np.zeros(len(nodes), np.int64)
        D.latest_events(
            view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, nodes, t, k, seqs,
            tims, lens,
        )  # fmt: skip
        return seqs, tims, lens

    def _global(self, seqs: np.ndarray) -> np.ndarray:
        """``_latest``'s neighbor shard ids as global ids (the unused slots keep their values)."""
        if not seqs.size:
            return seqs
        return self.local.store.external_ids(seqs.reshape(-1)).astype(np.int64).reshape(seqs.shape)

    def _remote(self, dst: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, ...]:
        """From v's owner: the time since v's latest event before ``t``, v's latest neighbors (global ids),
        their times (with ``pair_decayed``; else ``None``) and how many (and v's walk rows); the distinct
        ``(v, t)`` queries travel, in one round."""
        ex, w = self.exchange, self.exchange.world_size
        # the walk state's new events ride along (to every rank), advanced before the replies
        extra = () if self.walks is None else self.walks.outgoing(float(t.min()) if len(t) else math.inf)
        nodes, times, rows = distinct_queries(dst, t)
        owner = np.full(len(nodes), self.exchange.rank, np.int64)  # unknown vertices: answered here
        owner[nodes >= 0] = self.index.owner(nodes[nodes >= 0])
        sel = [np.flatnonzero(owner == d) for d in range(w)]
        asks = ex.all_to_all([(nodes[s], times[s], *extra) for s in sel], "pair_queries")
        if self.walks is not None:
            self.walks.advance([a[2:] for a in asks])
        replies = [self._answer(a[0], a[1]) for a in asks]
        got = ex.all_to_all(replies, "pair_neighbors", [[len(s)] * len(replies[0]) for s in sel])
        out = [np.empty((len(nodes), *x.shape[1:]), x.dtype) for x in replies[0]]
        for s, parts in zip(sel, got, strict=True):
            for whole, part in zip(out, parts, strict=True):
                whole[s] = part
        since, seqs, *rest = (x[rows] for x in out)
        tims = rest.pop(0) if self.local.decayed is not None else None
        return since, seqs, tims, *rest

    def _answer(self, gids: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, ...]:
        """As v's owner: ``(since, latest neighbors in global ids, counts)`` of each asked ``(v, t)``, with
        their times after the neighbors when the model reads decayed features, and v's walk rows
        (``ShardWalks.rows``) when it reads walks."""
        shard, local = self.local.store, self._local(gids)
        since = np.empty((len(gids), 2))
        view = shard.view()
        K.endpoint_since(
            view.start, view.deg, view.pool, view.edge_t, view.edge_del, view.num_nodes, local, local,
            np.ascontiguousarray(t), since,
        )  # fmt: skip
        seqs, tims, lens = self._latest(local, np.ascontiguousarray(t))
        times = (tims,) if self.local.decayed is not None else ()
        rows = () if self.walks is None else self.walks.rows(gids)
        return since[:, 0], self._global(seqs), *times, lens, *rows
