"""Store insert throughput and memory, against rebuilding a T-CSR per batch (TGL) and PyG torch.cat.

python benchmarks/store.py [--quick] [--json] [--plot PATH]    (also: streamgnn bench store)
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

try:
    from .common import median_time, report, set_threads
except ImportError:  # run as a script
    from common import median_time, report, set_threads

import torch
from tqdm import tqdm

from streamgnn.cli._args import output_file, positive_int
from streamgnn.datasets import load
from streamgnn.events import EventBatch
from streamgnn.store import TemporalGraphStore


def insert_all(batches: list[EventBatch]) -> TemporalGraphStore:
    store = TemporalGraphStore()
    for b in batches:
        store.ingest(b)
    return store


def rebuild_tcsr_every_batch(batches: list[EventBatch]) -> None:
    """TGL's way: rebuild both directions' T-CSR (indptr, indices, ts, eid) from all events so far."""
    src_parts, dst_parts, t_parts = [], [], []
    for b in batches:
        src_parts.append(b.src)
        dst_parts.append(b.dst)
        t_parts.append(b.t)
        src, dst, t = np.concatenate(src_parts), np.concatenate(dst_parts), np.concatenate(t_parts)
        eid = np.arange(len(src))
        node = np.concatenate([src, dst])
        order = np.lexsort((np.concatenate([t, t]), node))
        indptr = np.zeros(int(node.max()) + 2, np.int64)
        np.cumsum(np.bincount(node, minlength=len(indptr) - 1), out=indptr[1:])
        _ = (indptr, np.concatenate([dst, src])[order], np.concatenate([t, t])[order], np.tile(eid, 2)[order])


def pyg_cat_every_batch(batches: list[EventBatch]) -> None:
    """PyG ``TemporalData`` grown by ``torch.cat`` of each column per batch."""
    from torch_geometric.data import TemporalData

    data = None
    for b in batches:
        new = TemporalData(
            src=torch.from_numpy(b.src),
            dst=torch.from_numpy(b.dst),
            t=torch.from_numpy(b.t),
            msg=torch.zeros(len(b), 0),
        )
        if data is None:
            data = new
        else:
            data = TemporalData(
                src=torch.cat([data.src, new.src]),
                dst=torch.cat([data.dst, new.dst]),
                t=torch.cat([data.t, new.t]),
                msg=torch.cat([data.msg, new.msg]),
            )


def power_law_stream(n: int, nodes: int, seed: int = 0) -> EventBatch:
    rng = np.random.default_rng(seed)
    src = (rng.zipf(1.6, n) - 1) % nodes
    dst = (rng.zipf(1.8, n) - 1 + nodes // 2) % nodes
    return EventBatch.from_columns(src=src, dst=dst, t=np.arange(n, dtype=np.float64), eid=np.arange(n))


def scale_run(n: int, batch_size: int, chunk: int) -> tuple[list[float], float]:
    """Events/s for each consecutive ``chunk`` of a power-law stream, and bytes/edge at the end."""
    import time

    stream = power_law_stream(n, nodes=max(1000, n // 10))
    store = TemporalGraphStore()
    rates = []
    bar = tqdm(total=n, desc="scale", unit="ev", unit_scale=True, leave=False)
    for lo in range(0, n, chunk):
        part = stream.take(slice(lo, lo + chunk))
        t0 = time.perf_counter()
        for b in part.split(batch_size):
            store.ingest(b)
        rates.append(len(part) / (time.perf_counter() - t0))
        bar.update(len(part))
    bar.close()
    return rates, store.nbytes()["total"] / store.num_edges


HEADLINE = {
    "insert_events_per_s": "store inserts/s, JODIE Wikipedia ({events:,} events, batches of {batch_size})",
    "insert_vs_pyg_cat": "insert speed vs PyG's torch.cat buffers, JODIE Wikipedia",
    "insert_vs_rebuild": "insert vs a T-CSR rebuilt every batch, JODIE Wikipedia ({rebuild_events:,} events)",
    "bytes_per_edge": "store bytes per edge, {bytes_per_edge_dataset}",
    "scale_last_vs_first": "insert rate last vs first 3 chunks, synthetic {scale_events:,}-event stream",
    "scale_bytes_per_edge": "store bytes per edge, synthetic {scale_events:,}-event stream",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a run under a minute")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--batch-size", type=positive_int, default=200, help="events per insert (e.g. 200)")
    ap.add_argument("--repeats", type=positive_int, default=None, help="timed runs per figure (e.g. 5)")
    ap.add_argument(
        "--plot", type=output_file, default=None, help="write insert cost per million events as a PNG"
    )
    args = ap.parse_args(argv)
    set_threads(1)
    repeats = args.repeats or (3 if args.quick else 5)

    wiki = load("jodie_wikipedia")
    batches = list(wiki.split(args.batch_size))
    insert_all(batches[:5])  # compile (or load the cached kernels) outside the timing
    ours = median_time(lambda: insert_all(batches), repeats)
    base = batches[: len(batches) // 4] if args.quick else batches
    ours_base = median_time(lambda: insert_all(base), repeats)
    rebuild = median_time(lambda: rebuild_tcsr_every_batch(base), 1 if args.quick else 3)
    pyg = median_time(lambda: pyg_cat_every_batch(batches), repeats)

    travian = load("travian_attacks")
    store = insert_all(list(travian.split(args.batch_size)))
    mem = store.nbytes()
    n_scale = 1_000_000 if args.quick else 10_000_000
    rates, scale_bpe = scale_run(n_scale, args.batch_size, chunk=n_scale // 10)

    results = {
        "dataset": "jodie_wikipedia",
        "events": len(wiki),
        "batch_size": args.batch_size,
        "insert_events_per_s": len(wiki) / ours,
        "pyg_cat_events_per_s": len(wiki) / pyg,
        "insert_vs_pyg_cat": pyg / ours,
        "rebuild_events": sum(len(b) for b in base),
        "rebuild_events_per_s": sum(len(b) for b in base) / rebuild,
        "insert_vs_rebuild": rebuild / ours_base,
        "bytes_per_edge": mem["total"] / store.num_edges,
        "bytes_per_edge_dataset": "travian_attacks",
        "bytes_per_edge_parts": {k: round(v / store.num_edges, 2) for k, v in mem.items() if k != "total"},
        "scale_events": n_scale,
        "scale_events_per_s_first_3_chunks": statistics.median(rates[:3]),
        "scale_events_per_s_last_3_chunks": statistics.median(rates[-3:]),
        "scale_last_vs_first": statistics.median(rates[-3:]) / statistics.median(rates[:3]),
        "scale_bytes_per_edge": scale_bpe,
    }
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        xs = np.arange(1, len(rates) + 1) * (n_scale // len(rates))
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(xs / 1e6, [1e9 / r for r in rates], marker="o")
        ax.set_xlabel("events inserted (millions)")
        ax.set_ylabel("insert cost (ns / event)")
        ax.set_ylim(bottom=0)
        ax.set_title("streamgnn store: insert cost per event as the graph grows")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    report(results, args.json, "store: insert throughput and memory", HEADLINE, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
