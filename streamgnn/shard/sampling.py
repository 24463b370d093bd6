"""Temporal neighbor sampling over shards, in global ids.

Exact (``RoutedSampler``): each query goes to the owner of its vertex, which holds the vertex's complete
adjacency (an edge is stored by the owners of both endpoints) and samples it with the ordinary
``TemporalSampler`` over its shard; neighbors come back as global ids with their edge times and features.
One hop costs two ``all_to_all`` exchanges (queries out, neighbors back), whatever the number of query sets:
``sample_sets`` serves the evaluation and training queries of a step together.

Communication-free (``LocalSampler``): every query is answered from this rank's shard alone. A vertex this
rank owns has its complete adjacency here; any other vertex only the edges it shares with owned vertices
(the halo), and a vertex the shard has never seen has no neighbors.

"recent" sampling is deterministic, so both give exactly the neighbors one store gives. "uniform" draws are
keyed by a root's position in its sampler call, and the calls differ between world sizes: the draws are
equally uniform but not the same ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..sampling import SamplerConfig, TemporalSampler
from ..sampling.types import SampledHop, SampledSubgraph
from ..store import TemporalGraphStore
from .comm import Collectives
from .ownership import GlobalIndex


class _ShardHops:
    """One single-hop ``TemporalSampler`` per hop over the shard, answering in global ids."""

    def __init__(self, shard: TemporalGraphStore, config: SamplerConfig, edge_dim: int) -> None:
        self.shard, self.edge_dim = shard, edge_dim
        self.hops = [
            TemporalSampler(shard, dataclasses.replace(config, fanouts=(k,), node_features=False))
            for k in config.fanouts
        ]

    def answer(self, hop: int, gids: np.ndarray, t: np.ndarray, key: int):
        """``(counts, nbr gids, edge times, edge features)`` of each query, from the shard."""
        local = self.shard.node_index(gids, strict=False) if self.shard.num_nodes and len(gids) else None
        if local is None:
            local = np.full(len(gids), -1, np.int64)
        got = self.hops[hop].sample(local, t, key=key).hops[0]
        nbr = self.shard.external_ids(got.nbr).astype(np.int64) if len(got) else np.zeros(0, np.int64)
        feat = got.edge_features
        if feat is None:
            feat = np.zeros((len(got), self.edge_dim), np.float32)
        return np.diff(got.ptr), nbr, got.t, feat


def _hop(q: np.ndarray, q_t: np.ndarray, counts, nbr, t, feat, edge_dim: int) -> SampledHop:
    ptr = np.zeros(len(q) + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    root_index = np.repeat(np.arange(len(q)), counts)
    dt = q_t[root_index] - t
    eid = np.full(len(nbr), -1, np.int64)  # edge ids are per shard: not exchanged (features come along)
    return SampledHop(ptr, root_index, nbr, eid, t, dt, q_t, feat if edge_dim else None, None)


class LocalSampler:
    """Communication-free: sample global-id queries from this rank's shard only."""

    def __init__(self, shard: TemporalGraphStore, config: SamplerConfig, edge_dim: int) -> None:
        self.config, self.edge_dim = config, edge_dim
        self.local = _ShardHops(shard, config, edge_dim)

    def sample_sets(
        self, sets: list[tuple[np.ndarray, np.ndarray]], key: int, roots_local: bool = False
    ) -> list[SampledSubgraph]:
        out = []
        for roots, times in sets:
            hops, q, q_t = [], roots, times
            for h in range(len(self.config.fanouts)):
                counts, nbr, t, feat = self.local.answer(h, q, q_t, key)
                hops.append(_hop(q, q_t, counts, nbr, t, feat, self.edge_dim))
                q, q_t = nbr, t
            out.append(SampledSubgraph(roots, times, hops))
        return out


class RoutedSampler:
    """Exact: every query is sampled by the owner of its vertex (see the module docstring)."""

    def __init__(
        self, shard: TemporalGraphStore, index: GlobalIndex, exchange: Collectives, config: SamplerConfig,
        edge_dim: int,
    ) -> None:  # fmt: skip
        self.index, self.exchange, self.config, self.edge_dim = index, exchange, config, edge_dim
        self.local = _ShardHops(shard, config, edge_dim)

    def sample_sets(
        self, sets: list[tuple[np.ndarray, np.ndarray]], key: int, roots_local: bool = False
    ) -> list[SampledSubgraph]:
        """Sample each ``(roots, times)`` set (global ids, -1: unknown) through the same exchanges.
        ``roots_local``: every rank's roots are its own, so the first hop needs no exchange."""
        q = np.concatenate([np.asarray(r, np.int64) for r, _ in sets])
        q_t = np.concatenate([np.asarray(t, np.float64) for _, t in sets])
        bounds = [len(r) for r, _ in sets]
        hops = []
        for h in range(len(self.config.fanouts)):
            if h == 0 and roots_local:
                hop = _hop(q, q_t, *self.local.answer(h, q, q_t, key), self.edge_dim)
            else:
                hop = self._routed_hop(h, q, q_t, key)
            hops.append(hop)
            q, q_t = hop.nbr, hop.t
        return _split(sets, hops, bounds)

    def _routed_hop(self, h: int, q: np.ndarray, q_t: np.ndarray, key: int) -> SampledHop:
        ex, w = self.exchange, self.exchange.world_size
        owner = np.full(len(q), -1, np.int64)
        known = q >= 0
        owner[known] = self.index.owner(q[known])
        sel = [np.flatnonzero(owner == d) for d in range(w)]
        asks = ex.all_to_all([(q[s], q_t[s]) for s in sel], "sample_queries")
        sizes = [len(a[0]) for a in asks]
        counts, nbr, t, feat = self.local.answer(
            h, np.concatenate([a[0] for a in asks]), np.concatenate([a[1] for a in asks]), key
        )
        first = np.concatenate([[0], np.cumsum(counts)])  # first answer row of each query
        at = np.cumsum([0, *sizes])  # first query of each asking rank
        replies = []
        for s in range(w):
            a, b = first[at[s]], first[at[s + 1]]
            replies.append((counts[at[s] : at[s + 1]], nbr[a:b], t[a:b], feat[a:b]))
        got = ex.all_to_all(replies, "sample_neighbors")
        all_counts = np.zeros(len(q), np.int64)
        for s, g in zip(sel, got, strict=True):
            all_counts[s] = g[0]
        ptr = np.zeros(len(q) + 1, np.int64)
        np.cumsum(all_counts, out=ptr[1:])
        m = int(ptr[-1])
        out_nbr, out_t = np.empty(m, np.int64), np.empty(m, np.float64)
        out_feat = np.empty((m, self.edge_dim), np.float32)
        for s, (c, g_nbr, g_t, g_feat) in zip(sel, got, strict=True):
            pos = np.repeat(ptr[s], c) + (np.arange(len(g_nbr)) - np.repeat(np.cumsum(c) - c, c))
            out_nbr[pos], out_t[pos], out_feat[pos] = g_nbr, g_t, g_feat
        return _hop(q, q_t, all_counts, out_nbr, out_t, out_feat, self.edge_dim)


def _split(sets, hops: list[SampledHop], bounds: list[int]) -> list[SampledSubgraph]:
    """The subgraph of each query set, from hops sampled for all sets' queries one after another."""
    out = []
    starts = [np.cumsum([0, *bounds])] + [None] * len(hops)
    for h, hop in enumerate(hops):  # query boundaries of hop h + 1: neighbor boundaries of hop h
        starts[h + 1] = hop.ptr[starts[h]]
    for i, (roots, times) in enumerate(sets):
        sub_hops = []
        for h, hop in enumerate(hops):
            a, b = int(starts[h][i]), int(starts[h][i + 1])
            e0, e1 = int(hop.ptr[a]), int(hop.ptr[b])
            sub_hops.append(
                SampledHop(hop.ptr[a : b + 1] - e0, hop.root_index[e0:e1] - a, hop.nbr[e0:e1], hop.eid[e0:e1],
                           hop.t[e0:e1], hop.dt[e0:e1], hop.query_t[a:b],
                           None if hop.edge_features is None else hop.edge_features[e0:e1], None)
            )  # fmt: skip
        out.append(SampledSubgraph(np.asarray(roots, np.int64), np.asarray(times, np.float64), sub_hops))
    return out
