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

import copy
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..events import EventBatch
from ..progress import progress_bar
from ..sampling import EvalNegatives
from .config import TrainConfig
from .driver import Batches, Drive
from .metrics import LinkMetrics, batch_mean_metrics, losses_to_baselines
from .step import Attached, StepResult
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
    """Training throughput per epoch (events/s over the training part) and the scores after the last
    epoch, or after the best one when training stopped early (``fit_offline(patience=...)``):
    ``epochs`` trained, ``best_epoch`` (1-based) whose weights were scored, ``val_ap_per_epoch`` (empty
    without early stopping).

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
    epochs: int = 0
    best_epoch: int = 0
    val_ap_per_epoch: list[float] = field(default_factory=list)
    test_with: dict[str, LinkMetrics] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "train_events_per_s": self.train_events_per_s,
            "train_loss": self.train_loss,
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "val_ap_per_epoch": list(self.val_ap_per_epoch),
            "test_with": {k: m.as_dict() for k, m in self.test_with.items()},
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
    patience: int | None = None,
    split: ChronologicalSplit | None = None,
    test_negatives: np.ndarray | tuple[np.ndarray, np.ndarray] | None = None,
    test_with: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]] | None = None,
    test_by: dict[str, Callable[[OnlineTrainer, np.ndarray], LinkMetrics]] | None = None,
    score_val: bool = True,
    sees_batch: bool = False,
    progress: bool = False,
    attach: Callable[[OnlineTrainer], dict[str, Attached]] | None = None,
) -> OfflineResult:
    """Train ``epochs`` passes over the training part and score validation and test (module docstring).

    ``patience``: train until validation AP has not improved for ``patience`` epochs (``epochs`` at most),
    then go back to the best epoch's weights and its memory, and score from there (DyGLib's protocol: a
    fixed epoch count under-trains some streams and over-trains others). Each epoch then scores the
    validation part against its fixed AP negatives (no ranking, so it costs one pass). None: exactly
    ``epochs`` passes.

    ``test_negatives``: external ids ``[len(split.test), q]`` to rank test positives against (e.g. a
    benchmark's shared candidates; column 0 is the AP negative), or ``(ids, valid)`` where some rows have
    fewer than ``q`` (``valid`` marks the real ones, as ``fixed_negatives`` returns); default:
    ``fixed_negatives``.
    ``test_with``: more negative sets of the same shape (e.g. ``{"historical": ...}``), each scoring the test
    part again from the state before it: ``OfflineResult.test_with[name]``, baselines' ``"test_<name>"``.
    ``test_by``: more test protocols that ranking against fixed destinations cannot express (e.g. negatives
    with another source), each called as ``protocol(trainer, split.test)`` from the state before the test
    part (the store already holds it, as for ``test_with``): ``OfflineResult.test_with[name]``.
    ``score_val=False`` replays validation into memory and graph without scoring it. ``sees_batch``: train
    as DyGLib's trainer does: each epoch's store holds the whole training part from its start and each step
    embeds each event at its own time (``query_time="event"``), so it sees its batch's earlier events
    (strictly before each time: nothing later), memory still updated once per batch, and historical
    training negatives are pairs of the batches before (``start_epoch``); default: each batch from the
    state before it. ``progress``: a bar
    over epochs with each one's loss and validation AP (converged training can run for hours).
    ``attach``: what follows the trainer's steps, made from it (``StreamTrainer.attached``; e.g. a
    labelled task's loss trained jointly, ``tasks.joint.training_labels``).

    Every part is a ``Phase``: the online trainers' step (``StreamTrainer.step``) over its batches, driven
    by their loop (``driver.Drive``), with the phase's flags (train, score, ingest) and negatives.
    """
    if epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}")
    if patience is not None and (not isinstance(patience, int) or patience < 1):
        raise ConfigError(f"patience must be an int >= 1 (epochs) or None, got {patience!r}")
    split = split or ChronologicalSplit.make(events)
    config = dataclasses.replace(config, serve_every=0, checkpoint_every=0)
    trainer = OnlineTrainer(config)
    if config.train_negative_pool == "train_part":  # DyGLib's training negatives: the part's destinations
        trainer.negatives.use_train_part(events.dst[split.train])
    trainer.attached.update(attach(trainer) if attach is not None else {})
    run = OfflineRun(events, split, config, trainer, sees_batch)
    more = {k: run.given(f"test_with[{k!r}]", v) for k, v in (test_with or {}).items()}
    test_negatives = run.given("test_negatives", test_negatives)
    training = run.train(epochs, patience, progress)
    val, val_new = run.validate(score_val)
    test, test_new, scored_with = run.test(test_negatives, more, test_by or {})
    label = getattr(run.trainer.link_model, "name", "model")
    flags = [
        f"{part}: {line}"
        for part, ours in (("test", test), ("test_inductive", test_new))
        for line in losses_to_baselines(label, ours, {b: parts[part] for b, parts in run.baselines.items()})
    ]
    rates, losses, val_aps, best_epoch = training
    return OfflineResult(
        rates, losses, val, val_new, test, test_new, run.baselines, flags, len(rates), best_epoch, val_aps,
        scored_with,
    )  # fmt: skip


@dataclass(frozen=True)
class Phase:
    """One part of an offline run: the steps over ``rows`` of the events, in batches, all with the same
    flags (``StreamTrainer.step``'s) and, when scored, ``negatives`` ``(ids, valid)`` one row per row."""

    rows: np.ndarray
    train: bool = False
    score: bool = False
    ingest: bool = True
    negatives: tuple[np.ndarray, np.ndarray] | None = None
    query_time: str | None = None  # ``StreamTrainer.step``'s (None: the config's)


def run_phase(trainer: OnlineTrainer, events: EventBatch, phase: Phase) -> list[StepResult]:
    """``phase``'s batches of ``config.batch_size`` through the online trainers' loop (``driver.Drive``:
    no checkpoints, no bar), each one step with the phase's flags; their results in order."""
    results: list[StepResult] = []
    flags = dict(train=phase.train, score=phase.score, ingest=phase.ingest, query_time=phase.query_time)
    drive = Drive(
        trainer, every=0, limit=None, progress=False, size=lambda item: len(item[0]),
        step=lambda item, arrival: trainer.step(item[0], arrival=arrival, **flags, **item[1]),
        on_step=lambda _item, result, _arrival: results.append(result),
    )  # fmt: skip
    drive.run(phase_batches(events, phase, trainer.config.batch_size), lambda: None)
    return results


def phase_batches(events: EventBatch, phase: Phase, size: int) -> Batches:
    """``Drive``'s items of a phase: each batch of ``size`` rows with its negatives (when scored)."""
    rows, neg = phase.rows, phase.negatives
    for lo in range(0, len(rows), size):
        part = slice(lo, lo + size)
        given = {} if neg is None else dict(negatives=neg[0][part], negatives_valid=neg[1][part])
        yield (events.take(rows[part]), given), time.perf_counter(), True


class OfflineRun:
    """One ``fit_offline`` run: the trainer over ``events`` split by ``split``, and each baseline's scores
    per part (``baselines[name][part]``)."""

    def __init__(
        self, events: EventBatch, split: ChronologicalSplit, config: TrainConfig, trainer, sees_batch: bool
    ) -> None:
        self.events, self.split, self.config, self.trainer = events, split, config, trainer
        self.sees_batch = sees_batch
        self.baselines: dict[str, dict[str, LinkMetrics]] = {name: {} for name in trainer.baselines}

    def part(self, name: str, rows: np.ndarray, *, ingest: bool, scored: bool, negatives=None) -> LinkMetrics:
        """Score (or only replay) part ``name``; the baselines' scores go to ``baselines[...][name]``."""
        if scored and negatives is None:
            negatives = fixed_negatives(self.events, self.split, rows, self.config)
        phase = Phase(rows, score=scored, ingest=ingest, negatives=negatives if scored else None)
        results = run_phase(self.trainer, self.events, phase)
        unscored = LinkMetrics(*[float("nan")] * 3, 0)
        for base, parts in self.baselines.items():
            scores = [r.baselines[base] for r in results if base in r.baselines]  # (a batch with no positive)
            parts[name] = batch_mean_metrics(scores) if scored else unscored
        return batch_mean_metrics([(r.pos, r.neg, r.rr) for r in results]) if scored else unscored

    def memory(self) -> list:
        """Every stream model's ``state()`` (memory, pending messages, banks): a point to ``rewind`` to."""
        return [model.state() for model in self.trainer.stream_models()]

    def rewind(self, states: list) -> None:
        for model, state in zip(self.trainer.stream_models(), states, strict=True):
            model.load_state(state)

    def train(self, epochs: int, patience: int | None, progress: bool) -> tuple[list, list, list, int]:
        """The training epochs (with ``patience``, until validation AP stops improving, then back to the
        best epoch's weights, store and memory as they were before its validation), the held-out edges
        joined after them. ``(events/s per epoch, mean loss per epoch, validation AP per epoch, best)``."""
        trainer, split = self.trainer, self.split
        rates, losses, val_aps = [], [], []
        part = self.events.take(split.train)
        select = None if patience is None else fixed_negatives(self.events, split, split.val, self.config)
        best = (-np.inf, 0, None, None)  # validation AP, epoch, weights, memory before validation
        bar = progress_bar(total=epochs, unit="epoch", disable=not progress)
        for epoch in range(1, epochs + 1):
            self.start_epoch(part)
            start = time.perf_counter()
            epoch_loss = [r.loss for r in run_phase(trainer, self.events, self.training_phase())]
            rates.append(len(part) / (time.perf_counter() - start))
            losses.append(float(np.nanmean(epoch_loss)) if epoch_loss else float("nan"))
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
            if patience is None:
                continue
            trainer.store.ingest(self.events.take(split.held_out))
            before = self.memory()
            ap_only = (select[0][:, :1], select[1][:, :1])  # selection needs AP only: skip ranking
            val_aps.append(self.part("val", split.val, ingest=True, scored=True, negatives=ap_only).ap)
            if val_aps[-1] > best[0]:
                weights = copy.deepcopy(trainer.link_model.state_dict())
                best = (val_aps[-1], epoch, weights, copy.deepcopy(before))
            bar.set_postfix(loss=f"{losses[-1]:.4f}", val_ap=f"{val_aps[-1]:.4f}", best_epoch=best[1])
            if epoch - best[1] >= patience:
                break
        bar.close()
        if patience is None:
            trainer.store.ingest(self.events.take(split.held_out))
            return rates, losses, val_aps, epochs
        _, best_epoch, weights, before = best
        trainer.link_model.load_state_dict(weights)
        store = trainer.new_store()
        store.ingest(part)
        trainer.reset_stream(store)
        store.ingest(self.events.take(split.held_out))
        self.rewind(before)
        return rates, losses, val_aps, best_epoch

    def start_epoch(self, part: EventBatch) -> None:
        """A training epoch's fresh state: an empty store, or (``sees_batch``) one holding the training part,
        whose negatives' history then starts empty and grows batch by batch as without the view, so a
        historical training negative is a pair of an earlier batch, never one met later in the part."""
        if not self.sees_batch:
            self.trainer.reset_stream()
            return
        store = self.trainer.new_store()
        store.ingest(part)
        self.trainer.reset_stream(store, negative_pairs=False)

    def training_phase(self) -> Phase:
        """An epoch's steps: each batch from the state before it, or, ``sees_batch``, from the store holding
        the part, each event at its own time."""
        if self.sees_batch:
            return Phase(self.split.train, train=True, ingest=False, query_time="event")
        return Phase(self.split.train, train=True)

    def validate(self, score_val: bool) -> tuple[LinkMetrics, LinkMetrics]:
        """Validation (transductive, then inductive from the memory before it); the memory after it stays.
        ``score_val=False``: replayed, not scored (the inductive figures are the same unscored ones)."""
        split = self.split
        before_val = self.memory()
        val = self.part("val", split.val, ingest=True, scored=score_val)
        self.after_val = self.memory()
        if not score_val:
            for parts in self.baselines.values():
                parts["val_inductive"] = parts["val"]
            return val, val
        self.rewind(before_val)
        val_new = self.part("val_inductive", split.val_new, ingest=False, scored=True)
        self.rewind(self.after_val)
        return val, val_new

    def test(
        self, negatives, more: dict, by: dict
    ) -> tuple[LinkMetrics, LinkMetrics, dict[str, LinkMetrics]]:
        """The test part (its transductive figures, then each of ``more`` negative sets and ``by``
        protocols, then the inductive figures, each from the memory after validation)."""
        split = self.split
        test = self.part("test", split.test, ingest=True, scored=True, negatives=negatives)
        scored_with = {}
        for name, given in more.items():  # the store holds the test part now: sampling still stops before t
            self.rewind(self.after_val)
            scored_with[name] = self.part(
                f"test_{name}", split.test, ingest=False, scored=True, negatives=given
            )
        for name, protocol in by.items():
            self.rewind(self.after_val)
            scored_with[name] = protocol(self.trainer, split.test)
        self.rewind(self.after_val)
        test_new = self.part("test_inductive", split.test_new, ingest=False, scored=True)
        return test, test_new, scored_with

    def given(self, name: str, negatives) -> tuple[np.ndarray, np.ndarray] | None:
        """Negatives given for the test part as ``(ids, valid)`` (None: none given), their shape checked."""
        if negatives is None:
            return None
        ids, valid = negatives if isinstance(negatives, tuple) else (negatives, None)
        ids = np.asarray(ids)
        valid = np.ones(ids.shape, bool) if valid is None else np.asarray(valid, bool)
        if ids.ndim != 2 or ids.shape[0] != len(self.split.test):
            raise ConfigError(
                f"{name} has shape {ids.shape}: need {len(self.split.test)} rows, one per test event"
            )
        if valid.shape != ids.shape:
            raise ConfigError(f"{name}: its mask has shape {valid.shape}, its ids {ids.shape}")
        return ids, valid
