"""The learned model a ``TrainConfig`` names: ``config.model`` a ``TGNConfig`` (TGN and its variants) or a
``DyGFormerConfig``. The one place a config becomes a ``LinkModel``, so ``OnlineTrainer``, ``fit_offline``,
``streamgnn train`` and the benchmarks pick models the same way."""

from __future__ import annotations

import torch

from ..nn import DyGFormerConfig
from .config import TrainConfig
from .distributed import DistContext
from .dygformer_model import DyGFormerLinkModel
from .protocol import LinkModel
from .tgn_model import TGNLinkModel


def make_link_model(config: TrainConfig, *, device: torch.device | str, dist: DistContext) -> LinkModel:
    if isinstance(config.model, DyGFormerConfig):
        return DyGFormerLinkModel(config, device=device, dist=dist)
    return TGNLinkModel(config, device=device, dist=dist)
