"""Link scores for (src, dst) pairs from served embeddings: the trainer's own link predictor when its
checkpoints are at hand, else cosine similarity, and the answer says which and why.

The embeddings topic carries vectors only; the predictor (for TGN its MLP on ``[z_src, z_dst]``, and with
``TGNConfig.pair_features`` the pair encoder) lives in the trainer's checkpoints. With ``checkpoint_dir`` the
scorer asks the model family for the scoring head of the newest checkpoint (``train.models.scoring_head``:
this module knows no model's weights or kinds) and reloads it when ``LATEST`` moves, so ``/score``
gives the probability the trainer itself would give the pair from these embeddings; its weights may be up to
one checkpoint interval older than the embeddings. A sharded job's link predictor is the same on every rank:
``checkpoint_dir`` may name its checkpoint folder (rank 0's is read) or any rank's (``ckpt/rank-00001``).

A predictor that reads pair features also needs the pair's history and its ends' latest neighbors, which
live in the trainer's store, not in the topic. Given that ``store`` (the service runs in the trainer's
process, as ``streamgnn demo --serve`` runs it), the scorer computes them at query time as of just after the
store's newest event, the time the served embeddings are computed at, and answers
``"pair_features": "store"``. A service that only reads the embeddings topic has no store: it scores such a
model by cosine similarity and says so in ``"why"``, never by the predictor with the pair part left out.
The store must not be ingesting while it is read (the demo serves once its stream has ended). A model
that does not score from two embeddings (the DyGFormer-style model reads both ends' neighbor sequences
together) is scored by cosine similarity too, with the reason its family gives in ``"why"``, and so is a
head whose width is not the served embeddings'. With ``checkpoint_dir`` but no usable checkpoint in it (none
yet, or the newest damaged or of an unknown config), the answer is cosine with the reason in ``"why"``; an
unusable checkpoint is logged once and not read again until ``LATEST`` moves on.

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

from ..errors import CheckpointError, ConfigError
from ..sampling.pairs import PairFeatures
from ..store import TemporalGraphStore
from ..train.head import ScoringHead

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Loaded:
    """One checkpoint's scoring head, and the pair features it reads over the store when it reads them."""

    step: str
    head: ScoringHead | None  # None: a model that does not score from embeddings (``why``)
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
        self._why = ""  # why no checkpoint is in use (none yet, or the newest is unusable)
        self._refused = ""  # the newest checkpoint that could not be used: not tried again

    def _refresh(self) -> None:
        if self.checkpoint_dir is None:
            return
        from ..shard.checkpoint import KIND as SHARDED
        from ..shard.checkpoint import replicated_folder
        from ..train.checkpoint import load_tensors, step_path
        from ..train.config import TrainConfig
        from ..train.models import scoring_head

        folder = replicated_folder(self.checkpoint_dir)  # (a sharded run's: the same weights on every rank)
        try:
            latest = step_path(folder).name
        except CheckpointError:  # none yet (or LATEST mid-replace): keep what we have
            self._why = "serve.checkpoint_dir holds no usable checkpoint yet"
            return
        if latest in (self._refused, self._loaded.step if self._loaded is not None else None):
            return
        try:
            _, manifest, state = load_tensors(folder / latest, kind=("trainer", SHARDED))
            head = scoring_head(TrainConfig.from_checkpoint(manifest["config"]), state)
        except (CheckpointError, ConfigError, KeyError, RuntimeError, OSError, ValueError, TypeError) as exc:
            # written by another process, it may hold anything: the answer says so, the log once
            log.warning("link scorer: cannot use %s (%s); scoring by cosine", latest, exc)
            self._refused, self._why = latest, f"cannot use checkpoint {latest} (the service's log says why)"
            return
        if isinstance(head, str):
            self._loaded = _Loaded(latest, None, None, f"{latest}: {head}")
            return
        pairs = None
        if head.reads_pairs and self.store is not None:
            pairs = head.pair_features(self.store)
            # The walk state is the store's, not the weights': a new checkpoint keeps it (no replay).
            before = self._loaded.pairs.walks if self._loaded is not None and self._loaded.pairs else None
            if before is not None and pairs.walks is not None and before.settings == pairs.walks.settings:
                pairs.walks = before
        self._loaded = _Loaded(latest, head, pairs)

    def score(self, z_src: np.ndarray, z_dst: np.ndarray, src=None, dst=None) -> tuple[np.ndarray, dict]:
        """Scores of the rows' pairs; ``src``/``dst``: their external node ids (read by pair features)."""
        with self._lock:
            self._refresh()
            loaded = self._loaded
        if loaded is None:
            return _cosine(z_src, z_dst), {"scorer": "cosine", **({"why": self._why} if self._why else {})}
        head = loaded.head
        why = loaded.why
        if head is not None and head.dim != z_src.shape[1]:
            served = z_src.shape[1]
            why = f"the model of {loaded.step} scores {head.dim}-d embeddings; the served ones are {served}-d"
        elif head is not None and head.reads_pairs and loaded.pairs is None:
            why = (
                f"the model of {loaded.step} reads pair features, which need the trainer's store; this "
                "service reads only the embeddings topic"
            )
        if why:
            return _cosine(z_src, z_dst), {"scorer": "cosine", "checkpoint": loaded.step, "why": why}
        info = {"scorer": "link_predictor", "checkpoint": loaded.step}
        raw = None
        if head.reads_pairs:
            raw, t = self._pair_features(loaded.pairs, src, dst)
            info.update(pair_features="store", as_of=t)
        return 1.0 / (1.0 + np.exp(-head.logits(z_src, z_dst, raw))), info

    def _pair_features(self, pairs: PairFeatures, src, dst) -> tuple[tuple[np.ndarray, ...], float]:
        """The pairs' raw features as of just after the store's newest event (unknown ids: none)."""
        store = self.store
        s, d = (store.node_index(np.asarray(ids), strict=False) for ids in (src, dst))
        t = float(np.nextafter(store.watermark, math.inf)) if math.isfinite(store.watermark) else 0.0
        return pairs.read(s, d, t), t


def _cosine(z_src: np.ndarray, z_dst: np.ndarray) -> np.ndarray:
    num = np.einsum("ij,ij->i", z_src, z_dst, dtype=np.float64)
    den = np.linalg.norm(z_src, axis=1) * np.linalg.norm(z_dst, axis=1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
