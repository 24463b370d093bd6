"""What a model's stream state that lives with the shards offers ``ShardedTrainer``: ``RankState``.

The sharded trainer owns the distribution (admission, ownership, ingest into the shards, the exchange of
scores, checkpoints); it knows no model's state. A model whose stream state is split over the ranks (TGN's
memory: each rank's owned rows, a halo of others' in communication-free mode) keeps it in a ``RankState``
that its sharded access (``tgn_access.shard_access``) makes and hands the trainer
(``ShardedTrainer.states``), and the trainer calls it at the points of a step where the shard changes. A
model that keeps nothing there (DyGFormer reads its sequences from the shards, EdgeBank keeps the pairs of
owned sources itself) makes none.

Bytes come through the model (``LinkModel.nbytes``); a rank reports them under ``PARTS`` (a part a model
does not hold reads 0), so the benchmark's tables keep their columns for every model.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..events import EventBatch

# a rank's bytes by part, in the order reports list them (``ShardedTrainer.nbytes``; then ``baseline.*``)
PARTS = ("store", "memory", "index", "halo", "cache", "negatives", "walks")


class RankState(Protocol):
    """A model's per-rank stream state (module docstring). Every hook but ``state``/``load_state`` is called
    by every rank after the same global batch, in the order listed.

    Its state has the library's one vocabulary (``streamgnn.checkpoint``): ``state()`` gives plain arrays,
    and it takes them back in place with ``load_state``, not as a new object from ``from_state``, because
    the model's sharded access made it and holds it (and it holds the rows its embedder reads) by
    reference."""

    parts: tuple[str, ...]  # the names its checkpoint arrays go under (``NAME.*``; none the trainer uses)

    def add_vertices(self, gids: np.ndarray) -> None:
        """Vertices (global ids) this rank owns from now on, as the batch's admission numbers them."""

    def ingested(self, batch: EventBatch) -> None:
        """The events this rank's shard just took (global ids: events with an owned endpoint)."""

    def stepped(self, steps: int) -> None:
        """A global batch is done (``steps`` done in all); a collective: every rank calls it."""

    def state(self) -> dict[str, dict[str, np.ndarray]]:
        """Arrays of a checkpoint, by part (``parts``): with ``load_state``, resume bit for bit."""

    def load_state(self, state: dict[str, dict[str, np.ndarray]]) -> None:
        """Go back to a ``state``, in place (the arrays under each of ``parts``, as a checkpoint holds
        them)."""
