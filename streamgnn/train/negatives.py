"""The trainer's negatives: destinations drawn from what the stream has shown so far.

A ``NegativeSampler`` whose pool and history are exactly the store's edge additions, kept in step with the
store (``observe`` after each batch, ``rebuild`` when the store is replaced), so that a draw for a batch
never depends on the batch itself. Draws are keyed by ``(step, purpose)``: a resumed run, or another rank,
draws the same negatives for the same batch.

``pool="id_range"`` draws training negatives uniformly over the integer id range of the destinations seen
so far instead, ids the store does not know included (they read as blank nodes): the online analog of
PyG's ``TemporalDataLoader``, which draws over the training data's destination id range.
``pool="seen_blank"`` draws from the destinations seen so far, but makes each training negative a blank
node (-1: no history, zero memory) with the probability that a positive of the same batch goes to a
destination the store does not know yet: blankness then tells a model nothing, where from the seen pool alone
(no blank negative ever) it learns "blank destination = positive" and ranks blank candidates first.
``pool="train_part"`` draws training negatives as DyGLib's trainer does (its ``NegativeEdgeSampler`` over the
training data, random strategy): uniformly, with replacement, from the training part's distinct destinations,
known in advance (``use_train_part``: ``fit_offline`` gives them from its split), so a draw may name a
destination the stream has not reached yet, a blank node (-1) then, as it has no history there either. Only
an offline fit has a training part: an online run with this pool is refused at its first draw.

>>> import numpy as np
>>> from streamgnn.store import TemporalGraphStore
>>> negatives = StreamNegatives(seed=0)
>>> negatives.rebuild(TemporalGraphStore())
>>> negatives.ready  # nothing seen yet: no destination to draw
False
>>> negatives.observe(np.array([0, 1]), np.array([2, 3]))
>>> negatives.draw(np.array([0]), np.array([2]), num=1, strategy="random", step=0, purpose=TRAIN).tolist()
[[3]]
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..sampling import NegativeSampler
from ..sampling.rng import key_of
from ..store import TemporalGraphStore

EVAL, TRAIN = 0, 1  # key offsets: every draw is named by (step, purpose)
POOLS = ("seen_blank", "seen", "id_range", "train_part")
BLANK_POOLS = ("id_range", "seen_blank", "train_part")  # pools whose -1 draws are blank-node negatives


def counted(neg: np.ndarray, pool: str) -> np.ndarray:
    """Which training draws count in the loss: from a blank pool every draw (-1 is a blank node), from the
    seen pool only real ones (-1 there means no destination was left to draw)."""
    return np.ones(np.shape(neg), bool) if pool in BLANK_POOLS else np.asarray(neg) >= 0


class StreamNegatives:
    """Pool and history of negative destinations, equal to the destinations and pairs seen so far."""

    def __init__(self, seed: int, pool: str = "seen") -> None:
        if pool not in POOLS:
            raise ConfigError(f"negative pool must be one of {POOLS}, got {pool!r}")
        self.seed = seed
        self.pool = pool
        self.sampler: NegativeSampler | None = None
        self.store: TemporalGraphStore | None = None
        self._range = (np.iinfo(np.int64).max, np.iinfo(np.int64).min)  # external destination ids seen
        self.train_part: np.ndarray | None = None  # the "train_part" pool's external ids

    def use_train_part(self, destinations: np.ndarray) -> None:
        """The ``train_part`` pool's ids: the training part's destinations (external ids; duplicates are
        dropped, so every distinct destination is equally likely, as in DyGLib's sampler)."""
        part = np.unique(np.asarray(destinations))
        if not len(part):
            raise ConfigError("train_negative_pool='train_part' needs a training part with destinations")
        self.train_part = part

    @property
    def ready(self) -> bool:
        """Whether any destination has been seen (there is something to draw)."""
        return self.sampler is not None

    def observe(self, src: np.ndarray, dst: np.ndarray, history: np.ndarray | None = None) -> None:
        """Add a batch's applied edges (internal ids): their pairs join the history, destinations the pool.
        ``history``: which pairs join the history (default all; a shard keeps only its own sources')."""
        if not len(dst):
            return
        if self.pool == "id_range":
            ext = np.asarray(self.store.external_ids(dst))
            if ext.dtype.kind not in "iu":
                raise ConfigError(f"train_negative_pool='id_range' needs integer node ids, not {ext.dtype}")
            self._range = (min(self._range[0], int(ext.min())), max(self._range[1], int(ext.max())))
        if self.sampler is None:
            self.sampler = NegativeSampler(dst, seed=self.seed)
        elif history is not None:  # every destination joins the pool, also those of pairs left out below
            self.sampler.extend_pool(dst)
        if history is not None:
            src, dst = src[history], dst[history]
        self.sampler.observe(src, dst)

    def rebuild(self, store: TemporalGraphStore, *, pairs: bool = True) -> None:
        """Start over from exactly the store's edges (a new pass, a restored checkpoint). ``pairs=False``:
        their destinations join the pool, none of their pairs the history, for a store that already holds
        the pass's later events (``fit_offline(sees_batch=True)``): a historical draw then names only a pair
        of the batches stepped since, never one the source meets later in the pass."""
        self.sampler = None
        self.store = store
        self._range = (np.iinfo(np.int64).max, np.iinfo(np.int64).min)
        edges = store.edges()
        self.observe(edges.src, edges.dst, None if pairs else np.zeros(len(edges.dst), bool))

    def draw(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        *,
        num: int,
        strategy: str,
        step: int,
        purpose: int,
        frac: float = 1.0,
        groups: np.ndarray | None = None,
    ) -> np.ndarray:
        """``int64[n, num]`` negatives of ``(src, dst)`` (``NegativeSampler.sample``); needs ``ready``.

        With the ``id_range`` and ``train_part`` pools, training draws (``purpose=TRAIN``) are uniform
        (``uniform``), ``-1`` where the store does not know the id."""
        if self.pool in ("id_range", "train_part") and purpose == TRAIN:
            return self.uniform(len(src) * num, step).reshape(len(src), num)
        out = self.sampler.sample(
            src, dst, num=num, strategy=strategy, frac=frac, groups=groups, key=2 * step + purpose
        )
        if self.pool == "seen_blank" and purpose == TRAIN and len(dst):
            rng = np.random.default_rng(int(key_of(self.seed, 2 * step + purpose)))
            out[rng.random(out.shape) < np.mean(np.asarray(dst) < 0)] = -1
        return out

    def uniform(self, size: int, step: int) -> np.ndarray:
        """``size`` training destinations (internal ids, -1 where the store does not know one yet) drawn
        uniformly with replacement: over the seen id range (``id_range``) or the training part's
        destinations (``train_part``), keyed by ``step`` as every draw."""
        rng = np.random.default_rng(int(key_of(self.seed, 2 * step + TRAIN)))
        if self.pool == "id_range":
            ext = rng.integers(self._range[0], self._range[1] + 1, size=size)
        elif self.train_part is None:
            raise ConfigError(
                "train_negative_pool='train_part' draws from an offline split's training part, which an "
                "online run has not got (fit_offline gives it): use 'seen_blank', 'seen' or 'id_range'"
            )
        else:
            ext = self.train_part[rng.integers(0, len(self.train_part), size=size)]
        return self.store.node_index(ext, strict=False)
