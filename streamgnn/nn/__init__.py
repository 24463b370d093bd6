"""The temporal link models' parts: TGN's (time encoding, growing node memory, temporal attention, link
scoring, the pair encoder), the DyGFormer-style model and TPNet. The agents' graph filters are
``streamgnn.filters``."""

from .attention import TemporalAttentionEmbedding, TemporalAttentionLayer
from .dygformer import DyGFormer, DyGFormerConfig
from .inputs import EmbeddingInput, NeighborHop
from .memory import NodeMemory, aggregate_last, aggregate_mean
from .predictor import LinkPredictor
from .tgn import TGN, TGNConfig
from .time import TimeEncoder
from .tpnet import TPNet, TPNetConfig

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
    "TPNet",
    "TPNetConfig",
    "aggregate_last",
    "aggregate_mean",
]
