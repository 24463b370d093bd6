"""Streaming partitioners against hash and offline METIS/KaHIP: edge cut, replication factor, balance, speed.

python benchmarks/partition.py [--quick] [--json] [--plot PATH]    (also: streamgnn bench partition)

Each stream (Bitcoin OTC, CollegeMsg, Digg replies, Travian attacks and a seeded synthetic power-law stream
with planted communities: 10M edges, 1M with --quick) is partitioned in arrival order, k = 4, 8, 32:

- vertex partitioners (edge cut, every temporal edge counted): hash, LDG and Fennel in one pass (placed at
  first sight; and with 8 buffered edges per new vertex), and LDG and Fennel (4 buffered edges) with
  streaming rebalancing (every 1% of the stream, at least 2000 edges, the recent window's vertices are
  re-placed from their whole adjacency, up to 3 passes; the vertices moved are reported), against METIS
  (pymetis) and KaHIP (kaffpa, where it is installed; not with --quick) run offline on the final graph
  (edge weights = edge multiplicity, the same 10% imbalance allowed);
- edge partitioners (replication factor): HDRF and DBH against hash edge placement (each edge at its
  source's hash partition, as producers key Kafka today, and each edge at a hash of the edge; the better
  of the two is the baseline).

A dataset "has community structure" when METIS cuts it at most ``STRUCTURE`` times as much as a
degree-preserving random null of it (its edges' destinations shuffled): the cut targets apply there.
Speed: one-pass ``observe`` over the whole pre-mapped stream (ids already internal, as the store hands
them over), single thread, median of ``--repeats``, k = 32, on the synthetic stream.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

try:
    from .common import median_time, report, set_threads
except ImportError:  # run as a script
    from common import median_time, report, set_threads

from tqdm import tqdm

from streamgnn.cli._args import output_file
from streamgnn.datasets import load
from streamgnn.events import EventBatch
from streamgnn.partition import PartitionerConfig, PartitionTimeline, hash_partition, make_partitioner
from streamgnn.partition.metrics import replica_counts
from streamgnn.store import StoreConfig, TemporalGraphStore
from streamgnn.store.idmap import NodeIdMap

REAL = ("bitcoin_otc", "collegemsg", "digg_reply", "travian_attacks")
KS = (4, 8, 32)
STRUCTURE = 0.8
SLACK = 0.1  # every method may exceed the mean partition size by 10%
ONE_PASS = {
    "ldg": "ldg",
    "fennel": "fennel",
    "ldg_buffer8": {"name": "ldg", "buffer_edges": 8},
    "fennel_buffer8": {"name": "fennel", "buffer_edges": 8},
}
REBALANCED = {"ldg_rebalance": {"name": "ldg"}, "fennel_rebalance": {"name": "fennel", "buffer_edges": 4}}


def synthetic_stream(num_edges: int, seed: int = 0, mix: float = 0.2) -> EventBatch:
    """Edges between ``num_edges // 10`` vertices in communities of ~1000: a vertex's weight is Pareto
    (degree exponent ~2.5), a source is drawn by weight and its destination by weight from its own
    community (from everyone with probability ``mix``). Arrival order is random; no self-loops."""
    rng = np.random.default_rng(seed)
    n = max(1000, num_edges // 10)
    comm = rng.integers(0, max(4, n // 1000), n)
    w = np.minimum((1.0 - rng.random(n)) ** (-1.0 / 1.5), n / 100)
    order = np.argsort(comm, kind="stable")
    cw = np.cumsum(w[order])
    first = np.searchsorted(comm[order], np.arange(comm.max() + 2))
    base = np.r_[0.0, cw][first]
    m = int(num_edges * 1.01) + 16
    src = order[np.minimum(np.searchsorted(cw, rng.random(m) * cw[-1], "right"), n - 1)]
    c = comm[src]
    inside = rng.random(m) >= mix
    r = np.where(inside, base[c] + rng.random(m) * (base[c + 1] - base[c]), rng.random(m) * cw[-1])
    dst = order[np.minimum(np.searchsorted(cw, r, "right"), n - 1)]
    keep = np.flatnonzero(src != dst)[:num_edges]
    return EventBatch.from_columns(
        src=src[keep], dst=dst[keep], t=np.arange(len(keep), dtype=np.float64), eid=np.arange(len(keep))
    )


@dataclass(frozen=True)
class Graph:
    """A stream with ids mapped to internal ids in order of first appearance (as the store maps them)."""

    name: str
    events: EventBatch
    src: np.ndarray
    dst: np.ndarray
    external: np.ndarray

    @property
    def n(self) -> int:
        return len(self.external)


def graph_of(name: str, events: EventBatch) -> Graph:
    ids = NodeIdMap()
    src, dst = ids.map_events(events.kind, events.src, events.dst)
    return Graph(name, events, src, dst, ids.all_external())


def one_pass(g: Graph, spec, k: int) -> tuple[np.ndarray, object, float]:
    """Labels (waiting vertices placed at the end), the partitioner and the seconds ``observe`` took."""
    p = make_partitioner(spec, k)
    labels = np.empty(g.n, np.int32)
    p.add_vertices(labels, 0, g.n, g.external)
    t0 = time.perf_counter()
    p.observe(labels, g.events.kind, g.src, g.dst, g.events.t)
    seconds = time.perf_counter() - t0
    p.flush(labels)
    return labels, p, seconds


def rebalanced(g: Graph, spec: dict, k: int, every: int, timeline: PartitionTimeline | None = None):
    """``spec`` in a store that rebalances every ``every`` edges; (labels, vertices moved, store)."""
    cfg = PartitionerConfig(**spec, rebalance={"every_edges": every})
    store = TemporalGraphStore(StoreConfig(num_partitions=k, partitioner=cfg))
    step = max(every, len(g.events) // 40)
    for piece in g.events.split(step):
        store.ingest(piece)
        if timeline is not None:
            timeline.record(store)
    store.partitioner.flush(store.partition)  # a vertex seen only in a self-loop waits for a real edge
    if timeline is not None:
        timeline.record(store, force=True)
    labels = store.partition[: store.num_nodes].copy()
    return labels, store.partitioner.moved, store


def static_graph(src: np.ndarray, dst: np.ndarray, n: int):
    """Symmetric CSR without self-loops, edge weight = how often the pair occurs (either direction)."""
    ok = src != dst
    a, b = np.r_[src[ok], dst[ok]], np.r_[dst[ok], src[ok]]
    pair, weight = np.unique(a * n + b, return_counts=True)
    a, b = pair // n, pair % n
    xadj = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=xadj[1:])
    return xadj, b, weight


def metis(csr, k: int, seed: int = 0) -> np.ndarray:
    import pymetis

    xadj, adjncy, weight = csr
    opts = pymetis.Options(ufactor=int(SLACK * 1000), seed=seed)
    _, parts = pymetis.part_graph(
        k, adjacency=pymetis.CSRAdjacency(xadj, adjncy), eweights=weight, options=opts
    )
    return np.asarray(parts, np.int32)


def kahip(csr, k: int, seed: int = 0, skip: bool = False) -> np.ndarray | None:
    if skip:
        return None
    try:
        import kahip
    except ImportError:
        return None
    xadj, adjncy, weight = csr
    n = len(xadj) - 1
    _, parts = kahip.kaffpa(
        [1] * n, xadj.tolist(), weight.tolist(), adjncy.tolist(), k, SLACK, True, seed, kahip.FASTSOCIAL
    )
    return np.asarray(parts, np.int32)


def cut(labels: np.ndarray, g: Graph) -> float:
    return float((labels[g.src] != labels[g.dst]).mean())


def vertex_balance(labels: np.ndarray, k: int) -> float:
    sizes = np.bincount(labels, minlength=k)
    return float(sizes.max() / sizes.mean())


def replication(g: Graph, part: np.ndarray, k: int) -> tuple[float, float]:
    """(replication factor, edge balance) of edges placed at ``part``."""
    per, touched = replica_counts(g.src, g.dst, part.astype(np.int32), g.n, k)
    loads = np.bincount(part, minlength=k)
    return float(per.sum() / touched), float(loads.max() / loads.mean())


def structure(g: Graph, k: int, metis_cut: float, seed: int = 0) -> float:
    """METIS's cut of the graph over its cut of a degree-preserving random null (destinations shuffled)."""
    dst = np.random.default_rng(seed).permutation(g.dst)
    null = Graph(g.name, g.events, g.src, dst, g.external)
    return metis_cut / max(cut(metis(static_graph(null.src, null.dst, g.n), k), null), 1e-9)


def run_dataset(g: Graph, ks, every: int, bar, timeline: PartitionTimeline | None, quick: bool) -> dict:
    out = {}
    for k in ks:
        r: dict = {"cut": {}, "vertex_balance": {}}
        hash_labels = hash_partition(g.external, k)
        r["cut"]["hash"], r["vertex_balance"]["hash"] = cut(hash_labels, g), vertex_balance(hash_labels, k)
        for name, spec in ONE_PASS.items():
            labels, _, _ = one_pass(g, spec, k)
            r["cut"][name], r["vertex_balance"][name] = cut(labels, g), vertex_balance(labels, k)
        r["vertices_moved"] = {}
        for name, spec in REBALANCED.items():
            track = timeline if k == 8 and name == "fennel_rebalance" else None
            labels, r["vertices_moved"][name], _ = rebalanced(g, spec, k, every, track)
            r["cut"][name], r["vertex_balance"][name] = cut(labels, g), vertex_balance(labels, k)
        csr = static_graph(g.src, g.dst, g.n)
        t0 = time.perf_counter()
        labels = metis(csr, k)
        r["metis_seconds"] = time.perf_counter() - t0
        r["cut"]["metis"], r["vertex_balance"]["metis"] = cut(labels, g), vertex_balance(labels, k)
        labels = kahip(csr, k, skip=quick)
        if labels is not None:
            r["cut"]["kahip"], r["vertex_balance"]["kahip"] = cut(labels, g), vertex_balance(labels, k)
        r["metis_vs_null"] = structure(g, k, r["cut"]["metis"])
        offline = min(v for m, v in r["cut"].items() if m in ("metis", "kahip"))
        streaming = {m: v for m, v in r["cut"].items() if m not in ("metis", "kahip", "hash")}
        one = {m: v for m, v in streaming.items() if m in ONE_PASS}
        r["best_streaming"] = min(streaming, key=streaming.get)
        r["best_cut_vs_metis"] = min(streaming.values()) / r["cut"]["metis"]
        r["best_cut_vs_offline"] = min(streaming.values()) / offline
        r["best_cut_vs_hash"] = min(streaming.values()) / r["cut"]["hash"]
        r["best_one_pass_cut_vs_metis"] = min(one.values()) / r["cut"]["metis"]
        rf, eb = {}, {}
        rf["hash_source"], eb["hash_source"] = replication(g, hash_labels[g.src], k)
        rf["hash_edge"], eb["hash_edge"] = replication(g, hash_partition(g.src * g.n + g.dst, k), k)
        for name in ("hdrf", "dbh"):
            _, p, _ = one_pass(g, name, k)
            rf[name], eb[name] = replication(g, p.edge_partition, k)
        r["replication_factor"], r["edge_balance"] = rf, eb
        base = min(rf["hash_source"], rf["hash_edge"])
        r["hdrf_rf_vs_hash"], r["dbh_rf_vs_hash"] = rf["hdrf"] / base, rf["dbh"] / base
        out[k] = r
        bar.update(1)
    return out


def speed(g: Graph, repeats: int) -> dict:
    """Edges per second of one-pass ``observe`` at k = 32 (single thread)."""
    out = {}
    for name in ("ldg", "fennel", "fennel_buffer8", "hdrf", "dbh"):
        spec = ONE_PASS.get(name, name)
        one_pass(graph_of("warm", g.events[:1000]), spec, 32)  # compile or load the cached kernels
        secs = statistics.median(one_pass(g, spec, 32)[2] for _ in range(repeats))
        out[f"{name}_edges_per_s"] = len(g.src) / secs
    return out


def store_overhead(events: EventBatch, repeats: int) -> float:
    """Store ingest time with Fennel over ingest with hash, 200-event batches (median of ``repeats``)."""
    batches = list(events.split(200))

    def run(spec):
        store = TemporalGraphStore(StoreConfig(num_partitions=32, partitioner=spec))
        for b in batches:
            store.ingest(b)

    return median_time(lambda: run("fennel"), repeats) / median_time(lambda: run("hash"), repeats)


def buffer_sweep(g: Graph, k: int) -> list[dict]:
    """Cut of one-pass Fennel against buffered edges per new vertex, and of rebalancing against its period."""
    metis_cut = cut(metis(static_graph(g.src, g.dst, g.n), k), g)
    rows = []
    for b in (1, 2, 4, 8, 16, 32):
        labels, _, _ = one_pass(g, {"name": "fennel", "buffer_edges": b}, k)
        rows.append(
            {
                "method": f"fennel buffer_edges={b}",
                "cut": cut(labels, g),
                "vs_metis": cut(labels, g) / metis_cut,
            }
        )
    for every in (len(g.src) // 5, len(g.src) // 20, len(g.src) // 100):
        labels, moved, _ = rebalanced(g, REBALANCED["fennel_rebalance"], k, every)
        c = cut(labels, g)
        rows.append({"method": f"fennel rebalance every {every} edges", "cut": c, "vs_metis": c / metis_cut,
                     "moved": moved})  # fmt: skip
    return rows


def headline(per: dict, structured: list[str], names: list[str]) -> dict:
    def worst(key, among):
        return max(per[d][k][key] for d in among for k in per[d])

    return {
        "best_cut_vs_metis": worst("best_cut_vs_metis", structured),
        "best_cut_vs_hash": worst("best_cut_vs_hash", structured),
        "best_one_pass_cut_vs_metis": worst("best_one_pass_cut_vs_metis", structured),
        "best_cut_vs_offline": worst("best_cut_vs_offline", structured),
        "best_cut_vs_metis_all_datasets": worst("best_cut_vs_metis", names),
        "hdrf_rf_vs_hash": worst("hdrf_rf_vs_hash", names),
        "dbh_rf_vs_hash": worst("dbh_rf_vs_hash", names),
    }


def plot(per: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(per)
    ks = list(next(iter(per.values())))
    fig, axes = plt.subplots(2, len(ks), figsize=(4.2 * len(ks), 7), squeeze=False)
    for j, k in enumerate(ks):
        methods = list(per[names[0]][k]["cut"])
        x = np.arange(len(names))
        width = 0.8 / len(methods)
        for i, m in enumerate(methods):
            axes[0, j].bar(x + i * width, [per[d][k]["cut"].get(m, np.nan) for d in names], width, label=m)
        axes[0, j].set_title(f"edge cut, k={k}")
        rf_methods = list(per[names[0]][k]["replication_factor"])
        width = 0.8 / len(rf_methods)
        for i, m in enumerate(rf_methods):
            axes[1, j].bar(x + i * width, [per[d][k]["replication_factor"][m] for d in names], width, label=m)
        axes[1, j].set_title(f"replication factor, k={k}")
        for ax in axes[:, j]:
            ax.set_xticks(x + 0.4, names, rotation=30, ha="right", fontsize=8)
    axes[0, 0].legend(fontsize=7)
    axes[1, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


HEADLINE = {
    "best_cut_vs_metis": "best streaming cut vs METIS, worst of {structured_datasets}",
    "best_cut_vs_hash": "best streaming cut vs hash, worst of {structured_datasets}",
    "best_one_pass_cut_vs_metis": "best one-pass cut vs METIS, worst of {structured_datasets}",
    "best_cut_vs_metis_all_datasets": "best streaming cut vs METIS, worst of {all_datasets}",
    "hdrf_rf_vs_hash": "HDRF replication factor vs hash, worst of {all_datasets}",
    "fennel_edges_per_s": "Fennel edges/s, synthetic {synthetic_edges:,}-edge stream",
    "store_ingest_fennel_vs_hash": "store ingest speed with Fennel vs hash placement, CollegeMsg",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="a 200k-edge synthetic stream, k = 4 and 32, no KaHIP or sweep"
    )
    ap.add_argument("--datasets", default=",".join(REAL + ("synthetic",)), help="comma-separated subset")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--plot",
        type=output_file,
        default=None,
        help="write cut/replication bars here (PNG), a timeline beside it",
    )
    ap.add_argument("--synthetic-edges", type=int, default=None, help="edges of the synthetic stream")
    ap.add_argument("--rebalance-every", type=int, default=None, help="edges between rebalancing checks")
    ap.add_argument("--repeats", type=int, default=None, help="timing repeats (median)")
    args = ap.parse_args(argv)
    for key in ("synthetic_edges", "rebalance_every", "repeats"):
        if getattr(args, key) is not None and getattr(args, key) < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1")
    set_threads(1)
    load_before = os.getloadavg()[0]
    chosen = args.datasets.split(",")
    unknown = sorted(set(chosen) - set(REAL) - {"synthetic"})
    if unknown or "synthetic" not in chosen:
        ap.error(f"--datasets: unknown {unknown}; the synthetic stream is always run (speed is timed on it)")
    num_syn = args.synthetic_edges or (200_000 if args.quick else 10_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    ks = (4, 32) if args.quick else KS
    graphs = [graph_of(name, load(name)) for name in REAL if name in chosen]
    graphs.append(graph_of("synthetic", synthetic_stream(num_syn)))
    timeline = PartitionTimeline(every_edges=5000)
    per = {}
    with tqdm(total=len(graphs) * len(ks), desc="partition", leave=False) as bar:
        for g in graphs:
            every = args.rebalance_every or max(2000, len(g.src) // 100)
            track = timeline if g.name == "digg_reply" else None
            per[g.name] = run_dataset(g, ks, every, bar, track, args.quick)
    names = [g.name for g in graphs]
    structured = [d for d in names if max(per[d][k]["metis_vs_null"] for k in per[d]) <= STRUCTURE]
    results = headline(per, structured, names)
    speeds = speed(graphs[-1], repeats)
    results["ldg_edges_per_s"] = speeds["ldg_edges_per_s"]
    results["fennel_edges_per_s"] = speeds["fennel_edges_per_s"]
    results["speed"] = {"stream": "synthetic", "edges": len(graphs[-1].src), "k": 32, **speeds}
    results["store_ingest_fennel_vs_hash"] = store_overhead(load("collegemsg"), repeats + 2)
    results["rebalance_every_edges"] = (
        "1% of each stream, at least 2000" if args.rebalance_every is None else every
    )
    results["community_structure"] = {d: max(per[d][k]["metis_vs_null"] for k in per[d]) for d in names}
    results["no_community_structure"] = [d for d in names if d not in structured]
    if not args.quick:
        results["buffer_sweep_bitcoin_otc_k8"] = buffer_sweep(graphs[0], 8)
    results["datasets"] = {d: {str(k): v for k, v in per[d].items()} for d in names}
    results["synthetic_edges"] = len(graphs[-1].src)
    results["structured_datasets"], results["all_datasets"] = ", ".join(structured), ", ".join(names)
    results["load_avg_1m_before"], results["load_avg_1m_after"] = load_before, os.getloadavg()[0]
    if args.plot:
        plot(per, args.plot)
        timeline.plot(
            os.path.splitext(args.plot)[0] + "_timeline.png", "Fennel + rebalancing, Digg replies, k=8"
        )
    if not args.json:
        for d in names:
            for k, r in per[d].items():
                cuts = " ".join(f"{m}={v:.3f}" for m, v in r["cut"].items())
                rfs = " ".join(f"{m}={v:.2f}" for m, v in r["replication_factor"].items())
                print(f"{d:16s} k={k:<2d} cut: {cuts} | RF: {rfs} | moved: {r['vertices_moved']}")
        results = {key: v for key, v in results.items() if key != "datasets"}
    report(
        results, args.json, "partition: streaming partitioners against hash and METIS", HEADLINE, args.quick
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
