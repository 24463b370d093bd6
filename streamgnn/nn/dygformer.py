"""DyGFormer (Yu et al., NeurIPS 2023): a link is scored from the two endpoints' latest interactions alone.

Each endpoint's sequence is its latest ``sequence_length - 1`` neighbors plus the node itself (time gap 0),
as DyGLib pads it. Per token: the time since the interaction (``TimeEncoder``), the edge's features, and the
**neighbor co-occurrence** encoding: how often the token's node occurs in its own sequence and in the other
endpoint's, each count through a small MLP, summed. The node itself among the other's neighbors says "these
two met, this often"; shared neighbors say "they move in the same circles": pair information that node
embeddings computed apart cannot hold. Tokens are cut into patches of ``patch_size``, each channel projected
to ``channel_dim``, the two sequences concatenated and run through a Transformer (pre-norm, as DyGLib's),
then each end's patches are mean-pooled into its encoding and an MLP scores the pair.

Departures from DyGLib, each for a reason: no node-feature channel (our streams have none; DyGLib feeds zeros,
a constant channel) and no edge channel without edge features (the same); padding is masked in attention and
pooling (DyGLib attends to and averages padding, so a node's encoding depended on how short its history
was); an unknown node (id -1) co-occurs with nothing, not even another unknown node.

>>> cfg = DyGFormerConfig(sequence_length=4, patch_size=2, channel_dim=4, time_dim=4, embedding_dim=6)
>>> model = DyGFormer(cfg)
>>> real = torch.tensor([[False, True, True, True]])
>>> seq = Sequences(torch.tensor([[0, 3, 5, 1]]), torch.zeros(1, 4), real)
>>> model.score(seq, seq).shape, model.alone(seq).shape
(torch.Size([1]), torch.Size([1, 6]))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .gather import gather_rows
from .predictor import LinkPredictor
from .time import TimeEncoder


@dataclass(frozen=True)
class DyGFormerConfig:
    """Model shape; ``TrainConfig(model=DyGFormerConfig())`` trains it. Defaults are DyGLib's UCI config
    (32 tokens per end, patches of 1, channels of 50, time encoding 100, 2 layers of 2 heads); its Enron
    config is ``sequence_length=256, patch_size=8, dropout=0.0``. ``embedding_dim``: width of each end's
    encoding (what ``embed`` serves; DyGLib's is its padded feature width, 172). ``edge_feature_dim``: the
    events' feature width (0: none). ``variant`` names the model, as ``TGNConfig.variant`` does."""

    sequence_length: int = 32
    patch_size: int = 1
    channel_dim: int = 50
    time_dim: int = 100
    num_layers: int = 2
    num_heads: int = 2
    dropout: float = 0.1
    embedding_dim: int = 100
    edge_feature_dim: int = 0
    variant: Literal["dygformer"] = "dygformer"

    def __post_init__(self) -> None:
        if self.variant != "dygformer":
            raise ConfigError(f"DyGFormerConfig.variant must be 'dygformer', got {self.variant!r}")
        for name in ("patch_size", "channel_dim", "time_dim", "num_layers", "num_heads", "embedding_dim"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"DyGFormerConfig.{name} must be an int >= 1, got {getattr(self, name)!r}")
        if not isinstance(self.sequence_length, int) or self.sequence_length < 2:
            raise ConfigError(
                f"DyGFormerConfig.sequence_length must be an int >= 2 (the node and at least one neighbor), "
                f"got {self.sequence_length!r}"
            )
        if self.sequence_length % self.patch_size:
            raise ConfigError(
                f"DyGFormerConfig.sequence_length ({self.sequence_length}) must be a multiple of patch_size "
                f"({self.patch_size})"
            )
        if not isinstance(self.edge_feature_dim, int) or self.edge_feature_dim < 0:
            raise ConfigError(
                f"DyGFormerConfig.edge_feature_dim must be an int >= 0, got {self.edge_feature_dim!r}"
            )
        if self.width % self.num_heads:
            raise ConfigError(
                f"DyGFormerConfig: the Transformer's width ({self.width}: channel_dim times "
                f"{self.width // self.channel_dim} channels) must be a multiple of num_heads "
                f"({self.num_heads})"
            )
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"DyGFormerConfig.dropout must be in [0, 1), got {self.dropout}")

    @property
    def width(self) -> int:
        """The Transformer's width: one ``channel_dim`` per channel (time, co-occurrence, edge features)."""
        return self.channel_dim * (3 if self.edge_feature_dim else 2)


@dataclass(frozen=True)
class Sequences:
    """``n`` token sequences of length ``L``: node ids (-1: unknown), time since each interaction, which
    tokens are real, and the interactions' edge features (None: the model reads none)."""

    ids: Tensor  # int64 [n, L]
    dt: Tensor  # float32 [n, L]
    mask: Tensor  # bool [n, L]
    edge_feat: Tensor | None = None  # float32 [n, L, d_e]

    def take(self, rows: Tensor) -> Sequences:
        parts = (self.ids, self.dt, self.mask, self.edge_feat)
        return Sequences(*(None if x is None else x[rows] for x in parts))

    def to(self, device: torch.device | str) -> Sequences:
        parts = (self.ids, self.dt, self.mask, self.edge_feat)
        return Sequences(*(None if x is None else x.to(device) for x in parts))


def cooccurrence(a: Sequences, b: Sequences) -> Tensor:
    """``float [n, L, 2]``: for each real token of ``a``, how often its node occurs among ``a``'s real tokens
    and among ``b``'s (0 for padding). An unknown node (negative id) matches nothing but itself."""
    known = (a.ids >= 0).unsqueeze(2)
    own = ((a.ids.unsqueeze(2) == a.ids.unsqueeze(1)) & a.mask.unsqueeze(1) & known).sum(2)
    other = ((a.ids.unsqueeze(2) == b.ids.unsqueeze(1)) & b.mask.unsqueeze(1) & known).sum(2)
    own = torch.maximum(own, torch.ones_like(own))  # a real token occurs at least once in its own sequence
    return torch.stack([own, other], 2).float() * a.mask.unsqueeze(2)


class DyGFormer(nn.Module):
    """The encoder and link predictor; the caller gathers ``Sequences`` (the model never sees the store)."""

    def __init__(self, config: DyGFormerConfig) -> None:
        super().__init__()
        c, p = config.channel_dim, config.patch_size
        self.config = config
        self.time = TimeEncoder(config.time_dim, init="geometric")  # DyGLib's initialization
        self.count = nn.Sequential(nn.Linear(1, c), nn.ReLU(), nn.Linear(c, c))
        self.time_patch = nn.Linear(p * config.time_dim, c)
        self.count_patch = nn.Linear(p * c, c)
        self.edge_patch = nn.Linear(p * config.edge_feature_dim, c) if config.edge_feature_dim else None
        width = config.width
        layer = nn.TransformerEncoderLayer(
            width, config.num_heads, 4 * width, config.dropout, activation="gelu", batch_first=True,
            norm_first=True,
        )  # fmt: skip
        self.transformer = nn.TransformerEncoder(layer, config.num_layers, enable_nested_tensor=False)
        self.output = nn.Linear(width, config.embedding_dim)
        self.predictor = LinkPredictor(config.embedding_dim)
        self.out_dim = config.embedding_dim

    def score(self, a: Sequences, b: Sequences) -> Tensor:
        """Logits ``[n]`` of the pairs ``(a[i], b[i])`` (``a`` the sources)."""
        return self.predictor(*self.encode(a, b))

    def encode(self, a: Sequences, b: Sequences) -> tuple[Tensor, Tensor]:
        """Each end's encoding ``[n, embedding_dim]`` of the pairs ``(a[i], b[i])``, read together."""
        xa, ma = self._patches(a, cooccurrence(a, b))
        xb, mb = self._patches(b, cooccurrence(b, a))
        h = self.transformer(torch.cat([xa, xb], 1), src_key_padding_mask=~torch.cat([ma, mb], 1))
        split = xa.shape[1]
        return self._pool(h[:, :split], ma), self._pool(h[:, split:], mb)

    def alone(self, a: Sequences) -> Tensor:
        """Each sequence's encoding without a partner (no co-occurrence with another end): what ``embed``
        serves, a summary of the node's recent interactions, not what it scores a pair with."""
        none = Sequences(a.ids[:, :0], a.dt[:, :0], a.mask[:, :0])
        x, m = self._patches(a, cooccurrence(a, none))
        return self._pool(self.transformer(x, src_key_padding_mask=~m), m)

    def _patches(self, s: Sequences, counts: Tensor) -> tuple[Tensor, Tensor]:
        """``[n, L / patch_size, width]`` patch vectors and which patches hold a real token."""
        n, length = s.ids.shape
        p = self.config.patch_size
        real = s.mask.unsqueeze(2).float()
        time = self.time(s.dt) * real
        # f(own) + f(other), DyGLib's encoding. Counts are integers 0..L, so f is evaluated once per value and
        # gathered: the same numbers as applying it per token, without an [n, L, 2, channel_dim] MLP pass.
        table = self.count(torch.arange(length + 1, dtype=torch.float32, device=counts.device).unsqueeze(1))
        count = gather_rows(table, counts.long()).sum(2) * real
        parts = [
            self.time_patch(time.reshape(n, length // p, -1)),
            self.count_patch(count.reshape(n, length // p, -1)),
        ]
        if self.edge_patch is not None:
            edge = s.edge_feat * real
            parts.append(self.edge_patch(edge.reshape(n, length // p, -1)))
        return torch.cat(parts, 2), s.mask.view(n, length // p, p).any(2)

    def _pool(self, h: Tensor, mask: Tensor) -> Tensor:
        m = mask.unsqueeze(2).float()
        return self.output((h * m).sum(1) / m.sum(1).clamp_min(1.0))
