"""What the sharded tests' worker scripts share: joining the gloo group as one rank, stepping a trainer
through the global batches of a replayed stream, and reaching TGN's memory rows (which live with the
model's sharded backends, not with the trainer)."""

from __future__ import annotations

import os

import numpy as np
import torch


def rank_env(rank: int, world: int, port: int) -> None:
    """This process as ``rank`` of ``world`` ranks on this host (master on ``port``), for whatever joins
    the group next (``init_distributed``, a ``TrainJob``); one thread each: the ranks share the host."""
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def join(rank: int, world: int, port: int):
    """This process as ``rank`` of ``world`` real gloo ranks (``rank_env``): the ``DistContext``."""
    from streamgnn.train import init_distributed

    rank_env(rank, world, port)
    return init_distributed()


def reference_or_join(rank: int, world: int, port: int, out: str, key: str, reference):
    """A worker script's start: ``world`` 0 is the one-process reference, ``reference()`` saved under
    ``key`` at ``out`` (None returned); any other ``world`` joins as ``rank`` of it (``join``: the
    ``DistContext``)."""
    torch.set_num_threads(1)
    if world == 0:
        torch.save({key: reference()}, out)
        return None
    return join(rank, world, port)


def replay(trainer, events, batch: int, chunk: int = 37) -> tuple[list, list[np.ndarray]]:
    """Step ``trainer`` through every global batch of ``events`` (this rank reads its partitions in
    ``chunk``-row pulls); each batch's ``StepResult`` and event ids."""
    from streamgnn.shard import GlobalBatcher, PartitionedReplay

    own = trainer.ownership
    batcher = GlobalBatcher(PartitionedReplay(events, own, chunk=chunk), own, trainer.exchange, batch)
    steps, batches = [], []
    while (b := batcher.next_batch()) is not None:
        batches.append(b.eid)
        steps.append(trainer.step(b))
    return steps, batches


def tgn_state(trainer):
    """A sharded TGN trainer's memory over the shards (``shard.tgn_state.TGNShardState``)."""
    (state,) = trainer.states
    return state
