"""Where a labelled stream's labels live: in one process (``Alone``), or on the ranks of a sharded job
(``Ranks``). ``jobs.labelled`` reads, admits, scores and learns from its labels the same way in both; what
differs is here.

In a sharded job (``train.sharding``, one or several ranks):

- the feed: rank 0 reads it and hands each read (the labels, the dead letters their decoding made, how
  many the file still holds back) to every rank in one broadcast, so every rank holds the same labels in
  the same order and decides alike which are late, unknown or due (its dead letters: the same on every
  rank, each counted once, as one process counts it);
- node ids: the global index every rank holds whole (the numbers one store would give);
- a label is its node's owner's (an edge label: its source's, the rank that scores its edge's link; a
  node no event has yet: rank 0's). The owner embeds its ends, from its own step's embeddings where they
  are (an edge label on its own event: exactly the rows the link was scored from), else by the model (a
  collective every rank enters whenever labels are due, each with its own queries, maybe none; each
  vertex embedded by its owner), and the rows are gathered, so every rank holds every due label's inputs;
- the head is replicated: every rank takes the same steps on the same rows (as the replicated trainer's
  model, its inputs being what is exchanged rather than its gradients), so its parameters, normaliser,
  replay and prequential records are the same on every rank, and a rank's figures are the job's, each
  label once; the stream features are replicated too (every rank steps every global batch);
- a label's prediction is published by its owner alone: the predictions topic holds each label once.
"""

from __future__ import annotations

import numpy as np

from ..events import DeadLetter, EventBatch, EventKind
from ..shard.trainer import ShardedTrainer
from ..tasks.labels import Labels
from ..train.distributed import collective


class Alone:
    """One process: every label is its own, its ids the store's."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer

    @property
    def world(self) -> int:
        return 1

    def take(self, feed, until: float) -> tuple[Labels, list[DeadLetter], int]:
        """The feed's new labels up to ``until``, their dead letters, and how many the feed holds back."""
        labels, letters = feed.take(until)
        return labels, letters, feed.waiting()

    def index(self, ids: np.ndarray) -> np.ndarray:
        """Dense ids of external ones, -1 for a node not seen."""
        return self.trainer.store.node_index(ids, strict=False)

    def external(self, lo: int, hi: int) -> np.ndarray:
        return self.trainer.store.external_ids(np.arange(lo, hi))

    def mine(self, rows: np.ndarray) -> np.ndarray:
        """Which labels (by their node's dense id) this process embeds and publishes: all."""
        return np.ones(len(rows), bool)

    def queries(self, nodes: np.ndarray, blank: int) -> np.ndarray:
        """The model's ids of ``nodes`` to embed (-1, unknown: the blank row ``blank``)."""
        return np.where(nodes >= 0, nodes, blank)

    def must_embed(self, rest: np.ndarray) -> bool:
        """Whether ``embed`` is called for the labels' ends no step row holds (``rest``)."""
        return bool(rest.any())

    def gather(self, z: np.ndarray, mine: np.ndarray) -> np.ndarray:
        return z

    def learned(self, batch: EventBatch) -> np.ndarray:
        """Which rows of the batch being stepped the store admitted as edge additions (its refusals and
        replayed duplicates apart): known once admission decided, before the graph holds them."""
        ok = np.zeros(len(batch), bool)
        ok[self.trainer.admitted_rows] = True
        return ok


class Ranks(Alone):
    """A rank of a sharded job (module docstring); ``trainer`` is its ``ShardedTrainer``."""

    @property
    def world(self) -> int:
        return self.trainer.dist.world_size

    def take(self, feed, until: float) -> tuple[Labels, list[DeadLetter], int]:
        """Rank 0's read of the feed, on every rank (a collective)."""
        box = [Alone.take(self, feed, until) if self.trainer.dist.is_main else None]
        if self.world > 1:
            collective("broadcast_object_list", box, 0)
        return box[0]

    def index(self, ids: np.ndarray) -> np.ndarray:
        return self.trainer.index.lookup(ids)

    def external(self, lo: int, hi: int) -> np.ndarray:
        return self.trainer.index.external(np.arange(lo, hi))

    def mine(self, rows: np.ndarray) -> np.ndarray:
        """The labels whose node this rank owns; those of a node no event has yet are rank 0's."""
        index, rank = self.trainer.index, self.trainer.dist.rank
        known = rows >= 0
        out = np.full(len(rows), rank == 0)
        out[known] = index.owner(rows[known]) == rank
        return out

    def queries(self, nodes: np.ndarray, blank: int) -> np.ndarray:
        return nodes  # -1 reads the zero row: an owner's working set has one

    def must_embed(self, rest: np.ndarray) -> bool:
        return True  # a collective: every rank enters it whenever labels are due (the same everywhere)

    def gather(self, z: np.ndarray, mine: np.ndarray) -> np.ndarray:
        """Every due label's rows, each from its owner (``z``: this rank's, the labels ``mine``)."""
        got = self.trainer.exchange.all_gather((np.flatnonzero(mine), z), "task_inputs")
        out = np.empty((len(mine), z.shape[1]), np.float32)
        for at, rows in got:
            out[at] = rows
        return out

    def learned(self, batch: EventBatch) -> np.ndarray:
        """The edge additions the global index admitted (the same on every rank; a rank's own dead
        letters are only those it reports)."""
        ok = np.zeros(len(batch), bool)
        ok[self.trainer.admitted_rows] = True
        return ok & (batch.kind == EventKind.EDGE_ADD)


def placement(trainer) -> Alone:
    """``Ranks`` for a sharded trainer, else ``Alone``."""
    return Ranks(trainer) if isinstance(trainer, ShardedTrainer) else Alone(trainer)
