"""Link scores for (src, dst) pairs from served embeddings: the trainer's own link predictor when its
checkpoints are at hand, else cosine similarity, and the answer says which and why.

The embeddings topic carries vectors only; the predictor (TGN's MLP on ``[z_src, z_dst]``, and with
``TGNConfig.pair_features`` the pair encoder) lives in the trainer's checkpoints. With ``checkpoint_dir`` the
scorer loads the predictor of the newest checkpoint (and reloads it when ``LATEST`` moves), so ``/score``
gives the probability the trainer itself would give the pair from these embeddings; its weights may be up to
one checkpoint interval older than the embeddings.

A predictor that reads pair features also needs the pair's history and its ends' latest neighbors, which
live in the trainer's store, not in the topic. Given that ``store`` (the service runs in the trainer's
process, as ``streamgnn demo --serve`` runs it), the scorer computes them at query time as of just after the
store's newest event, the time the served embeddings are computed at, and answers
``"pair_features": "store"``. A service that only reads the embeddings topic has no store: it scores such a
model by cosine similarity and says so in ``"why"``, never by the predictor with the pair part left out.
The store must not be ingesting while it is read (the demo serves once its stream has ended). A model
that does not score from two embeddings (the DyGFormer-style model reads both ends' neighbor sequences
together) is scored by cosine similarity too, with the reason in ``"why"``.

    scorer = LinkScorer("out/ckpt")  # or LinkScorer(None): cosine similarity
    scores, info = scorer.score(z_src, z_dst, src_ids, dst_ids)  # info: {"scorer": "link_predictor", ...}
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import CheckpointError, ConfigError
from ..nn import LinkPredictor, TGNConfig
from ..nn.pairs import PairEncoder
from ..sampling.pairs import PairFeatures
from ..store import TemporalGraphStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Loaded:
    """One checkpoint's predictor, and its pair encoder and features when the model reads pairs."""

    step: str
    predictor: LinkPredictor | None  # None: a model that does not score from embeddings (``why``)
    encoder: PairEncoder | None
    pairs: PairFeatures | None
    why: str = ""


class LinkScorer:
    """``score(z_src, z_dst, src, dst)`` -> ``(scores [n], info)``; see the module docstring.

    ``store``: the trainer's live store (external node ids), for models that read pair features."""

    def __init__(self, checkpoint_dir: str | Path | None, store: TemporalGraphStore | None = None) -> None:
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.store = store
        self._lock = threading.Lock()
        self._loaded: _Loaded | None = None

    def _refresh(self, dim: int) -> None:
        if self.checkpoint_dir is None:
            return
        from ..train.checkpoint import load_state, step_path
        from ..train.config import TrainConfig

        try:
            latest = step_path(self.checkpoint_dir).name
        except CheckpointError:
            return  # no checkpoint yet (or LATEST mid-replace): keep what we have (cosine until the first)
        if self._loaded is not None and latest == self._loaded.step:
            return
        try:
            _, manifest, state = load_state(self.checkpoint_dir / latest)
            model = TrainConfig.from_checkpoint(manifest["config"]).model
            if not isinstance(model, TGNConfig):
                why = (
                    f"the model of {latest} ({type(model).__name__}) scores a pair from both ends' neighbor "
                    "sequences, not from two served embeddings"
                )
                self._loaded = _Loaded(latest, None, None, None, why)
                return
            encoder = PairEncoder.of(model) if model.pair_features else None
            predictor = LinkPredictor(dim, pair_dim=encoder.out_dim if encoder is not None else 0)
            predictor.load_state_dict(_part(state["model"], "predictor."))
            if encoder is not None:
                encoder.load_state_dict(_part(state["model"], "pair_encoder."))
        except (CheckpointError, ConfigError, KeyError, RuntimeError) as exc:
            log.warning("link scorer: cannot use %s (%s); scoring by cosine", latest, exc)
            return
        predictor.eval()
        pairs = None
        if encoder is not None and self.store is not None:
            pairs = PairFeatures.of(self.store, model)
            # The walk state is the store's, not the weights': a new checkpoint keeps it (no replay).
            before = self._loaded.pairs.walks if self._loaded is not None and self._loaded.pairs else None
            if before is not None and pairs.walks is not None and before.settings == pairs.walks.settings:
                pairs.walks = before
        self._loaded = _Loaded(latest, predictor, encoder, pairs)

    def score(self, z_src: np.ndarray, z_dst: np.ndarray, src=None, dst=None) -> tuple[np.ndarray, dict]:
        """Scores of the rows' pairs; ``src``/``dst``: their external node ids (read by pair features)."""
        with self._lock:
            self._refresh(z_src.shape[1])
            loaded = self._loaded
        if loaded is None:
            return _cosine(z_src, z_dst), {"scorer": "cosine"}
        if loaded.predictor is None:
            return _cosine(z_src, z_dst), {"scorer": "cosine", "checkpoint": loaded.step, "why": loaded.why}
        info = {"scorer": "link_predictor", "checkpoint": loaded.step}
        pair = None
        if loaded.encoder is not None:
            if loaded.pairs is None:
                why = (
                    f"the model of {loaded.step} reads pair features, which need the trainer's store; this "
                    "service reads only the embeddings topic"
                )
                return _cosine(z_src, z_dst), {"scorer": "cosine", "checkpoint": loaded.step, "why": why}
            pair, t = self._pair_vectors(loaded, src, dst)
            info.update(pair_features="store", as_of=t)
        with torch.no_grad():
            logits = loaded.predictor(torch.from_numpy(z_src), torch.from_numpy(z_dst), pair).double().numpy()
        return 1.0 / (1.0 + np.exp(-logits)), info

    def _pair_vectors(self, loaded: _Loaded, src, dst) -> tuple[torch.Tensor, float]:
        """The pairs' encoded features as of just after the store's newest event (unknown ids: none)."""
        store = self.store
        s, d = (store.node_index(np.asarray(ids), strict=False) for ids in (src, dst))
        t = float(np.nextafter(store.watermark, math.inf)) if math.isfinite(store.watermark) else 0.0
        raw = (torch.from_numpy(x) for x in loaded.pairs.read(s, d, t))
        with torch.no_grad():
            return loaded.encoder(*raw), t


def _part(weights: dict, prefix: str) -> dict:
    return {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}


def _cosine(z_src: np.ndarray, z_dst: np.ndarray) -> np.ndarray:
    num = np.einsum("ij,ij->i", z_src, z_dst, dtype=np.float64)
    den = np.linalg.norm(z_src, axis=1) * np.linalg.norm(z_dst, axis=1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
