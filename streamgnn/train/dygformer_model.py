"""DyGFormer as a ``LinkModel``: each query's latest neighbors from the store's sampler, ``nn.DyGFormer``.

Stateless beyond the store: everything the model knows of the stream is the store's edges, read at query
time, so ``observe``, ``reset_state`` and the stream state are no-ops and a restored store is the whole
stream state. Per batch ``prepare`` reads, before the store holds the batch, one sequence per distinct
``(node, query time)`` among the sources, destinations, negatives and candidates (the sampler's recent-K
kernel, strictly before the query time); then every pair is encoded *together* (co-occurrence and attention
span both ends), so ranking ``q`` candidates costs ``q`` Transformer passes per positive, not one. Each
pair is scored at its source's query time, candidates included.

Where the sequences come from is the model's one access part, a ``NeighborReader``: in one process the store's
sampler (``LocalNeighbors``); sharded, the owners of the queried vertices (``shard.sequences``). The model
scores and trains ``StepInput.rows`` only, so the same code runs on every rank of a sharded run.

>>> from streamgnn.nn import DyGFormerConfig
>>> from streamgnn.train import TrainConfig
>>> from streamgnn.train.protocol import StepInput
>>> cfg = DyGFormerConfig(sequence_length=4, channel_dim=4, time_dim=4, embedding_dim=4)
>>> model = DyGFormerLinkModel(TrainConfig(model=cfg))
>>> model.attach(TemporalGraphStore())
>>> batch = StepInput(np.array([-1]), np.array([-1]), np.zeros(1), np.zeros(1), 0, np.zeros(1), 0, 0)
>>> math.isfinite(model.train(model.prepare(batch, None, np.array([-1])), np.array([True]), ()))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from ..nn import EmbeddingInput
from ..nn.dygformer import DyGFormer, Sequences
from ..sampling import SampledSubgraph, SamplerConfig, TemporalSampler
from ..store import TemporalGraphStore
from .config import TrainConfig
from .distributed import DistContext
from .negatives import counted
from .protocol import Candidates, JointTerm, Learned, StepInput, check_edge_features
from .tgn_access import distinct_queries
from .tgn_model import pos_neg_loss

_EVAL, _TRAIN, _SERVE = 0, 1, 2  # sampler key offsets, as TGN's: every draw is named by (step, purpose)
CHUNK = 2048  # pairs per Transformer pass when scoring many candidates (bounds memory, not the result)


class NeighborReader(Protocol):
    """Where ``DyGFormerLinkModel`` reads its sequences: each root's sampled neighbors before its time."""

    def attach(self, store: TemporalGraphStore) -> None:
        """Read from ``store`` from now on."""

    def sample(
        self, roots: np.ndarray, times: np.ndarray, key: int, serving: bool = False
    ) -> SampledSubgraph:
        """One hop of each root's neighbors strictly before its time (-1: unknown, none). A collective when
        sharded: every rank calls as often, with or without roots. ``serving``: the roots are vertices this
        process serves (sharded: its own, read from its shard with no exchange)."""


class LocalNeighbors:
    """One process: the store's sampler."""

    def __init__(self, config: SamplerConfig) -> None:
        self.sampler = TemporalSampler(TemporalGraphStore(), config)

    def attach(self, store: TemporalGraphStore) -> None:
        self.sampler.store = store

    def sample(
        self, roots: np.ndarray, times: np.ndarray, key: int, serving: bool = False
    ) -> SampledSubgraph:
        return self.sampler.sample(roots, times, key=key)


@dataclass
class _Prepared:
    """What ``prepare`` read before the batch was ingested: the distinct queries' sequences and, per row,
    the source's and each candidate's index among them (column 0 the destination)."""

    batch: StepInput
    candidates: Candidates | None
    train_neg: np.ndarray | None
    seqs: Sequences | None
    src: torch.Tensor | None  # [n]
    eval_cand: torch.Tensor | None  # [n, 2] or [n, 1 + q] when ranking
    train_cand: torch.Tensor | None  # [n, 2]: destination, training negative


class DyGFormerLinkModel(Learned):
    """``nn.DyGFormer`` with its neighbor reader and optimizer; ``model`` and ``optimizer`` are public.
    ``neighbors``: makes the reader from the sampler's config (None: ``LocalNeighbors``, one process)."""

    trainable = True
    name = "DyGFormer"  # how run summaries call it

    def __init__(
        self, config: TrainConfig, *, device: torch.device | str = "cpu", dist: DistContext | None = None,
        neighbors: Callable[[SamplerConfig], NeighborReader] | None = None,
    ) -> None:  # fmt: skip
        self.config = config
        self.device = torch.device(device)
        self.dist = dist or DistContext()
        mcfg = config.model
        self.model = DyGFormer(mcfg).to(self.device)
        self.dist.broadcast_module(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, fused=True)
        self.out_dim = self.model.out_dim
        sampling = SamplerConfig(
            fanouts=(mcfg.sequence_length - 1,),
            strategy=config.sampling,
            seed=config.seed,
            edge_features=mcfg.edge_feature_dim > 0,
        )
        self.neighbors = (neighbors or LocalNeighbors)(sampling)

    @staticmethod
    def scoring_head(config: TrainConfig, state: dict) -> str:
        """Why no head scores this model from served embeddings: it scores a pair from both ends' neighbor
        sequences encoded together (``score``), and what it serves (``embed``) is each node alone."""
        return (
            f"the model ({type(config.model).__name__}) scores a pair from both ends' neighbor sequences, "
            "not from two served embeddings"
        )

    # ------------------------------------------------------------------ the stream (all of it in the store)
    def attach(self, store: TemporalGraphStore) -> None:
        check_edge_features(store, self.config.model.edge_feature_dim, "DyGFormerConfig")
        self.neighbors.attach(store)

    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        """Nothing to do: the store already holds the batch, and it is all the model reads."""

    def reset_state(self) -> None:
        """Nothing to forget: the model keeps no state of the stream (the store is its state)."""

    def nbytes(self) -> dict[str, int]:
        return {}  # the store is its state

    def state(self) -> None:
        return None

    def load_state(self, state: None) -> None:
        pass

    # ------------------------------------------------------------------ per batch
    def prepare(
        self, batch: StepInput, candidates: Candidates | None, train_neg: np.ndarray | None
    ) -> _Prepared:
        s = batch.rows
        src, t = batch.src[s], batch.t_query[s]
        n = len(src)
        groups = [src[:, None]]
        if candidates is not None:
            cols = candidates.neg[s] if candidates.rank else candidates.neg[s, :1]
            groups.append(np.column_stack([batch.dst[s], cols]))
        if train_neg is not None:
            groups.append(np.column_stack([batch.dst[s], train_neg[s]]))
        if len(groups) == 1:
            return _Prepared(batch, candidates, train_neg, None, None, None, None)
        roots = np.concatenate([g.reshape(-1) for g in groups])
        times = np.concatenate([np.repeat(t, g.shape[1]) for g in groups])
        roots, times, rows = distinct_queries(roots, times)
        # read even with no rows: sharded, every rank enters the reader's exchanges once per batch
        seqs = self._sequences(roots, times, batch.step, _TRAIN if candidates is None else _EVAL)
        if not n:
            return _Prepared(batch, candidates, train_neg, None, None, None, None)
        rows = torch.from_numpy(rows).to(self.device)
        parts = list(rows.split([g.size for g in groups]))
        src_rows = parts.pop(0)
        eval_cand = parts.pop(0).view(n, -1) if candidates is not None else None
        train_cand = parts.pop(0).view(n, 2) if train_neg is not None else None
        return _Prepared(batch, candidates, train_neg, seqs, src_rows, eval_cand, train_cand)

    @torch.no_grad()
    def score(self, prepared: _Prepared) -> tuple[np.ndarray, np.ndarray | None]:
        if not len(prepared.batch.rows):
            return np.zeros((0, 2)), None
        self.model.eval()
        cand = prepared.eval_cand
        logits = self._logits(prepared.seqs, prepared.src, cand).double().cpu().numpy()
        ap = logits[:, :2]
        return ap, (logits if prepared.candidates.rank else None)

    def train(self, prepared: _Prepared, keep: np.ndarray, joint: Sequence[JointTerm]) -> float:
        """One optimizer step on ``mean BCE(positives) + mean BCE(negatives)``, each rank's part scaled so
        that the averaged gradient is the single-process full-batch one (as TGN's); ``joint``'s losses
        added before the backward pass (``LinkModel.train``), the link loss alone returned."""
        s = prepared.batch.rows
        model, d = self.model, self.dist
        has_neg = keep & counted(prepared.train_neg, self.config.train_negative_pool)
        n_pos, n_neg = int(keep.sum()), int(has_neg.sum())
        if not n_pos:
            return math.nan
        model.train()
        self.optimizer.zero_grad()
        for term in joint:
            term.optimizer.zero_grad()
        local = 0.0
        if len(s):
            pos, neg = self._logits(prepared.seqs, prepared.src, prepared.train_cand).unbind(1)
            loss = pos_neg_loss(pos, neg, keep[s], has_neg[s], n_pos, n_neg)
            (sum((term.loss for term in joint), loss) * d.world_size).backward()
            local = loss.item()
        d.average_gradients(list(model.parameters()))
        self.optimizer.step()
        for term in joint:
            term.optimizer.step()
        return d.all_sum([local], self.device)[0]

    @torch.no_grad()
    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> np.ndarray:
        """Each node's own sequence encoded without a partner (``DyGFormer.alone``): what the node did
        lately, not how it scores against any one partner (that needs both ends, ``score``)."""
        self.model.eval()
        nodes = np.asarray(nodes, np.int64)
        seqs = self._sequences(nodes, np.full(len(nodes), t), step, _SERVE, serving=True)
        out = [self.model.alone(seqs.take(rows)) for rows in torch.arange(len(nodes)).split(CHUNK)]
        return torch.cat(out).float().cpu().numpy() if out else np.zeros((0, self.out_dim), np.float32)

    def embedded(self, prepared: _Prepared) -> None:
        """None: a pair's score encodes both ends' sequences together, no per-node embedding."""
        return None

    def _logits(self, seqs: Sequences, src: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """``[n, c]`` logits of each source ``src[i]`` against ``cand[i, j]`` (rows of ``seqs``)."""
        a, b = src.unsqueeze(1).expand_as(cand).reshape(-1), cand.reshape(-1)
        out = [
            self.model.score(seqs.take(a[i : i + CHUNK]), seqs.take(b[i : i + CHUNK]))
            for i in range(0, len(a), CHUNK)
        ]
        return torch.cat(out).view(cand.shape)

    def _sequences(
        self, roots: np.ndarray, times: np.ndarray, step: int, purpose: int, serving: bool = False
    ) -> Sequences:
        """Each root's latest ``sequence_length - 1`` neighbors strictly before its time (most recent
        right-aligned), then the root itself at gap 0 (-1: unknown, no neighbors)."""
        mcfg = self.config.model
        k = mcfg.sequence_length - 1
        sub = self.neighbors.sample(roots, times, 3 * step + purpose, serving)
        hop = EmbeddingInput.from_subgraph(sub, k).hops[0]
        n = len(roots)
        ids = torch.cat([torch.where(hop.mask, hop.nbr, -1), torch.from_numpy(roots).unsqueeze(1)], 1)
        dt = torch.cat([hop.dt, torch.zeros(n, 1)], 1)
        mask = torch.cat([hop.mask, torch.ones(n, 1, dtype=torch.bool)], 1)
        edge = None
        if mcfg.edge_feature_dim:
            feat = hop.edge_feat if hop.edge_feat is not None else torch.zeros(n, k, mcfg.edge_feature_dim)
            edge = torch.cat([feat, torch.zeros(n, 1, mcfg.edge_feature_dim)], 1)
        return Sequences(ids, dt, mask, edge).to(self.device)
