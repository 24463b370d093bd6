"""Link scores for (src, dst) pairs from served embeddings: the trainer's own link predictor when its
checkpoints are at hand, else cosine similarity, and the answer says which.

The embeddings topic carries vectors only; the predictor (TGN's MLP on ``[z_src, z_dst]``) lives in the
trainer's checkpoints. With ``checkpoint_dir`` the scorer loads the predictor of the newest checkpoint (and
reloads it when ``LATEST`` moves), so ``/score`` gives the probability the trainer itself would give the pair
from these embeddings; its weights may be up to one checkpoint interval older than the embeddings.

    scorer = LinkScorer("out/ckpt")  # or LinkScorer(None): cosine similarity
    scores, info = scorer.score(z_src, z_dst)  # info: {"scorer": "link_predictor", "checkpoint": "step-..."}
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import torch

from ..errors import CheckpointError
from ..nn import LinkPredictor

log = logging.getLogger(__name__)


class LinkScorer:
    """``score(z_src, z_dst)`` -> ``(scores [n], info)``; see the module docstring."""

    def __init__(self, checkpoint_dir: str | Path | None) -> None:
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self._lock = threading.Lock()
        self._loaded: str | None = None  # the step directory the predictor came from
        self._predictor: LinkPredictor | None = None

    def _refresh(self, dim: int) -> None:
        if self.checkpoint_dir is None:
            return
        from ..train.checkpoint import load_state, step_path

        try:
            latest = step_path(self.checkpoint_dir).name
        except CheckpointError:
            return  # no checkpoint yet (or LATEST mid-replace): keep what we have (cosine until the first)
        if latest == self._loaded:
            return

        try:
            _, _, state = load_state(self.checkpoint_dir / latest)
            weights = {k.removeprefix("predictor."): v for k, v in state["model"].items()}
            weights = {k: v for k, v in weights.items() if k.startswith("mlp.")}
            predictor = LinkPredictor(dim)
            predictor.load_state_dict(weights)
        except (CheckpointError, KeyError, RuntimeError) as exc:
            log.warning("link scorer: cannot use %s (%s); scoring by cosine", latest, exc)
            return
        predictor.eval()
        self._predictor, self._loaded = predictor, latest

    def score(self, z_src: np.ndarray, z_dst: np.ndarray) -> tuple[np.ndarray, dict]:
        with self._lock:
            self._refresh(z_src.shape[1])
            predictor, loaded = self._predictor, self._loaded
        if predictor is not None:
            with torch.no_grad():
                logits = predictor(torch.from_numpy(z_src), torch.from_numpy(z_dst)).double().numpy()
            return 1.0 / (1.0 + np.exp(-logits)), {"scorer": "link_predictor", "checkpoint": loaded}
        num = np.einsum("ij,ij->i", z_src, z_dst, dtype=np.float64)
        den = np.linalg.norm(z_src, axis=1) * np.linalg.norm(z_dst, axis=1)
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0), {"scorer": "cosine"}
