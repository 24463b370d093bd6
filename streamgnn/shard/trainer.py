"""ShardedTrainer: partition-parallel test-then-train; each rank holds its partitions' graph and memory.

Per global batch (identical on every rank, see ``GlobalBatcher``), the same protocol as ``OnlineTrainer``:

1. ``GlobalIndex.admit``: validation, event-id dedup, lateness and global ids, the same on every rank;
2. each rank takes the positives whose source it owns (the events it read) and draws their negatives: the
   pool of destinations is replicated, the history of a source lives with its owner, and each event's draw is
   keyed by its place in the global batch, so the draws are those one process makes;
3. neighborhoods are sampled (``RoutedSampler``: by the owners; ``LocalSampler``: from the local shard) and
   memory rows gathered (exact: from the owners, pending messages included; communication-free: owned rows
   exact, others from a halo copy at most ``staleness`` batches old);
4. the batch goes into each shard (events with an owned endpoint: a cut edge is kept by both owners);
5. scores are gathered, gradients averaged so that they equal the one-process gradient, and each owner
   commits its vertices' memory updates.

Exact mode therefore computes what one process computes (same samples, memory rows, losses; the model within
float tolerance): only reduction orders differ. Training dropout draws different masks for different
tensor shapes, so equality across world sizes holds with ``dropout=0``, as for the replicated mode.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..events import EventBatch, EventKind
from ..nn import TGN, EmbeddingInput
from ..sampling import NegativeSampler, SamplerConfig
from ..store import StoreConfig, TemporalGraphStore
from ..train.config import TrainConfig
from ..train.distributed import DistContext, init_distributed, local_device
from ..train.metrics import RunningMetrics, reciprocal_ranks
from ..train.trainer import StepResult
from .comm import Exchange
from .config import ShardConfig
from .memory import OwnedMemory, Rows, WorkingSet, lend_state, working_set
from .ownership import GlobalIndex, Ownership
from .sampling import LocalSampler, RoutedSampler

ADD, UPDATE = int(EventKind.EDGE_ADD), int(EventKind.NODE_UPDATE)


@dataclass
class _Queries:
    """Distinct ``(vertex, time)`` queries of one model input and each root's row among them."""

    nodes: np.ndarray
    times: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, roots: np.ndarray, times: np.ndarray) -> _Queries:
        order = np.lexsort((times, roots))
        r, t = roots[order], times[order]
        first = np.ones(len(order), bool)
        first[1:] = (r[1:] != r[:-1]) | (t[1:] != t[:-1])
        rows = np.empty(len(order), np.int64)
        rows[order] = np.cumsum(first) - 1
        return cls(r[first], t[first], rows)


class ShardedTrainer:
    """One rank of a sharded run; ``step`` takes each global batch (every rank the same one, in step)."""

    def __init__(
        self, config: TrainConfig, shard: ShardConfig | None = None, *, dist: DistContext | None = None
    ):
        self.config, self.shard_config = config, shard or ShardConfig()
        mcfg = config.model
        if mcfg.node_feature_dim:
            raise ConfigError("sharded training does not yet gather node features: set node_feature_dim=0")
        if not mcfg.uses_memory:
            raise ConfigError("sharded training shards TGN memory: the tgat variant (no memory) needs none")
        self.dist = dist or init_distributed()
        self.device = local_device(config.device)
        d = self.dist
        self.ownership = Ownership(self.shard_config.num_partitions, d.world_size, d.rank)
        self.exchange = Exchange(d.rank, d.world_size, self.device)
        self.index = GlobalIndex(self.ownership)
        self.store = TemporalGraphStore(StoreConfig())  # this rank's shard, in global ids
        self.owned = OwnedMemory(mcfg.memory_dim, mcfg.edge_feature_dim)
        torch.manual_seed(config.seed)
        self.model = TGN(mcfg).to(self.device)
        d.broadcast_module(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, fused=True)
        sampling = SamplerConfig(
            fanouts=(mcfg.num_neighbors,) * max(mcfg.num_layers, 1), strategy=config.sampling,
            seed=config.seed, edge_features=mcfg.edge_feature_dim > 0,
        )  # fmt: skip
        if self.shard_config.mode == "exact":
            self.sampler = RoutedSampler(
                self.store, self.index, self.exchange, sampling, mcfg.edge_feature_dim
            )
        else:
            self.sampler = LocalSampler(self.store, sampling, mcfg.edge_feature_dim)
        self.negatives: NegativeSampler | None = None
        self.metrics = RunningMetrics(config.window_events)
        self.steps = self.learned = self.position = self.dead_letter_count = 0

    # ------------------------------------------------------------------ per batch
    def step(self, batch: EventBatch, *, train: bool = True, score: bool = True) -> StepResult:
        started = time.perf_counter()
        cfg = self.config
        before = self.index.num_nodes
        adm = self.index.admit(batch)
        self.owned.add_rows(
            np.arange(before, self.index.num_nodes)[self.index.owned(np.arange(before, self.index.num_nodes))]
        )
        add = batch.kind[adm.rows] == ADD
        rows = adm.rows[add]
        m = len(rows)
        pre_src, pre_dst, post_src, post_dst = adm.pre_src[add], adm.pre_dst[add], adm.src[add], adm.dst[add]
        t = batch.t[rows].copy()
        feat = self._edge_features(batch, rows)
        mine = np.flatnonzero(self.index.owned(post_src))
        scoring = score and m > 0 and self.negatives is not None
        training = train and m > 0 and self.negatives is not None
        t_query = t if cfg.query_time == "event" else np.full_like(t, t.min(initial=math.inf))
        sets: list[_Queries] = []
        if scoring:
            neg_ids = self.negatives.sample(
                pre_src, pre_dst, num=max(cfg.eval_negatives, 1), strategy=cfg.eval_strategy, groups=t,
                key=2 * self.steps,
            )[mine]  # fmt: skip
            rank = cfg.eval_negatives > 0
            roots = [pre_src[mine], pre_dst[mine], neg_ids[:, 0]]
            times = [t_query[mine]] * 3
            if rank:
                roots.append(np.column_stack([pre_dst[mine], neg_ids]).reshape(-1))
                times.append(np.full(len(roots[-1]), t.min()))
            sets.append(_Queries.of(np.concatenate(roots), np.concatenate(times)))
        if training:
            train_neg = self.negatives.sample(
                pre_src, pre_dst, num=1, strategy=cfg.train_negatives, key=2 * self.steps + 1
            )[:, 0]
            roots = np.concatenate([pre_src[mine], pre_dst[mine], train_neg[mine]])
            sets.append(_Queries.of(roots, np.tile(t_query[mine], 3)))
        inputs, ws = self._inputs(sets) if sets else ([], None)

        letters = self._ingest(batch, adm)
        pos = neg = rr = np.zeros(0)
        if scoring:
            pos, neg, rr = self._score(inputs[0], ws, rank, neg_ids >= 0, mine, m)
        loss = math.nan
        if training:
            loss = self._train(inputs[-1], ws, train_neg, mine, m)
        self._observe(post_src, post_dst, t, feat)
        self._observe_negatives(post_src, post_dst)
        self.learned += m
        self.steps += 1
        scored = rows if scoring else rows[:0]
        if scoring or training:
            self.metrics.add(pos, neg, rr, batch.t[scored], loss, time.perf_counter() - started)
        return StepResult(len(batch), m, batch.eid[scored], batch.t[scored], pos, neg, rr, loss, letters)

    def _edge_features(self, batch: EventBatch, rows: np.ndarray) -> np.ndarray | None:
        dim = self.config.model.edge_feature_dim
        if not dim:
            return None
        if batch.feature_dim != dim and len(rows):
            raise ConfigError(
                f"the model expects {dim} edge features per event, the batch has {batch.feature_dim}"
            )
        return batch.features[rows] if len(rows) else np.zeros((0, dim), np.float32)

    def _ingest(self, batch: EventBatch, adm) -> list:
        """Events with an owned endpoint into the shard (global ids); dead letters: the index's, and the
        shard's for events this rank read (their source's owner reports them, once)."""
        kind = batch.kind[adm.rows]
        owned_src = self.index.owned(adm.src)
        mine = owned_src | (self.index.owned(adm.dst) & (kind != UPDATE))
        rows = adm.rows[mine]
        if len(rows):
            part = batch.take(rows)
            src = adm.src[mine]
            dst = np.where(kind[mine] == UPDATE, src, adm.dst[mine])
            shard_batch = EventBatch(part.kind, src, dst, part.t, part.eid, part.weight, part.features)
            report = self.store.ingest(shard_batch, "shard")
            reported = owned_src[mine]
            for letter in report.dead_letters:
                if reported[letter.index]:
                    adm.dead_letters.append(letter)
        self.dead_letter_count += len(adm.dead_letters)
        return adm.dead_letters

    # ------------------------------------------------------------------ model inputs
    def _inputs(self, sets: list[_Queries]) -> tuple[list[tuple[EmbeddingInput, torch.Tensor]], WorkingSet]:
        mcfg = self.config.model
        subs = self.sampler.sample_sets([(q.nodes, q.times) for q in sets], key=3 * self.steps)
        dense = [EmbeddingInput.from_subgraph(sub, mcfg.num_neighbors, None, mcfg.num_layers) for sub in subs]
        needed = [q.nodes for q in sets] + [h.nbr[h.mask].numpy() for inp in dense for h in inp.hops]
        gids = np.unique(np.concatenate(needed))
        ws = self._gather(gids[gids >= 0])
        out = []
        for q, inp in zip(sets, dense, strict=True):
            hops = []
            for h in inp.hops:
                nbr = np.where(h.mask.numpy(), ws.ids(h.nbr.numpy()), ws.blank)
                edge = h.edge_feat
                if mcfg.edge_feature_dim and edge is None:
                    edge = torch.zeros(*h.mask.shape, mcfg.edge_feature_dim)
                hops.append(type(h)(torch.from_numpy(nbr), h.dt, h.mask, edge, None))
            nodes = torch.from_numpy(ws.ids(q.nodes))
            out.append((EmbeddingInput(nodes, inp.t, None, hops).to(self.device), torch.from_numpy(q.rows)))
        return out, ws

    def _gather(self, gids: np.ndarray) -> WorkingSet:
        """Rows of sorted ``gids`` (pending messages included) and the committed rows of their messages' other
        endpoints, from their owners."""
        rows = self._fetch(gids, pending=True)
        others = np.setdiff1d(np.unique(rows.msg_other), gids)
        return working_set(gids, rows, others, self._fetch(others, pending=False))

    def _fetch(self, gids: np.ndarray, pending: bool) -> Rows:
        ex = self.exchange
        owner = self.index.owner(gids) if len(gids) else np.zeros(0, np.int32)
        sel = [np.flatnonzero(owner == r) for r in range(ex.world_size)]
        tag = "memory_rows" if pending else "memory_others"
        asks = ex.all_to_all([(gids[s],) for s in sel], tag + "_queries")
        got = ex.all_to_all([self.owned.export(a[0], pending).arrays() for a in asks], tag)
        d, de = self.owned.memory_dim, self.owned.edge_dim
        n = len(gids)
        memory, last, version = np.zeros((n, d), np.float32), np.zeros(n), np.zeros(n, np.int64)
        msgs = []
        for s, g in zip(sel, got, strict=True):
            memory[s], last[s], version[s] = g[0], g[1], g[2]
            msgs.append((s[g[3]], *g[4:]))
        cat = [np.concatenate([m[i] for m in msgs]) if msgs else None for i in range(5)]
        if not msgs:
            cat = [
                np.zeros(0, np.int64),
                np.zeros(0, np.int64),
                np.zeros(0),
                np.zeros((0, de), np.float32),
                np.zeros(0, bool),
            ]
        return Rows(memory, last, version, *cat)

    # ------------------------------------------------------------------ score, train, observe
    @torch.no_grad()
    def _score(self, inp, ws: WorkingSet, rank: bool, neg_ok: np.ndarray, mine: np.ndarray, m: int):
        inp, rows = inp
        n = len(mine)
        local = np.full((n, 3), math.nan)
        if n:
            self.model.eval()
            with lend_state(self.model.memory, ws.state):
                z = self.model(inp)
            rows = rows.to(self.device)
            predict = self.model.predictor
            z_src = z[rows[:n]]
            ap = predict.candidates(z_src, z, rows[n : 3 * n].view(2, n).T).double().cpu().numpy()
            local[:, 0] = ap[:, 0]
            local[:, 1] = np.where(neg_ok[:, 0], ap[:, 1], np.nan)
            if rank:
                scores = predict.candidates(z_src, z, rows[3 * n :].view(n, -1)).double().cpu().numpy()
                local[:, 2] = reciprocal_ranks(scores[:, 0], scores[:, 1:], neg_ok)
        full = self._gather_rows(local, mine, m)
        return full[:, 0], full[:, 1], full[:, 2]

    def _gather_rows(self, local: np.ndarray, mine: np.ndarray, m: int) -> np.ndarray:
        """Every rank's rows of a per-event result, in global batch order."""
        got = self.exchange.all_gather((mine.astype(np.int64), local), "scores")
        full = np.full((m, local.shape[1]), math.nan)
        for idx, vals in got:
            full[idx] = vals
        return full

    def _train(self, inp, ws: WorkingSet, train_neg: np.ndarray, mine: np.ndarray, m: int) -> float:
        inp, rows = inp
        n = len(mine)
        model, d = self.model, self.dist
        has_neg = train_neg >= 0
        n_neg = int(has_neg.sum())
        model.train()
        self.optimizer.zero_grad()
        local = 0.0
        if n:
            with lend_state(model.memory, ws.state):
                z = model(inp)
            rows = rows.to(self.device)
            logits = model.predictor.candidates(z[rows[:n]], z, rows[n:].view(2, n).T)
            pos, neg = logits.unbind(1)
            loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum") / m
            if n_neg:
                w_neg = torch.from_numpy(has_neg[mine].astype(np.float32)).to(self.device)
                loss = (
                    loss
                    + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), w_neg, reduction="sum")
                    / n_neg
                )
            (loss * d.world_size).backward()
            local = loss.item()
        d.average_gradients(list(model.parameters()))
        self.optimizer.step()
        return d.all_sum([local], self.device)[0]

    @torch.no_grad()
    def _observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        """Owners commit the pending messages of the batch's owned endpoints, then queue the new ones."""
        ends = np.unique(np.concatenate([src, dst]))
        ends = ends[self.index.owned(ends)]
        ws = self._gather(ends)  # collective: every rank enters it, even with nothing to commit
        if len(ends):
            with lend_state(self.model.memory, ws.state) as mem:
                mem.flush(torch.from_numpy(np.arange(len(ends))).to(self.device))
            n = len(ends)
            self.owned.commit(
                ends, ws.state["memory"][:n].cpu().numpy(), ws.state["last_update"][:n].cpu().numpy()
            )
        if not len(src):
            return
        n = len(src)
        node = np.stack([src, dst], 1).reshape(-1)  # (src side, dst side) per event: arrival order
        other = np.stack([dst, src], 1).reshape(-1)
        side = np.tile([True, False], n)
        keep = self.index.owned(node)
        f = None if feat is None else np.repeat(feat, 2, 0)[keep]
        self.owned.append_messages(node[keep], other[keep], np.repeat(t, 2)[keep], f, side[keep])

    def _observe_negatives(self, src: np.ndarray, dst: np.ndarray) -> None:
        """The destination pool is replicated; the history of a source lives with its owner."""
        if not len(dst):
            return
        if self.negatives is None:
            self.negatives = NegativeSampler(dst, seed=self.config.seed)
        else:
            self.negatives.pool = np.union1d(self.negatives.pool, dst)
        mine = self.index.owned(src)
        self.negatives.observe(src[mine], dst[mine])
