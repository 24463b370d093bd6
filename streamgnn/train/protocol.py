"""What the online loop asks of a link-prediction model: the contract between ``OnlineTrainer`` and a model.

The loop owns the stream: which rows are positives, the store, the negatives, metrics, serving and
checkpoints. A model owns how it scores, learns and remembers. Per global batch the loop calls, in order:

1. ``prepare(batch, candidates, train_neg)`` *before the store holds the batch* (gather neighborhoods now:
   nothing of the batch may leak into its own scores);
2. ``score(prepared)`` -> logits of this rank's rows (the loop turns them into AP/AUC/MRR for every model
   alike), then ``train(prepared, keep)`` when the model is ``trainable``;
3. ``observe(src, dst, t, feat)`` with the applied edges: only now may the batch reach the model's state.

So a second model family, or a baseline such as ``EdgeBank``, plugs in without touching the loop. Ids are
the store's internal node ids; ``-1`` marks a node the store does not know yet.

State has the library's one vocabulary (``streamgnn.checkpoint``, ``docs/checkpoints.md``): ``state()``
plain data, ``from_state`` a new object, ``load_state`` in place where others hold the object. A model is
built by its trainer and held by reference, so it has the in-place form: ``state()``/``load_state`` for what
it remembers of the stream, and torch's ``state_dict``/``load_state_dict`` for a checkpoint's tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ..errors import ConfigError
from ..store import TemporalGraphStore


@dataclass(frozen=True)
class StepInput:
    """One global batch's ``m`` positives as the loop hands them to a model, before the store holds them."""

    src: np.ndarray  # int64 [m] internal ids, -1: not in the store yet
    dst: np.ndarray  # int64 [m]
    t: np.ndarray  # float64 [m] event times
    t_query: np.ndarray  # float64 [m] when each positive is embedded (config.query_time)
    blank: int  # a state row no node owns yet (zero memory): where unknown nodes read
    scorer: np.ndarray  # int [m] the rank that scores and trains each row (every rank's, not only this one's)
    rank: int  # this rank
    step: int  # global batches before this one: keys every random draw

    @property
    def rows(self) -> np.ndarray:
        """This rank's rows (ascending): a data-parallel rank's slice, a sharded rank's owned sources."""
        return np.flatnonzero(self.scorer == self.rank)


@dataclass(frozen=True)
class Candidates:
    """Evaluation negatives of the ``m`` positives: column 0 is the AP/AUC negative; all of them rank."""

    neg: np.ndarray  # int64 [m, q] internal ids, -1: unknown node
    valid: np.ndarray  # bool [m, q] real entries
    rank: bool  # score every column for MRR (else column 0 only)


@dataclass(frozen=True)
class JointTerm:
    """A loss that what follows the step (a labelled task, ``step.Attached.joint``) adds to the link loss
    of a trained batch, in the same backward pass, so that its gradients reach the model's embedding
    module: ``loss`` (scalar, already weighted; its graph built from the state before the batch) and the
    ``optimizer`` of the follower's own parameters, stepped after the model's."""

    loss: torch.Tensor
    optimizer: torch.optim.Optimizer


class Learned:
    """A model's checkpoint tensors where they are its torch module ``model`` and its ``optimizer`` (every
    learned ``LinkModel`` here): ``state_dict``/``load_state_dict`` of both, under torch's names."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def check_edge_features(store: TemporalGraphStore, want: int, config: str) -> None:
    """Refuse, at ``attach``, a store whose rows carry another number of edge features than the model
    reads (``config``: the model's config class, whose ``edge_feature_dim`` to set), not at a later step."""
    have = store.edge_feature_dim
    if have is not None and want != have:
        raise ConfigError(
            f"the store holds {have} edge features per row but the model expects {want}: "
            f"set {config}.edge_feature_dim={have}"
        )


@runtime_checkable
class LinkModel(Protocol):
    """A link-prediction model the online loop drives (see the module docstring for the call order)."""

    trainable: bool  # whether ``train`` learns anything (the loop draws training negatives only then)
    out_dim: int | None  # width of served embeddings; None: the model embeds nothing (no table)

    def attach(self, store: TemporalGraphStore) -> None:
        """Read neighborhoods and features from ``store`` from now on (a new pass, a restored store)."""

    def prepare(self, batch: StepInput, candidates: Candidates | None, train_neg: np.ndarray | None) -> Any:
        """Everything ``score`` and ``train`` need that must be read before the batch is ingested.

        ``train_neg``: one negative per positive (int64 [m], -1: none), given when the loop trains. With
        ``TrainConfig.train_negative_pool`` "id_range" or "seen_blank", -1 is a blank node instead (zero
        memory, no neighbors: an id the store does not know yet), as PyG's loader draws.
        """

    def score(self, prepared: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """Logits of this rank's ``n = len(batch.rows)`` rows: ``[n, 2]`` (positive, column-0 negative) at
        the query times, and ``[n, 1 + q]`` (positive, every candidate) when ``candidates.rank``, else
        None."""

    def train(self, prepared: Any, keep: np.ndarray, joint: Sequence[JointTerm]) -> float:
        """One update on the rows where ``keep`` (bool [m]: the store applied them); the global mean loss.
        ``joint``: what follows the step adds to the loss (``step.Attached.joint``; empty: nothing), in
        the one backward pass, each term's own optimizer stepped after the model's; the link loss alone
        is returned. (A task's term reaches the embeddings through ``joint_embed``, which a model with
        learned embeddings has: ``tasks.joint.joint_model``.)"""

    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        """Take in a scored batch's applied edges (internal ids after ingest)."""

    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> np.ndarray:
        """Embeddings ``float32 [n, out_dim]`` of ``nodes`` at time ``t`` (serving)."""

    def embedded(self, prepared: Any) -> np.ndarray | None:
        """The embeddings ``score`` reads of this rank's ``n`` rows' sources then destinations at their
        query times, ``float32 [2n, out_dim]``, from the state before the batch (what ``embed`` gives those
        nodes then), for what follows the step (a labelled task's head), which then embeds them no second
        time; called before the batch is applied. None: the model keeps no per-node embeddings."""

    def reset_state(self) -> None:
        """Forget the stream (memory, seen pairs); learned parameters stay."""

    def nbytes(self) -> dict[str, int]:
        """Bytes of what it remembers of the stream, by part (e.g. ``memory``, ``walks``; parameters and the
        store apart): what a rank of a sharded run reports under each part (``shard.state.PARTS``)."""

    def state(self) -> Any:
        """What the model remembers of the stream (memory, pending messages, banks), as plain data that stays
        valid while the model goes on: a rewind point for ``load_state`` (offline evaluation scores
        new-node edges from the state before a part), not a checkpoint."""

    def load_state(self, state: Any) -> None:
        """Go back to a ``state()``, in place: the trainer, its step and the offline run hold the model by
        reference, and its parameters stay as they are."""

    def state_dict(self) -> dict:
        """Everything a checkpoint must hold to continue bit for bit (plain tensors and lists, read back by
        ``torch.load(weights_only=True)``: torch's names, as for any torch state)."""

    def load_state_dict(self, state: dict) -> None:
        """Inverse of ``state_dict``."""
