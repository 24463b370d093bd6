"""Link scoring head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .gather import gather_rows


class LinkPredictor(nn.Module):
    """MLP on ``[z_src, z_dst]`` -> one logit per pair (TGN's merge-layer decoder); directed."""

    def __init__(self, in_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__()
        hidden_dim = hidden_dim or in_dim
        self.mlp = nn.Sequential(nn.Linear(2 * in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))

    def forward(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        """``z_src``, ``z_dst [n, in_dim]`` -> logits ``[n]`` (use with ``BCEWithLogitsLoss``)."""
        return self.mlp(torch.cat([z_src, z_dst], dim=-1)).squeeze(-1)

    def candidates(self, z_src: Tensor, z_cand: Tensor, index: Tensor) -> Tensor:
        """Logits ``[n, q]`` of each source ``z_src[i]`` against the candidates ``z_cand[index[i]]``.

        The same as ``forward`` on every pair, but the first layer is split into its source and destination
        halves so that each embedding is projected once, not once per pair it appears in.
        """
        first, act, last = self.mlp
        d = z_src.size(-1)
        src = F.linear(z_src, first.weight[:, :d], first.bias)
        cand = F.linear(z_cand, first.weight[:, d:])
        return last(act(src.unsqueeze(1) + gather_rows(cand, index))).squeeze(-1)
