"""Embeddings where the data lives: the owner of a vertex embeds it; the rank scoring an event gets rows.

A rank scores and trains on the events it read, but the embedding of a ``(vertex, time)`` query is computed
by the vertex's owner, which holds the vertex's adjacency and memory row (only its neighbors' rows come from
other ranks). Queries go to owners in one ``all_to_all``, each owner embeds the distinct queries it received
(so a candidate many events share, e.g. a popular MRR negative, is embedded once in the whole job, as in one
process), and the rows come back in a second. Rows for training arrive as leaves: the rank that owns the loss
backpropagates to them and returns each row's gradient to its owner, which finishes the backward pass through
its own forward (a third exchange). Parameter gradients are then averaged over ranks as usual.

In communication-free mode every rank embeds its own queries from what it holds, with no exchange.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..nn import TGN, EmbeddingInput
from ..train.tgn_access import distinct_queries
from .cache import RowCache
from .memory import HaloCache, OwnedMemory, Rows, WorkingSet, lend_state, working_set


@dataclass
class Queries:
    """Distinct ``(vertex, time)`` queries of one model input and each root's row among them."""

    nodes: np.ndarray
    times: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, roots: np.ndarray, times: np.ndarray) -> Queries:
        return cls(*distinct_queries(np.asarray(roots, np.int64), np.asarray(times, np.float64)))


@dataclass
class _Round:
    """One ``embed`` call's bookkeeping, kept for its ``backward``."""

    order: list[list[np.ndarray]]  # [set][owner]: positions of the set's queries sent to that owner
    served: list[list[torch.Tensor]]  # [asker][set]: rows of this owner's embeddings answering them
    z: list[torch.Tensor]  # this owner's embeddings per set
    out: list[torch.Tensor]  # this asker's rows per set
    grad: list[bool]


class Embedder:
    """Owner-computed embeddings for one rank of a sharded TGN (module docstring), over the memory rows of
    its ``tgn_state.TGNShardState``; ``trainer`` gives the index, the exchange and the configs."""

    def __init__(self, trainer, module: TGN, owned: OwnedMemory, halo: HaloCache | None) -> None:
        self.tr, self.module = trainer, module
        self.owned, self.halo = owned, halo  # this rank's rows, others' (communication-free; ``tgn_state``)
        self._round: _Round | None = None
        self.last_working_set: WorkingSet | None = (
            None  # the last forward's rows: ``observe`` commits from them
        )
        self.sampler = None  # over this rank's shard: set by ``ShardEmbeddings.attach``
        self.cache = RowCache(trainer.shard_config.cache_rows)

    def embed(self, plans: dict[int, list[Queries]], grad: list[bool], key: int) -> list[torch.Tensor]:
        """Rows ``[len(q.nodes), out_dim]`` of each of this rank's query sets ``plans[rank]``; ``grad`` sets
        come as leaves whose gradients ``backward`` hands to the owners. A collective: every rank passes
        as many sets. When ``plans`` holds every rank's sets (each rank can work them out: the batch and
        the negative pool are the same everywhere), an owner knows what it will be asked without asking."""
        tr = self.tr
        ex, w, me = tr.exchange, tr.exchange.world_size, tr.dist.rank
        sets, k = plans[me], len(plans[me])
        order = [[np.flatnonzero(o == d) for d in range(w)] for o in (self._owner(q.nodes, me) for q in sets)]
        parts = [self._asks(sets, [order[i][d] for i in range(k)]) for d in range(w)]
        if not tr.exact:
            asks = parts
        elif len(plans) == w:
            asks = []
            for r in range(w):  # what rank r asks of this rank, worked out here
                theirs = plans[r]
                asks.append(
                    self._asks(theirs, [np.flatnonzero(self._owner(q.nodes, r) == me) for q in theirs])
                )
        else:
            asks = ex.all_to_all(parts, "embed_queries")
        # as owner: the distinct queries of each set over every asker
        starts = [np.concatenate([[0], np.cumsum(a[2])]) for a in asks]
        mine = [
            Queries.of(np.concatenate([a[0][s[i] : s[i + 1]] for a, s in zip(asks, starts, strict=True)]),
                       np.concatenate([a[1][s[i] : s[i + 1]] for a, s in zip(asks, starts, strict=True)]))
            for i in range(k)
        ]  # fmt: skip
        z = self._forward(mine, grad, key)
        served, replies, first = [], [], np.zeros(k, np.int64)
        for a in asks:
            idx = []
            for i in range(k):
                n = int(a[2][i])
                idx.append(torch.from_numpy(mine[i].rows[first[i] : first[i] + n]).to(tr.device))
                first[i] += n
            served.append(idx)
            rows = [z[i][idx[i]].detach() for i in range(k)]
            replies.append((torch.cat(rows).float().cpu().numpy(),))
        expect = [[sum(len(order[i][d]) for i in range(k))] for d in range(w)]
        got = ex.all_to_all(replies, "embeddings", expect) if tr.exact else replies
        out = []
        for i, q in enumerate(sets):
            rows = np.zeros((len(q.nodes), self.module.out_dim), np.float32)
            for d in range(w):
                before = sum(len(order[j][d]) for j in range(i))
                rows[order[i][d]] = got[d][0][before : before + len(order[i][d])]
            out.append(torch.from_numpy(rows).to(tr.device).requires_grad_(grad[i]))
        self._round = _Round(order, served, z, out, grad)
        return out

    def embed_apart(self, queries: Queries, key: int) -> torch.Tensor:
        """Rows of ``queries`` (no gradient; a collective) that leave the batch in progress as it was: a
        serving round, or a labelled task's embeddings between a batch's ``prepare`` and its training,
        must not replace the round ``backward`` finishes nor the working set ``observe`` commits from."""
        kept = self._round, self.last_working_set
        (z,) = self.embed({self.tr.dist.rank: [queries]}, [False], key)
        self._round, self.last_working_set = kept
        return z

    def backward(self) -> None:
        """Send the gradients of the last ``embed``'s ``grad`` rows to their owners and finish the backward
        pass there (a collective; rows nothing used get zero)."""
        tr, r = self.tr, self._round
        self._round = None
        ex, w = tr.exchange, tr.exchange.world_size
        sets = [i for i, g in enumerate(r.grad) if g]
        grads = [r.out[i].grad if r.out[i].grad is not None else torch.zeros_like(r.out[i]) for i in sets]
        parts = []
        for d in range(w):
            rows = [g[torch.from_numpy(r.order[i][d]).to(g.device)] for i, g in zip(sets, grads, strict=True)]
            parts.append((torch.cat(rows).cpu().numpy(),))
        expect = [[sum(len(r.served[s][i]) for i in sets)] for s in range(w)]
        got = ex.all_to_all(parts, "embedding_grads", expect) if tr.exact else parts
        tensors, totals = [], []
        for j, i in enumerate(sets):
            if not r.z[i].requires_grad:
                continue
            total = torch.zeros_like(r.z[i])
            for s, (rows,) in enumerate(got):
                before = sum(len(r.served[s][sets[q]]) for q in range(j))
                n = len(r.served[s][i])
                total.index_add_(
                    0, r.served[s][i], torch.from_numpy(rows[before : before + n]).to(total.device)
                )
            tensors.append(r.z[i])
            totals.append(total)
        if tensors:
            torch.autograd.backward(tensors, totals)

    @staticmethod
    def _asks(sets: list[Queries], at: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        """The queries at positions ``at[i]`` of each set ``i``: nodes, times, and the count per set."""
        return (
            np.concatenate([q.nodes[p] for q, p in zip(sets, at, strict=True)]),
            np.concatenate([q.times[p] for q, p in zip(sets, at, strict=True)]),
            np.array([len(p) for p in at], np.int64),
        )

    def _owner(self, nodes: np.ndarray, asker: int) -> np.ndarray:
        """Who embeds each of ``asker``'s queries: the vertex's owner (exact) or the asker itself
        (communication-free, and vertices nobody knows yet)."""
        tr = self.tr
        owner = np.full(len(nodes), asker, np.int64)
        if tr.exact:
            known = nodes >= 0
            owner[known] = tr.index.owner(nodes[known])
        return owner

    # ------------------------------------------------------------------ the owner's forward
    def _forward(self, sets: list[Queries], grad: list[bool], key: int) -> list[torch.Tensor]:
        model = self.module
        inputs, ws = self.inputs(sets, key)
        self.last_working_set = ws  # the batch's owned endpoints are among its rows: ``commit`` reuses them
        z = []
        for inp, g in zip(inputs, grad, strict=True):
            model.train(g)
            with torch.set_grad_enabled(g), lend_state(model.memory, ws.state):
                z.append(
                    model(inp) if len(inp.nodes) else torch.zeros(0, model.out_dim, device=self.tr.device)
                )
        return z

    def inputs(self, sets: list[Queries], key: int) -> tuple[list[EmbeddingInput], WorkingSet]:
        """Model inputs of each set's distinct queries over one working set of memory rows (collective)."""
        tr = self.tr
        mcfg = tr.config.model
        # the roots are this rank's (or unknown): their neighbors are here, only deeper hops are routed
        subs = self.sampler.sample_sets([(q.nodes, q.times) for q in sets], key=key, roots_local=True)
        dense = [EmbeddingInput.from_subgraph(sub, mcfg.num_neighbors, None, mcfg.num_layers) for sub in subs]
        needed = [q.nodes for q in sets] + [h.nbr[h.mask].numpy() for inp in dense for h in inp.hops]
        gids = np.unique(np.concatenate(needed)) if needed else np.zeros(0, np.int64)
        ws = self.gather(gids[gids >= 0])
        out = []
        for q, inp in zip(sets, dense, strict=True):
            hops = []
            for h in inp.hops:
                nbr = np.where(h.mask.numpy(), ws.ids(h.nbr.numpy()), ws.blank)
                edge = h.edge_feat
                if mcfg.edge_feature_dim and edge is None:
                    edge = torch.zeros(*h.mask.shape, mcfg.edge_feature_dim)
                hops.append(type(h)(torch.from_numpy(nbr), h.dt, h.mask, edge, None, h.t))
            out.append(EmbeddingInput(torch.from_numpy(ws.ids(q.nodes)), inp.t, None, hops).to(tr.device))
        return out, ws

    def gather(self, gids: np.ndarray, owned: bool = False) -> WorkingSet:
        """Rows of sorted ``gids`` (pending messages included) and the committed rows of their messages'
        other endpoints: from their owners (exact) or from this rank (communication-free; a collective).
        ``owned``: every one of ``gids`` is this rank's (on every rank), so the first round stays local."""
        rows = self._fetch_local(gids, True) if owned else self._fetch(gids, pending=True)
        others = np.setdiff1d(np.unique(rows.msg_other), gids)
        return working_set(gids, rows, others, self._fetch(others, pending=False))

    def _fetch(self, gids: np.ndarray, pending: bool) -> Rows:
        tr = self.tr
        if not tr.exact:
            return self._fetch_local(gids, pending)
        ex, me = tr.exchange, tr.dist.rank
        owner = tr.index.owner(gids) if len(gids) else np.zeros(0, np.int32)
        sel = [np.flatnonzero(owner == r) for r in range(ex.world_size)]
        tag = "memory_rows" if pending else "memory_others"
        held, entries = self.cache.lookup(gids, pending)
        held[sel[me]] = -1  # this rank's own rows are read in place
        asks = ex.all_to_all([(gids[s], held[s]) for s in sel], tag + "_queries")
        got = ex.all_to_all([self._changed_rows(a_gids, a_held, pending) for a_gids, a_held in asks], tag)
        n, d = len(gids), self.owned.memory_dim
        memory, last, version = np.zeros((n, d), np.float32), np.zeros(n), np.zeros(n, np.int64)
        msgs = []
        for r, (s, g) in enumerate(zip(sel, got, strict=True)):
            changed, (mem, lst, ver, m_owner, *m_rest) = g[0], g[1:]
            fresh = s[changed]
            memory[fresh], last[fresh], version[fresh] = mem, lst, ver
            msgs.append((s[m_owner], *m_rest))
            if r != me:
                msgs += self._through_cache(gids, s, changed, g[1:], entries, pending, memory, last, version)
        parts = [np.concatenate([m[j] for m in msgs]) for j in range(5)]
        return Rows(memory, last, version, *parts)

    def _changed_rows(self, gids: np.ndarray, held: np.ndarray, pending: bool) -> tuple[np.ndarray, ...]:
        """As owner: the asked rows whose version differs from the one the asker holds, and their messages
        (message owners index ``gids``)."""
        rows = self.owned.export(gids, pending)
        changed = rows.version != held
        keep = changed[rows.msg_owner]
        return (changed, rows.memory[changed], rows.last_update[changed], rows.version[changed],
                *(a[keep] for a in rows.arrays()[3:]))  # fmt: skip

    def _through_cache(self, gids, s, changed, reply, entries, pending, memory, last, version) -> list[tuple]:
        """Cache the rows rank ``r`` sent (positions ``s[changed]``), fill the unchanged ones from the cache;
        returns the cached rows' messages as ``(position, other, t, feat, from_src)`` parts."""
        mem, lst, ver, m_owner, *m_rest = reply
        cache, sent = self.cache, np.flatnonzero(changed)
        by_owner = np.argsort(m_owner, kind="stable")  # each row's messages, in storage order
        lo = np.searchsorted(m_owner[by_owner], sent, "left")
        hi = np.searchsorted(m_owner[by_owner], sent, "right")
        for j, pos in enumerate(sent.tolist()):
            own = by_owner[lo[j] : hi[j]]
            messages = tuple(a[own] for a in m_rest) if pending else None
            cache.put(int(gids[s[pos]]), int(ver[j]), mem[j], float(lst[j]), messages)
        out = []
        for pos in np.flatnonzero(~changed).tolist():
            i = s[pos]
            v, row, lu, messages = entries[i]  # as looked up before the puts above (which may evict it)
            cache.hits += 1
            memory[i], last[i], version[i] = row, lu, v
            if pending and len(messages[0]):
                out.append((np.full(len(messages[0]), i, np.int64), *messages))
        return out

    def _fetch_local(self, gids: np.ndarray, pending: bool) -> Rows:
        """Communication-free: owned rows as they are, others' from the halo copy (no pending messages)."""
        tr = self.tr
        mine = tr.index.owned(gids)
        rows = self.owned.export(gids[mine], pending)
        memory, last = np.empty((len(gids), self.owned.memory_dim), np.float32), np.empty(len(gids))
        memory[mine], last[mine] = rows.memory, rows.last_update
        if not mine.all():
            memory[~mine], last[~mine] = self.halo.rows(gids[~mine])
        owner = np.flatnonzero(mine)[rows.msg_owner]
        return Rows(memory, last, np.zeros(len(gids), np.int64), owner, *rows.arrays()[4:])
