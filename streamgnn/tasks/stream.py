"""A link model's stream state at each label's time: what "ours" feeds a task's head.

The link model learns link prediction over the training period as ``fit_offline`` does (``pretrain``:
passes over the training part's events from blank memory, test-then-train batches), jointly with the
task's loss on the training labels where asked (``joint``). Then one pass replays
the whole stream with the learned weights frozen (``embed_at_labels``): before each batch is ingested, the
labels that fall in it are embedded from the model as it was, so a label's embedding holds only events
strictly before its time, never its own event nor any later one.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from ..events import EventBatch
from ..train import OnlineTrainer
from .joint import JointHead, TrainingLabels
from .labels import Labels


def pretrain(
    trainer: OnlineTrainer,
    events: EventBatch,
    until: float,
    epochs: int,
    joint: JointHead | None = None,
    labels: Labels | None = None,
) -> list[float]:
    """``epochs`` passes of link prediction over the events at ``t <= until``; each pass's mean link loss.
    ``joint``: the task's loss on ``labels`` at ``t <= until`` (the training split's) is added to each
    step's (``joint.TrainingLabels``: each label from the state before its event's batch)."""
    if epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}")
    part = events.take(np.flatnonzero(events.t <= until))
    if joint is not None:
        if labels is None:
            raise ConfigError("pretrain: joint training needs the labels")
        trainer.attached["joint"] = TrainingLabels(
            joint, trainer, labels.take(np.flatnonzero(labels.t <= until))
        )
    losses = []
    try:
        for _ in range(epochs):
            trainer.reset_stream()
            step_losses = [trainer.step(b, score=False).loss for b in part.split(trainer.config.batch_size)]
            losses.append(float(np.nanmean(step_losses)) if step_losses else float("nan"))
    finally:
        trainer.attached.pop("joint", None)
    return losses


def embed_at_labels(
    trainer: OnlineTrainer,
    events: EventBatch,
    labels: Labels,
    *,
    batch_size: int | None = None,
    other_end: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(z_node, z_dst)``: each label's node (or edge ends') embedding from a replay of ``events`` from
    blank memory in batches of ``batch_size`` (default: the trainer's), taken before the batch holding
    the label's first event at or after its time is ingested, at the earliest label time of that batch
    (module docstring). ``z_dst`` is None for node labels, or with ``other_end`` the embedding of their
    event's other end (``Labels.other_end``: the page a banned editor edited). The model learns nothing
    during the replay.

    Why a replay batch of its own: the state before a batch holds none of the batch's earlier events, and
    those are often the ones a label is about. On JODIE Wikipedia, batches of 200 events span ~55
    minutes; for 62% of the edits (94 of the 148 bans with an earlier edit) the editor's previous edit
    falls in the same batch, unseen by the embedding while the stream features count it. Smaller replay
    batches see more of it (45% at 50, 30% at 20), at more steps' cost, with the weights unchanged."""
    model = trainer.link_model
    if model.out_dim is None:
        raise ConfigError(f"{type(model).__name__} embeds nothing: a task head needs a model with embeddings")
    if len(events) and np.any(np.diff(events.t) < 0):
        raise ConfigError("events must be sorted by time (EventBatch.sorted_by_time())")
    bs = trainer.config.batch_size if batch_size is None else batch_size
    if not (isinstance(bs, int) and bs >= 1):
        raise ConfigError(f"embed_at_labels: batch_size must be an int >= 1, got {batch_size!r}")
    trainer.reset_stream()
    # Label i is embedded before batch k = (events strictly before it) // bs: the state then holds only
    # events of earlier batches, all strictly before the label's time.
    batch_of = np.searchsorted(events.t, labels.t, side="left") // bs
    second = _other_end(labels) if other_end else labels.dst
    ends = [labels.node] if second is None else [labels.node, second]
    z = np.zeros((len(ends), len(labels), model.out_dim), np.float32)
    n_batches = -(-len(events) // bs)
    for k in range(n_batches + 1):
        lo, hi = np.searchsorted(batch_of, [k, k + 1], side="left")
        if hi > lo:
            store = trainer.store
            known = [
                store.node_index(e[lo:hi], strict=False) if store.num_nodes else np.full(hi - lo, -1)
                for e in ends
            ]
            with torch.no_grad():
                out = model.embed(np.concatenate(known), float(labels.t[lo]), store.num_nodes, trainer.steps)
            z[:, lo:hi] = out.reshape(len(ends), hi - lo, -1)
        if k < n_batches:
            trainer.step(events.take(slice(k * bs, (k + 1) * bs)), train=False, score=False)
    return z[0], (z[1] if second is not None else None)


def _other_end(labels: Labels) -> np.ndarray:
    """The node labels' other ends, or a ConfigError naming why there are none."""
    if labels.on_edges:
        raise ConfigError("other_end is for node labels: an edge label's other end (its dst) is read already")
    if labels.other_end is None:
        raise ConfigError(
            "other_end: these node labels carry no other end (Labels.other_end: only a node label read "
            "from an edge event has one, e.g. Labels.of_events; not one sent on its own)"
        )
    return labels.other_end
