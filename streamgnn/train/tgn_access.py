"""TGN's access to the graph and its memory where they live: one store, or many shards (``TGNAccess``).

``TGNLinkModel`` holds what TGN is: the ``nn.TGN`` module and its optimizer, the query layout of a batch,
scoring, the loss and the update. What depends on where the graph and the memory live it asks of its
access, three parts, so the same model runs in one process (``tgn_local``) or partitioned over ranks
(``shard.tgn_access``):

- ``Embeddings``: embeddings of ``(node, time)`` queries. ``prepare`` reads, before the store holds the
  batch, what each ``QuerySet`` needs (one process: the sampled neighborhoods; sharded: the owners' rows,
  computed there and sent back); ``forward`` gives a set's embeddings of its distinct queries and each
  root's row among them, ``finish`` runs after this rank's backward pass and before gradients are averaged
  (sharded: the owners finish theirs), ``embed`` serves.
- ``Memory``: ``observe`` takes a scored batch's applied edges into TGN memory (one process: the module's
  own ``NodeMemory``; sharded: each owner commits its vertices' rows and queues their new messages).
- a ``PairReader`` for the predictor's pair features (``sampling.pairs.PairFeatures`` over the store, or
  ``shard.pairs.ShardPairs``), None when the model reads none.

A model family other than TGN runs sharded the same way: it keeps the ``LinkModel`` protocol, scores and
trains ``StepInput.rows`` only, and reaches its stream state through parts like these (DyGFormer: its
``NeighborReader``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..store import TemporalGraphStore
from .protocol import StepInput

EVAL, TRAIN, SERVE = 0, 1, 2  # what a query set is for: with the step, it keys the sampler's draws


def distinct_queries(nodes: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct ``(node, time)`` pairs (sorted) and the index of each input pair among them: a query many
    roots share is embedded once."""
    (nodes, times), rows = distinct_rows(nodes, times)
    return nodes, times, rows


def distinct_rows(*columns: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """The distinct rows of equal-length ``columns`` (sorted by the first column, then the next, ...) and
    each input row's index among them: ``np.unique`` of a record array, by one ``lexsort`` of the columns
    (records compare field by field in Python's generic sort, four times slower)."""
    order = np.lexsort(columns[::-1])
    cols = [c[order] for c in columns]
    first = np.ones(len(order), bool)
    if len(order):
        first[1:] = False
        for c in cols:
            first[1:] |= c[1:] != c[:-1]
    rows = np.empty(len(order), np.int64)
    rows[order] = np.cumsum(first) - 1
    return [c[first] for c in cols], rows


@dataclass(frozen=True)
class QuerySet:
    """One model input of a batch: ``layout(rows)`` gives the roots and query times of the batch's ``rows``
    (any rank's: a sharded owner may work out what another rank will ask of it)."""

    purpose: int  # EVAL or TRAIN
    grad: bool  # training: gradients flow back through these embeddings
    layout: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


class Embeddings(Protocol):
    """Embeddings of ``(node, time)`` queries (see the module docstring)."""

    def attach(self, store: TemporalGraphStore) -> None:
        """Read neighborhoods from ``store`` from now on."""

    def prepare(self, batch: StepInput, sets: list[QuerySet]) -> list[Any]:
        """What each set's ``forward`` needs, read before the store holds ``batch`` (a collective when
        sharded: every rank passes sets of the same purposes)."""

    def forward(self, prepared: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings of one prepared set's distinct queries and each root's row among them."""

    def finish(self) -> None:
        """After this rank's backward pass, before gradients are averaged (a collective when sharded)."""

    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> torch.Tensor:
        """Embeddings ``[n, out_dim]`` of ``nodes`` at time ``t``, for serving (a collective when sharded)."""


class Memory(Protocol):
    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        """Take a scored batch's applied edges (every rank the whole batch's) into memory."""

    def nbytes(self) -> dict[str, int]:
        """Bytes of the node state it keeps, by part (``memory``; sharded: ``halo`` and ``cache`` too)."""


class PairReader(Protocol):
    store: TemporalGraphStore

    def read(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, ...]:
        """Raw pair features of each ``(src[i], dst[i])`` at ``t[i]`` (-1: unknown, no history)."""

    def nbytes(self) -> int:
        """Bytes of the state it keeps beside the store (the walk features' cache)."""


@dataclass
class TGNAccess:
    """A ``TGNLinkModel``'s access parts; ``TGNLinkModel(access=...)`` takes a function that makes them."""

    embeddings: Embeddings
    memory: Memory
    pairs: PairReader | None
