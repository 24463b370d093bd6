"""The learned model a ``TrainConfig`` names: ``config.model`` a ``TGNConfig`` (TGN and its variants) or a
``DyGFormerConfig``. The one place a config becomes a ``LinkModel``, so ``OnlineTrainer``, ``fit_offline``,
``streamgnn train`` and the benchmarks pick models the same way."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..errors import ConfigError
from ..nn import DyGFormerConfig
from .config import TrainConfig
from .distributed import DistContext
from .dygformer_model import DyGFormerLinkModel
from .protocol import LinkModel
from .tgn_local import local_backends
from .tgn_model import TGNLinkModel


def make_link_model(
    config: TrainConfig, *, device: torch.device | str, dist: DistContext, backends: Callable | None = None
) -> LinkModel:
    """``backends``: where a TGN model's embeddings, memory and pair features live (``tgn_backend``; None:
    one process), e.g. ``shard.tgn_backend.shard_backends``."""
    if isinstance(config.model, DyGFormerConfig):
        if backends is not None:
            raise ConfigError(
                "DyGFormer reads both endpoints' neighbor sequences from one store: it has no backends"
            )
        return DyGFormerLinkModel(config, device=device, dist=dist)
    return TGNLinkModel(config, device=device, dist=dist, backends=backends or local_backends)
