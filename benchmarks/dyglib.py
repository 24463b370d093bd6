"""DyGLib's link-prediction protocol (Yu et al., 2023), with DyGLib's semantics and our code.

The published tables (DyGFormer's, TPNet's) are made with it, so a figure from here sits in them without a
footnote. What it is, from DyGLib's ``utils/DataLoader.py``, ``utils/utils.py`` (``NegativeEdgeSampler``) and
``evaluate_models_utils.py`` (commit 3aacc36):

- split at the 70% and 85% time quantiles; 10% of all nodes, drawn among those active after the training
  period, are withheld from training with every edge touching them (``ChronologicalSplit``'s default);
- the test part is scored in batches of 200, memory updated by each batch after it is scored, and each
  positive gets one negative edge: AP and AUC over the batch's positives and negatives (scikit-learn's
  definitions), averaged over batches;
- each event of a batch is embedded at its own time over the whole graph (DyGLib's neighbor sampler,
  ``find_neighbors_before``: every interaction strictly before that time), so it sees its batch's earlier
  events: ours scores each batch from a store that already holds it, at each event's time
  (``step(ingest=False, query_time="event")``; sampling and every pair feature stop strictly before each
  time). ``ap_dyglib_batch``: the same negatives scored from the state before each batch (the store holding
  only earlier batches), as this protocol scored them before (a stricter reading; benchmarks/RESULTS.md,
  "Batch composition: what DyGLib's models see of their own batch");
- every earlier batch is the past, whatever its time: DyGLib's memory-based models and TPNet's walk
  matrices take each batch in once it is scored, also where the next batch has the same time (US Legis.:
  one time per Congress, 25 batches each). Our store reads strictly before a time, so the protocol parts
  the batches that share a time by a thousandth of a time unit each (``break_ties``; a batch's own events
  stay tied, and no event moves past the next time): without it US Legis.'s test AP read nothing of its
  own Congress but memory (3 epochs, seed 0: 0.714; parted 0.779, historical 0.737);
- negatives come from a sampler over the whole stream, reseeded before the test part (seed 2):

  "random": a destination drawn uniformly (with replacement, no collision check: it may be the positive's
  own) from every destination of the stream; the source stays the positive's.
  "historical": edges (source *and* destination replaced) drawn without replacement among the distinct
  edges with a time in [the stream's first time, the batch's first time], less those with a time in [the
  batch's first, its last time]; where fewer exist than the batch has positives, all of them plus edges
  drawn uniformly from every (source, destination) pair of the stream that is not a positive of the batch.
  "inductive": as "historical", but among those edges also leaving out every edge seen up to the end of
  validation (edges that first appear during the test part, before the batch).

Training, validation and early stopping are our trainer's (``fit_offline``), in DyGLib's view by default
(``sees_batch``: each epoch's store holds the training part and each step embeds each event at its own time,
so it sees its batch's earlier events as DyGLib's trainer does; at 2 epochs +0.001 random and +0.02 to
+0.07 historical AP on UCI and Enron, level on US Legis.; ``--no-sees-batch``: each batch from the state
before it). DyGLib's training negatives (one per positive, the destination uniform over the training part's
distinct destinations, those the stream has not reached yet included) are one option away,
``TrainConfig(train_negative_pool="train_part")`` (``--ours train_negative_pool=train_part``), and not what
this protocol trains with: at equal epochs they moved our random-negative test AP by -0.003 to +0.007
(scored as ``ap_dyglib_batch``; -0.002 and -0.004 on UCI and Enron scored in the view) and the
historical-negative AP from -0.054 (Enron) to +0.09 (US Legis.) (benchmarks/RESULTS.md, "DyGLib's training
negatives (#36)").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.train import ChronologicalSplit, OnlineTrainer, TrainConfig, fit_offline
from streamgnn.train.metrics import LinkMetrics, batch_mean_metrics

STRATEGIES = ("random", "historical", "inductive")
TEST_SEED = 2  # DyGLib's test sampler's seed (validation's is 0)
# TPNet (Lu et al., NeurIPS 2024), transductive test AP: Table 1 (random), Table 7 (historical); our names.
# As issue 36 quotes them; Can. Parl.'s, UN Trade's, UN Vote's and Contacts' were not found (TPNet's
# repository holds no results).
TPNET_AP = {
    "random": {
        "collegemsg": 0.9735, "enron": 0.9290, "jodie_wikipedia": 0.9932, "uslegis": 0.8058, "mooc": 0.9639,
        "lastfm": 0.9450, "reddit": 0.9927, "socialevo": 0.9473, "flights": 0.9893,
    },
    "historical": {"collegemsg": 0.8634, "enron": 0.8079, "mooc": 0.9269, "lastfm": 0.8774},
}  # fmt: skip


# The published tables' names of our streams: a summary key names a stream as the tables do (``ap_dyglib_uci``
# is CollegeMsg, the very stream DyGLib calls UCI); a run's "stream" keeps our dataset name.
PUBLISHED = {"collegemsg": "uci", "jodie_wikipedia": "wikipedia"}


def published(stream: str) -> str:
    """The name DyGLib's and TPNet's tables give ``stream`` (our dataset name where they use the same)."""
    return PUBLISHED.get(stream, stream)


class NegativeEdgeSampler:
    """DyGLib's negative edges for one evaluation part (module docstring), over the whole stream's
    ``src``, ``dst`` and (sorted) times ``t``; ``last_observed``: the end of what the model saw before
    the part (the "inductive" strategy leaves out every edge up to it). ``reset()`` before each pass, so
    every pass draws the same negatives."""

    def __init__(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        t: np.ndarray,
        strategy: str = "random",
        last_observed: float | None = None,
        seed: int = TEST_SEED,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ConfigError(f"negative strategy must be one of {STRATEGIES}, got {strategy!r}")
        if strategy == "inductive" and last_observed is None:
            raise ConfigError("the inductive strategy needs last_observed (the end of validation)")
        t = np.asarray(t, np.float64)
        if len(t) == 0 or np.any(np.diff(t) < 0):
            raise ConfigError("NegativeEdgeSampler needs a non-empty stream sorted by time")
        self.strategy, self.seed, self.t = strategy, seed, t
        self.sources, src_i = np.unique(np.asarray(src), return_inverse=True)
        self.destinations, dst_i = np.unique(np.asarray(dst), return_inverse=True)
        self.codes = src_i.astype(np.int64) * len(self.destinations) + dst_i  # one integer per (src, dst)
        observed = t <= last_observed if last_observed is not None else np.zeros(len(t), bool)
        self.observed = np.unique(self.codes[observed])
        self.reset()

    def reset(self) -> None:
        self.rng = np.random.RandomState(self.seed)

    def sample(
        self, batch_src: np.ndarray, batch_dst: np.ndarray, start: float, end: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(neg_src, neg_dst)``, one per positive ``(batch_src[i], batch_dst[i])`` of a batch whose
        times span ``[start, end]``."""
        size = len(batch_src)
        if self.strategy == "random":
            self.rng.randint(0, len(self.sources), size)  # DyGLib draws a source too and drops it
            return np.asarray(batch_src), self.destinations[self.rng.randint(0, len(self.destinations), size)]
        before = self.codes[: np.searchsorted(self.t, start, side="right")]
        current = self.codes[
            np.searchsorted(self.t, start, side="left") : np.searchsorted(self.t, end, "right")
        ]
        pool = np.setdiff1d(np.unique(before), current)
        if self.strategy == "inductive":
            pool = np.setdiff1d(pool, self.observed)
        if size <= len(pool):
            return self._pairs(pool[self.rng.choice(len(pool), size=size, replace=False)])
        fill = self._random_pairs(size - len(pool), self._code_of(batch_src, batch_dst))
        return self._pairs(np.concatenate([fill, pool]))

    def _random_pairs(self, size: int, exclude: np.ndarray) -> np.ndarray:
        """``size`` codes drawn uniformly among every (source, destination) pair less ``exclude``, without
        replacement unless fewer exist."""
        exclude = np.unique(exclude)
        allowed = len(self.sources) * len(self.destinations) - len(exclude)
        if allowed <= 0:
            raise ConfigError("no negative edge exists: every pair of the stream is a positive of the batch")
        ranks = self.rng.choice(allowed, size=size, replace=allowed < size)
        # the k-th allowed code is k plus the excluded codes at or below it
        return ranks + np.searchsorted(exclude - np.arange(len(exclude)), ranks, side="right")

    def _code_of(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        s = np.searchsorted(self.sources, src)
        d = np.searchsorted(self.destinations, dst)
        s, d = np.minimum(s, len(self.sources) - 1), np.minimum(d, len(self.destinations) - 1)
        known = (self.sources[s] == src) & (self.destinations[d] == dst)
        return (s * len(self.destinations) + d)[known]

    def _pairs(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        codes = codes.astype(np.int64)
        return self.sources[codes // len(self.destinations)], self.destinations[
            codes % len(self.destinations)
        ]


def batch_keys(n: int, parts: ChronologicalSplit, batch_size: int) -> np.ndarray:
    """Each of ``n`` events' place in the protocol's schedule: training batches, then the held-out edges
    (joined after training), validation's batches, then the test's, in order (``int64 [n]``)."""
    keys = np.zeros(n, np.int64)
    base = 0
    for rows in (parts.train, parts.held_out, parts.val, parts.test):
        rows = np.sort(rows)
        keys[rows] = base + np.arange(len(rows)) // batch_size
        base += -(-len(rows) // batch_size) + 1
    return keys


def break_ties(t: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``t`` (sorted) with the events of one time in different batches (``keys``) apart: each later batch's
    share of a time a little later (a thousandth of a time unit per batch, less where the next time is
    closer: always before it), a batch's own events still tied. Our store reads strictly before a time,
    DyGLib's models read every earlier batch (memory, TPNet's walk matrices) whatever its time: this makes
    the two agree where a stream has few times (US Legis.: one per Congress, 5,000 events each, in 25
    batches). The order is kept; a batch's events sit where they were (module docstring)."""
    t = np.asarray(t, np.float64)
    order = np.lexsort((keys, t))
    ts, ks = t[order], keys[order]
    new_time = np.r_[True, ts[1:] != ts[:-1]]
    step = np.r_[False, ks[1:] != ks[:-1]] & ~new_time
    rank = np.cumsum(step) - np.maximum.accumulate(np.where(new_time, np.cumsum(step), 0))
    if not rank.any():
        return t
    gaps = np.diff(np.unique(ts))
    delta = min(1e-3, float(gaps.min()) / (rank.max() + 1) if len(gaps) else 1e-3)
    out = np.empty_like(t)
    out[order] = ts + delta * rank
    moved = out[order]
    if np.any((np.diff(moved) <= 0) & (np.diff(rank) > 0)):
        raise ConfigError(
            f"times up to {ts[-1]:g} are too large to part the batches that share one by {delta:g}: "
            "rebase the stream's times"
        )
    return out


def split(events: EventBatch) -> ChronologicalSplit:
    """DyGLib's split (time quantiles, 10% of the nodes withheld from training)."""
    return ChronologicalSplit.make(events, by_time=True, new_node_fraction=0.1)


def random_negatives(events: EventBatch, rows: np.ndarray, batch_size: int) -> np.ndarray:
    """``[len(rows), 1]`` DyGLib random negative destinations of the test part ``rows``, batch by batch as
    the test is scored: ``fit_offline(test_negatives=...)`` scores them with the positive's source."""
    sampler = NegativeEdgeSampler(events.src, events.dst, events.t, "random")
    out = [
        sampler.sample(events.src[rows[lo : lo + batch_size]], None, 0.0, 0.0)[1]
        for lo in range(0, len(rows), batch_size)
    ]
    return np.concatenate(out)[:, None] if out else np.zeros((0, 1), events.dst.dtype)


def random_test(
    events: EventBatch, negatives: np.ndarray, batch_size: int
) -> Callable[[OnlineTrainer, np.ndarray], LinkMetrics]:
    """A ``fit_offline(test_by=...)`` protocol: the test part against ``negatives`` (``random_negatives``:
    destinations, the positive's source kept), batch by batch from the store that already holds the part,
    each event at its own time (DyGLib's view, module docstring); memory updated by each batch after it
    is scored."""

    def protocol(trainer: OnlineTrainer, rows: np.ndarray) -> LinkMetrics:
        parts = []
        for lo in range(0, len(rows), batch_size):
            batch, neg = events.take(rows[lo : lo + batch_size]), negatives[lo : lo + batch_size]
            res = trainer.step(batch, train=False, ingest=False, negatives=neg, query_time="event")
            parts.append((res.pos, res.neg, np.full(len(res.pos), np.nan)))
        return batch_mean_metrics(parts)

    return protocol


def edge_negatives_test(
    events: EventBatch, strategy: str, last_observed: float, batch_size: int, timed: EventBatch
) -> Callable[[OnlineTrainer, np.ndarray], LinkMetrics]:
    """A ``fit_offline(test_by=...)`` protocol: the test part scored against DyGLib's ``strategy``
    negative edges (``last_observed``: the end of validation), which replace the source too. Per batch,
    as DyGLib's evaluation: the negatives are scored first, from the state before the batch, then the
    positives, which update memory; each event at its own time (DyGLib's view, module docstring). The
    negatives are drawn by ``events``' times, the batches scored at ``timed``'s (``break_ties``)."""
    sampler = NegativeEdgeSampler(events.src, events.dst, events.t, strategy, last_observed)

    def protocol(trainer: OnlineTrainer, rows: np.ndarray) -> LinkMetrics:
        sampler.reset()
        parts = []
        for lo in range(0, len(rows), batch_size):
            batch, times = timed.take(rows[lo : lo + batch_size]), events.t[rows[lo : lo + batch_size]]
            neg_src, neg_dst = sampler.sample(batch.src, batch.dst, times[0], times[-1])
            neg = trainer.score_pairs(neg_src, neg_dst, batch.t, query_time="event")
            res = trainer.step(
                batch, train=False, ingest=False, negatives=neg_dst[:, None], query_time="event"
            )
            parts.append((res.pos, neg[np.isin(batch.eid, res.eid)], np.full(len(res.pos), np.nan)))
        return batch_mean_metrics(parts)

    return protocol


def run_stream(
    name: str,
    events: EventBatch,
    config: TrainConfig,
    strategies: list[str],
    epochs: int,
    patience: int | None,
    sees_batch: bool = True,
) -> dict:
    """One seed (``config.seed``) of our model on ``events`` under DyGLib's protocol: test AP and AUC
    against each of ``strategies``' negatives (random always; ``ap_dyglib_batch``: random, each batch from
    the state before it, the test part's own pass, where EdgeBank is scored beside ours), epochs trained and
    the best. ``sees_batch``: train in DyGLib's view too (``fit_offline``'s; the default)."""
    parts = split(events)
    if not (len(parts.train) and len(parts.val) and len(parts.test)):
        raise ConfigError(
            f"{name}: DyGLib's time split of these {len(events):,} events (times "
            f"{events.t[0]:g}..{events.t[-1]:g}) leaves a part empty: too few distinct times (a --quick "
            "or --events prefix of a stream with one time per year or Congress); run it whole"
        )
    bs = config.batch_size
    last_observed = float(events.t[parts.val].max())
    edge_kinds = [s for s in dict.fromkeys(strategies) if s != "random"]
    negatives = random_negatives(events, parts.test, bs)
    timed = dataclasses.replace(events, t=break_ties(events.t, batch_keys(len(events), parts, bs)))
    tests = {"random": random_test(timed, negatives, bs)}
    tests.update({s: edge_negatives_test(events, s, last_observed, bs, timed) for s in edge_kinds})
    result = fit_offline(
        timed, config, epochs=epochs, patience=patience, split=parts, test_negatives=negatives,
        test_by=tests, score_val=False, sees_batch=sees_batch,
    )  # fmt: skip
    run = {
        "stream": name, "seed": config.seed, "events": len(events), "test_events": len(parts.test),
        "ap_dyglib": result.test_with["random"].ap, "auc_dyglib": result.test_with["random"].auc,
        "ap_dyglib_batch": result.test.ap, "auc_dyglib_batch": result.test.auc,
        "epochs": result.epochs, "best_epoch": result.best_epoch, "val_ap_per_epoch": result.val_ap_per_epoch,
    }  # fmt: skip
    for base, scores in result.baselines.items():
        run[f"ap_dyglib_{base}"], run[f"auc_dyglib_{base}"] = scores["test"].ap, scores["test"].auc
    for kind in edge_kinds:
        run[f"ap_dyglib_{kind}"] = result.test_with[kind].ap
        run[f"auc_dyglib_{kind}"] = result.test_with[kind].auc
    return run


def summarize(runs: list[dict]) -> dict:
    """Per-stream means over seeds (``ap_dyglib_<name>``, ..., ``<name>`` the published tables' name of the
    stream: ``published``) and ``worst_gap_to_tpnet``: the largest TPNet-minus-ours AP over the streams and
    negative kinds TPNet published (None where none was run)."""
    out: dict = {}
    gaps = []
    for stream in dict.fromkeys(r["stream"] for r in runs):
        mine = [r for r in runs if r["stream"] == stream]
        name = published(stream)
        metrics = [k for k in mine[0] if k.startswith(("ap_", "auc_")) or k in ("epochs", "best_epoch")]
        for m in metrics:
            out[f"{m}_{name}"] = float(np.mean([r[m] for r in mine]))
        out[f"events_{name}"] = mine[0]["events"]
        for kind, table in TPNET_AP.items():
            key = "ap_dyglib" if kind == "random" else f"ap_dyglib_{kind}"
            if stream in table and key in mine[0]:
                out[f"tpnet_{key}_{name}"] = table[stream]
                gaps.append(table[stream] - out[f"{key}_{name}"])
    out["worst_gap_to_tpnet"] = max(gaps) if gaps else None
    out["runs"] = runs
    return out
