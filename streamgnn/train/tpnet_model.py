"""TPNet as a ``LinkModel``: each query pair's latest neighbors and walk Gram matrices, ``nn.TPNet``.

Memory-less, as DyGFormer's model (``dygformer_model``): what it knows of the stream is the store's edges and
the walk vectors (``sampling.WalkFeatures``, a cache over the store that answers a query at ``t`` from the
events before ``t`` only), so a restored store is the whole stream state. Per batch ``prepare`` reads,
before the store holds the batch, each distinct ``(node, query time)``'s latest ``neighbors`` and their
walk Gram blocks with themselves, then per pair the neighbors' blocks with both endpoints and the
endpoints' with themselves (``WalkFeatures.relative``); the full ``(2 (hops + 1))^2`` Gram matrix of each
(neighbor, endpoint) is put together in chunks of pairs at scoring time, so ranking many candidates keeps
memory bounded. An encoding depends on the pair: ranking ``q`` candidates costs ``q`` passes.

One process only: a distributed or sharded run is refused (its walk vectors need the whole store).

>>> from streamgnn.nn import TPNetConfig
>>> from streamgnn.train import TrainConfig
>>> from streamgnn.train.protocol import StepInput
>>> cfg = TPNetConfig(neighbors=3, time_dim=4, width=6, walk_hops=1, walk_dim=8)
>>> model = TPNetLinkModel(TrainConfig(model=cfg))
>>> model.attach(TemporalGraphStore())
>>> batch = StepInput(np.array([-1]), np.array([-1]), np.zeros(1), np.zeros(1), 0, np.zeros(1), 0, 0)
>>> math.isfinite(model.train(model.prepare(batch, None, np.array([-1])), np.array([True]), ()))
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from ..nn import EmbeddingInput
from ..nn.tpnet import PairTokens, TPNet
from ..sampling import SamplerConfig
from ..sampling.walks import WalkFeatures
from ..store import TemporalGraphStore
from .config import TrainConfig
from .distributed import DistContext
from .dygformer_model import LocalNeighbors
from .negatives import counted
from .protocol import Candidates, JointTerm, Learned, StepInput, check_edge_features
from .tgn_access import distinct_queries
from .tgn_model import pos_neg_loss

_EVAL, _TRAIN, _SERVE = 0, 1, 2  # sampler key offsets, as TGN's
CHUNK = 1024  # pairs per pass when scoring many candidates (bounds memory, not the result)


@dataclass
class _Nodes:
    """Distinct ``(node, time)`` queries: their latest neighbors (right-aligned, -1 pads), the time since
    each, the edges' features and each neighbor's walk Gram block with itself (``[q, k, m, m]``)."""

    ids: np.ndarray  # int64 [q, k]
    dt: torch.Tensor  # float32 [q, k]
    mask: torch.Tensor  # bool [q, k]
    edge: torch.Tensor | None  # float32 [q, k, d_e]
    self_gram: torch.Tensor  # float32 [q, k, m, m]


@dataclass
class _Pairs:
    """Query pairs ``(a, b)``: their endpoints' rows in ``_Nodes``, the endpoints' Gram matrix ``[p, 2m,
    2m]`` and each neighbor's blocks with its own and the other endpoint (``[p, 2, k, 2 m m]``)."""

    a: torch.Tensor  # int64 [p]
    b: torch.Tensor  # int64 [p]
    ends: torch.Tensor  # float32 [p, 2m, 2m]
    rel: torch.Tensor  # float32 [p, 2, k, 2 m m]


@dataclass
class _Prepared:
    batch: StepInput
    candidates: Candidates | None
    train_neg: np.ndarray | None
    nodes: _Nodes | None
    pairs: _Pairs | None  # the evaluation's pairs row by row, then training's
    columns: tuple[int, ...]  # pairs per row: the evaluation's (1 + candidates) where scored, training's (2)


class TPNetLinkModel(Learned):
    """``nn.TPNet`` with its neighbor reader, walk vectors and optimizer; ``model`` and ``optimizer`` are
    public."""

    trainable = True
    name = "TPNet"  # how run summaries call it

    def __init__(
        self, config: TrainConfig, *, device: torch.device | str = "cpu", dist: DistContext | None = None
    ) -> None:
        self.dist = dist or DistContext()
        if self.dist.active:
            raise ConfigError(
                "TPNet (model.variant=tpnet) trains in one process only: distributed and sharded runs are "
                f"out of scope (world size {self.dist.world_size}); use the default model or DyGFormer"
            )
        self.config = config
        self.device = torch.device(device)
        mcfg = config.model
        self.model = TPNet(mcfg).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.out_dim = self.model.out_dim
        sampling = SamplerConfig(
            fanouts=(mcfg.neighbors,),
            strategy=config.sampling,
            seed=config.seed,
            edge_features=mcfg.edge_feature_dim > 0,
        )
        self.neighbors = LocalNeighbors(sampling)
        self.walks = WalkFeatures(
            mcfg.walk_hops, mcfg.walk_dim, (mcfg.walk_decay,), seed=config.seed, clock=mcfg.walk_clock
        )
        self.store = TemporalGraphStore()

    @staticmethod
    def scoring_head(config: TrainConfig, state: dict) -> str:
        """Why no head scores this model from served embeddings: an endpoint's encoding reads its
        neighbors' walks to the other endpoint (``score``); what it serves (``embed``) is each node alone."""
        return (
            f"the model ({type(config.model).__name__}) scores a pair from each end's neighbors read against "
            "both ends, not from two served embeddings"
        )

    # ------------------------------------------------------------------ the stream (all of it in the store)
    def attach(self, store: TemporalGraphStore) -> None:
        check_edge_features(store, self.config.model.edge_feature_dim, "TPNetConfig")
        self.neighbors.attach(store)
        self.store = store

    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        """Nothing to do: the store already holds the batch, and the walks read it at the next query."""

    def reset_state(self) -> None:
        """Drop the walk cache (the next query rebuilds it from the store, its one source)."""
        self.walks.reset()

    def nbytes(self) -> dict[str, int]:
        return {"walks": self.walks.nbytes()}

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
        groups = []  # the evaluation's pairs (destination, then the candidates), then training's
        if candidates is not None:
            cols = candidates.neg[s] if candidates.rank else candidates.neg[s, :1]
            groups.append(np.column_stack([batch.dst[s], cols]))
        if train_neg is not None:
            groups.append(np.column_stack([batch.dst[s], train_neg[s]]))
        if not groups:
            return _Prepared(batch, candidates, train_neg, None, None, ())
        purpose = _TRAIN if candidates is None else _EVAL
        a = np.concatenate([np.repeat(src, g.shape[1]) for g in groups])
        b = np.concatenate([g.reshape(-1) for g in groups])
        at = np.concatenate([np.repeat(t, g.shape[1]) for g in groups])
        nodes, pairs = self._read(a, b, at, batch.step, purpose)
        return _Prepared(batch, candidates, train_neg, nodes, pairs, tuple(g.shape[1] for g in groups))

    @torch.no_grad()
    def score(self, prepared: _Prepared) -> tuple[np.ndarray, np.ndarray | None]:
        if not len(prepared.batch.rows):
            return np.zeros((0, 2)), None
        self.model.eval()
        logits = self._logits(prepared, 0).double().cpu().numpy()
        return logits[:, :2], (logits if prepared.candidates.rank else None)

    def train(self, prepared: _Prepared, keep: np.ndarray, joint: Sequence[JointTerm]) -> float:
        """One optimizer step on ``mean BCE(positives) + mean BCE(negatives)`` (as DyGFormer's); ``joint``'s
        losses added before the backward pass, the link loss alone returned."""
        s = prepared.batch.rows
        has_neg = keep & counted(prepared.train_neg, self.config.train_negative_pool)
        n_pos, n_neg = int(keep.sum()), int(has_neg.sum())
        if not n_pos:
            return math.nan
        self.model.train()
        self.optimizer.zero_grad()
        for term in joint:
            term.optimizer.zero_grad()
        pos, neg = self._logits(prepared, len(prepared.columns) - 1).unbind(1)
        loss = pos_neg_loss(pos, neg, keep[s], has_neg[s], n_pos, n_neg)
        sum((term.loss for term in joint), loss).backward()
        self.optimizer.step()
        for term in joint:
            term.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> np.ndarray:
        """Each node encoded with itself as the other endpoint: what the node did lately and how its
        neighbors' walks reach it, not how it scores against any one partner (that needs both, ``score``)."""
        self.model.eval()
        nodes = np.asarray(nodes, np.int64)
        if not len(nodes):
            return np.zeros((0, self.out_dim), np.float32)
        info, pairs = self._read(nodes, nodes, np.full(len(nodes), float(t)), step, _SERVE)
        out = [
            self.model.encode(self._tokens(info, pairs, lo, lo + CHUNK))[:, 0]
            for lo in range(0, len(nodes), CHUNK)
        ]
        return torch.cat(out).float().cpu().numpy()

    def embedded(self, prepared: _Prepared) -> None:
        """None: an endpoint's encoding depends on the other endpoint, no per-node embedding."""
        return None

    # ------------------------------------------------------------------ reading and assembling
    def _read(self, a: np.ndarray, b: np.ndarray, t: np.ndarray, step: int, purpose: int):
        """The nodes' and pairs' raw inputs of the pairs ``(a[i], b[i])`` at ``t[i]`` (-1: unknown node)."""
        k, dev = self.config.model.neighbors, self.device
        roots, times, rows = distinct_queries(np.concatenate([a, b]), np.concatenate([t, t]))
        hop = EmbeddingInput.from_subgraph(self.neighbors.sample(roots, times, 3 * step + purpose), k).hops[0]
        ids = torch.where(hop.mask, hop.nbr, -1).numpy()
        m = self.config.model.walk_hops + 1
        flat = ids.reshape(-1)
        own = self.walks.products(self.store, flat, flat, self._walk_time(np.repeat(times, k)))[:, 0, :m, :m]
        edge = None
        if self.config.model.edge_feature_dim:
            edge = (
                hop.edge_feat
                if hop.edge_feat is not None
                else torch.zeros(*ids.shape, self.config.model.edge_feature_dim)
            )
        nodes = _Nodes(
            ids, hop.dt.to(dev), hop.mask.to(dev), None if edge is None else edge.to(dev),
            torch.from_numpy(own.reshape(*ids.shape, m, m)).float().to(dev),
        )  # fmt: skip
        ra, rb = rows[: len(a)], rows[len(a) :]
        ends, rel = self.walks.relative(self.store, a, b, self._walk_time(t), np.stack([ids[ra], ids[rb]], 1))
        pairs = _Pairs(
            torch.from_numpy(ra).to(dev), torch.from_numpy(rb).to(dev),
            torch.from_numpy(ends[:, 0]).float().to(dev), torch.from_numpy(rel[..., : 2 * m * m]).to(dev),
        )  # fmt: skip
        return nodes, pairs

    def _walk_time(self, t: np.ndarray) -> np.ndarray:
        """When the walks are read for a query at ``t``: just after it with ``walk_ties`` (the events at
        ``t`` count), else at it (only those before)."""
        return np.nextafter(t, np.inf) if self.config.model.walk_ties else t

    def _tokens(self, nodes: _Nodes, pairs: _Pairs, lo: int, hi: int) -> PairTokens:
        """``PairTokens`` of pairs ``lo..hi``: each neighbor's full Gram matrix with each endpoint,
        ``[[w w, w x], [x w, x x]]`` over hops ``0..walk_hops``."""
        a, b = pairs.a[lo:hi], pairs.b[lo:hi]
        p, k = len(a), nodes.dt.shape[1]
        m = self.config.model.walk_hops + 1
        rel = pairs.rel[lo:hi].view(p, 2, k, 2, m, m)  # [side, j, own/other, a, b]
        # side 0 (a's neighbors): own = anchor 0; side 1 (b's): own = anchor 1
        cross = torch.stack([rel[:, 0], rel[:, 1].flip(2)], 1).transpose(2, 3)  # [p, side, anchor, k, m, m]
        ends = pairs.ends[lo:hi]
        anchors = torch.stack([ends[:, :m, :m], ends[:, m:, m:]], 1)  # [p, anchor, m, m]
        self_gram = torch.stack([nodes.self_gram[a], nodes.self_gram[b]], 1)  # [p, side, k, m, m]
        shape = (p, 2, 2, k, m, m)
        top = torch.cat([self_gram.unsqueeze(2).expand(shape), cross], -1)
        bottom = torch.cat([cross.transpose(-1, -2), anchors[:, None, :, None].expand(shape)], -1)
        gram = torch.cat([top, bottom], -2).reshape(p, 2, 2, k, 4 * m * m)
        take = lambda x: torch.stack([x[a], x[b]], 1)  # noqa: E731
        edge = None if nodes.edge is None else take(nodes.edge)
        return PairTokens(take(nodes.dt), take(nodes.mask), gram, edge)

    def _logits(self, prepared: _Prepared, group: int) -> torch.Tensor:
        """``[n, c]`` logits of one group of pairs (``_Prepared.columns``: 0 the evaluation's where scored,
        the last training's), computed in chunks."""
        n, c = len(prepared.batch.rows), prepared.columns[group]
        start = n * sum(prepared.columns[:group])
        out = [
            self.model.score(self._tokens(prepared.nodes, prepared.pairs, lo, min(lo + CHUNK, start + n * c)))
            for lo in range(start, start + n * c, CHUNK)
        ]
        return torch.cat(out).view(n, c) if out else torch.zeros(n, c, device=self.device)
