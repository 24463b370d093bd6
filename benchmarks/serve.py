"""The embeddings service over HTTP: single-node lookups and top-k at 9k and 1M nodes (100-d rows).

python benchmarks/serve.py [--quick] [--json]    (also: streamgnn bench serve)

The service runs in its own process (uvicorn, one worker), its table filled with seeded random vectors (9,227
nodes: JODIE Wikipedia's count; 1,000,000). One client connection sends requests one after another (HTTP/1.1
keep-alive, stdlib ``http.client``), so p50/p99 are per-request latencies and requests/s is their sequential
rate. The baseline, timed in the same run, is the same call on the table in-process (no HTTP): the ratio is
what HTTP, JSON and the ASGI stack add. Top-k is exact (cosine, one matrix product over every row).
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import time

import numpy as np

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

from streamgnn.connectors.broker import free_port
from streamgnn.serve import EmbeddingTable

DIM = 100
SIZES = {"9k": 9_227, "1m": 1_000_000}


def filled_table(n: int, seed: int = 0) -> EmbeddingTable:
    table = EmbeddingTable(DIM)
    rng = np.random.default_rng(seed)
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        table.update(np.arange(lo, hi), rng.standard_normal((hi - lo, DIM), np.float32), t=1.0)
    return table


def serve_forever(n: int, port: int) -> None:
    """The server: a table of ``n`` nodes behind the real app (no Kafka: the reader is not started)."""
    import uvicorn

    from streamgnn.serve import ServeConfig, create_app
    from streamgnn.serve.reader import EmbeddingsReader
    from streamgnn.serve.scoring import LinkScorer

    set_threads(1)
    config = ServeConfig(port=port, log_every_s=0)
    reader = EmbeddingsReader("unused:9092", "unused", table=filled_table(n))
    reader.caught_up.set()
    app = create_app(config, reader, LinkScorer(None))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def timed_requests(conn: http.client.HTTPConnection, paths: list[str]) -> np.ndarray:
    """Per-request wall seconds; every answer must be 200."""
    out = np.empty(len(paths))
    for i, path in enumerate(paths):
        t0 = time.perf_counter()
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        out[i] = time.perf_counter() - t0
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status} {body[:200]!r}")
    return out


def measure(n: int, lookups: int, topks: int, seed: int = 1) -> dict:
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--server", str(n), str(port)])
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        deadline = time.monotonic() + 300
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
        lookup = timed_requests(conn, [f"/embeddings?ids={i}" for i in rng.integers(0, n, lookups)])
        topk = timed_requests(conn, [f"/topk?id={i}&k=10" for i in rng.integers(0, n, topks)])
        conn.close()
    finally:
        server.terminate()
        server.wait()
    table = filled_table(n)  # the in-process baseline: the same calls without HTTP
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
    return {
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer requests (under a minute)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--sizes", default="9k,1m", help="table sizes to run, of 9k,1m (default both)")
    args = ap.parse_args(argv)
    set_threads(1)
    lookups, topks = (300, 40) if args.quick else (3000, 300)
    results: dict = {"dim": DIM, "lookups": lookups, "topk_requests": topks, "k": 10, "metric": "cosine"}
    for name in args.sizes.split(","):
        for key, value in measure(SIZES[name], lookups, topks).items():
            results[f"{key}_{name}"] = value
    last = args.sizes.split(",")[-1]  # the headline keys: the largest table run
    for key in ("lookup_p99_ms", "topk_p99_ms", "lookups_per_s", "lookup_p50_ms", "topk_p50_ms"):
        results[key] = results[f"{key}_{last}"]
    report(results, args.json, "embeddings service over HTTP (one sequential client connection)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--server"]:
        serve_forever(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(main())
