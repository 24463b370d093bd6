"""Labelled tasks: node and edge labels of the bundled streams, our model's embeddings through a task head,
beside the baselines on the same chronological 70/15/15 split.

python benchmarks/tasks.py [--quick] [--json] [--epochs N] [--seeds 0 1] [--streams NAME ...]
                           [--joint-weights 0 1 ...] [--replay-batches 200 20 ...]
                           [--head-penalties 1e-4 ...] [--head-loss balanced|unweighted]
                           [--head-other-end | --no-head-other-end]
(also: streamgnn bench tasks)

Tasks (``streamgnn.tasks``):
- JODIE Wikipedia ban prediction (dynamic node classification, the TGN/DyGLib protocol): each edit's
  ``label`` (1: the editor was banned after it) predicted from the editor's embedding as of the edit; test
  AUC-ROC, ``auc_wikipedia_ban``.
- Bitcoin OTC and Alpha rating sign at arrival (edge classification): whether a new rating is positive,
  from the rater's and the ratee's embeddings just before it; test AUC-ROC, ``auc_sign_bitcoin_otc`` and
  ``auc_sign_bitcoin_alpha``. Past ratings (rating / 10) are the model's 1-d edge features: its memory
  reads the ratings a node gave and received, never the one being predicted.

- Travian alliances as node affinity (TGB's node property prediction; ``tasks_affinity``): how a player's
  next day's attacks, messages and trades are shared among alliances; test NDCG@10,
  ``ndcg10_travian_alliance``, beside TGB's persistence and moving average (its own protocol, below).

Ours: the default model (``TrainConfig()``'s, batch 200, Adam 1e-4) trained on link prediction over the
training period's events for ``--epochs`` passes, then frozen; the stream is replayed and each label's
embedding is taken before its event's batch is ingested (``tasks.stream``); a staged task head over the
embedding and the label's causal stream features (``tasks.head``: a logistic regression on the features,
then an MLP of 80 units over them, then one over everything; ``tasks.evaluate`` says why) is trained on
the training labels with the task's loss (node classification: DyGLib's plain one; the rating signs:
classes weighing the same; ``Task.balanced``), each stage's epoch picked by validation AUC (a stage that
improves nothing is left out), and scored on test (``stages_<task>``: the validation AUC after each);
``auc_<task>_embeddings`` and ``auc_<task>_features_mlp`` are the same head over the embeddings alone
and over the stream features alone (ablations of ours: what each input adds; not baselines). Beside
them, on the same rows (keys ``auc_<task>_<baseline>``): ``majority`` (a constant: 0.5), ``persistence``
(the node's last label before; for a rating, the ratee's last rating's sign), ``features`` (a logistic
regression on causal stream features: degree, decayed activity, recency of each end, the pair's count and,
for ratings, the reputation features) and, for ratings, ``reputation`` (a logistic regression on the
rater's past mean rating given and the ratee's past mean received alone). ``margin_<task>`` is ours minus
the best baseline. Figures are means over ``--seeds``; ``runs`` holds each seed's, with AP, validation
figures and the split's sizes. ``--quick``: the first 4,000 events of each stream, 1 epoch, seed 0 (smoke
values: Wikipedia's first 4,000 edits hold 6 bans, so its AUC there is noise; Travian is thinned to
every k-th event instead, all 30 days).

``--joint-weights 0 1 3``: the model is pretrained once per weight, jointly with the task's loss on the
training labels at that weight (``tasks.joint``; 0: link prediction alone), and ours is, per seed, the run
whose validation AUC is highest (keys ``auc_<task>_joint_<w>``, ``val_auc_<task>_joint_<w>``,
``cpu_seconds_<task>_joint_<w>``, ``joint_chosen_<task>``).

``--replay-batches 200 20``: each seed's model, trained at batches of 200, embeds the labels from a
replay at each size (``tasks.stream.embed_at_labels``: the state before a batch holds none of its earlier
events, on Wikipedia often the editor's previous edit); ours is, per seed, the size whose head scores
best on validation (keys ``auc_<task>_replay_<b>``, ``val_auc_<task>_replay_<b>``,
``auc_<task>_embeddings_replay_<b>``, ``replay_chosen_<task>``).

``--head-penalties 1e-5 1e-4 1e-3 1e-2``: beside the staged head, a linear head over the embedding and
the stream features at once, L2-regularised at each penalty (``tasks.protocol.fit_linear``); ours is, per
seed, whichever head scores best on validation (their validation figures: ``stages_<task>``,
``linear_all_<penalty>``). ``--head-loss balanced|unweighted``: ours' head with classes weighing the
same or the plain loss, whatever the task's protocol says (the baselines' stay balanced). Where a node
label is read from an edge event (Wikipedia), ours' head reads that event's other end's embedding beside
the node's (the edited page beside the editor; ``Labels.other_end``, ``tasks.evaluate``);
``--no-head-other-end`` leaves it out, ``--head-other-end`` is refused for streams whose labels have
none. The baselines' inputs are the same either way.

How far from noise (binary labels): ``spread_auc_<task>[_<baseline>]`` (max - min over seeds),
``auc_se_<task>`` (ours' test AUC's standard error) and ``auc_diff_se_<task>_<baseline>`` (that of ours
minus the baseline on the same test rows), means over seeds, by DeLong's covariance
(``tasks.metrics.auc_delong``).

Published (quoted, not rerun): dynamic node classification AUC-ROC on JODIE Wikipedia with its 172-d LIWC
edge features, which the bundled dataset does not ship (``published_auc_wikipedia_ban``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass

import numpy as np

try:
    from . import tasks_affinity as affinity
    from .common import report, set_threads
except ImportError:  # run as a script
    import tasks_affinity as affinity
    from common import report, set_threads

from streamgnn.cli._args import positive_int
from streamgnn.datasets import load, load_labels
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.tasks import EdgeClassification, HeadConfig, Labels, NodeClassification, Task, evaluate
from streamgnn.train import TrainConfig

BATCH_SIZE = 200
QUICK_EVENTS = 4_000
# Transcribed from the papers' node classification tables (not re-checked against the PDFs when added;
# DyGLib's paper is not stored here and its README holds no table).
PUBLISHED = {
    "TGN-attn (Rossi et al. 2020, Table 3; with edge features)": 0.8781,
    "JODIE (DyGLib, Yu et al. 2023; with edge features)": 0.8899,
    "DyRep (DyGLib, Yu et al. 2023; with edge features)": 0.8639,
    "TGAT (DyGLib, Yu et al. 2023; with edge features)": 0.8409,
    "TGN (DyGLib, Yu et al. 2023; with edge features)": 0.8638,
    "GraphMixer (DyGLib, Yu et al. 2023; with edge features)": 0.8680,
    "DyGFormer (DyGLib, Yu et al. 2023; with edge features)": 0.8744,
}


@dataclass(frozen=True)
class Stream:
    """A bundled dataset as a labelled task: ``key`` names its figures (``auc_<key>``)."""

    dataset: str
    key: str
    task: Task
    ratings: bool  # the events' weights are ratings: the labels are their signs, the model's edge features


STREAMS = {
    "jodie_wikipedia": Stream("jodie_wikipedia", "wikipedia_ban", NodeClassification(), False),
    "bitcoin_otc": Stream("bitcoin_otc", "sign_bitcoin_otc", EdgeClassification(), True),
    "bitcoin_alpha": Stream("bitcoin_alpha", "sign_bitcoin_alpha", EdgeClassification(), True),
}
BASELINES = ("majority", "persistence", "features", "reputation")


def prepare(stream: Stream, events: int | None) -> tuple[EventBatch, Labels]:
    """The stream in time order (its first ``events``), times from 0, and its labels: the ban column on
    each edit's editor, or each rating's sign on its edge (ratings / 10 as the events' one feature)."""
    raw = load(stream.dataset)
    n = len(raw) if events is None else min(events, len(raw))
    raw = raw.take(slice(0, n))  # load() is already stably sorted by time
    t = raw.t - raw.t.min()
    if stream.ratings:
        weight = raw.weight
        feats = (weight / 10.0).reshape(-1, 1)
        ev = EventBatch.from_columns(
            src=raw.src, dst=raw.dst, t=t, eid=np.arange(n), weight=weight, features=feats
        )
        return ev, Labels.of_events(ev, (weight > 0).astype(np.int64), on_edges=True)
    ev = EventBatch.from_columns(src=raw.src, dst=raw.dst, t=t, eid=np.arange(n))
    return ev, Labels.of_events(ev, load_labels(stream.dataset)[:n].astype(np.int64), on_edges=False)


def run_stream(
    stream: Stream,
    events: EventBatch,
    labels: Labels,
    seed: int,
    epochs: int,
    joint_weight: float = 0.0,
    replay_batches: tuple[int, ...] = (),
    penalties: tuple[float, ...] = (),
    balanced: bool | None = None,
    other_end: bool | None = None,
) -> dict:
    """One seed of ours and the baselines on one stream: test AUC/AP, validation AUC, sizes, seconds;
    ``joint_weight``: the model pretrained jointly with the task's loss at that weight (0: link alone);
    ``replay_batches``: the labels embedded at each replay batch size, ours the best on validation;
    ``penalties``: the linear heads over every input tried beside the staged one; ``balanced``: classes
    weigh the same in ours' loss (``HeadConfig``; None: as the task says; the baselines' stay balanced);
    ``other_end``: ours' head reads each node label's event's other end's embedding too (``evaluate``'s;
    None: wherever the labels carry one)."""
    model = TGNConfig(edge_feature_dim=1 if stream.ratings else 0)
    config = TrainConfig(batch_size=BATCH_SIZE, seed=seed, model=model)
    started, cpu = time.perf_counter(), time.process_time()
    head = HeadConfig(seed=seed, penalties=penalties, balanced=balanced)
    result = evaluate(
        stream.task, events, labels, config, epochs=epochs, head=head,
        joint_weight=joint_weight, replay_batches=replay_batches, other_end=other_end,
    )  # fmt: skip
    run = {
        "stream": stream.dataset, "seed": seed, "events": len(events), "joint_weight": joint_weight,
        "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
        "auc": result.ours.test["auc"], "ap": result.ours.test["ap"], "val_auc": result.ours.val["auc"],
        "auc_embeddings": result.embeddings_only.test["auc"],
        "auc_features_mlp": result.features_only.test["auc"],
        "head_epochs": result.ours.epochs, "val_auc_stages": result.ours.stages,
        "link_loss": result.link_loss, **result.sizes, "replay_batch": result.replay_batch,
        "replay": {
            size: {"auc": o.test["auc"], "val_auc": o.val["auc"], "auc_embeddings": e.test["auc"]}
            for size, (o, e) in result.replay.items()
        },
        "auc_se": result.test_se, "auc_diff_se": result.diff_se,
    }  # fmt: skip
    for name, figures in result.baselines.items():
        run[f"auc_{name}"], run[f"ap_{name}"] = figures["auc"], figures["ap"]
        run[f"val_auc_{name}"] = result.baselines_val[name]["auc"]
    return run


def summarize(runs: list[dict]) -> dict:
    """Per task: the mean over seeds of ours (``auc_<key>``) and of each baseline (``auc_<key>_<name>``),
    ``margin_<key>`` (ours minus the best baseline), and every run. Where a seed ran at several joint
    weights, ours is its run of the best validation AUC (``chosen``); each weight's own means are
    ``auc_<key>_joint_<w>`` and ``val_auc_<key>_joint_<w>``, the weights chosen ``joint_chosen_<key>``."""
    out: dict = {}
    for stream in STREAMS.values():
        every = [r for r in runs if r["stream"] == stream.dataset]
        if not every:
            continue
        key = stream.key
        mine = chosen(every)
        weights = sorted({r.get("joint_weight", 0.0) for r in every})
        if len(weights) > 1:
            for w in weights:
                at = [r for r in every if r.get("joint_weight", 0.0) == w]
                out[f"auc_{key}_joint_{w:g}"] = _mean([r["auc"] for r in at])
                out[f"val_auc_{key}_joint_{w:g}"] = _mean([r["val_auc"] for r in at])
                out[f"cpu_seconds_{key}_joint_{w:g}"] = _mean([r.get("cpu_seconds", math.nan) for r in at])
            out[f"joint_chosen_{key}"] = [r.get("joint_weight", 0.0) for r in mine]
        out[f"auc_{key}"] = _mean([r["auc"] for r in mine])
        out[f"ap_{key}"] = _mean([r["ap"] for r in mine])
        out[f"auc_{key}_embeddings"] = _mean([r["auc_embeddings"] for r in mine])
        out[f"auc_{key}_features_mlp"] = _mean([r["auc_features_mlp"] for r in mine])
        names = [b for b in BASELINES if f"auc_{b}" in mine[0]]
        for b in names:
            out[f"auc_{key}_{b}"] = _mean([r[f"auc_{b}"] for r in mine])
        best = max(
            (out[f"auc_{key}_{b}"] for b in names),
            default=math.nan,
            key=lambda v: -math.inf if math.isnan(v) else v,
        )
        out[f"margin_{key}"] = out[f"auc_{key}"] - best
        out[f"stages_{key}"] = {
            stage: _mean([r["val_auc_stages"].get(stage, math.nan) for r in mine])
            for stage in mine[0]["val_auc_stages"]
        }
        out[f"test_positive_{key}"] = mine[0]["test_positive"]
        out.update(noise(key, mine, ["", *(f"_{b}" for b in names)]))
        out[f"events_{key}"] = mine[0]["events"]
    out["runs"] = runs
    return out


def noise(key: str, mine: list[dict], suffixes: list[str]) -> dict:
    """How far the figures are from noise: the spread over seeds (max - min) of ours and of each
    baseline (``spread_auc_<key><suffix>``), the mean standard error of ours' test AUC and of ours minus
    each baseline on the same rows (``auc_se_<key>``, ``auc_diff_se_<key>_<baseline>``; DeLong); and,
    where several replay batch sizes were tried, each one's means (``auc_<key>_replay_<b>``, its validation
    and embeddings-alone figures) and the sizes validation picked (``replay_chosen_<key>``)."""
    out: dict = {}
    for suffix in suffixes:
        values = [r[f"auc{suffix}"] for r in mine if math.isfinite(r[f"auc{suffix}"])]
        out[f"spread_auc_{key}{suffix}"] = max(values) - min(values) if values else math.nan
    if mine[0].get("auc_se"):
        out[f"auc_se_{key}"] = _mean([r["auc_se"]["ours"] for r in mine])
        for name in mine[0]["auc_diff_se"]:
            out[f"auc_diff_se_{key}_{name}"] = _mean([r["auc_diff_se"][name] for r in mine])
    sizes = list(mine[0].get("replay", {}))
    if len(sizes) > 1:
        for size in sizes:
            for figure, name in (("auc", "auc_"), ("val_auc", "val_auc_"), ("auc_embeddings", "auc_")):
                at = [r["replay"][size][figure] for r in mine]
                suffix = "_embeddings" if figure == "auc_embeddings" else ""
                out[f"{name}{key}{suffix}_replay_{size}"] = _mean(at)
        out[f"replay_chosen_{key}"] = [r["replay_batch"] for r in mine]
    return out


def chosen(runs: list[dict]) -> list[dict]:
    """Each seed's run of the highest validation AUC of ours (the first on a tie): the joint weight is
    picked on validation, never on test."""
    best: dict[int, dict] = {}
    for r in runs:
        val = r["val_auc"] if math.isfinite(r["val_auc"]) else -math.inf
        kept = best.get(r["seed"])
        if kept is None or val > (kept["val_auc"] if math.isfinite(kept["val_auc"]) else -math.inf):
            best[r["seed"]] = r
    return [best[s] for s in sorted(best)]


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan


def _parser() -> argparse.ArgumentParser:
    """``bench tasks``' options (``main`` checks the combinations)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    quick = f"the first {QUICK_EVENTS:,} events of each stream, 1 epoch, seed 0"
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--epochs", type=positive_int, help="link pretraining passes (default 3; 1 with --quick)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="e.g. --seeds 0 1 (default 0)")
    names = [*STREAMS, affinity.KEY]
    ap.add_argument("--streams", nargs="+", choices=names, default=names, help="e.g. bitcoin_otc")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch and Numba threads")
    ap.add_argument("--events", type=positive_int, default=None, help="cap each stream at its first N events")
    ap.add_argument(
        "--joint-weights", type=float, nargs="+", default=[0.0],
        help="pretrain at each task-loss weight (0: link prediction alone); ours is each seed's best on "
        "validation (default: 0)",
    )  # fmt: skip
    ap.add_argument(
        "--replay-batches", type=positive_int, nargs="+", default=[BATCH_SIZE],
        help="embed the labels from a replay in batches of each size (the model trained at "
        f"{BATCH_SIZE}); ours is each seed's best on validation (default: {BATCH_SIZE})",
    )  # fmt: skip
    ap.add_argument(
        "--head-penalties", type=float, nargs="*", default=[],
        help="also fit a linear head over the embedding and the stream features at once at each L2 "
        "penalty; ours is each seed's best head on validation (default: none, the staged head alone)",
    )  # fmt: skip
    ap.add_argument(
        "--head-loss", choices=("balanced", "unweighted"), default=None,
        help="ours' head with classes weighing the same, or the plain loss (DyGLib's); default: the "
        "task's (node classification unweighted, rating signs balanced); the baselines stay balanced",
    )  # fmt: skip
    ap.add_argument(
        "--head-other-end", action=argparse.BooleanOptionalAction, default=None,
        help="ours' head reads the embedding of each node label's event's other end (Wikipedia: the "
        "edited page) beside the node's; default: wherever the labels carry one",
    )  # fmt: skip
    return ap


def _headline(streams: list[str], joint_weights: list[float], travian: bool) -> dict[str, str]:
    """The summary's headline keys, each with what it means, for the streams run."""
    headline = {}
    if travian:
        headline.update(affinity.HEADLINE)
    for name in streams:
        if name == affinity.KEY:
            continue
        key = STREAMS[name].key
        headline[f"auc_{key}"] = f"test AUC-ROC, ours, {name}"
        headline[f"auc_{key}_embeddings"] = f"test AUC-ROC, ours over the embeddings alone, {name}"
        headline[f"auc_{key}_features_mlp"] = f"test AUC-ROC, ours over the stream features alone, {name}"
        for b in BASELINES:
            headline[f"auc_{key}_{b}"] = f"test AUC-ROC, {b}, {name}"
        headline[f"margin_{key}"] = f"ours minus the best baseline, {name}"
        for w in joint_weights if len(joint_weights) > 1 else ():
            headline[f"auc_{key}_joint_{w:g}"] = (
                f"test AUC-ROC, ours pretrained at joint weight {w:g}, {name}"
            )
    return headline


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    edge_streams = [n for n in args.streams if n in STREAMS and STREAMS[n].task.on_edges]
    if args.head_other_end is True and (edge_streams or affinity.KEY in args.streams):
        refused = [*edge_streams, *([affinity.KEY] if affinity.KEY in args.streams else [])]
        ap.error(
            f"--head-other-end: only node labels read from edge events have another end; not {refused} "
            "(e.g. --streams jodie_wikipedia)"
        )
    if any(not 0 <= p < math.inf for p in args.head_penalties):
        ap.error(f"--head-penalties: each penalty must be a number >= 0, got {args.head_penalties}")
    if any(not 0 <= w < math.inf for w in args.joint_weights):
        ap.error(f"--joint-weights: each weight must be a number >= 0, got {args.joint_weights}")
    set_threads(args.threads)
    epochs = args.epochs or (1 if args.quick else 3)
    seeds = args.seeds or [0]
    cap = args.events or (QUICK_EVENTS if args.quick else None)
    runs, travian = [], []
    for name in args.streams:
        if name == affinity.KEY:
            travian = [affinity.run(cap, seed, epochs, BATCH_SIZE) for seed in seeds]
            continue
        stream = STREAMS[name]
        events, labels = prepare(stream, cap)
        runs += [
            run_stream(
                stream,
                events,
                labels,
                seed,
                epochs,
                w,
                tuple(args.replay_batches),
                tuple(args.head_penalties),
                None if args.head_loss is None else args.head_loss == "balanced",
                args.head_other_end,
            )
            for seed in seeds
            for w in args.joint_weights
        ]
    summary = summarize(runs)
    if travian:
        summary.update(affinity.summarize(travian, _mean))
        summary["runs"] += travian
    summary["published_auc_wikipedia_ban"] = dict(PUBLISHED)
    summary.update(epochs=epochs, seeds=seeds, threads=args.threads, joint_weights=args.joint_weights)
    summary["replay_batches"] = args.replay_batches
    summary["head_penalties"] = args.head_penalties
    summary["head_loss"] = args.head_loss
    summary["head_other_end"] = args.head_other_end
    headline = _headline(args.streams, args.joint_weights, bool(travian))
    report(
        summary,
        args.json,
        "tasks: node and edge labels, ours vs baselines (test AUC-ROC; Travian NDCG@10)",
        headline,
        args.quick,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
