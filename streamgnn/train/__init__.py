"""Online (prequential) and offline training of link models (TGN, DyGFormer), metrics, checkpoints, data
parallelism. The jobs that run it on a stream (``TrainJob``, ``run_online``) are ``streamgnn.jobs``."""

from .config import FollowConfig, TrainConfig
from .distributed import DistContext, init_distributed
from .dygformer_model import DyGFormerLinkModel
from .metrics import (
    LinkMetrics,
    RunningMetrics,
    WindowMetrics,
    average_precision,
    link_metrics,
    reciprocal_ranks,
    roc_auc,
)
from .offline import ChronologicalSplit, OfflineResult, fit_offline
from .protocol import Candidates, LinkModel, StepInput
from .report import plot_windows, write_summary
from .tgn_model import TGNLinkModel
from .tpnet_model import TPNetLinkModel
from .trainer import OnlineResult, OnlineTrainer, StepResult

__all__ = [
    "Candidates",
    "ChronologicalSplit",
    "DistContext",
    "DyGFormerLinkModel",
    "LinkMetrics",
    "LinkModel",
    "OfflineResult",
    "OnlineResult",
    "OnlineTrainer",
    "RunningMetrics",
    "StepInput",
    "StepResult",
    "TGNLinkModel",
    "TPNetLinkModel",
    "FollowConfig",
    "TrainConfig",
    "WindowMetrics",
    "average_precision",
    "fit_offline",
    "init_distributed",
    "link_metrics",
    "plot_windows",
    "reciprocal_ranks",
    "roc_auc",
    "write_summary",
]
