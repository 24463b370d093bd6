"""Sharded, partition-parallel training: W ranks (gloo, one thread each) against one, exact and
communication-free.

python benchmarks/distributed.py [--quick] [--json] [--worlds 1,2,4]      (also: streamgnn bench distributed)

Two measurements, each W ranks as real processes of one ``torch.distributed`` job on this machine:

- training, JODIE Wikipedia (a prefix with ``--quick``): ``ShardedTrainer`` test-then-train, TGN dims 100,
  batches of 200, 10 recent neighbors, 100 fixed-rule MRR negatives, each rank reading its own partitions of
  8. Train events/s over the batches after a warm-up (median of the ranks' rates; every rank processes every
  global batch), online AP/MRR over the whole run, data bytes each rank sends per batch (sampling, memory
  rows, batch agreement; gradients, the same in every mode, reported apart).
- bytes, the power-law stream of the sampler benchmark (10M events, 1M with ``--quick``): the stream goes
  through each rank's shard and memory (batches of 20,000, no training: memory rows are committed as in
  training), then each rank reports its bytes of store shard + memory rows + replicated index + negative
  history, from each part's own accounting. ``bytes_per_rank_vs_single``: the largest rank at W=2 over W=1.

Each figure is one run per configuration (ratios within one invocation, same host); the load average is
recorded before and after, since this machine is shared.
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
    """One rank of one measurement (run in its own process)."""
    import torch

    from streamgnn.nn import TGNConfig
    from streamgnn.shard import GlobalBatcher, PartitionedReplay, ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig, init_distributed

    torch.set_num_threads(1)
    import numba

    numba.set_num_threads(1)
    events = _stream(job["stream"], job["events"])
    train = job["kind"] == "train"
    edge_dim = events.feature_dim or 0 if train else 0
    model = TGNConfig(memory_dim=100, time_dim=100, embedding_dim=100, num_neighbors=10,
                      edge_feature_dim=edge_dim)  # fmt: skip
    config = TrainConfig(
        model=model, batch_size=job["batch"], serve_every=0, sharding=ShardConfig(PARTITIONS, job["mode"])
    )
    trainer = ShardedTrainer(config, dist=init_distributed())
    source = PartitionedReplay(events, trainer.ownership, chunk=5 * job["batch"])
    batcher = GlobalBatcher(source, trainer.ownership, trainer.exchange, job["batch"])
    stamps, steps = [], 0
    while (batch := batcher.next_batch()) is not None:
        trainer.step(batch, train=train, score=train)
        steps += 1
        stamps.append((time.perf_counter(), len(batch)))
    out = {
        "rank": trainer.dist.rank,
        "steps": steps,
        "bytes": trainer.nbytes(),
        "sent": dict(trainer.exchange.sent),
    }
    if train:
        t0 = stamps[WARMUP_BATCHES - 1][0]
        done = sum(n for _, n in stamps[WARMUP_BATCHES:])
        trainer.metrics.close()
        m = trainer.metrics.summary()
        grads = sum(p.numel() * 4 for p in trainer.model.parameters())
        out.update(events_per_s=done / (stamps[-1][0] - t0), ap=m.ap, mrr=m.mrr, grad_bytes=grads)
    return out


def launch(job: dict, world: int) -> list[dict]:
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
            cmd = [sys.executable, __file__, "--worker", json.dumps(job), str(out)]
            procs.append(subprocess.Popen(cmd, env=env_r, stderr=subprocess.PIPE, text=True))
        errors = [p.communicate()[1] for p in procs]
        for p, err in zip(procs, errors, strict=True):
            if p.returncode:
                raise RuntimeError(f"a rank failed ({job}, W={world}):\n{err[-3000:]}")
        return [json.loads(o.read_text()) for o in outs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="Wikipedia prefix and a 1M-event stream (under 2 min)"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--worlds", default="1,2", help="world sizes to run, e.g. 1,2,4 (default 1,2)")
    ap.add_argument("--events", type=int, default=None, help="Wikipedia events to train on (default all)")
    ap.add_argument("--stream-events", type=int, default=None, help="power-law events (default 10M)")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        Path(args.worker[1]).write_text(json.dumps(worker(json.loads(args.worker[0]))))
        return 0
    worlds = [int(w) for w in args.worlds.split(",")]
    wiki = args.events or (12_000 if args.quick else 0)
    stream = args.stream_events or (1_000_000 if args.quick else 10_000_000)
    results: dict = {"load_avg_1m_before": os.getloadavg()[0], "partitions": PARTITIONS, "shared_host": True}
    started = time.perf_counter()
    runs = {}
    for world in worlds:
        for mode in ("exact", "comm_free") if world > 1 else ("exact",):
            job = {"kind": "train", "stream": "wikipedia", "events": wiki, "batch": 200, "mode": mode}
            runs[("train", world, mode)] = launch(job, world)
        job = {"kind": "bytes", "stream": "powerlaw", "events": stream, "batch": 20_000, "mode": "exact"}
        runs[("bytes", world, "exact")] = launch(job, world)
    for (kind, world, mode), ranks in runs.items():
        tag = f"{kind}_w{world}" + ("" if mode == "exact" else "_comm_free")
        if kind == "train":
            results[f"{tag}.events_per_s"] = statistics.median(r["events_per_s"] for r in ranks)
            results[f"{tag}.ap"], results[f"{tag}.mrr"] = ranks[0]["ap"], ranks[0]["mrr"]
            results[f"{tag}.sent_bytes_per_batch"] = max(sum(r["sent"].values()) / r["steps"] for r in ranks)
            results[f"{tag}.grad_bytes_per_batch"] = ranks[0]["grad_bytes"]
            for purpose in sorted({p for r in ranks for p in r["sent"]}):
                results[f"{tag}.sent.{purpose}"] = max(r["sent"].get(purpose, 0) / r["steps"] for r in ranks)
        else:
            results[f"{tag}.max_rank_bytes"] = max(r["bytes"]["total"] for r in ranks)
            for part in ranks[0]["bytes"]:
                results[f"{tag}.rank0.{part}"] = ranks[0]["bytes"][part]
    if ("train", 2, "exact") in runs:
        results["events_per_s_w2_vs_w1"] = results["train_w2.events_per_s"] / results["train_w1.events_per_s"]
        results["ap_w1"], results["ap_w2"] = results["train_w1.ap"], results["train_w2.ap"]
        results["comm_free_ap"] = results["train_w2_comm_free.ap"]
        results["comm_free_bytes_vs_exact"] = (
            results["train_w2_comm_free.sent_bytes_per_batch"] / results["train_w2.sent_bytes_per_batch"]
        )
        results["bytes_per_rank_vs_single"] = (
            results["bytes_w2.max_rank_bytes"] / results["bytes_w1.max_rank_bytes"]
        )
    results["load_avg_1m_after"] = os.getloadavg()[0]
    results["wall_s"] = time.perf_counter() - started
    report(results, args.json, "Sharded training: W ranks against one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
