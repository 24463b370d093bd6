"""Sharded, partition-parallel training: W ranks (gloo, one thread each) against one, exact and
communication-free.

python benchmarks/distributed.py [--quick] [--json] [--worlds 1,2,4]      (also: streamgnn bench distributed)

Two measurements, each W ranks as real processes of one ``torch.distributed`` job on this machine:

- training, JODIE Wikipedia (a prefix with ``--quick``): ``ShardedTrainer`` test-then-train, the default
  model (TGN reading pair features; ``--tgn-only``: TGN alone, what this benchmark ran before), dims 100,
  batches of 200, 10 recent neighbors, 100 fixed-rule MRR negatives, each rank reading its own partitions of
  8. Train events/s over the batches after a warm-up (median of the ranks' rates; every rank processes every
  global batch), online AP/MRR over the whole run, data bytes each rank sends per batch (sampling, memory
  rows, batch agreement; gradients, the same in every mode, reported apart). At W=2, exact mode runs twice:
  vertices owned by hash of their id, and by Fennel's placement (the events carry it, as the partition
  router publishes them; ``ShardConfig(placement="stream")``): ``fennel_bytes_vs_hash`` compares their
  exchanged bytes per batch, with each placement's edge cut.
- bytes, the power-law stream of the sampler benchmark (10M events, 1M with ``--quick``): the stream goes
  through each rank's shard and memory (batches of 20,000, no training: memory rows are committed as in
  training), then each rank reports its bytes of store shard + memory rows + replicated index + negative
  history + walk-feature rows (brought to the whole stream by one read without queries) + the default
  baselines' held pairs (each rank's EdgeBanks keep the pairs of the sources it owns), from each part's
  own accounting. ``bytes_per_rank_vs_single``: the largest rank at W=2 over W=1.

Repeat ``i`` trains with seed ``i``: events/s are the median over repeats (ratios taken per repeat, within
one invocation, same host), AP/MRR the mean over the repeats' seeds (``<run>.ap_runs`` lists each), since one
seed's AP moves by tenths of a point when only the rounding changes (see RESULTS.md); the other figures come
from repeat 0. The load average is recorded before and after, since this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    from .common import report
except ImportError:  # run as a script
    from common import report

PARTITIONS = 8
WARMUP_BATCHES = 10
BATCH = 200
BYTES_BATCH = 20_000


def _stream(name: str, events: int):
    from streamgnn.datasets import load
    from streamgnn.events import EventBatch

    if name == "wikipedia":
        b = load("jodie_wikipedia")
        return b[:events] if events else b
    try:
        from .sampler import power_law_stream
    except ImportError:
        from sampler import power_law_stream
    s = power_law_stream(events)
    return EventBatch.from_columns(src=s.src, dst=s.dst, t=s.t, eid=np.arange(len(s.src)))


def worker(job: dict) -> dict:
    """One rank of one launch (its own process): training on Wikipedia, then (``bytes``) the power-law
    stream through a fresh trainer's shard and memory."""
    import numba
    import torch

    from streamgnn.train import init_distributed

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    dist = init_distributed()
    out = {"train": _train(job, dist)}
    if job["bytes_events"]:
        out["bytes"] = _bytes(job, dist)
    return out


def _trainer(job: dict, edge_dim: int, batch: int, dist, baselines: tuple[str, ...] = ()):
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig

    # dropout 0: its masks are drawn per tensor shape, which differs with the world size (see README)
    model = TGNConfig(memory_dim=100, time_dim=100, embedding_dim=100, num_neighbors=10,
                      edge_feature_dim=edge_dim, dropout=0.0, pair_features=job["pairs"])  # fmt: skip
    placement = "stream" if job["placement"] == "fennel" else "hash"
    sharding = ShardConfig(PARTITIONS, job["mode"], placement=placement)
    # training runs no baselines: the figures are the model's own exchange (each baseline adds 3 score
    # columns to it); the bytes run keeps the default ones, whose held pairs a rank's memory includes
    config = TrainConfig(
        model=model, batch_size=batch, serve_every=0, seed=job["seed"], sharding=sharding, baselines=baselines
    )
    return ShardedTrainer(config, dist=dist)


def _run(trainer, events, batch: int, train: bool) -> list[tuple[float, int]]:
    from streamgnn.shard import GlobalBatcher, PartitionedReplay

    source = PartitionedReplay(events, trainer.ownership, chunk=5 * batch)
    batcher = GlobalBatcher(source, trainer.ownership, trainer.exchange, batch)
    stamps = []
    while (b := batcher.next_batch()) is not None:
        trainer.step(b, train=train, score=train)
        stamps.append((time.perf_counter(), len(b), time.process_time()))
    return stamps


def fennel_placed(events):
    """``events`` as a Fennel partition router publishes them (its ``RoutingState``), in stream order, with
    the endpoints' partitions; and the edge cut."""
    from streamgnn.events import concat
    from streamgnn.jobs.routing import RoutingState

    state = RoutingState("fennel", PARTITIONS)
    out, _ = state.route(events)
    routed = concat([*out.values(), *state.flush().values()])
    return routed.take(np.argsort(routed.eid, kind="stable")), state.report().edge_cut


def _hash_cut(events) -> float:
    from streamgnn.partition import hash_partition

    return float((hash_partition(events.src, PARTITIONS) != hash_partition(events.dst, PARTITIONS)).mean())


def _train(job: dict, dist) -> dict:
    from streamgnn.train.distributed import entered

    events = _stream("wikipedia", job["events"])
    if job["placement"] == "fennel":
        events = fennel_placed(events)[0]
    trainer = _trainer(job, events.feature_dim or 0, BATCH, dist)
    before = sum(entered().values())
    stamps = _run(trainer, events, BATCH, train=True)
    collectives = sum(entered().values()) - before  # every one this rank entered: exchanges, reductions
    t0, c0 = stamps[WARMUP_BATCHES - 1][0], stamps[WARMUP_BATCHES - 1][2]
    timed = len(stamps) - WARMUP_BATCHES
    done = sum(s[1] for s in stamps[WARMUP_BATCHES:])
    trainer.metrics.close()
    m = trainer.metrics.summary()
    grads = sum(p.numel() * 4 for p in trainer.model.parameters())  # all-reduced each batch, in every mode
    return {
        "events_per_s": done / (stamps[-1][0] - t0), "ap": m.ap, "mrr": m.mrr, "steps": len(stamps),
        "sent": dict(trainer.exchange.sent), "grad_bytes": grads,
        "cpu_ms_per_batch": 1e3 * (stamps[-1][2] - c0) / timed,
        "collectives_per_batch": collectives / len(stamps),
    }  # fmt: skip


def _bytes(job: dict, dist) -> dict:
    from streamgnn.train import TrainConfig

    trainer = _trainer(job, 0, BYTES_BATCH, dist, baselines=TrainConfig().baselines)
    _run(trainer, _stream("powerlaw", job["bytes_events"]), BYTES_BATCH, train=False)
    if trainer.link_model.pairs is not None:  # no scoring read them: bring the walk rows to every event
        trainer.link_model.pairs.read([], [], [])  # but the newest time stamp's, as a training run holds them
    return trainer.nbytes()


def launch(job: dict, world: int, script: str = __file__) -> list[dict]:
    """``world`` processes of ``script --worker JOB OUT`` as the ranks of one gloo job on this host; what
    each wrote to its ``OUT`` (JSON), in rank order."""
    from streamgnn.connectors.broker import free_port

    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs, outs = [], []
        for r in range(world):
            out = Path(tmp) / f"r{r}.json"
            outs.append(out)
            env_r = {**env, "RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                     "MASTER_PORT": str(port)}  # fmt: skip
            cmd = [sys.executable, script, "--worker", json.dumps(job), str(out)]
            procs.append(subprocess.Popen(cmd, env=env_r, stderr=subprocess.PIPE, text=True))
        errors = [p.communicate()[1] for p in procs]
        for p, err in zip(procs, errors, strict=True):
            if p.returncode:
                raise RuntimeError(f"a rank failed ({job}, W={world}):\n{err[-3000:]}")
        return [json.loads(o.read_text()) for o in outs]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="Wikipedia prefix and a 1M-event stream (under 2 min)"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--worlds", default="1,2", help="world sizes to run, e.g. 1,2,4 (default 1,2)")
    ap.add_argument("--events", type=int, default=None, help="Wikipedia events to train on (default all)")
    ap.add_argument("--stream-events", type=int, default=None, help="power-law events (default 10M)")
    ap.add_argument(
        "--repeats", type=int, default=None, help="speed runs per world size (default 3, quick 1)"
    )
    ap.add_argument(
        "--tgn-only", action="store_true", help="TGN without pair features (the default model reads them)"
    )
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.events is not None and args.events <= WARMUP_BATCHES * BATCH:
        ap.error(
            f"--events {args.events}: the first {WARMUP_BATCHES} batches of {BATCH} are a warm-up, so "
            f"training speed needs more than {WARMUP_BATCHES * BATCH} events"
        )
    if args.worker:
        Path(args.worker[1]).write_text(json.dumps(worker(json.loads(args.worker[0]))))
        return 0
    worlds = [int(w) for w in args.worlds.split(",")]
    if 1 not in worlds or len(worlds) < 2:
        raise SystemExit("--worlds needs 1 and at least one more world size, e.g. 1,2")
    wiki = args.events or (12_000 if args.quick else 0)
    stream = args.stream_events or (1_000_000 if args.quick else 10_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    results: dict = {"load_avg_1m_before": os.getloadavg()[0], "partitions": PARTITIONS, "repeats": repeats,
                     "pair_features": not args.tgn_only}  # fmt: skip
    started = time.perf_counter()
    w = 2 if 2 in worlds else worlds[1]
    speed, quality = _run_all(results, worlds, w, wiki, stream, repeats, not args.tgn_only)
    _summarize(results, speed, quality, w)
    wiki_events = _stream("wikipedia", wiki)
    results["fennel_edge_cut"] = fennel_placed(wiki_events)[1]
    results["hash_edge_cut"] = _hash_cut(wiki_events)
    results["load_avg_1m_after"] = os.getloadavg()[0]
    results["wall_s"] = time.perf_counter() - started
    results["stream_events"] = stream
    headline = {
        f"events_per_s_w{w}_vs_w1": f"training speed, {w} ranks vs 1, JODIE Wikipedia (exact mode)",
        "ap_w1": "online AP, 1 rank, JODIE Wikipedia",
        f"ap_w{w}": f"online AP, {w} ranks exact, JODIE Wikipedia",
        "comm_free_ap": f"online AP, {w} ranks communication-free, JODIE Wikipedia",
        "comm_free_bytes_vs_exact": "bytes sent, communication-free vs exact, JODIE Wikipedia",
        "bytes_per_rank_vs_single": "largest rank's memory vs one process, {stream_events:,}-event power-law",
        "fennel_edge_cut": "Fennel edge cut, JODIE Wikipedia",
        "hash_edge_cut": "hash edge cut, JODIE Wikipedia",
    }
    report(results, args.json, "Sharded training: W ranks against one", headline, args.quick)
    return 0


def _run_all(results: dict, worlds: list[int], w: int, wiki: int, stream: int, repeats: int, pairs: bool):
    """Every run, ``repeats`` times: per-run figures into ``results``; returns the speeds by (world, tag)
    and the (AP, MRR) per repeat by tag."""
    speed: dict[tuple[int, str], list[float]] = {}
    quality: dict[str, list[tuple[float, float]]] = {}  # (AP, MRR) per repeat (= seed)
    runs = [(world, mode, "hash") for world in worlds for mode in ("exact", "comm_free")[: 1 + (world > 1)]]
    runs.append((w, "exact", "fennel"))
    for rep in range(repeats):  # W=1 and the others alternate, so load changes hit both alike
        for world, mode, placement in runs:
            job = {
                "events": wiki,
                "mode": mode,
                "placement": placement,
                "bytes_events": stream if rep == 0 and mode == "exact" and placement == "hash" else 0,
                "seed": rep,
                "pairs": pairs,
            }
            ranks = launch(job, world)
            tag = (
                f"w{world}"
                + ("" if mode == "exact" else "_comm_free")
                + ("_fennel" if placement == "fennel" else "")
            )
            speed.setdefault((world, tag), []).append(
                statistics.median(r["train"]["events_per_s"] for r in ranks)
            )
            train = [r["train"] for r in ranks]
            quality.setdefault(tag, []).append((train[0]["ap"], train[0]["mrr"]))
            if not rep:
                _first_run(results, tag, ranks, mode == "exact" and placement == "hash")
    return speed, quality


def _first_run(results: dict, tag: str, ranks: list[dict], exact_hash: bool) -> None:
    """What the first repeat of a run measures besides speed: bytes sent, CPU, collectives, memory."""
    train = [r["train"] for r in ranks]
    results[f"{tag}.sent_bytes_per_batch"] = max(sum(t["sent"].values()) / t["steps"] for t in train)
    results[f"{tag}.grad_bytes_per_batch"] = train[0]["grad_bytes"]
    results[f"{tag}.cpu_ms_per_batch"] = max(t["cpu_ms_per_batch"] for t in train)
    results[f"{tag}.collectives_per_batch"] = train[0]["collectives_per_batch"]
    for purpose in sorted({p for t in train for p in t["sent"]}):
        results[f"{tag}.sent.{purpose}"] = max(t["sent"].get(purpose, 0) / t["steps"] for t in train)
    if exact_hash:
        results[f"{tag}.max_rank_bytes"] = max(r["bytes"]["total"] for r in ranks)
        results[f"{tag}.max_rank_walk_bytes"] = max(r["bytes"].get("walks", 0) for r in ranks)
        for part, value in ranks[0]["bytes"].items():
            results[f"{tag}.rank0_bytes.{part}"] = value


def _summarize(results: dict, speed: dict, quality: dict, w: int) -> None:
    """Means over seeds, medians over repeats and the ratios the headline reads."""
    for tag, per_seed in quality.items():
        results[f"{tag}.ap"] = statistics.mean(ap for ap, _ in per_seed)
        results[f"{tag}.mrr"] = statistics.mean(mrr for _, mrr in per_seed)
        results[f"{tag}.ap_runs"] = ",".join(f"{ap:.4f}" for ap, _ in per_seed)
    for (world, tag), rates in speed.items():
        results[f"{tag}.events_per_s"] = statistics.median(rates)
        results[f"{tag}.events_per_s_runs"] = ",".join(f"{r:.1f}" for r in rates)
        if world > 1:  # per-repeat ratios against the W=1 run of the same repeat, then the median
            ratios = [r / one for r, one in zip(rates, speed[(1, "w1")], strict=True)]
            results[f"events_per_s_{tag}_vs_w1"] = statistics.median(ratios)
    results["ap_w1"], results[f"ap_w{w}"] = results["w1.ap"], results[f"w{w}.ap"]
    results["comm_free_ap"] = results[f"w{w}_comm_free.ap"]
    for tag in (
        f"w{w}",
        f"w{w}_comm_free",
    ):  # the speedup 2 idle cores would allow: CPU per batch, slowest rank
        results[f"cpu_bound_speedup_{tag}"] = (
            results["w1.cpu_ms_per_batch"] / results[f"{tag}.cpu_ms_per_batch"]
        )
    results["comm_free_bytes_vs_exact"] = (
        results[f"w{w}_comm_free.sent_bytes_per_batch"] / results[f"w{w}.sent_bytes_per_batch"]
    )
    results["bytes_per_rank_vs_single"] = results[f"w{w}.max_rank_bytes"] / results["w1.max_rank_bytes"]
    results["fennel_bytes_vs_hash"] = (
        results[f"w{w}_fennel.sent_bytes_per_batch"] / results[f"w{w}.sent_bytes_per_batch"]
    )


if __name__ == "__main__":
    sys.exit(main())
