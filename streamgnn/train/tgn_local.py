"""TGN's access in one process (``tgn_access``): neighborhoods from the store's sampler, the module's own
memory, pair features over the store. What ``TGNLinkModel`` uses unless given others (the online and
replicated data-parallel trainers, offline fitting).

>>> from streamgnn.nn import TGNConfig
>>> from streamgnn.train import TrainConfig
>>> from streamgnn.train.tgn_model import TGNLinkModel
>>> model = TGNLinkModel(TrainConfig(model=TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8)))
>>> type(model.embeddings).__name__, type(model.memory).__name__
('LocalEmbeddings', 'LocalMemory')
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..nn import TGN, EmbeddingInput
from ..sampling import SamplerConfig, TemporalSampler
from ..sampling.pairs import PairFeatures
from ..store import TemporalGraphStore
from .config import TrainConfig
from .protocol import StepInput
from .tgn_access import SERVE, QuerySet, TGNAccess, distinct_queries


def local_access(model) -> TGNAccess:
    """The one-process access of a ``TGNLinkModel``."""
    mcfg = model.config.model
    pairs = PairFeatures.of(TemporalGraphStore(), mcfg) if mcfg.pair_features else None
    embeddings = LocalEmbeddings(model.model, model.config, model.sampling, model.device)
    return TGNAccess(embeddings, LocalMemory(model.model, model.device), pairs)


class LocalEmbeddings:
    """Sampled neighborhoods of the store, embedded by the module over its own memory."""

    def __init__(self, module: TGN, config: TrainConfig, sampling: SamplerConfig, device: torch.device):
        self.module, self.config, self.device = module, config, device
        self.sampler = TemporalSampler(TemporalGraphStore(), sampling)

    def attach(self, store: TemporalGraphStore) -> None:
        self.sampler.store = store

    def prepare(self, batch: StepInput, sets: list[QuerySet]) -> list[tuple[EmbeddingInput, torch.Tensor]]:
        rows = batch.rows
        return [self._input(*q.layout(rows), batch.blank, batch.step, q.purpose) for q in sets]

    def forward(self, prepared: tuple[EmbeddingInput, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        inp, rows = prepared
        return self.module(inp), rows

    def finish(self) -> None:
        pass  # the backward pass is whole here

    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> torch.Tensor:
        z, rows = self.forward(self._input(nodes, np.full(len(nodes), t), blank, step, SERVE))
        return z[rows]

    def _input(
        self, roots: np.ndarray, times: np.ndarray, blank: int, step: int, purpose: int
    ) -> tuple[EmbeddingInput, torch.Tensor]:
        """Neighborhoods of the distinct queries among ``roots`` (internal ids, -1: unknown, reads row
        ``blank``) at ``times``, and each root's row among them: a repeated query is embedded once."""
        mcfg = self.config.model
        roots, times, rows = distinct_queries(roots, np.asarray(times, np.float64))
        mem = torch.from_numpy(np.where(roots < 0, blank, roots))
        rows = torch.from_numpy(rows).to(self.device)
        if mcfg.num_layers == 0:
            return EmbeddingInput(mem, torch.from_numpy(times)).to(self.device), rows
        sub = self.sampler.sample(roots, times, key=3 * step + purpose)
        node_feat = None
        if mcfg.node_feature_dim:
            node_feat = np.zeros((len(roots), mcfg.node_feature_dim), np.float32)
            if sub.root_node_features is not None:
                node_feat[roots >= 0] = sub.root_node_features[roots >= 0]
        inp = EmbeddingInput.from_subgraph(sub, mcfg.num_neighbors, node_feat, mcfg.num_layers)
        if mcfg.edge_feature_dim or mcfg.node_feature_dim:
            # A store without features yet (no node update so far, history without edge features) reads zeros.
            hops = [
                replace(
                    hop,
                    edge_feat=_or_zeros(hop.edge_feat, hop.mask.shape, mcfg.edge_feature_dim),
                    node_feat=_or_zeros(hop.node_feat, hop.mask.shape, mcfg.node_feature_dim),
                )
                for hop in inp.hops
            ]
            inp = replace(inp, hops=hops)
        return replace(inp, nodes=mem).to(self.device), rows


class LocalMemory:
    """The module's own ``NodeMemory``: messages queued now, applied when the nodes are next embedded."""

    def __init__(self, module: TGN, device: torch.device) -> None:
        self.module, self.device = module, device

    def nbytes(self) -> dict[str, int]:
        """The module's memory buffers: rows, last updates, pending messages (none without memory)."""
        memory = self.module.memory
        return {} if memory is None else {"memory": sum(b.nbytes for b in memory.buffers())}

    @torch.no_grad()
    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        device = self.device
        self.module.observe(
            torch.from_numpy(src).to(device),
            torch.from_numpy(dst).to(device),
            torch.from_numpy(t).to(device),
            None if feat is None else torch.from_numpy(feat).to(device),
        )


def _or_zeros(feat: torch.Tensor | None, shape: torch.Size, dim: int) -> torch.Tensor | None:
    """``feat``, or zeros ``[*shape, dim]`` where the model wants features and none were sampled."""
    return feat if feat is not None or not dim else torch.zeros(*shape, dim)
