"""TGN's graph attention embedding (Rossi et al. 2020, after TGAT): roots attend over temporal neighbors.

Attention runs over the neighbor slots that exist only (a segment softmax per root), never over padding, and
the node part of the key/value projection is applied once per distinct node state, then gathered: a batch's
neighbors repeat the same few nodes, and padding is most of a dense ``[n, k]`` tree.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from .gather import gather_rows
from .inputs import NeighborHop
from .time import TimeEncoder


class TemporalAttentionLayer(nn.Module):
    """One hop: a root's query ``[h_root, time_enc(0)]`` attends over keys ``[h_nbr, e, time_enc(dt)]``.

    The attention output is merged with ``h_root`` by TGN's merge layer ``MLP([out, h_root])``, so a root
    without neighbors still gets an embedding from its own state. The projections live in an
    ``nn.MultiheadAttention`` (their checkpoint layout); the forward is computed here, over real neighbors
    only.
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
        self.node_dim = node_dim
        self.num_heads = num_heads
        self.dropout = dropout
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
        self,
        h_root: Tensor,
        nbr_states: Tensor,
        nbr_index: Tensor | None,
        row: Tensor,
        dt: Tensor,
        edge_feat: Tensor | None = None,
    ) -> Tensor:
        """Embeddings ``[n, out_dim]`` of ``n`` roots with states ``h_root [n, node_dim]``.

        Neighbor ``j`` (of ``E``) belongs to root ``row[j]`` and has state ``nbr_states[nbr_index[j]]``
        (``nbr_states[j]`` when ``nbr_index`` is None), age ``dt[j]`` and features ``edge_feat[j]``.
        """
        n, out_dim = h_root.size(0), self.attn.embed_dim
        heads, head_dim = self.num_heads, out_dim // self.num_heads
        w_q, w_k, w_v = self._in_proj_weights()
        b_q, _, b_v = self.attn.in_proj_bias.chunk(3)
        # The key bias adds q . b_k to every score of a root, which the softmax cancels: leave it out, or Adam
        # turns the float noise of its (truly zero) gradient into steps of size lr.
        b_kv = torch.cat([torch.zeros_like(b_v), b_v])
        query = self.query(torch.cat([h_root, self.time_enc(dt.new_zeros(1)).expand(n, -1)], dim=-1))
        q = F.linear(query, w_q, b_q).view(n, heads, head_dim) / math.sqrt(head_dim)
        # [h_nbr, e, time_enc] @ W = h_nbr @ W_node + [e, time_enc] @ W_rest: the node part once per state.
        w_kv = torch.cat([w_k, w_v])
        node_kv = F.linear(nbr_states, w_kv[:, : self.node_dim])
        if nbr_index is not None:
            node_kv = gather_rows(node_kv, nbr_index)
        rest = self.time_enc(dt)  # (without edge features no ``cat``: it would copy every slot's row)
        if edge_feat is not None:
            rest = torch.cat([edge_feat, rest], dim=-1)
        kv = node_kv + F.linear(rest, w_kv[:, self.node_dim :], b_kv)
        k, v = kv.view(-1, 2, heads, head_dim).unbind(1)
        score = (gather_rows(q, row) * k).sum(-1)  # [E, heads]
        at = row.unsqueeze(1).expand(-1, heads)
        top = score.new_full((n, heads), -math.inf).scatter_reduce(0, at, score.detach(), "amax")
        weight = torch.exp(score - top.index_select(0, row))
        weight = weight / gather_rows(weight.new_zeros(n, heads).index_add(0, row, weight), row)
        weight = F.dropout(weight, self.dropout, self.training)
        out = h_root.new_zeros(n, heads, head_dim).index_add(0, row, weight.unsqueeze(-1) * v)
        empty = torch.ones(n, 1, dtype=torch.bool, device=row.device).index_fill(0, row, False)
        out = self.attn.out_proj(out.view(n, out_dim)).masked_fill(empty, 0.0)
        return self.merge(torch.cat([out, h_root], dim=-1))

    def _in_proj_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        attn = self.attn
        if attn.in_proj_weight is not None:  # key width happens to equal out_dim: packed layout
            return attn.in_proj_weight.chunk(3)
        return attn.q_proj_weight, attn.k_proj_weight, attn.v_proj_weight


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

    def forward(
        self, states: list[Tensor], hops: list[NeighborHop], index: list[Tensor] | None = None
    ) -> Tensor:
        """``states[l]``: states ``[n_l, node_dim]`` of tree level ``l`` -> root embeddings ``[n_0, out]``.

        ``hops[l]`` links level ``l`` to level ``l + 1``, as in ``EmbeddingInput``. With ``index``, level
        ``l``'s slot ``i`` has state ``states[l][index[l][i]]`` instead (e.g. one memory row per distinct
        node, shared by every slot that holds the node).
        """
        depth = len(self.layers)
        if len(states) < depth + 1 or len(hops) < depth:
            raise ConfigError(f"{depth} attention layers need {depth} hops, got {len(hops)}")
        # Compact the dense tree to its real slots: level l + 1's slot j hangs under compact row parent[l][j].
        rows = [None if index is None else index[0]]  # per level: state row of each compact row (None: same)
        parents, ages, feats = [], [], []
        pos = None  # dense slot -> compact row of the current level (-1: padding); None: every slot is real
        for level, hop in enumerate(hops[:depth], start=1):
            k = hop.mask.size(1)
            slot = hop.mask.reshape(-1).nonzero().squeeze(1)
            parent = torch.div(slot, k, rounding_mode="floor")
            if pos is not None:
                parent = pos[parent]
                real = parent >= 0  # a hand-built tree may mark slots under padding: they do not exist
                slot, parent = slot[real], parent[real]
            parents.append(parent)
            ages.append(hop.dt.reshape(-1).index_select(0, slot))  # (``index_select``: faster than ``[]``)
            feats.append(
                None
                if hop.edge_feat is None
                else gather_rows(hop.edge_feat.reshape(-1, hop.edge_feat.size(-1)), slot)
            )
            rows.append(slot if index is None else index[level].index_select(0, slot))
            pos = torch.full((hop.mask.numel(),), -1, dtype=torch.long, device=slot.device)
            pos[slot] = torch.arange(len(slot), device=slot.device)
        h = [(states[level], rows[level]) for level in range(depth + 1)]
        for layer in self.layers:
            h = [
                (layer(_gather(*h[i]), *h[i + 1], parents[i], ages[i], feats[i]), None)
                for i in range(len(h) - 1)
            ]
        return h[0][0]


def _gather(table: Tensor, rows: Tensor | None) -> Tensor:
    return table if rows is None else gather_rows(table, rows)
