"""Node and edge label predictions from served embeddings, by the task head the training job learned
(``streamgnn train`` with a ``task``: ``tasks.online.OnlineHead``).

The head lives in the trainer's checkpoints beside the link model (``task`` in their tensor state); with
``serve.checkpoint_dir`` the predictor loads the newest checkpoint's head and reloads it when ``LATEST``
moves, as ``scoring.LinkScorer`` does for the link predictor, so ``/predict`` answers what the job's head
would answer for these embeddings; its weights may be up to one checkpoint interval older than them. A
node task reads a node's embedding, an edge task the pair ``[z_src, z_dst]``; a head that also reads the
stream features (``task.features``) reads them from the same checkpoint, as of its newest event (the
service has no store of its own), and so does node affinity's head its nodes' revealed labels
(``affinity.RevealedShares``: what it ranks each node's classes from beside the embedding). A sharded
job's head and stream features are the same on every rank
(``jobs.label_ranks``): ``serve.checkpoint_dir`` may name the job's checkpoint folder (rank 0's is read) or
any rank's (``ckpt/rank-00001``).

    predictor = TaskPredictor("out/ckpt")
    loaded = predictor.load()                      # None-headed, with the reason, when there is none
    out = predictor.predict(loaded, z_src, src)    # [{"probability": ..., "label": ...}, ...]
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, ConfigError
from ..shard.checkpoint import KIND as SHARDED
from ..shard.checkpoint import replicated_folder
from ..tasks.affinity import NodeAffinity, RevealedShares
from ..tasks.live_features import LiveFeatures
from ..tasks.online import OnlineHead
from ..tasks.task import Classification, Task
from .config import int_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedTask:
    """One checkpoint's head (None: none to use, ``why``), its stream features and their time, and node
    affinity's revealed shares per class."""

    checkpoint: str
    head: OnlineHead | None
    features: LiveFeatures | None = None
    t: float = 0.0
    why: str = ""
    revealed: RevealedShares | None = None


class TaskPredictor:
    """The newest checkpoint's task head under ``checkpoint_dir`` (None: the service has none)."""

    def __init__(self, checkpoint_dir: str | Path | None) -> None:
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self._lock = threading.Lock()
        self._loaded: LoadedTask | None = None

    def load(self) -> LoadedTask:
        """The newest checkpoint's head, reloaded when ``LATEST`` moves."""
        if self.checkpoint_dir is None:
            return LoadedTask(
                "", None, why="the service has no serve.checkpoint_dir to read a task head from"
            )
        from ..train.checkpoint import step_path

        folder = replicated_folder(self.checkpoint_dir)
        with self._lock:
            try:
                latest = step_path(folder).name
            except CheckpointError:
                return LoadedTask("", None, why=f"{self.checkpoint_dir} holds no usable checkpoint yet")
            if self._loaded is None or self._loaded.checkpoint != latest:
                self._loaded = self._read(folder, latest)
            return self._loaded

    def _read(self, folder: Path, latest: str) -> LoadedTask:
        from ..train.checkpoint import load_tensors

        try:
            _, _, state = load_tensors(folder / latest, kind=("trainer", SHARDED))
            if "task" not in state:
                return LoadedTask(
                    latest, None, why=f"checkpoint {latest} holds no task head (no task learned)"
                )
            task = state["task"]
            head = OnlineHead.from_state(task["head"], f"{latest}: task")
            features = None if task.get("features") is None else LiveFeatures.from_state(task["features"])
            t = float(task["watermark"])
            revealed = task.get("revealed")
            revealed = None if revealed is None else RevealedShares.from_state(revealed)
            return LoadedTask(latest, head, features, t if math.isfinite(t) else 0.0, revealed=revealed)
        except (CheckpointError, ConfigError, KeyError, OSError) as exc:
            log.warning("task predictor: cannot use %s (%s)", latest, exc)
            return LoadedTask(
                latest, None, why=f"cannot use checkpoint {latest} (the service's log says why)"
            )

    @staticmethod
    def inputs(loaded: LoadedTask, z: np.ndarray, ids: np.ndarray, z_dst=None, dst=None) -> np.ndarray:
        """The head's input rows: node affinity's revealed shares of the nodes, the embeddings (an edge's two
        ends side by side) and, when it reads them, the nodes' stream features as of the checkpoint's
        newest event."""
        x = z if z_dst is None else np.concatenate([z, z_dst], axis=1)
        if loaded.revealed is not None:
            x = np.concatenate([loaded.revealed.rows(ids), x], axis=1)
        if loaded.features is None:
            return x
        f = loaded.features
        t = np.full(len(ids), loaded.t)
        rows = f.rows(feature_rows(f, ids), None if dst is None else feature_rows(f, dst), t)
        return np.concatenate([x, rows], axis=1)

    @staticmethod
    def predict(head: OnlineHead, x: np.ndarray, k: int | None = None) -> list[dict]:
        """Each input row's prediction (``prediction_fields``; ``k``: node affinity's classes ranked)."""
        return prediction_fields(head.task, head.predict(x), k)


def feature_rows(features: LiveFeatures, ids: np.ndarray) -> np.ndarray:
    """The features' rows of the service's node ``ids`` (-1: none), matched by the text the embeddings
    topic keys a node by (``str(id)``), so a service reading ids as strings finds the nodes of a job that
    read them as ints, and the other way round."""
    if features.ids.dtype == object:  # the job's ids were strings
        return features.index(np.array([str(i) for i in ids], dtype=object))
    if np.asarray(ids).dtype != object:
        return features.index(np.asarray(ids, np.int64))
    ints, ok = np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
    for i, text in enumerate(ids):
        with contextlib.suppress(ValueError):  # (no int id: not a node the job saw)
            ints[i], ok[i] = int_id(str(text)), True
    return np.where(ok, features.index(ints), -1)


def prediction_fields(task: Task, out: np.ndarray, k: int | None = None) -> list[dict]:
    """What ``task.predict``'s output ``out`` says of each row, as ``/predict`` and the training job's
    predictions topic give it: a binary task's probability of class 1 and the label it implies
    (``probability >= 0.5``), a multi-class task's probabilities and most likely class, node affinity's
    ``k`` (None: the task's ``top_k``) highest-ranked classes with their predicted shares
    (``affinities``, best first; ties by class id), a value."""
    if isinstance(task, NodeAffinity):
        top = np.argsort(-out, axis=1, kind="stable")[:, : k or task.k]
        return [
            {"affinities": [{"class": int(c), "share": float(row[c])} for c in best]}
            for row, best in zip(out, top, strict=True)
        ]
    if not isinstance(task, Classification):
        return [{"value": float(v)} for v in out]
    if task.binary:
        return [{"probability": float(p), "label": int(p >= 0.5)} for p in out]
    return [{"probabilities": row.tolist(), "label": int(np.argmax(row))} for row in out]
