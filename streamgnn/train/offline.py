"""The offline protocol of the TGN paper, so that our figures line up with published ones.

Chronological 70/15/15 split; a random 10% of the nodes active after the training period are withheld from
training altogether ("new nodes"). Each epoch streams the training part test-then-train from blank memory.
Then the held-out training-period edges join the graph (TGN's full neighbor finder, which memory never saw),
and validation and test are scored batch by batch, test-then-observe: transductive over all their edges,
inductive over the edges touching a node never seen in training, the latter from the memory as it was before
the part (TGN restores a memory backup for it). AP and AUC are means over batches of one negative per
positive, as in the paper; MRR ranks each positive among ``eval_negatives`` fixed negatives.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..events import EventBatch
from ..sampling import EvalNegatives
from .config import TrainConfig
from .metrics import LinkMetrics, batch_mean_metrics, losses_to_baselines
from .trainer import OnlineTrainer


@dataclass(frozen=True)
class ChronologicalSplit:
    """Row indices into the event batch for each part, in time order."""

    train: np.ndarray
    held_out: np.ndarray  # training-period edges touching a withheld node: in the graph, never trained on
    val: np.ndarray
    test: np.ndarray
    val_new: np.ndarray  # validation edges with an endpoint never seen in training
    test_new: np.ndarray

    @classmethod
    def make(
        cls,
        events: EventBatch,
        *,
        val: float = 0.15,
        test: float = 0.15,
        new_node_fraction: float = 0.1,
        by_time: bool = True,
        seed: int = 2020,
    ) -> ChronologicalSplit:
        """TGN's split of a time-ordered batch of edge additions.

        ``by_time``: part boundaries at time quantiles (TGN), else at row positions ``int(0.70 n)``,
        ``int(0.85 n)`` (PyG's examples). ``new_node_fraction`` of all nodes, drawn among those active after
        the training period, are withheld from training (0 for none).
        """
        n = len(events)
        if not (val > 0 and test > 0 and val + test < 1):
            raise ConfigError(f"need 0 < val, 0 < test and val + test < 1, got val={val}, test={test}")
        if not 0 <= new_node_fraction < 1:
            raise ConfigError(f"new_node_fraction must be in [0, 1), got {new_node_fraction}")
        if n and np.any(np.diff(events.t) < 0):
            raise ConfigError("events must be sorted by time (EventBatch.sorted_by_time())")
        if by_time:
            val_time, test_time = np.quantile(events.t, [1 - val - test, 1 - test])
            part = np.where(events.t <= val_time, 0, np.where(events.t <= test_time, 1, 2))
        else:
            rows = np.arange(n)
            part = np.where(rows < int((1 - val - test) * n), 0, np.where(rows < int((1 - test) * n), 1, 2))
        nodes = np.unique(np.concatenate([events.src, events.dst]))
        late = np.unique(np.concatenate([events.src[part > 0], events.dst[part > 0]]))
        rng = np.random.default_rng(seed)
        k = min(int(new_node_fraction * len(nodes)), len(late))
        withheld = rng.choice(late, size=k, replace=False) if k else late[:0]
        touches = np.isin(events.src, withheld) | np.isin(events.dst, withheld)
        train = (part == 0) & ~touches
        seen = np.unique(np.concatenate([events.src[train], events.dst[train]]))
        new = ~np.isin(events.src, seen) | ~np.isin(events.dst, seen)
        where = np.flatnonzero
        return cls(
            where(train), where((part == 0) & touches), where(part == 1), where(part == 2),
            where((part == 1) & new), where((part == 2) & new),
        )  # fmt: skip


_PARTS = ("val", "val_inductive", "test", "test_inductive")


@dataclass(frozen=True)
class OfflineResult:
    """Training throughput per epoch (events/s over the training part) and the scores after the last.

    ``baselines``: each baseline's scores per part (``"val"``, ``"val_inductive"``, ``"test"``,
    ``"test_inductive"``) on the same positives and negatives; ``flags``: where the model loses to one.
    """

    train_events_per_s: list[float]
    train_loss: list[float]
    val: LinkMetrics
    val_inductive: LinkMetrics
    test: LinkMetrics
    test_inductive: LinkMetrics
    baselines: dict[str, dict[str, LinkMetrics]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "train_events_per_s": self.train_events_per_s,
            "train_loss": self.train_loss,
            **{name: getattr(self, name).as_dict() for name in _PARTS},
            "baselines": {
                b: {p: m.as_dict() for p, m in parts.items()} for b, parts in self.baselines.items()
            },
            "flags": list(self.flags),
        }


def fixed_negatives(events: EventBatch, split: ChronologicalSplit, rows: np.ndarray, config: TrainConfig):
    """``(ids [len(rows), q], valid)``: fixed negatives (external ids) for ``rows``, drawn by
    ``EvalNegatives`` over every destination of the stream, with the training edges as history."""
    codes, index = np.unique(np.concatenate([events.src, events.dst]), return_inverse=True)
    src_c, dst_c = index[: len(events)], index[len(events) :]
    fixed = EvalNegatives.generate(
        src_c[rows], dst_c[rows], events.t[rows], events.eid[rows],
        dst_pool=dst_c, history=(src_c[split.train], dst_c[split.train]),
        num=max(config.eval_negatives, 1), strategy=config.eval_strategy, seed=config.seed,
    )  # fmt: skip
    valid = fixed.neg >= 0
    return codes[np.where(valid, fixed.neg, 0)], valid


def fit_offline(
    events: EventBatch,
    config: TrainConfig,
    *,
    epochs: int = 1,
    split: ChronologicalSplit | None = None,
    test_negatives: np.ndarray | None = None,
    score_val: bool = True,
) -> OfflineResult:
    """Train ``epochs`` passes over the training part and score validation and test (module docstring).

    ``test_negatives``: external ids ``[len(split.test), q]`` to rank test positives against (e.g. a
    benchmark's shared candidates; column 0 is the AP negative); default: ``fixed_negatives``.
    ``score_val=False`` replays validation into memory and graph without scoring it.
    """
    if epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}")
    split = split or ChronologicalSplit.make(events)
    config = dataclasses.replace(config, serve_every=0, checkpoint_every=0)
    trainer = OnlineTrainer(config)
    bs = config.batch_size
    rates, losses = [], []
    for _ in range(epochs):
        trainer.reset_stream()
        part = events.take(split.train)
        start = time.perf_counter()
        epoch_loss = [trainer.step(b, score=False).loss for b in part.split(bs)]
        rates.append(len(part) / (time.perf_counter() - start))
        losses.append(float(np.nanmean(epoch_loss)) if epoch_loss else float("nan"))
    trainer.store.ingest(events.take(split.held_out))

    unscored = LinkMetrics(*[float("nan")] * 3, 0)
    baselines: dict[str, dict[str, LinkMetrics]] = {name: {} for name in trainer.baselines}

    def run(name: str, rows: np.ndarray, *, ingest: bool, scored: bool, negatives=None) -> LinkMetrics:
        """Score (or only replay) part ``name``; the baselines' scores go to ``baselines[...][name]``."""
        if scored and negatives is None:
            negatives = fixed_negatives(events, split, rows, config)
        results = []
        for lo in range(0, len(rows), bs):
            batch = events.take(rows[lo : lo + bs])
            part = slice(lo, lo + bs)
            neg = dict(negatives=negatives[0][part], negatives_valid=negatives[1][part]) if scored else {}
            res = trainer.step(batch, train=False, score=scored, ingest=ingest, **neg)
            results.append(((res.pos, res.neg, res.rr), res.baselines))
        for base, parts in baselines.items():
            scores = [b[base] for _, b in results if base in b]  # (a batch with no positive has none)
            parts[name] = batch_mean_metrics(scores) if scored else unscored
        return batch_mean_metrics([r for r, _ in results]) if scored else unscored

    def memory() -> list:
        return [model.stream_state() for model in trainer.stream_models()]

    def restore(states: list) -> None:
        for model, state in zip(trainer.stream_models(), states, strict=True):
            model.load_stream_state(state)

    before_val = memory()
    val = run("val", split.val, ingest=True, scored=score_val)
    after_val = memory()
    if score_val:
        restore(before_val)
        val_new = run("val_inductive", split.val_new, ingest=False, scored=True)
        restore(after_val)
    else:
        val_new = val
        for parts in baselines.values():
            parts["val_inductive"] = parts["val"]
    test_neg = None
    if test_negatives is not None:
        test_negatives = np.asarray(test_negatives)
        if test_negatives.shape[0] != len(split.test):
            raise ConfigError(
                f"test_negatives has {test_negatives.shape[0]} rows for {len(split.test)} test events"
            )
        test_neg = (test_negatives, np.ones(test_negatives.shape, bool))
    test = run("test", split.test, ingest=True, scored=True, negatives=test_neg)
    restore(after_val)
    test_new = run("test_inductive", split.test_new, ingest=False, scored=True)
    label = getattr(trainer.link_model, "name", "model")
    flags = [
        f"{part}: {line}"
        for part, ours in (("test", test), ("test_inductive", test_new))
        for line in losses_to_baselines(label, ours, {b: parts[part] for b, parts in baselines.items()})
    ]
    return OfflineResult(rates, losses, val, val_new, test, test_new, baselines, flags)
