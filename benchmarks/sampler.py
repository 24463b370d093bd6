"""Temporal neighbor sampling from the live store, against PyG's LastNeighborLoader and vectorized numpy.

python benchmarks/sampler.py [--quick] [--json] [--plot PATH]    (also: streamgnn bench sampler)

Each stream is replayed as in PyG's TGN example: batches of 200 events; for each batch, sample 600 roots
(sources, destinations and one random destination per event) at the events' times, then insert the
batch. Measured per batch and thread count: recent-10 one hop (ours, LastNeighborLoader, numpy) and
uniform 10-10 two hops (ours, numpy), in sampled neighbors per second, median over runs of
``--batches`` batches each. The numpy baseline queries a T-CSR of the whole stream built once (it cannot
take inserts; its build time is reported) and draws uniform neighbors with replacement. Also reported:
the latency of a recent-10 call right after an insert, and the kernel's compile and cached-start cost
measured in fresh processes (not with --quick).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

import torch
from torch_geometric.nn.models.tgn import LastNeighborLoader

from streamgnn.cli._args import output_file, positive_int
from streamgnn.datasets import load
from streamgnn.events import EventBatch
from streamgnn.sampling import TemporalSampler
from streamgnn.store import TemporalGraphStore

BATCH = 200
K = 10
CHUNK = 1_000_000  # events per store ingest call while loading the history


@dataclass(frozen=True)
class Stream:
    """Events with node ids relabelled by first appearance, so they equal the store's internal ids."""

    name: str
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    num_nodes: int

    def batch(self, lo: int, hi: int) -> EventBatch:
        return EventBatch.from_columns(
            src=self.src[lo:hi], dst=self.dst[lo:hi], t=self.t[lo:hi], eid=np.arange(lo, hi)
        )


def relabel(name: str, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> Stream:
    both = np.empty(2 * len(src), np.int64)
    both[0::2], both[1::2] = src, dst
    _, first, inverse = np.unique(both, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    ids = rank[inverse]
    return Stream(name, ids[0::2].copy(), ids[1::2].copy(), np.ascontiguousarray(t, np.float64), len(first))


def power_law_stream(n_events: int, seed: int = 0) -> Stream:
    """Both endpoints drawn with Zipf popularity rank**-0.8 over n/10 nodes (degree tail ~ d**-2.25);
    integer times, about four events per timestamp, so ties are common."""
    rng = np.random.default_rng(seed)
    n_nodes = max(n_events // 10, 10)
    w = np.arange(1, n_nodes + 1, dtype=np.float64) ** -0.8
    w /= w.sum()
    perm = rng.permutation(n_nodes)
    src = perm[rng.choice(n_nodes, n_events, p=w)]
    dst = perm[rng.choice(n_nodes, n_events, p=w)]
    t = np.sort(rng.integers(0, max(n_events // 4, 1), n_events)).astype(np.float64)
    label = f"powerlaw_{n_events // 1_000_000}M" if n_events >= 1_000_000 else f"powerlaw_{n_events}"
    return relabel(label, src, dst, t)


def wikipedia() -> Stream:
    b = load("jodie_wikipedia")
    return relabel("jodie_wikipedia", b.src, b.dst, b.t)


class NumpyTCSR:
    """The vectorized baseline: a static T-CSR of the whole stream (both directions, time-sorted per node),
    where ``searchsorted`` on ``node * span + t`` finds every root's edges before its query time at once."""

    def __init__(self, s: Stream) -> None:
        n = len(s.src)
        node = np.empty(2 * n, np.int64)
        nbr = np.empty(2 * n, np.int64)
        node[0::2], node[1::2] = s.src, s.dst
        nbr[0::2], nbr[1::2] = s.dst, s.src
        self.t0 = float(s.t.min())
        self.span = float(s.t.max()) - self.t0 + 1.0
        if s.num_nodes * self.span >= 2.0**53:
            raise ValueError("node * span + t is not exact in float64 for this stream")
        t = np.repeat(s.t, 2)
        key = node * self.span + (t - self.t0)
        order = np.argsort(key, kind="stable")
        self.key, self.nbr, self.eid, self.t = key[order], nbr[order], order >> 1, t[order]
        self.indptr = np.searchsorted(self.key, np.arange(s.num_nodes + 1) * self.span)

    def _hop(self, roots: np.ndarray, tq: np.ndarray, k: int, rng: np.random.Generator | None):
        lo = self.indptr[roots]
        avail = np.searchsorted(self.key, roots * self.span + (tq - self.t0)) - lo
        cnt = np.minimum(avail, k)
        ptr = np.zeros(len(roots) + 1, np.int64)
        np.cumsum(cnt, out=ptr[1:])
        root_index = np.repeat(np.arange(len(roots)), cnt)
        offset = np.arange(ptr[-1]) - ptr[root_index]
        if rng is None:  # the newest k
            pos = lo[root_index] + avail[root_index] - cnt[root_index] + offset
        else:  # all when there are at most k, else k with replacement
            many = avail[root_index] > k
            drawn = (rng.random(len(offset)) * avail[root_index]).astype(np.int64)
            pos = lo[root_index] + np.where(many, drawn, offset)
        t = self.t[pos]
        return ptr, root_index, self.nbr[pos], self.eid[pos], t, tq[root_index] - t

    def recent(self, roots: np.ndarray, tq: np.ndarray, k: int):
        return self._hop(roots, tq, k, None)

    def uniform(self, roots: np.ndarray, tq: np.ndarray, fanouts: tuple[int, ...], rng: np.random.Generator):
        hops = []
        for k in fanouts:
            hop = self._hop(roots, tq, k, rng)
            hops.append(hop)
            roots, tq = hop[2], hop[4]
        return hops


@dataclass(frozen=True)
class Replay:
    """The timed part of a stream: ``runs * batches`` batches, each with its 600 roots and their times."""

    first: int
    runs: int
    batches: int
    roots: list[np.ndarray]
    times: list[np.ndarray]


def replay(
    plan: Replay, call: Callable, insert: Callable[[int, int], object]
) -> tuple[list[float], list[float]]:
    """Per batch: time ``call(roots, t)`` (it returns the neighbors it sampled), then ``insert`` the batch.

    Returns the neighbors/s of each run and every call's seconds.
    """
    rates, calls = [], []
    for r in range(plan.runs):
        count, secs = 0, 0.0
        for b in range(r * plan.batches, (r + 1) * plan.batches):
            t0 = time.perf_counter()
            count += call(plan.roots[b], plan.times[b])
            took = time.perf_counter() - t0
            secs += took
            calls.append(took)
            lo = plan.first + b * BATCH
            insert(lo, lo + BATCH)
        rates.append(count / secs)
    return rates, calls


def measure(s: Stream, runs: int, batches: int, threads: tuple[int, ...], seed: int = 0) -> dict[str, float]:
    """Load ``s`` up to its last ``runs * batches`` batches, then replay those once per method and thread
    count, each method from its own copy of the state, so no method runs in another's cache leftovers."""
    rng = np.random.default_rng(seed)
    n = len(s.src)
    first = n - runs * batches * BATCH
    if first < BATCH:
        raise ValueError(f"{s.name}: {n} events are too few for {runs} x {batches} batches")
    out: dict[str, float] = {"events": n, "nodes": s.num_nodes}
    set_threads(max(threads))
    store = TemporalGraphStore()
    t0 = time.perf_counter()
    for lo in range(0, first, CHUNK):
        store.ingest(s.batch(lo, min(lo + CHUNK, first)))
    out["store_load_events_per_s"] = first / (time.perf_counter() - t0)
    assert np.array_equal(store.node_index(s.src[:100]), s.src[:100])
    lnl = LastNeighborLoader(s.num_nodes, K)
    src_t, dst_t = torch.from_numpy(s.src), torch.from_numpy(s.dst)
    t0 = time.perf_counter()
    for lo in range(0, first, BATCH):
        lnl.insert(src_t[lo : min(lo + BATCH, first)], dst_t[lo : min(lo + BATCH, first)])
    out["lnl_insert_batch_ms"] = (time.perf_counter() - t0) / -(-first // BATCH) * 1e3
    t0 = time.perf_counter()
    csr = NumpyTCSR(s)
    out["numpy_tcsr_build_s"] = time.perf_counter() - t0

    destinations = np.unique(s.dst)
    roots, times = [], []
    for b in range(runs * batches):
        lo = first + b * BATCH
        roots.append(
            np.concatenate([s.src[lo : lo + BATCH], s.dst[lo : lo + BATCH], rng.choice(destinations, BATCH)])
        )
        times.append(np.tile(s.t[lo : lo + BATCH], 3))
    plan = Replay(first, runs, batches, roots, times)

    def ours(fanouts: tuple[int, ...], strategy: str):
        mine = copy.deepcopy(store)
        sampler = TemporalSampler(mine, fanouts=fanouts, strategy=strategy, seed=seed)
        sampler.sample(roots[0][:10], times[0][:10])  # load the compiled kernel
        return lambda r, t: sum(len(h) for h in sampler.sample(r, t).hops), lambda a, b: mine.ingest(
            s.batch(a, b)
        )

    def last_neighbor_loader():
        mine = copy.deepcopy(lnl)
        return lambda r, t: mine(torch.from_numpy(r))[2].numel(), lambda a, b: mine.insert(
            src_t[a:b], dst_t[a:b]
        )

    def numpy(hop: Callable):
        return lambda r, t: sum(len(h[2]) for h in hop(r, t)), lambda a, b: None

    methods = {
        "recent10.ours": lambda: ours((K,), "recent"),
        "recent10.lnl": last_neighbor_loader,
        "recent10.numpy": lambda: numpy(lambda r, t: [csr.recent(r, t, K)]),
        "uniform2hop.ours": lambda: ours((K, K), "uniform"),
        "uniform2hop.numpy": lambda: numpy(lambda r, t: csr.uniform(r, t, (K, K), rng)),
    }
    for name, make in methods.items():
        for th in threads:
            set_threads(th)
            rates, calls = replay(plan, *make())
            out[f"{name}_per_s@{th}t"] = statistics.median(rates)
            out[f"{name}_call_ms@{th}t"] = statistics.median(calls) * 1e3
        out[f"{name}_per_s"] = max(out[f"{name}_per_s@{th}t"] for th in threads)
    _ingest_and_check(s, store, csr, plan, out)
    return out


def _ingest_and_check(s: Stream, store: TemporalGraphStore, csr: NumpyTCSR, plan: Replay, out: dict) -> None:
    """After the replays: the store's ingest of the replayed batches timed, the ratios, and the same answers
    from the store and the numpy baseline."""
    first, runs, batches, roots, times = plan.first, plan.runs, plan.batches, plan.roots, plan.times
    out["after_insert_call_ms"] = out["recent10.ours_call_ms@1t"]
    t0 = time.perf_counter()
    for b in range(runs * batches):
        lo = first + b * BATCH
        store.ingest(s.batch(lo, lo + BATCH))
    out["ingest_batch_ms"] = (time.perf_counter() - t0) / (runs * batches) * 1e3
    out["recent10_vs_lastneighborloader"] = out["recent10.ours_per_s"] / out["recent10.lnl_per_s"]
    out["recent10_vs_numpy"] = out["recent10.ours_per_s"] / out["recent10.numpy_per_s"]
    out["uniform2hop_vs_numpy"] = out["uniform2hop.ours_per_s"] / out["uniform2hop.numpy_per_s"]
    # Same answers: the store now holds the replayed batches too, and both sides query back in time.
    r, t = roots[0][: 2 * BATCH], times[0][: 2 * BATCH]
    hop = TemporalSampler(store, fanouts=(K,)).sample(r, t).hops[0]
    ptr, _, nbr, eid, _, _ = csr.recent(r, t, K)
    if not (np.array_equal(hop.ptr, ptr) and np.array_equal(hop.nbr, nbr) and np.array_equal(hop.eid, eid)):
        raise AssertionError(f"{s.name}: recent-10 differs from the numpy baseline")


COMPILE_PROBE = """
import json, time
import numpy as np
from streamgnn.events import EventBatch
from streamgnn.sampling import TemporalSampler
from streamgnn.store import TemporalGraphStore
store = TemporalGraphStore()
store.ingest(EventBatch.from_columns(src=[0, 1, 2], dst=[1, 2, 0], t=[1.0, 2.0, 3.0], eid=[0, 1, 2]))
sampler = TemporalSampler(store, fanouts=(2, 2), strategy="uniform")
out = {}
for name, n in (("serial", 2), ("parallel", 4096)):  # hops of >= PARALLEL_MIN_ROOTS roots run in parallel
    t0 = time.perf_counter()
    sampler.sample(np.arange(n) % 3, np.full(n, 4.0))
    out[name] = time.perf_counter() - t0
print(json.dumps(out))
"""


def compile_costs() -> dict[str, float]:
    """First sample calls in a fresh process (serial kernel, then parallel kernel): with an empty Numba
    cache (they compile) and again with the cache that run left (they load)."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for phase in ("compile", "cached"):
            t0 = time.perf_counter()
            res = subprocess.run(
                [sys.executable, "-c", COMPILE_PROBE], env=env, capture_output=True, text=True, check=True
            )
            firsts = json.loads(res.stdout.strip().splitlines()[-1])
            out[f"{phase}_first_call_s"] = firsts["serial"]
            out[f"{phase}_first_parallel_call_s"] = firsts["parallel"]
            out[f"{phase}_process_s"] = time.perf_counter() - t0
    return out


def headline(per: dict[str, dict[str, float]]) -> dict[str, float]:
    """The issue's top-level keys: each figure from the stream where it is weakest."""
    out = {
        key.replace(".ours", ""): min(p[key] for p in per.values())
        for key in (
            "recent10.ours_per_s", "recent10_vs_lastneighborloader", "uniform2hop.ours_per_s",
            "uniform2hop_vs_numpy",
        )
    }  # fmt: skip
    out["after_insert_call_ms"] = max(p["after_insert_call_ms"] for p in per.values())
    return out


METHODS = ("recent10.ours", "recent10.lnl", "recent10.numpy", "uniform2hop.ours", "uniform2hop.numpy")
LABELS = ("recent-10\nours", "recent-10\nLastNeighbor-\nLoader", "recent-10\nnumpy", "uniform 10-10\nours",
          "uniform 10-10\nnumpy")  # fmt: skip


def plot(per: dict[str, dict[str, float]], path: str) -> None:
    """Sampled neighbors/s of every method, one panel per stream, 1 and 2 threads side by side."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.6), tight_layout=True)
    FigureCanvasAgg(fig)
    width = 0.38
    for ax, (name, res) in zip(fig.subplots(1, len(per), squeeze=False)[0], per.items(), strict=True):
        for j, th in enumerate((1, 2)):
            rates = [res[f"{m}_per_s@{th}t"] / 1e6 for m in METHODS]
            xs = [i + (j - 0.5) * width for i in range(len(METHODS))]
            bars = ax.bar(xs, rates, width, label=f"{th} thread{'s' if th > 1 else ''}")
            ax.bar_label(bars, fmt="%.1f", fontsize=6)
        ax.set_xticks(range(len(METHODS)), LABELS, fontsize=7)
        ax.set_ylabel("sampled neighbors / s (millions)")
        ax.set_title(f"{name}: recent-10 {res['recent10_vs_lastneighborloader']:.1f}x LastNeighborLoader")
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="300k synthetic events, fewer runs and batches, no cold-compile probe (under a minute)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--events", type=positive_int, default=None, help="synthetic stream size (default 10M, quick 300k)"
    )
    ap.add_argument("--runs", type=positive_int, default=None, help="runs per figure; the median is reported")
    ap.add_argument("--batches", type=positive_int, default=None, help="batches of 200 events per run")
    ap.add_argument(
        "--plot", type=output_file, default=None, help="write neighbors/s per method and stream as a PNG"
    )
    args = ap.parse_args(argv)
    events = args.events or (300_000 if args.quick else 10_000_000)
    runs = args.runs or (3 if args.quick else 9)
    batches = args.batches or (5 if args.quick else 20)
    threads = (1, 2)
    t_start = time.perf_counter()
    results: dict[str, float | int | str] = {
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "load_avg_1m_before": os.getloadavg()[0],
        "roots_per_batch": 3 * BATCH,
        "runs": runs,
        "batches_per_run": batches,
    }
    per = {}
    for stream in (wikipedia(), power_law_stream(events)):
        per[stream.name] = measure(stream, runs, batches, threads)
        results.update({f"{stream.name}.{k}": v for k, v in per[stream.name].items()})
    results.update(headline(per))
    if not args.quick:  # a fresh process compiling every kernel takes longer than the whole quick run
        results.update(compile_costs())
    results["load_avg_1m_after"] = os.getloadavg()[0]
    results["wall_s"] = time.perf_counter() - t_start
    shown = {}
    for name in per:
        data = "JODIE Wikipedia" if name == "jodie_wikipedia" else f"synthetic power-law, {events:,} events"
        shown[f"{name}.recent10.ours_per_s"] = f"recent-10 sampled neighbors/s, {data}"
        shown[f"{name}.recent10_vs_lastneighborloader"] = f"recent-10 vs PyG's LastNeighborLoader, {data}"
        shown[f"{name}.uniform2hop.ours_per_s"] = f"uniform 10-10 sampled neighbors/s, {data}"
        shown[f"{name}.uniform2hop_vs_numpy"] = f"uniform 10-10 vs a numpy T-CSR, {data}"
        shown[f"{name}.after_insert_call_ms"] = f"first sample call after an insert (ms), {data}"
    report(results, args.json, "Temporal sampler: neighbors/s, medians of runs", shown, args.quick)
    if args.plot:
        plot(per, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
