"""The long-running jobs, applications over the runtime and core layers: ``TrainJob``, the training job
behind ``streamgnn train``, torchrun and compose (replicated or, with ``TrainConfig.sharding``, sharded);
``run_online``, the same job from Python on a stream in hand; and the partition router behind ``streamgnn
partition`` (``jobs.router.PartitionRouter``, its broker-free core ``jobs.routing.RoutingState``; not
imported here, so that the training job does not load the Kafka clients); and the agents jobs behind
``streamgnn agents`` (``jobs.agents``, with their fault injection)."""

from .online import run_online
from .train import TrainJob

__all__ = ["TrainJob", "run_online"]
