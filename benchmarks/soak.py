"""Soak: a long replayed stream through ingest, online training and the HTTP embeddings service, with the
process's resident memory sampled along the way. Does anything grow with the stream that should not?

python benchmarks/soak.py [--quick] [--json] [--events N] [--segment N]      (also: streamgnn bench soak)

The stream is the power-law stream of the sampler and distributed benchmarks (10M events; 100k with
``--quick``), written to a binary file by a child process and replayed from it in chunks, so the stream
itself never sits in this process's memory. One process does everything, as a deployed worker would:

- ingest and training: an ``OnlineTrainer`` test-then-trains on every batch (AP/AUC, MRR against 5
  negatives, the two EdgeBank baselines, the running-metric windows, the latency sketch), with a small TGN
  (dims 16, 5 neighbors, batches of 1,000) to keep 10M events affordable (the rate measured is in
  RESULTS.md); what is measured is memory over the stream, and the per-batch records are the same at any
  model width.
- serving: every batch refreshes the touched nodes' rows in the trainer's ``EmbeddingTable``, which a real
  uvicorn server (the service's app, in a thread of this process) answers over HTTP; between the 10k-event
  chunks of a segment a client asks ``/embeddings`` and ``/topk`` for nodes of the chunk just trained
  (every answer must be 200).

The graph itself grows with its events (the store keeps every edge; it has no retention), so the stream is
cut into segments of ``--segment`` events (1M by default) and each segment is a new pass
(``OnlineTrainer.reset_stream``: a fresh store and table) while the model, optimizer, metrics, latency
record, HTTP server and the process live on. So what the soak measures is everything but the graph: a
record that grows per batch or per event shows as RSS growing from segment to segment.

Reported: ``rss_growth_second_half`` = max RSS over the second half of the events / max RSS over the first
half (target <= 1.05; at this process's ~460 MB, 5% is ~23 MB, so a small leak shows only in the slope),
``rss_slope_second_half_mb_per_m_events`` (a line fitted through the second half's samples), the RSS
figures (MB), events/s over the whole run, requests answered, and a PNG of RSS over events. The load
average is recorded before and after, since this machine is shared.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

ROW = np.dtype([("src", np.int64), ("dst", np.int64), ("t", np.float64)])  # one event in the replay file
CHUNK = 10_000  # events read from the file at a time (one source batch)
BATCH = 1_000
TARGET = 1.05


def write_stream(path: str, events: int) -> None:
    """The distributed benchmark's power-law stream, as rows of ``ROW`` (run in a child process)."""
    try:
        from .sampler import power_law_stream
    except ImportError:
        from sampler import power_law_stream
    s = power_law_stream(events)
    rows = np.empty(len(s.src), ROW)
    rows["src"], rows["dst"], rows["t"] = s.src, s.dst, s.t
    rows.tofile(path)


def replay(path: str, start: int, stop: int):
    """Events ``start..stop`` of the file, ``CHUNK`` at a time, read into fresh arrays (no mapping, whose
    pages would count as this process's memory)."""
    from streamgnn.events import EventBatch

    with open(path, "rb") as f:
        f.seek(start * ROW.itemsize)
        for lo in range(start, stop, CHUNK):
            rows = np.fromfile(f, ROW, min(CHUNK, stop - lo))
            yield EventBatch.from_columns(
                src=rows["src"], dst=rows["dst"], t=rows["t"], eid=np.arange(lo, lo + len(rows))
            )


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class Server:
    """The embeddings service's app over ``table``, served by uvicorn in a thread (no Kafka reader: the
    trainer writes the table directly)."""

    def __init__(self, table) -> None:
        import uvicorn

        from streamgnn.connectors.broker import free_port
        from streamgnn.serve import ServeConfig, create_app
        from streamgnn.serve.reader import EmbeddingsReader
        from streamgnn.serve.scoring import LinkScorer

        self.port = free_port()
        reader = EmbeddingsReader("unused:9092", "unused", table=table)
        reader.caught_up.set()
        app = create_app(ServeConfig(port=self.port, log_every_s=0), reader, LinkScorer(None))
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="soak-http", daemon=True)

    def __enter__(self) -> Server:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the soak's HTTP server did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join()


class Client:
    """Requests over a fresh connection each (the trainer may keep the server busy longer than any
    keep-alive); every answer must be 200 and JSON."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.requests = 0
        self.seconds = 0.0

    def get(self, path: str) -> dict:
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        self.seconds += time.perf_counter() - t0
        self.requests += 1
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status} {body[:200]!r}")
        return json.loads(body)


def soak(events: int, segment: int, query_every: int, samples: int, progress: bool = True) -> dict:
    """Run the soak (see the module docstring); returns the figures and the RSS samples."""
    import torch

    from streamgnn.nn import TGNConfig
    from streamgnn.progress import progress_bar
    from streamgnn.train import OnlineTrainer, TrainConfig

    torch.manual_seed(0)
    # TGN alone, as the 10M-event run in RESULTS.md measured it: pair features (the default model's) read
    # the store and keep no per-batch state of their own, and would make an already long run longer
    model = TGNConfig(memory_dim=16, time_dim=16, embedding_dim=16, num_neighbors=5, pair_features=False)
    config = TrainConfig(model=model, batch_size=BATCH, eval_negatives=5, serve_every=1, lr=1e-3)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="streamgnn-soak-") as tmp:
        path = str(Path(tmp) / "stream.bin")
        subprocess.run([sys.executable, __file__, "--write-stream", path, str(events)], check=True)
        trainer = OnlineTrainer(config)
        every = max(CHUNK, events // samples // CHUNK * CHUNK)  # events between RSS samples
        rng = np.random.default_rng(0)
        trace: list[tuple[int, int]] = [(0, rss_bytes())]
        done, chunks = 0, 0
        bar = progress_bar(total=events, unit="ev", disable=not progress)
        with Server(trainer.table) as server:
            client = Client(server.port)

            def source(lo: int, hi: int):
                nonlocal done, chunks
                prev = None
                for chunk in replay(path, lo, hi):
                    if prev is not None:  # the previous chunk is trained and served by now
                        done += len(prev)
                        chunks += 1
                        bar.update(len(prev))
                        if chunks % query_every == 0:
                            ids = rng.choice(np.unique(prev.src), 3, replace=False)
                            got = client.get("/embeddings?ids=" + ",".join(map(str, ids)))
                            assert len(got["embeddings"]) == 3, got
                            client.get(f"/topk?id={ids[0]}&k=10")
                        if done % every == 0:
                            trace.append((done, rss_bytes()))
                    prev = chunk
                    yield chunk
                done += len(prev)
                bar.update(len(prev))
                trace.append((done, rss_bytes()))

            start = time.perf_counter()
            for lo in range(0, events, segment):
                if lo:
                    trainer.reset_stream()  # a new pass: fresh store and table (see the module docstring)
                result = trainer.fit(source(lo, min(events, lo + segment)), progress=False)
            seconds = time.perf_counter() - start
        bar.close()
    figures = _figures(trace, events, result, trainer, client)
    return {
        "events": events,
        "segment_events": segment,
        "batch": BATCH,
        "model_dims": model.memory_dim,
        **figures,
        "events_per_s": events / seconds,
        "seconds": seconds,
        "load_avg_before": load_before[0],
        "load_avg_after": os.getloadavg()[0],
    }


def _figures(trace: list[tuple[int, int]], events: int, result, trainer, client) -> dict:
    """The RSS trace's figures (growth over the second half, its slope) and the run's own."""
    at = np.array([e for e, _ in trace])
    rss = np.array([r for _, r in trace], np.float64)
    first, second = rss[at <= events / 2], rss[at > events / 2]
    return {
        "rss_growth_second_half": float(second.max() / first.max()),
        "rss_target": TARGET,
        "rss_start_mb": rss[0] / 2**20,
        "rss_max_first_half_mb": first.max() / 2**20,
        "rss_max_second_half_mb": second.max() / 2**20,
        "rss_end_mb": rss[-1] / 2**20,
        # finer than the ratio: a least-squares line through the second half's samples
        "rss_slope_second_half_mb_per_m_events": float(
            np.polyfit(at[at > events / 2] / 1e6, second / 2**20, 1)[0] if len(second) > 1 else math.nan
        ),
        "requests": client.requests,
        "request_ms_mean": 1e3 * client.seconds / max(client.requests, 1),
        "latency_p50_ms": result.latency_p50_ms,
        "latency_p99_ms": result.latency_p99_ms,
        "windows_closed": trainer.metrics.closed,
        "ap": result.metrics.ap,
        "mrr": result.metrics.mrr,
        "trace": [[int(e), int(r)] for e, r in trace],
    }


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace = np.array(results["trace"], np.float64)
    events, half = results["events"], results["events"] / 2
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(trace[:, 0] / 1e6, trace[:, 1] / 2**20, marker=".", label="RSS of the soak process")
    base = results["rss_max_first_half_mb"]
    ax.axhline(base, color="grey", ls="--", label=f"max of the first half ({base:,.0f} MB)")
    ax.axhline(base * TARGET, color="red", ls=":", label=f"target: {TARGET:g} x the first half's max")
    ax.axvline(half / 1e6, color="black", lw=0.8, label="half of the events")
    for lo in range(results["segment_events"], events, results["segment_events"]):
        ax.axvline(lo / 1e6, color="grey", lw=0.3)
    ax.set_xlabel("events processed (millions; thin lines: a new segment's fresh store)")
    ax.set_ylabel("resident memory (MB)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"Soak: {events / 1e6:g}M events through ingest, training and HTTP serving; "
        f"growth {results['rss_growth_second_half']:.3f}x"
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


HEADLINE = {
    "rss_growth_second_half": "max RSS, second half / first (power-law stream, {events:,} events)",
    "rss_max_first_half_mb": "max RSS over the first half, MB",
    "rss_max_second_half_mb": "max RSS over the second half, MB",
    "events_per_s": "events/s through ingest, training and the service",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k events in segments of 20k")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--events", type=int, help="events to stream (default 10M; --quick 100k)")
    ap.add_argument("--segment", type=int, help="events per store segment (default 1M; --quick 20k)")
    ap.add_argument("--plot", type=Path, default=Path("soak.png"), help="RSS-over-events PNG (soak.png)")
    args = ap.parse_args(argv)
    events = args.events or (100_000 if args.quick else 10_000_000)
    segment = args.segment or (20_000 if args.quick else 1_000_000)
    if events < 2 * CHUNK or segment < CHUNK or segment % CHUNK:
        ap.error(f"--events must be at least {2 * CHUNK:,} and --segment a multiple of {CHUNK:,}")
    set_threads(1)
    results = soak(events, segment, query_every=1, samples=200, progress=not args.json)
    results["plot"] = str(plot(results, args.plot))
    trace = results.pop("trace")
    results["rss_samples"] = len(trace)
    for key, value in results.items():
        if isinstance(value, float) and not math.isfinite(value):
            results[key] = None
    report(
        results, args.json, f"soak: {events:,} events, RSS growth over the second half", HEADLINE, args.quick
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write-stream"]:
        write_stream(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(main())
