"""The temporal link models' parts: TGN's (time encoding, growing node memory, temporal attention, link
scoring, the pair encoder) and the DyGFormer-style model. The agents' graph filters are
``streamgnn.filters``."""

from .attention import TemporalAttentionEmbedding, TemporalAttentionLayer
from .dygformer import DyGFormer, DyGFormerConfig
from .inputs import EmbeddingInput, NeighborHop
from .memory import NodeMemory, aggregate_last, aggregate_mean
from .predictor import LinkPredictor
from .tgn import TGN, TGNConfig
from .time import TimeEncoder

__all__ = [
    "DyGFormer",
    "DyGFormerConfig",
    "TGN",
    "EmbeddingInput",
    "LinkPredictor",
    "NeighborHop",
    "NodeMemory",
    "TGNConfig",
    "TemporalAttentionEmbedding",
    "TemporalAttentionLayer",
    "TimeEncoder",
    "aggregate_last",
    "aggregate_mean",
]
