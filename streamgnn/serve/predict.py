"""Node and edge label predictions from served embeddings, by the task head the training job learned
(``streamgnn train`` with a ``task``: ``tasks.online.OnlineHead``).

The head lives in the trainer's checkpoints beside the link model (``task`` in their tensor state); with
``serve.checkpoint_dir`` the predictor loads the newest checkpoint's head and reloads it when ``LATEST``
moves, as ``scoring.LinkScorer`` does for the link predictor, so ``/predict`` answers what the job's head
would answer for these embeddings; its weights may be up to one checkpoint interval older than them. A
node task reads a node's embedding, an edge task the pair ``[z_src, z_dst]``.

    predictor = TaskPredictor("out/ckpt")
    head, why = predictor.head()       # None and the reason when there is none to use
    out = predictor.predict(head, z)   # [{"probability": ..., "label": ...}, ...]
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, ConfigError
from ..tasks.online import OnlineHead
from ..tasks.task import Classification

log = logging.getLogger(__name__)


class TaskPredictor:
    """The newest checkpoint's task head under ``checkpoint_dir`` (None: the service has none)."""

    def __init__(self, checkpoint_dir: str | Path | None) -> None:
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self._lock = threading.Lock()
        self._loaded: tuple[str, OnlineHead | None, str] | None = None  # (checkpoint, head, why none)

    def head(self) -> tuple[OnlineHead | None, str, str]:
        """``(head, checkpoint name, why there is none)``; the head is None when there is none to use."""
        if self.checkpoint_dir is None:
            return None, "", "the service has no serve.checkpoint_dir to read a task head from"
        from ..train.checkpoint import load_state, step_path

        with self._lock:
            try:
                latest = step_path(self.checkpoint_dir).name
            except CheckpointError:
                return None, "", f"{self.checkpoint_dir} holds no usable checkpoint yet"
            if self._loaded is None or self._loaded[0] != latest:
                self._loaded = (latest, *self._load(load_state, latest))
            name, head, why = self._loaded
        return head, name, why

    def _load(self, load_state, latest: str) -> tuple[OnlineHead | None, str]:
        try:
            _, _, state = load_state(self.checkpoint_dir / latest)
            if "task" not in state:
                return None, f"checkpoint {latest} holds no task head (the job learned no task)"
            return OnlineHead.from_state(state["task"]["head"], f"{latest}: task"), ""
        except (CheckpointError, ConfigError, KeyError, OSError) as exc:
            log.warning("task predictor: cannot use %s (%s)", latest, exc)
            return None, f"cannot use checkpoint {latest} (the service's log says why)"

    @staticmethod
    def predict(head: OnlineHead, z: np.ndarray) -> list[dict]:
        """Each input row's prediction: a binary task's probability of class 1 and the label it implies
        (``probability >= 0.5``), a multi-class task's probabilities and most likely class, a value."""
        out = head.predict(z)
        if not isinstance(head.task, Classification):
            return [{"value": float(v)} for v in out]
        if head.task.binary:
            return [{"probability": float(p), "label": int(p >= 0.5)} for p in out]
        return [{"probabilities": row.tolist(), "label": int(np.argmax(row))} for row in out]
