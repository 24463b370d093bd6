"""The embeddings service over HTTP: single-node lookups and top-k at 9k and 1M nodes (100-d rows).

python benchmarks/serve.py [--quick] [--json]    (also: streamgnn bench serve)

The service runs in its own process (uvicorn, one worker) with its default settings (``ServeConfig``: cosine
top-k from the approximate index once a table has 100k rows, so the 9k table is scanned exactly), its table
filled with seeded synthetic embeddings (9,227 nodes: JODIE Wikipedia's count; 1,000,000; under --quick
200,000). One client connection sends requests one after another (HTTP/1.1 keep-alive, stdlib
``http.client``), so p50/p99 are per-request latencies and requests/s is their sequential rate. The
baseline, timed in the same run, is the same call on an exact table in-process (no HTTP, every row scanned).

Two kinds of rows, each behind its own server at each indexed size: learned embeddings lie near a
low-dimensional subspace, so "lowrank" rows are 16-d Gaussian latents through a fixed random 16x100 map plus
isotropic noise (std 0.3); "isotropic" rows are 100-d Gaussian (no neighbor much nearer than another: the
worst case for an index that relies on locality; keys end in ``_isotropic``). ``topk_recall_at_10``: the
share of each served answer's 10 ids that the exact scan also returns. ``index_update_per_s``: rows per
second the approximate table absorbs when existing rows are rewritten in batches of 200 (the trainer's
publish path; the index upsert included), beside the exact table's rate (``exact_update_per_s``), against
``trainer_events_per_s``: the online trainer's rate on JODIE Wikipedia, measured in the same run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import time

import numpy as np

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

from streamgnn.connectors.broker import free_port
from streamgnn.embeddings.ann import ApproximateTopK
from streamgnn.serve import EmbeddingTable, ServeConfig

DIM = 100
LATENT = 16  # the synthetic embeddings' intrinsic dimension
SIZES = {"9k": 9_227, "200k": 200_000, "1m": 1_000_000}


def embeddings(n: int, seed: int = 0, isotropic: bool = False) -> np.ndarray:
    """``n`` synthetic 100-d rows: low-rank plus noise (see the module's doc), or isotropic Gaussian."""
    rng = np.random.default_rng(seed)
    if isotropic:
        return rng.standard_normal((n, DIM), np.float32)
    basis = rng.standard_normal((LATENT, DIM), np.float32)
    out = np.empty((n, DIM), np.float32)
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        out[lo:hi] = rng.standard_normal((hi - lo, LATENT), np.float32) @ basis
        out[lo:hi] += 0.3 * rng.standard_normal((hi - lo, DIM), np.float32)
    return out


def filled_table(rows: np.ndarray, approximate: ApproximateTopK | None) -> EmbeddingTable:
    table = EmbeddingTable(DIM, approximate)
    table.update(np.arange(len(rows)), rows, t=1.0)  # one write: the index is built once, from every row
    return table


def serve_forever(n: int, port: int, isotropic: bool, exact_below: int) -> None:
    """The server: a table of ``n`` nodes behind the real app with its default settings but
    ``topk_exact_below`` (no Kafka: the reader is not started)."""
    import uvicorn

    from streamgnn.serve import ServeConfig, create_app
    from streamgnn.serve.reader import EmbeddingsReader
    from streamgnn.serve.scoring import LinkScorer

    set_threads(1)
    config = ServeConfig(port=port, log_every_s=0, topk_exact_below=exact_below)
    table = filled_table(embeddings(n, isotropic=isotropic), config.approximate_topk())
    reader = EmbeddingsReader("unused:9092", "unused", table=table)
    reader.caught_up.set()
    app = create_app(config, reader, LinkScorer(None))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def timed_requests(conn: http.client.HTTPConnection, paths: list[str]) -> tuple[np.ndarray, list[dict]]:
    """Per-request wall seconds and the answers; every answer must be 200."""
    out, bodies = np.empty(len(paths)), []
    for i, path in enumerate(paths):
        t0 = time.perf_counter()
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        out[i] = time.perf_counter() - t0
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status} {body[:200]!r}")
        bodies.append(json.loads(body))
    return out, bodies


def recall_at_10(exact: EmbeddingTable, queries: np.ndarray, answers: list[list[int]]) -> float:
    """Mean share of each answer's ids that the exact scan returns among the query node's 10 nearest."""
    truth = np.concatenate(  # 50 queries at a time: a million scores each
        [
            exact.top_k(exact.embeddings(q), 10, exclude=q)[0]
            for q in np.array_split(queries, -(-len(queries) // 50))
        ]
    )
    return float(np.mean([len(set(a) & set(t.tolist())) / 10 for a, t in zip(answers, truth, strict=True)]))


def update_rate(table: EmbeddingTable, rows: np.ndarray, batches: int, seed: int = 2) -> float:
    """Rows per second ``table`` absorbs as existing rows are rewritten in batches of 200."""
    rng = np.random.default_rng(seed)
    n = len(table)
    plan = [(rng.choice(n, 200, replace=False), rng.integers(0, n, 200)) for _ in range(batches)]
    t0 = time.perf_counter()
    for ids, src in plan:
        table.update(ids, rows[src], t=2.0)
    return 200 * batches / (time.perf_counter() - t0)


def measure(
    n: int,
    lookups: int,
    topks: int,
    updates: int = 50,
    seed: int = 1,
    isotropic: bool = False,
    exact_below: int = ServeConfig.topk_exact_below,
) -> dict:
    """The HTTP and in-process figures of a table of ``n`` rows (low-rank, or ``isotropic``); ``updates``
    batches of 200 rewritten rows time the table's writes. The service indexes tables of ``exact_below``
    rows or more (its default otherwise)."""
    port = free_port()
    args = [str(n), str(port), str(int(isotropic)), str(exact_below)]
    server = subprocess.Popen([sys.executable, __file__, "--server", *args])
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        deadline = time.monotonic() + 3600  # a loaded host may take minutes to fill 1M rows and index them
        while True:
            try:
                conn.request("GET", "/health")
                if json.loads(conn.getresponse().read())["nodes"] == n:
                    break
            except (OSError, http.client.HTTPException):
                conn.close()
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the benchmark server for {n:,} nodes did not come up")
            time.sleep(0.2)
        rng = np.random.default_rng(seed)
        timed_requests(conn, [f"/embeddings?ids={i}" for i in rng.integers(0, n, 20)])  # warm up (thread
        timed_requests(conn, [f"/topk?id={i}&k=10" for i in rng.integers(0, n, 10)])  # pools wake slowly)
        lookup, _ = timed_requests(conn, [f"/embeddings?ids={i}" for i in rng.integers(0, n, lookups)])
        asked = rng.integers(0, n, topks)
        topk, answers = timed_requests(conn, [f"/topk?id={i}&k=10" for i in asked])
        conn.close()
    finally:
        server.terminate()
        server.wait()
    rows = embeddings(
        n, isotropic=isotropic
    )  # the server's rows, for the baseline: the same calls without HTTP, exact
    table = filled_table(rows, None)
    recall = recall_at_10(table, asked, [[nb["id"] for nb in a["neighbors"]] for a in answers])
    for i in range(10):
        table.top_k(table.embeddings([i]), 10, exclude=[i])
    ids = rng.integers(0, n, lookups)
    t0 = time.perf_counter()
    for i in ids:
        table.embeddings([i])
    inproc_lookup = (time.perf_counter() - t0) / lookups
    ids = rng.integers(0, n, topks)
    t0 = time.perf_counter()
    for i in ids:
        table.top_k(table.embeddings([i]), 10, exclude=[i])
    inproc_topk = (time.perf_counter() - t0) / topks
    out = {"topk_recall_at_10": recall, "exact_update_per_s": update_rate(table, rows, updates)}
    del table
    approximate = ServeConfig(topk_exact_below=exact_below).approximate_topk()
    if n >= approximate.exact_below:  # a smaller table has no index to update or ask
        indexed = filled_table(rows, approximate)
        times = np.empty(topks)
        for j, i in enumerate(rng.integers(0, n, topks)):
            t0 = time.perf_counter()
            indexed.top_k(indexed.embeddings([i]), 10, exclude=[i])
            times[j] = time.perf_counter() - t0
        out["inproc_approx_topk_p50_ms"] = 1e3 * float(np.percentile(times, 50))
        out["inproc_approx_topk_p99_ms"] = 1e3 * float(np.percentile(times, 99))
        out["index_update_per_s"] = update_rate(indexed, rows, updates)
    return {
        **out,
        "lookup_p50_ms": 1e3 * float(np.percentile(lookup, 50)),
        "lookup_p99_ms": 1e3 * float(np.percentile(lookup, 99)),
        "lookups_per_s": lookups / float(lookup.sum()),
        "topk_p50_ms": 1e3 * float(np.percentile(topk, 50)),
        "topk_p99_ms": 1e3 * float(np.percentile(topk, 99)),
        "topk_per_s": topks / float(topk.sum()),
        "inproc_lookup_ms": 1e3 * inproc_lookup,
        "inproc_topk_ms": 1e3 * inproc_topk,
        "lookup_http_overhead_x": float(np.percentile(lookup, 50)) / inproc_lookup,
    }


def trainer_events_per_s(events: int) -> float:
    """The online trainer's events/s on JODIE Wikipedia's first ``events`` events, in this run (its loop:
    test-then-train and the serving table's refresh; ``streamgnn bench train``'s ``online_events_per_s``),
    after a warm-up that keeps Numba's compilation out: the rate the index must keep up with."""
    from streamgnn.datasets import load
    from streamgnn.train import TrainConfig

    try:
        from .train import WARMUP_EVENTS, online_latency
    except ImportError:  # run as a script
        from train import WARMUP_EVENTS, online_latency

    stream, config = load("jodie_wikipedia"), TrainConfig(batch_size=200)
    online_latency(stream.take(slice(0, WARMUP_EVENTS)), config)
    return float(online_latency(stream.take(slice(0, events)), config).events_per_s)


KINDS = {"lowrank": False, "isotropic": True}
HEADLINE = {
    "topk_recall_at_10": "top-k recall@10 vs exact, {rows:,} synthetic low-rank rows, over HTTP",
    "topk_recall_at_10_isotropic": "top-k recall@10 vs exact, {rows:,} isotropic Gaussian rows, over HTTP",
    "topk_p99_ms": "top-k p99 over HTTP (ms), {rows:,} low-rank rows",
    "topk_p99_ms_isotropic": "top-k p99 over HTTP (ms), {rows:,} isotropic rows",
    "topk_p50_ms": "top-k p50 over HTTP (ms), {rows:,} low-rank rows",
    "index_update_per_s": "rows/s the {rows:,}-row low-rank table + index absorbs (rewrites of 200)",
    "index_update_per_s_isotropic": "rows/s the {rows:,}-row isotropic table + index absorbs",
    "trainer_events_per_s": "the online trainer's events/s in this run (JODIE Wikipedia)",
    "inproc_approx_topk_p99_ms": "approximate top-k p99 in-process (ms, no HTTP), {rows:,} low-rank rows",
    "exact_topk_ms": "exact top-k in-process (ms), {rows:,} low-rank rows: the scan it replaces",
    "lookup_p99_ms": "single-node lookup p99 over HTTP (ms), {rows:,} rows",
    "topk_p99_ms_9k": "top-k p99 over HTTP (ms), 9,227 rows (exact scan)",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer requests, 200k rows (smoke values)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--sizes", default=None, help="table sizes to run, of 9k,200k,1m (default 9k,1m)")
    args = ap.parse_args(argv)
    set_threads(1)
    sizes = (args.sizes or ("200k" if args.quick else "9k,1m")).split(",")
    lookups, topks, updates, train_events = (200, 40, 10, 2_000) if args.quick else (3000, 300, 100, 10_000)
    results: dict = {"dim": DIM, "lookups": lookups, "topk_requests": topks, "k": 10, "metric": "cosine"}
    results["load_avg_1m_before"] = os.getloadavg()[0]
    indexed = ServeConfig().topk_exact_below
    for name in sizes:
        for isotropic in KINDS.values() if SIZES[name] >= indexed else [False]:
            suffix = f"_{name}" + ("_isotropic" if isotropic else "")
            for key, value in measure(SIZES[name], lookups, topks, updates, isotropic=isotropic).items():
                results[key + suffix] = value
    last = sizes[-1]  # the headline keys: the largest table run
    for key in ("lookup_p99_ms", "topk_p99_ms", "lookups_per_s", "lookup_p50_ms", "topk_p50_ms",
                "topk_recall_at_10", "index_update_per_s", "inproc_approx_topk_p99_ms"):  # fmt: skip
        for kind in ("", "_isotropic"):
            if f"{key}_{last}{kind}" in results:
                results[key + kind] = results[f"{key}_{last}{kind}"]
    results["exact_topk_ms"] = results[f"inproc_topk_ms_{last}"]
    results["trainer_events_per_s"] = trainer_events_per_s(train_events)
    results["trainer_events"] = train_events
    results["rows"] = SIZES[last]
    results["load_avg_1m_after"] = os.getloadavg()[0]
    report(
        results,
        args.json,
        "embeddings service over HTTP (one sequential client connection)",
        HEADLINE,
        args.quick,
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--server"]:
        serve_forever(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5]))
    else:
        sys.exit(main())
