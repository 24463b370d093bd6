"""Per-rank checkpoints of a sharded run, cut at the same global batch on every rank.

Each rank writes its own trainer checkpoint (``streamgnn.train.checkpoint``: one atomic, verified container
of kind ``sharded-trainer``, with the ``TrainerState`` values and the model's and baselines' tensors the
online trainer writes too) under ``ROOT/rank-RRRRR/``: those, its shard of the store with its source
offsets, its share of the negative history, the global index, the global batcher's buffer (rows read but
not yet batched: an offset covers rows handed out, not rows learned), and the arrays of each model's rank
state (``state.RankState``; TGN's owned memory rows and pending messages under ``owned.*``, its halo under
``halo.*``). Every rank saves after the same step, and each keeps its two newest
checkpoints.

There is no coordinator: on restart every rank reads its own newest step and the ranks take the minimum
(an ``all_gather``), which every rank holds whole. A rank killed while writing step ``N`` left step
``N - every`` complete, and the ranks that finished step ``N`` still keep that one: all resume from it, so
nothing is lost or doubled. The world size and partition count must match the checkpoint's.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import numpy as np
import torch

from .. import checkpoint
from ..configs import from_record, stamp
from ..errors import CheckpointError, ConfigError
from ..train import checkpoint as trainer_checkpoint
from ..train.config import ShardConfig, TrainConfig
from ..train.resume import Expectation

KIND = "sharded-trainer"
KEEP = 2  # the newest two: a rank one checkpoint ahead of a killed one still holds the common cut


def rank_root(root: Path, rank: int) -> Path:
    return Path(root) / f"rank-{rank:05d}"


def replicated_folder(root: Path) -> Path:
    """Where a reader of what every rank holds alike (the link predictor, a task head and its stream
    features: ``jobs.label_ranks``) finds checkpoints under ``root``: rank 0's folder when ``root`` is a
    sharded run's checkpoint folder (``rank-RRRRR`` folders, no ``LATEST`` of its own), else ``root``."""
    root = Path(root)
    first = rank_root(root, 0)
    return first if first.is_dir() and not (root / "LATEST").exists() else root


def step_dir(root: Path, rank: int, step: int) -> Path:
    """Rank ``rank``'s checkpoint of ``step`` under ``root``."""
    return checkpoint.directory(rank_root(root, rank), step)


def save(trainer, root: Path, offsets: dict[str, int]) -> Path:
    """Write this rank's checkpoint of ``trainer`` at its current step."""
    rank = rank_root(root, trainer.dist.rank)
    return trainer_checkpoint.save(rank, trainer.steps, trainer.store, offsets, *state(trainer), KEEP, KIND)


def state(trainer) -> tuple[dict, dict]:
    """``(tensors, values)`` of this rank's part of a sharded run (its store apart: saved beside them): the
    ``TrainerState`` values and tensors the online trainer writes too, then the shard's own."""
    index_arrays, index_values = trainer.index.state()
    tensors = {
        **trainer_checkpoint.stream_tensors(trainer),
        **_tensors("index", index_arrays),
        **_tensors("batcher", trainer.batcher_state()),
        "pool": torch.from_numpy(
            trainer.negatives.sampler.pool if trainer.negatives.ready else np.zeros(0, np.int64)
        ),
    }
    for rank_state in trainer.states:  # a model's state that lives with the shards (TGN's memory)
        for part, arrays in rank_state.state().items():
            tensors.update(_tensors(part, arrays))
    for name, follower in trainer.attached.items():  # a labelled task's head, labels and scores
        tensors[name] = follower.state()
    values = {
        **trainer_checkpoint.TrainerState.of(trainer).values(),
        "shard": stamp(trainer.shard_config.to_dict()),
        "index": index_values,
        "world_size": trainer.dist.world_size,
        "rank": trainer.dist.rank,
    }
    return tensors, values


def saved_config(root: Path | None, rank: int) -> TrainConfig:
    """The config this rank's newest checkpoint under ``root`` saved (for a resume given none)."""
    steps = [] if root is None else checkpoint.numbers(rank_root(root, rank))
    if not steps:
        raise ConfigError(
            f"no sharded checkpoint of rank {rank} under {root} to take the config from: give one"
        )
    path = checkpoint.directory(rank_root(root, rank), steps[-1])
    return TrainConfig.from_checkpoint(checkpoint.manifest(path)["config"], f"{path}: config")


def common_step(trainer, root: Path) -> int | None:
    """The newest step every rank holds (a collective); None when no rank has a checkpoint. Each rank tells
    the world size its newest checkpoint was written by, so a run of another size than the one that wrote
    the folder hears that, not that some ranks hold nothing."""
    rank = rank_root(root, trainer.dist.rank)
    steps = checkpoint.numbers(rank)
    mine, world = (steps[-1] if steps else -1), -1
    if steps:
        with suppress(CheckpointError, TypeError, ValueError):  # a damaged one: its load names it
            world = int(checkpoint.manifest(checkpoint.directory(rank, mine)).get("world_size", -1))
    gathered = trainer.exchange.all_gather((np.array([mine, world]),), "checkpoint")
    every, worlds = [int(g[0][0]) for g in gathered], {int(g[0][1]) for g in gathered} - {-1}
    if max(every) < 0:
        return None
    size = trainer.dist.world_size
    if worlds - {size}:
        raise CheckpointError(
            f"{root} was written by a sharded run of {' and '.join(map(str, sorted(worlds)))} ranks; this "
            f"run has {size}: a sharded run resumes only with the world size that wrote its checkpoints "
            "(give a new --checkpoint-dir to start over)"
        )
    if min(every) < 0:
        raise CheckpointError(f"{root}: ranks {[r for r, s in enumerate(every) if s < 0]} hold no checkpoint")
    return min(every)


def load(trainer, root: Path, step: int, expect: Expectation | None = None) -> dict[str, int]:
    """Restore ``trainer`` from its rank's checkpoint of ``step``; returns the source offsets to resume at.
    ``expect``: refuse a checkpoint that does not fit this run (``train.resume``) before restoring it."""
    path = step_dir(root, trainer.dist.rank, step)
    if not path.is_dir():
        raise CheckpointError(f"{path} is missing: this rank no longer holds the step the others resume from")
    ckpt = trainer_checkpoint.load(path, trainer.device, KIND, expect)
    man, tensors = ckpt.manifest, ckpt.state
    shard = from_record(ShardConfig, man["shard"], f"{path}: shard", "train.sharding")
    if (
        man["world_size"] != trainer.dist.world_size
        or shard.num_partitions != trainer.ownership.num_partitions
    ):
        raise CheckpointError(
            f"{path} was written by {man['world_size']} ranks over {shard.num_partitions} partitions; "
            f"this run has {trainer.dist.world_size} over {trainer.ownership.num_partitions}"
        )
    if shard.placement != trainer.shard_config.placement:  # (placement "hash" before the option existed)
        raise CheckpointError(
            f"{path} placed vertices by {shard.placement!r}; this run by "
            f"{trainer.shard_config.placement!r}: resume with the same ShardConfig.placement"
        )
    trainer.store = ckpt.store
    trainer.index.load_state(_arrays("index", tensors), man.get("index"))  # with this run's lateness
    for rank_state in trainer.states:
        rank_state.load_state({part: _arrays(part, tensors) for part in rank_state.parts})
    trainer.saved_batcher = _arrays("batcher", tensors) or None
    pool = tensors["pool"].numpy()
    trainer.negatives.sampler = None
    if len(pool):  # the pool as saved; the history of owned sources: exactly the shard's edges from them
        edges = trainer.store.edges()
        src, dst = (trainer.store.external_ids(x).astype(np.int64) for x in (edges.src, edges.dst))
        trainer.negatives.observe(np.zeros(len(pool), np.int64), pool, history=np.zeros(len(pool), bool))
        trainer.negatives.observe(src, dst, history=trainer.index.owned(src))
    trainer_checkpoint.TrainerState.from_values(man).apply(trainer)
    trainer.rebind_store()
    trainer_checkpoint.load_stream_tensors(trainer, tensors)  # (after ``attach``: it completes it)
    checkpoint.load_rng_state(ckpt.rng)
    return dict(ckpt.store.source_offsets)


def _tensors(prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return checkpoint.prefixed(prefix, checkpoint.as_tensors(arrays))


def _arrays(prefix: str, state: dict) -> dict[str, np.ndarray]:
    return checkpoint.as_arrays(checkpoint.unprefix(prefix, state))
