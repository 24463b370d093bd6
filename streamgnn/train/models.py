"""The learned model a ``TrainConfig`` names: ``config.model`` a ``TGNConfig`` (TGN and its variants) or a
``DyGFormerConfig``. The one place a config becomes a ``LinkModel``, so ``OnlineTrainer``, ``fit_offline``,
``streamgnn train`` and the benchmarks pick models the same way, and the one place a checkpoint's config
and state become the head that scores served embeddings (``scoring_head``), so the service knows no
model's internals."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..nn import DyGFormerConfig
from .config import TrainConfig
from .distributed import DistContext
from .dygformer_model import DyGFormerLinkModel
from .head import ScoringHead
from .protocol import LinkModel
from .tgn_local import local_backends
from .tgn_model import TGNLinkModel


def _family(config: TrainConfig) -> type[TGNLinkModel] | type[DyGFormerLinkModel]:
    return DyGFormerLinkModel if isinstance(config.model, DyGFormerConfig) else TGNLinkModel


def make_link_model(
    config: TrainConfig, *, device: torch.device | str, dist: DistContext, backends: Callable | None = None,
    neighbors: Callable | None = None,
) -> LinkModel:  # fmt: skip
    """Where the model's stream-dependent parts live, for each family (None: one process): ``backends``, a
    TGN model's embeddings, memory and pair features (``tgn_backend``), e.g.
    ``shard.tgn_backend.shard_backends``; ``neighbors``, a DyGFormer model's sequence reader
    (``dygformer_model.NeighborReader``), e.g. ``shard.sequences.shard_neighbors``."""
    if _family(config) is DyGFormerLinkModel:
        return DyGFormerLinkModel(config, device=device, dist=dist, neighbors=neighbors)
    return TGNLinkModel(config, device=device, dist=dist, backends=backends or local_backends)


def scoring_head(config: TrainConfig, state: dict) -> ScoringHead | str:
    """The head that scores two served embeddings (plus the pair's raw features, if it reads them) as the
    model of a checkpoint's ``config`` and tensor ``state`` does, or the reason no such head exists. Raises
    ``KeyError``/``RuntimeError`` when ``state`` does not hold the weights the config calls for."""
    return _family(config).scoring_head(config, state)
