"""The long-running jobs, an application over the runtime layer (``train``, ``shard``): ``TrainJob``, the
training job behind ``streamgnn train``, torchrun and compose (replicated or, with ``TrainConfig.sharding``,
sharded), and ``run_online``, the same job from Python on a stream in hand."""

from .online import run_online
from .train import TrainJob

__all__ = ["TrainJob", "run_online"]
