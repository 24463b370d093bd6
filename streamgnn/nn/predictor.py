"""Link scoring head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from .gather import gather_rows


class LinkPredictor(nn.Module):
    """MLP on ``[z_src, z_dst]`` -> one logit per pair (TGN's merge-layer decoder); directed.

    ``pair_dim > 0``: the first layer also reads a pair vector per ``(src, dst)`` (``PairEncoder``), so the
    score can use what the two nodes did together, which their separate embeddings cannot hold.
    """

    def __init__(self, in_dim: int, hidden_dim: int | None = None, pair_dim: int = 0) -> None:
        super().__init__()
        hidden_dim = hidden_dim or in_dim
        self.in_dim, self.pair_dim = in_dim, pair_dim
        self.mlp = nn.Sequential(
            nn.Linear(2 * in_dim + pair_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1)
        )

    def forward(self, z_src: Tensor, z_dst: Tensor, pair: Tensor | None = None) -> Tensor:
        """``z_src``, ``z_dst [n, in_dim]`` (``pair [n, pair_dim]``) -> logits ``[n]`` (use with
        ``BCEWithLogitsLoss``)."""
        parts = [z_src, z_dst] + ([self._pair(pair)] if self.pair_dim else [])
        return self.mlp(torch.cat(parts, dim=-1)).squeeze(-1)

    def candidates(
        self, z_src: Tensor, z_cand: Tensor, index: Tensor, pair: Tensor | None = None,
        pair_index: Tensor | None = None,
    ) -> Tensor:  # fmt: skip
        """Logits ``[n, q]`` of each source ``z_src[i]`` against the candidates ``z_cand[index[i]]``; when the
        predictor reads pair vectors, ``pair [d, pair_dim]`` holds each distinct pair's once and
        ``pair_index [n, q]`` each pair's row among them.

        The same as ``forward`` on every pair, but the first layer is split into its source, destination and
        pair parts so that each embedding and each distinct pair vector is projected once, not once per
        pair it appears in (a batch's sources draw many of the same candidates).
        """
        first, act, last = self.mlp
        d = self.in_dim
        src = F.linear(z_src, first.weight[:, :d], first.bias)
        cand = F.linear(z_cand, first.weight[:, d : 2 * d])
        hidden = src.unsqueeze(1) + gather_rows(cand, index)
        if self.pair_dim:
            if pair_index is None:
                raise ConfigError("candidates with pair vectors needs pair_index, each pair's row")
            hidden = hidden + gather_rows(F.linear(self._pair(pair), first.weight[:, 2 * d :]), pair_index)
        return last(act(hidden)).squeeze(-1)

    def _pair(self, pair: Tensor | None) -> Tensor:
        if pair is None:
            raise ConfigError(f"this predictor reads pair vectors ({self.pair_dim}-d): pass pair=")
        return pair
