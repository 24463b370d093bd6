"""A model's scoring head apart from the model: what scores a pair from two served embeddings.

A service holds node embeddings (from the embeddings topic), not the model. To score a pair the way the
trainer does, it needs the part of the model that turns two embeddings (and, for a model that reads them,
the pair's raw features) into a logit. Each model family knows whether it has such a part and where its
weights sit in a checkpoint (``streamgnn.train.models.scoring_head``); this is what it hands over, so the
service never reads a model's state-dict keys or asks which family a config is.

>>> import numpy as np
>>> from streamgnn.nn import LinkPredictor
>>> head = ScoringHead(LinkPredictor(4))
>>> head.dim, head.reads_pairs, head.logits(np.ones((2, 4), np.float32), np.ones((2, 4), np.float32)).shape
(4, False, (2,))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..nn import LinkPredictor
from ..nn.pairs import PairEncoder
from ..sampling.pairs import PairFeatures
from ..store import TemporalGraphStore


@dataclass(frozen=True)
class ScoringHead:
    """``predictor`` on ``[z_src, z_dst]`` (and the ``encoder``'s pair vector when the model reads pair
    features, which ``features`` names: the model config ``PairFeatures.of`` reads). In eval mode."""

    predictor: LinkPredictor
    encoder: PairEncoder | None = None
    features: Any = None  # the model config whose pair features the encoder reads (None: reads none)

    def __post_init__(self) -> None:
        self.predictor.eval()
        if self.encoder is not None:
            self.encoder.eval()

    @property
    def dim(self) -> int:
        """The width of the embeddings it scores."""
        return self.predictor.in_dim

    @property
    def reads_pairs(self) -> bool:
        return self.encoder is not None

    def pair_features(self, store: TemporalGraphStore) -> PairFeatures:
        """The raw pair features this head reads, over ``store`` (``reads_pairs`` heads only)."""
        return PairFeatures.of(store, self.features)

    @torch.no_grad()
    def logits(
        self, z_src: np.ndarray, z_dst: np.ndarray, raw: tuple[np.ndarray, ...] | None = None
    ) -> np.ndarray:
        """float64 ``[n]`` logits of rows ``(z_src[i], z_dst[i])``; ``raw``: ``PairFeatures.read`` of the
        pairs when ``reads_pairs``."""
        pair = None
        if self.encoder is not None:
            pair = self.encoder(*(torch.from_numpy(x) for x in raw))
        return self.predictor(torch.from_numpy(z_src), torch.from_numpy(z_dst), pair).double().numpy()
