"""``streamgnn demo``: replay a bundled dataset through the store and report what it holds."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tqdm import tqdm

from . import datasets
from .store import StoreConfig, TemporalGraphStore


def run_demo(events: int | None, out: str, dataset: str = "jodie_wikipedia", quiet: bool = False) -> int:
    stream = datasets.load(dataset)
    if events is not None:
        stream = stream.take(slice(0, events))
    store = TemporalGraphStore(StoreConfig(num_partitions=4))
    dead = 0
    t0 = time.perf_counter()
    with tqdm(total=len(stream), unit="ev", unit_scale=True, disable=quiet, desc=f"ingest {dataset}") as bar:
        for batch in stream.split(200):
            dead += len(store.ingest(batch).dead_letters)
            bar.update(len(batch))
    seconds = time.perf_counter() - t0
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt = store.save(out_dir / "store")
    summary = {
        "dataset": dataset,
        "events": len(stream),
        "nodes": store.num_nodes,
        "edges": store.num_edges,
        "dead_letters": dead,
        "events_per_s": len(stream) / seconds,
        "bytes_per_edge": store.nbytes()["total"] / max(store.num_edges, 1),
        "partition_sizes": store.partition_sizes().tolist(),
        "edge_cut": store.edge_cut(),
        "checkpoint": str(ckpt),
        "content_hash": store.content_hash(),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    for key, value in summary.items():
        print(f"{key:16s} {value}")
    return 0
