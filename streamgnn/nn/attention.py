"""TGN's graph attention embedding (Rossi et al. 2020, after TGAT): roots attend over temporal neighbors."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .inputs import NeighborHop
from .time import TimeEncoder


class TemporalAttentionLayer(nn.Module):
    """One hop: a root's query ``[h_root, time_enc(0)]`` attends over keys ``[h_nbr, e, time_enc(dt)]``.

    The attention output is merged with ``h_root`` by an MLP (TGN's merge layer), so a root without neighbors
    still gets an embedding from its own state rather than NaN from an all-masked softmax.
    """

    def __init__(
        self,
        node_dim: int,
        edge_dim: int,
        time_encoder: TimeEncoder,
        out_dim: int,
        num_heads: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if out_dim % num_heads:
            raise ConfigError(f"embedding dim {out_dim} is not divisible by {num_heads} heads")
        self.time_enc = time_encoder
        key_dim = node_dim + edge_dim + time_encoder.dim
        # Project the query to out_dim so head count constrains only the embedding width, not feature widths.
        self.query = nn.Linear(node_dim + time_encoder.dim, out_dim)
        self.attn = nn.MultiheadAttention(
            out_dim, num_heads, dropout=dropout, kdim=key_dim, vdim=key_dim, batch_first=True
        )
        self.merge = nn.Sequential(
            nn.Linear(out_dim + node_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim)
        )

    def forward(
        self, h_root: Tensor, h_nbr: Tensor, dt: Tensor, mask: Tensor, edge_feat: Tensor | None = None
    ) -> Tensor:
        """``h_root [n, d]``, ``h_nbr [n, k, d]``, ``dt``/``mask``: ``[n, k]``, ``edge_feat [n, k, d_e]``.

        Returns ``[n, out_dim]``; ``mask`` marks real neighbors.
        """
        n = mask.size(0)
        query = torch.cat([h_root, self.time_enc(dt.new_zeros(n))], dim=-1)
        keys = [h_nbr, self.time_enc(dt)] if edge_feat is None else [h_nbr, edge_feat, self.time_enc(dt)]
        kv = torch.cat(keys, dim=-1)
        empty = ~mask.any(dim=1)
        ignore = ~mask
        ignore[:, -1] &= ~empty  # let empty rows attend to one padding slot; their output is zeroed below
        out, _ = self.attn(
            self.query(query).unsqueeze(1), kv, kv, key_padding_mask=ignore, need_weights=False
        )
        out = out.squeeze(1).masked_fill(empty.unsqueeze(1), 0.0)
        return self.merge(torch.cat([out, h_root], dim=-1))


class TemporalAttentionEmbedding(nn.Module):
    """``num_layers`` stacked attention hops over a dense neighbor tree (see ``inputs``); TGN uses 1, TGAT 2.

    Layer ``l`` turns level states ``h^{l-1}`` into ``h^l`` for every level that still has neighbors below it,
    so the roots' output depends on ``num_layers`` hops of neighborhood.
    """

    def __init__(
        self,
        node_dim: int,
        edge_dim: int,
        time_encoder: TimeEncoder,
        embedding_dim: int,
        *,
        num_layers: int = 1,
        num_heads: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ConfigError(f"attention needs num_layers >= 1, got {num_layers}")
        self.embedding_dim = embedding_dim
        self.layers = nn.ModuleList(
            TemporalAttentionLayer(
                node_dim if i == 0 else embedding_dim,
                edge_dim,
                time_encoder,
                embedding_dim,
                num_heads,
                dropout,
            )
            for i in range(num_layers)
        )

    def forward(self, states: list[Tensor], hops: list[NeighborHop]) -> Tensor:
        """``states[l]``: states ``[n_l, node_dim]`` of tree level ``l`` -> root embeddings ``[n_0, out]``.

        ``hops[l]`` links level ``l`` to level ``l + 1``, as in ``EmbeddingInput``.
        """
        depth = len(self.layers)
        if len(states) < depth + 1 or len(hops) < depth:
            raise ConfigError(f"{depth} attention layers need {depth} hops, got {len(hops)}")
        h = states[: depth + 1]
        for layer in self.layers:
            h = [
                layer(
                    h[i],
                    h[i + 1].reshape(*hop.mask.shape, h[i + 1].size(-1)),
                    hop.dt,
                    hop.mask,
                    hop.edge_feat,
                )
                for i, hop in enumerate(hops[: len(h) - 1])
            ]
        return h[0]
