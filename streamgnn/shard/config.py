"""How a sharded run divides the work: partitions, and exact or communication-free sampling and memory."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

MODES = ("exact", "comm_free")


@dataclass(frozen=True)
class ShardConfig:
    """``num_partitions``: graph partitions (keep it fixed across world sizes: a topic with that many
    partitions, spread round-robin over ranks; it must be >= the world size). ``mode``: "exact" (every
    sample and memory row from its owner: the same numbers as one process) or "comm_free" (each rank samples
    only its shard and reads other ranks' memory rows from a halo copy refreshed every ``staleness``
    batches)."""

    num_partitions: int = 8
    mode: str = "exact"
    staleness: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.num_partitions, int) or self.num_partitions < 1:
            raise ConfigError(f"num_partitions must be an int >= 1, got {self.num_partitions!r}")
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not isinstance(self.staleness, int) or self.staleness < 1:
            raise ConfigError(f"staleness must be an int >= 1 (batches), got {self.staleness!r}")
