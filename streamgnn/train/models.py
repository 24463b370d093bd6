"""The learned model a ``TrainConfig`` names, by the class of ``config.model``: a registry, so adding a model
family is one ``register`` call, not an edit of every place that builds one. The one place a config becomes
a ``LinkModel``, so ``OnlineTrainer``, ``ShardedTrainer``, ``fit_offline``, ``streamgnn train`` and the
benchmarks pick models the same way, and the one place a checkpoint's config and state become the head that
scores served embeddings (``scoring_head``), so the service knows no model's internals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import ConfigError
from ..nn import DyGFormerConfig, TGNConfig, TPNetConfig
from .config import MODEL_CONFIGS, TrainConfig
from .distributed import DistContext
from .dygformer_model import DyGFormerLinkModel
from .head import ScoringHead
from .protocol import LinkModel
from .tgn_model import TGNLinkModel
from .tpnet_model import TPNetLinkModel


@dataclass(frozen=True)
class ModelFamily:
    """How a model config of one class becomes a ``LinkModel``: ``model(config, device=, dist=)``, plus its
    stream-dependent part under the keyword ``part`` where the caller supplies one (a sharded run's), and
    ``model.scoring_head(config, state)`` for the service."""

    model: type
    part: str | None = None


MODELS: dict[type, ModelFamily] = {}


def register(config_class: type, model: type, part: str | None = None) -> None:
    """Build ``model`` for every ``TrainConfig`` whose ``model`` is a ``config_class``, which a config file or
    checkpoint names by its ``variant`` (``TrainConfig.model`` may then hold one: ``MODEL_CONFIGS``);
    ``part``: the keyword of ``model``'s constructor that takes its stream-dependent part (see
    ``make_link_model``). The first family registered is the default model."""
    MODEL_CONFIGS.register(config_class)
    MODELS[config_class] = ModelFamily(model, part)


register(
    TGNConfig, TGNLinkModel, part="access"
)  # the default; embeddings, memory, pair features (``tgn_access``)
register(DyGFormerConfig, DyGFormerLinkModel, part="neighbors")  # sequence reader (``NeighborReader``)
register(TPNetConfig, TPNetLinkModel)  # one process only: no stream-dependent part to supply


def family(config: TrainConfig) -> ModelFamily:
    """The registered family of ``config.model``, by its exact class."""
    found = MODELS.get(type(config.model))
    if found is None:
        known = ", ".join(sorted(c.__name__ for c in MODELS))
        raise ConfigError(f"model: no model is registered for {type(config.model).__name__} (known: {known})")
    return found


def make_link_model(
    config: TrainConfig, *, device: torch.device | str, dist: DistContext, **parts: Callable | None
) -> LinkModel:
    """The model ``config.model`` names. ``parts``: where each family's stream-dependent part lives, by the
    keyword its family registered (a missing or None one: the model's own, one process), e.g. a sharded
    run's ``access=shard.tgn_access.shard_access(...)`` for TGN and
    ``neighbors=shard.sequences.shard_neighbors(...)`` for DyGFormer; a family takes only its own."""
    fam = family(config)
    part = parts.get(fam.part) if fam.part is not None else None
    return fam.model(config, device=device, dist=dist, **({} if part is None else {fam.part: part}))


def scoring_head(config: TrainConfig, state: dict) -> ScoringHead | str:
    """The head that scores two served embeddings (plus the pair's raw features, if it reads them) as the
    model of a checkpoint's ``config`` and tensor ``state`` does, or the reason no such head exists. Raises
    ``KeyError``/``RuntimeError`` when ``state`` does not hold the weights the config calls for."""
    return family(config).model.scoring_head(config, state)
