"""Labelled tasks learned online by the live training job (issue 35): what a task head costs, and how
well it predicts each label before it has seen it.

For each stream (``tasks.py``'s: JODIE Wikipedia's bans on each edit's editor, Bitcoin OTC's and Alpha's
rating signs on each rating), the training job (``jobs.TrainJob``, test-then-train on every event) runs
twice on the same events, back to back: link prediction alone, then with the task (its labels from a
JSON-lines file, ``task.labels_file``). Reported:

- ``cost_ratio_<key>``: the job's seconds with the task over without (the issue's target: at most 1.3;
  medians over ``--repeats`` runs of each, alternating which goes first), with events per second;
  ``cpu_ratio_<key>`` the same of the CPU seconds the jobs used (on a loaded host, the cost itself);
  with ``--joint-weight W``, the job with the task trains the model jointly with its loss at ``W``
  (``task.joint_weight``; ``joint_weight`` in the JSON), so the ratios are the joint path's;
- ``auc_online_<key>``: the head's AUC-ROC on the test period's labels (the last 15% of the stream's
  time, as ``bench tasks`` splits it), each scored before the head learned from it, and ``auc_online_all_
  <key>`` over every label; ``auc_online_prior_<key>`` the running class share's;
- on the same test rows, the logistic regression on causal stream features (``auc_<key>_features``) and,
  for ratings, on the reputation features (``auc_<key>_reputation``), trained on the training part's labels
  as ``bench tasks`` trains them; an online logistic regression (``auc_online_<key>_features_lr``: the
  same online head, linear, over the stream features the live job keeps, scored before it learns on each
  batch of ``BATCH_SIZE`` labels); and ``margin_online_<key>``: the head minus the best of them;
- ``auc_online_fifths_<key>`` and ``auc_online_<key>_features_lr_fifths``: the AUC of the head's and the
  online regression's scores over each fifth of the labels, in time order (where over the stream either
  gains or falls behind).

With ``--sharded W`` the same two jobs run sharded instead (``train.sharding``, ``SHARD_PARTITIONS``
partitions), as ``W`` real gloo ranks on this host, back to back within each rank: what a task adds there is
one broadcast of the labels read, one embedding exchange and one gather of the head's inputs per batch with
labels due (``jobs.label_ranks``). Reported: ``sharded_cost_ratio_<key>`` (the slowest rank's median
seconds with the task over without: the ranks step in lockstep), ``sharded_cpu_ratio_<key>`` (all ranks'
CPU seconds), events per second of each, and ``sharded_auc_online_all_<key>`` (every label, as rank 0's
head scored it: each rank's head is the job's).

The head (``tasks.online``) is the staged one of ``bench tasks`` (a logistic regression on the stream
features, then MLPs over them and over the embeddings too), learned online: a few steps per batch with
class-balanced replay, answering with the stage whose recent prequential loss is lowest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    from .common import report, set_threads
    from .distributed import launch
    from .tasks import BATCH_SIZE, STREAMS, prepare
except ImportError:  # run as a script (a rank of --sharded)
    from common import report, set_threads
    from distributed import launch
    from tasks import BATCH_SIZE, STREAMS, prepare

from streamgnn.cli._args import positive_int
from streamgnn.jobs import TrainJob
from streamgnn.nn import TGNConfig
from streamgnn.shard import ShardConfig
from streamgnn.tasks import REPUTATION, Labels, LabelSplit, logistic_regression, stream_features
from streamgnn.tasks.config import TaskConfig
from streamgnn.tasks.live_features import LiveFeatures
from streamgnn.tasks.online import OnlineHead
from streamgnn.train import TrainConfig

QUICK_EVENTS = 4_000
QUICK_SHARDED_EVENTS = 2_000  # (--quick --sharded: each rank runs both jobs, under a minute in all)
SOURCE_BATCH = 10 * BATCH_SIZE
SHARD_PARTITIONS = 4
WARMUP_EVENTS = 3 * BATCH_SIZE


def write_labels(labels: Labels, path: Path) -> None:
    """``labels`` as the JSON lines a job reads (``tasks.admit``)."""
    with path.open("w") as out:
        for i in range(len(labels)):
            row = {"node": int(labels.node[i]), "t": float(labels.t[i]), "y": int(labels.y[i])}
            if labels.dst is not None:
                row["dst"] = int(labels.dst[i])
            out.write(json.dumps(row) + "\n")


def run_job(events, config: TrainConfig, task: TaskConfig | None) -> tuple[float, TrainJob, float]:
    """The job's wall seconds, the job, and its CPU seconds (this process's: one torch thread, so on a
    host shared with other work the CPU seconds are what the job itself cost, where the wall clock also
    counts the waits for a core)."""
    job = TrainJob(config, source=events.split(SOURCE_BATCH), task=task, log_every_s=3600)
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(sys.stderr):  # the job's status lines: stdout is the report's (--json)
        job.run(progress=False)
    return time.perf_counter() - started, job, time.process_time() - cpu


def both_jobs(
    events, labels: Labels, path: Path, seed: int, repeats: int, joint_weight: float = 0.0, sharding=None
) -> tuple[dict[str, float], TrainJob]:
    """The job on ``events`` without and with the task (its labels in ``path``), ``repeats`` times each,
    after an untimed warm-up on the first ``WARMUP_EVENTS``, alternating which runs first (a host whose load
    drifts favours neither): the medians of their wall and CPU seconds (``link_s``, ``task_s``,
    ``link_cpu``, ``task_cpu``) and the last job with the task."""
    kind = "edge_classification" if labels.on_edges else "node_classification"
    model = TGNConfig(edge_feature_dim=events.feature_dim or 0)
    config = TrainConfig(batch_size=BATCH_SIZE, seed=seed, model=model, serve_every=0, sharding=sharding)
    task_config = TaskConfig(kind=kind, labels_file=str(path), joint_weight=joint_weight)
    # untimed, first: the first job in a process pays its kernels' compiling or loading and torch's first
    # calls (at 1,200 events that put the ratio at 0.4 with the link job first)
    run_job(events.take(slice(0, WARMUP_EVENTS)), config, task_config)
    times: dict[str, list[float]] = {"link_s": [], "task_s": [], "link_cpu": [], "task_cpu": []}
    last = None
    for r in range(repeats):
        for with_task in (False, True) if r % 2 == 0 else (True, False):
            seconds, job, cpu = run_job(events, config, task_config if with_task else None)
            times["task_s" if with_task else "link_s"].append(seconds)
            times["task_cpu" if with_task else "link_cpu"].append(cpu)
            if with_task:
                last = job
    return {k: statistics.median(v) for k, v in times.items()}, last


def run_stream(
    name: str, cap: int | None, seed: int, folder: Path, repeats: int, joint_weight: float = 0.0
) -> dict:
    stream = STREAMS[name]
    events, labels = prepare(stream, cap)
    path = folder / f"{name}.jsonl"
    write_labels(labels, path)
    medians, job = both_jobs(events, labels, path, seed, repeats, joint_weight)
    link_s, task_s, link_cpu, task_cpu = (medians[k] for k in ("link_s", "task_s", "link_cpu", "task_cpu"))
    # (every run with the task scores alike: the same seed, every event learned)
    head = job.labelled.head
    t, y, score, prior = (np.concatenate(head.records[k]) for k in ("t", "y", "score", "prior"))
    if len(t) != len(labels) or not np.array_equal(t, labels.t):
        raise RuntimeError(f"{name}: the job scored {len(t)} of {len(labels)} labels")
    split = LabelSplit.by_time(labels, events.t)
    test = split.test
    key = stream.key
    task = head.task
    out = {
        f"events_{key}": len(events), f"labels_{key}": len(labels), f"test_labels_{key}": len(test),
        f"test_positive_{key}": int(np.sum(labels.y[test] == 1)),
        f"events_per_s_link_{key}": len(events) / link_s, f"events_per_s_task_{key}": len(events) / task_s,
        f"cost_ratio_{key}": task_s / link_s, f"cpu_ratio_{key}": task_cpu / link_cpu,
        f"auc_online_{key}": task.metrics(score[test], y[test])["auc"],
        f"auc_online_all_{key}": task.metrics(score, y)["auc"],
        f"auc_online_prior_{key}": task.metrics(prior[test], y[test])["auc"],
    }  # fmt: skip
    feats = stream_features(events, labels)
    baselines = {"features": feats.x}
    if REPUTATION[0] in feats.names:
        baselines["reputation"] = feats.select(REPUTATION)
    for base, x in baselines.items():
        scores = logistic_regression(task, x, labels, split, seed).scores
        out[f"auc_{key}_{base}"] = task.metrics(scores[test], labels.y[test])["auc"]
    lr = online_logistic_regression(task, feats, labels)
    out[f"auc_online_{key}_features_lr"] = task.metrics(lr[test], labels.y[test])["auc"]
    out[f"auc_online_fifths_{key}"] = fifths(task, score, y)
    out[f"auc_online_{key}_features_lr_fifths"] = fifths(task, lr, labels.y)
    best = max([out[f"auc_{key}_{b}"] for b in baselines] + [out[f"auc_online_{key}_features_lr"]])
    out[f"margin_online_{key}"] = out[f"auc_online_{key}"] - best
    return out


def sharded_stream(name: str, cap: int | None, seed: int, folder: Path, repeats: int, world: int) -> dict:
    """The two jobs sharded over ``world`` gloo ranks (module docstring): the ranks' seconds and the
    ratios, and every label's online AUC as rank 0's head scored it."""
    stream = STREAMS[name]
    _, labels = prepare(stream, cap)
    path = folder / f"{name}.jsonl"
    write_labels(labels, path)
    job = {"name": name, "cap": cap, "seed": seed, "labels": str(path), "repeats": repeats}
    ranks = launch(job, world, script=__file__)
    key = stream.key
    slowest = max(ranks, key=lambda r: r["link_s"] + r["task_s"])
    cpu = {k: sum(r[k] for r in ranks) for k in ("link_cpu", "task_cpu")}
    n = ranks[0]["events"]
    return {
        f"sharded_cost_ratio_{key}": slowest["task_s"] / slowest["link_s"],
        f"sharded_cpu_ratio_{key}": cpu["task_cpu"] / cpu["link_cpu"],
        f"sharded_events_per_s_link_{key}": n / slowest["link_s"],
        f"sharded_events_per_s_task_{key}": n / slowest["task_s"],
        f"sharded_auc_online_all_{key}": ranks[0]["auc"], f"sharded_labels_{key}": ranks[0]["scored"],
        f"sharded_scored_per_rank_{key}": [r["scored_here"] for r in ranks],
    }  # fmt: skip


def rank_worker(job: dict) -> dict:
    """One rank of ``sharded_stream``'s jobs (its own process, joined by the launcher's environment)."""
    set_threads(1)
    events, labels = prepare(STREAMS[job["name"]], job["cap"])
    sharding = ShardConfig(SHARD_PARTITIONS)
    medians, last = both_jobs(events, labels, Path(job["labels"]), job["seed"], job["repeats"], 0.0, sharding)
    head = last.labelled.head
    score, y = (np.concatenate(head.records[k]) for k in ("score", "y"))
    return {
        **medians, "events": len(events), "auc": head.task.metrics(score, y)["auc"], "scored": head.seen,
        "scored_here": last.labelled.scored_here,
    }  # fmt: skip


def fifths(task, scores: np.ndarray, y: np.ndarray) -> list[float]:
    """The AUC over each fifth of the labels, in time order."""
    edges = np.linspace(0, len(y), 6).astype(int)
    return [task.metrics(scores[a:b], y[a:b])["auc"] for a, b in zip(edges[:-1], edges[1:], strict=True)]


def online_logistic_regression(task, feats, labels: Labels) -> np.ndarray:
    """Every label's score by the online head, linear, over the stream features the live job keeps
    (``LiveFeatures``' names), each batch of ``BATCH_SIZE`` labels scored before it is learned."""
    names = LiveFeatures(86400.0, rated=REPUTATION[0] in feats.names).names(labels.on_edges)
    kind = "edge_classification" if labels.on_edges else "node_classification"
    head = OnlineHead(TaskConfig(kind=kind, labels_file="-", hidden=()), len(names), features=len(names))
    x, y, t = feats.select(names), labels.y, labels.t
    return np.concatenate([
        head.observe(x[i : i + BATCH_SIZE], y[i : i + BATCH_SIZE], t[i : i + BATCH_SIZE], learn=True)
        for i in range(0, len(labels), BATCH_SIZE)
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"the first {QUICK_EVENTS:,} events of each stream ({QUICK_SHARDED_EVENTS:,} sharded)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--streams", nargs="+", choices=list(STREAMS), default=list(STREAMS), help="e.g. bitcoin_otc"
    )
    ap.add_argument("--events", type=positive_int, default=None, help="cap each stream at its first N events")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--repeats", type=positive_int, default=1,
        help="runs of each job, alternating which goes first; the cost ratio is of their medians",
    )  # fmt: skip
    ap.add_argument("--threads", type=positive_int, default=1, help="torch and Numba threads")
    ap.add_argument(
        "--joint-weight", type=float, default=0.0,
        help="the job with the task trains the model jointly with the task's loss at this weight",
    )  # fmt: skip
    ap.add_argument(
        "--sharded", type=positive_int, default=None, metavar="W",
        help="run both jobs sharded over W gloo ranks on this host instead (the task's cost there)",
    )  # fmt: skip
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        Path(args.worker[1]).write_text(json.dumps(rank_worker(json.loads(args.worker[0]))))
        return 0
    if args.sharded and args.joint_weight:
        ap.error("--joint-weight with --sharded: the sharded job refuses joint training")
    set_threads(args.threads)
    cap = args.events or ((QUICK_SHARDED_EVENTS if args.sharded else QUICK_EVENTS) if args.quick else None)
    summary: dict = {
        "seed": args.seed, "threads": args.threads, "repeats": args.repeats, "joint_weight": args.joint_weight
    }  # fmt: skip
    summary["load_avg_1m_before"] = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        for name in args.streams:
            if args.sharded:
                summary["sharded_world"] = args.sharded
                summary.update(sharded_stream(name, cap, args.seed, Path(folder), args.repeats, args.sharded))
            else:
                summary.update(
                    run_stream(name, cap, args.seed, Path(folder), args.repeats, args.joint_weight)
                )
    summary["load_avg_1m_after"] = os.getloadavg()[0]
    headline = {}
    for name in args.streams:
        key = STREAMS[name].key
        if args.sharded:
            headline[f"sharded_cost_ratio_{key}"] = f"seconds with the task / link alone, sharded, {name}"
            headline[f"sharded_cpu_ratio_{key}"] = f"CPU seconds with the task / link alone, sharded, {name}"
            headline[f"sharded_auc_online_all_{key}"] = f"AUC-ROC of every label, online, sharded, {name}"
            continue
        headline[f"cost_ratio_{key}"] = f"seconds with the task / link prediction alone, {name}"
        headline[f"cpu_ratio_{key}"] = f"CPU seconds with the task / link prediction alone, {name}"
        headline[f"auc_online_{key}"] = (
            f"test AUC-ROC, online head (each label scored before learned), {name}"
        )
        headline[f"auc_{key}_features"] = f"test AUC-ROC, logistic regression on stream features, {name}"
        headline[f"auc_online_{key}_features_lr"] = f"test AUC-ROC, online logistic regression, {name}"
        headline[f"margin_online_{key}"] = f"online head minus the best baseline, {name}"
    report(summary, args.json, "tasks_online: labelled tasks learned by the live job", headline, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
