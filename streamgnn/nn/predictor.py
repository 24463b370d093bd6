"""Link scoring head."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LinkPredictor(nn.Module):
    """MLP on ``[z_src, z_dst]`` -> one logit per pair (TGN's merge-layer decoder); directed."""

    def __init__(self, in_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__()
        hidden_dim = hidden_dim or in_dim
        self.mlp = nn.Sequential(nn.Linear(2 * in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))

    def forward(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        """``z_src``, ``z_dst [n, in_dim]`` -> logits ``[n]`` (use with ``BCEWithLogitsLoss``)."""
        return self.mlp(torch.cat([z_src, z_dst], dim=-1)).squeeze(-1)
