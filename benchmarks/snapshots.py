"""Snapshots: incremental vs rebuilt (Travian), memory on a long stream, PGT models on our signals.

python benchmarks/snapshots.py [--quick] [--json] [--plot PATH]    (also: streamgnn bench snapshots)

- travian: daily snapshots of Travian attacks (632,800 events; the first 10 days with --quick) cut while
  the events stream in, each made incrementally (``SnapshotBuilder``) and rebuilt from all events so far
  (``snapshot_at``) at the same moment; the ratio of the totals, median of ``--repeats`` passes (every
  pair checked equal).
- memory: window snapshots over a synthetic power-law stream (10M events; 1M with --quick): the builder's
  own bytes against the largest snapshot, and their growth from the first half of the stream to the second.
- chickenpox: PGT's GConvGRU example (lags 4, 80/20 split, Adam 0.01, no state across snapshots, one step
  per epoch; --quick: the first 261 weeks, 1 epoch) trained by ``SnapshotTrainer`` on our signal (the JSON
  replayed as events through the store) and by PGT's example loop on the signal PGT's own loader class
  builds from the same file; test MSE.
- bitcoin_otc: monthly window snapshots, next-month link prediction with GConvGRU (degree features, state
  carried, a step per snapshot), against a snapshot EdgeBank and preferential attachment on the same
  chronological split and the same negatives (20 per positive): AUC and MRR, averaged over the test snapshots.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
import tracemalloc

import numpy as np

try:
    from .common import report, set_threads
    from .store import power_law_stream
except ImportError:  # run as a script
    from common import report, set_threads
    from store import power_law_stream

import torch
from tqdm import tqdm

from streamgnn.cli._args import output_file, positive_int
from streamgnn.datasets import load, pgt
from streamgnn.snapshots import (
    NextLinks,
    NodeTarget,
    SnapshotBuilder,
    SnapshotSpec,
    SnapshotTrainConfig,
    SnapshotTrainer,
    build_signal,
    snapshot_at,
)
from streamgnn.snapshots.baselines import SnapshotEdgeBank, SnapshotPreferentialAttachment, evaluate_links
from streamgnn.store import TemporalGraphStore

DAY = 86_400.0
TRAVIAN_FIRST_DAY = 1_259_643_600.0  # 2009-12-01 05:00 UTC: the daily files run midnight to midnight Eastern


# ---------------------------------------------------------------------------------------------- travian
def travian_pass(events, spec: SnapshotSpec, check: bool) -> tuple[list[float], list[float]]:
    """Per snapshot: seconds to cut it incrementally and to rebuild it, as the events stream in."""
    store = TemporalGraphStore()
    builder = SnapshotBuilder(store, spec)
    inc, reb = [], []
    t = spec.start

    def cut():
        t0 = time.perf_counter()
        a = builder.advance(t)
        t1 = time.perf_counter()
        b = snapshot_at(store, t, spec)
        reb.append(time.perf_counter() - t1)
        inc.append(t1 - t0)
        if check:
            a, b = a.canonical(), b.canonical()
            assert np.array_equal(a.edge_index, b.edge_index) and np.array_equal(a.edge_weight, b.edge_weight)

    for batch in events.split(10_000):
        store.ingest(batch)
        while store.watermark > t:
            cut()
            t += spec.every
    cut()  # the last day: through the end of the stream
    return inc, reb


def travian(days: int, repeats: int) -> dict:
    events = load("travian_attacks")
    events = events[: int(np.searchsorted(events.t, TRAVIAN_FIRST_DAY + days * DAY))]
    specs = {
        "state": SnapshotSpec(every=DAY, start=TRAVIAN_FIRST_DAY + DAY, weight="count"),
        "window": SnapshotSpec(kind="window", every=DAY, start=TRAVIAN_FIRST_DAY + DAY, weight="count"),
    }
    out = {"travian_events": len(events)}
    for kind, spec in specs.items():
        travian_pass(events[:2000], spec, check=True)  # compile (or load the cached kernels) first
        runs = [travian_pass(events, spec, check=r == 0) for r in range(repeats)]
        ratios = [sum(reb) / sum(inc) for inc, reb in runs]
        suffix = "" if kind == "state" else "_window"
        out[f"incremental_vs_rebuild{suffix}"] = statistics.median(ratios)
        out[f"incremental_vs_rebuild{suffix}_runs"] = ratios
        out[f"travian_{kind}_incremental_s"] = statistics.median(sum(inc) for inc, _ in runs)
        out[f"travian_{kind}_rebuild_s"] = statistics.median(sum(reb) for _, reb in runs)
        out["travian_snapshots"] = len(runs[0][0])
        out[f"_travian_{kind}_per_snapshot"] = runs[0]
    return out


# ---------------------------------------------------------------------------------------------- memory
def memory(n: int, snapshots: int = 100) -> dict:
    stream = power_law_stream(n, nodes=max(1000, n // 10))
    every = n / snapshots
    spec = SnapshotSpec(kind="window", every=every, start=every, weight="count")
    store = TemporalGraphStore()
    builder = SnapshotBuilder(store, spec)
    tracemalloc.start()
    held, snap_bytes, store_bytes, cut_peaks, t = [], [], [], [], spec.start
    bar = tqdm(total=n, desc="memory", unit="ev", unit_scale=True, leave=False)
    peak = 0
    for batch in stream.split(10_000):
        store.ingest(batch)
        bar.update(len(batch))
        while store.watermark > t:
            before, ingest_peak = tracemalloc.get_traced_memory()
            peak = max(peak, ingest_peak)
            tracemalloc.reset_peak()
            snap = builder.advance(t)  # used, then dropped: nothing holds old snapshots
            cut_peaks.append(tracemalloc.get_traced_memory()[1] - before)
            held.append(builder.nbytes())
            snap_bytes.append(snap.nbytes())
            store_bytes.append(store.nbytes()["total"])
            t += every
    bar.close()
    peak = max(peak, tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    half = len(held) // 2
    return {
        "memory_events": n,
        "memory_snapshots": len(held),
        "memory_builder_max_mb": max(held) / 1e6,
        "memory_snapshot_max_mb": max(snap_bytes) / 1e6,
        "memory_window_events": int(every),
        "memory_builder_vs_snapshot": max(held) / max(snap_bytes),
        "memory_builder_bytes_per_window_event": max(held) / every,
        "memory_cut_peak_mb": max(cut_peaks) / 1e6,
        "memory_builder_growth": max(held[half:]) / max(held[:half]),
        "memory_store_mb": store_bytes[-1] / 1e6,
        "memory_peak_traced_mb": peak / 1e6,
        "memory_peak_beyond_store_mb": (peak - store_bytes[-1]) / 1e6,
        "_memory_series": (held, snap_bytes, store_bytes),
    }


# ---------------------------------------------------------------------------------------------- chickenpox
def pgt_example_mse(signal, seed: int, epochs: int) -> float:
    """PGT's examples/recurrent/gconvgru_example.py on ``signal`` (its loss with ``y_hat`` squeezed: the
    example's ``[N, 1] - [N]`` broadcasts into an N x N matrix)."""
    import torch.nn.functional as F
    from torch_geometric_temporal.nn.recurrent import GConvGRU
    from torch_geometric_temporal.signal import temporal_signal_split

    class RecurrentGCN(torch.nn.Module):
        def __init__(self, node_features):
            super().__init__()
            self.recurrent = GConvGRU(node_features, 32, 1)
            self.linear = torch.nn.Linear(32, 1)

        def forward(self, x, edge_index, edge_weight):
            return self.linear(F.relu(self.recurrent(x, edge_index, edge_weight)))

    torch.manual_seed(seed)
    train, test = temporal_signal_split(signal, train_ratio=0.8)
    model = RecurrentGCN(node_features=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for _ in range(epochs):
        cost = 0
        for snap in train:
            cost = cost + torch.mean(
                (model(snap.x, snap.edge_index, snap.edge_attr).squeeze(-1) - snap.y) ** 2
            )
        (cost / train.snapshot_count).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        costs = [torch.mean((model(s.x, s.edge_index, s.edge_attr).squeeze(-1) - s.y) ** 2) for s in test]
    return float(torch.stack(costs).mean())


def pgt_chickenpox_signal():
    """The signal PGT's own ChickenpoxDatasetLoader builds, fed the bundled JSON instead of its download."""
    from torch_geometric_temporal.dataset import ChickenpoxDatasetLoader

    class Bundled(ChickenpoxDatasetLoader):
        def _read_web_data(self):
            self._dataset = pgt.read_json("chickenpox")

    return Bundled().get_dataset(lags=4)


def chickenpox(seeds: list[int], epochs: int, weeks: int = 521) -> dict:
    """``weeks``: a shorter series for tests (both signals cut the same)."""
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    store = TemporalGraphStore()
    store.ingest(pgt.series_events("chickenpox"))
    until = weeks - 1.0
    ours = build_signal(store, SnapshotSpec(every=1.0, start=0.0), target=NodeTarget(lags=4), until=until)
    theirs = pgt_chickenpox_signal()[: weeks - 4]
    cfg = SnapshotTrainConfig(lr=0.01, epochs=epochs, carry_state=False, train_ratio=0.8)
    mine, pgts = [], []
    for seed in tqdm(seeds, desc="chickenpox seeds", leave=False):
        torch.manual_seed(seed)
        trainer = SnapshotTrainer(GConvGRU(4, 32, 1), dataclasses.replace(cfg, seed=seed))
        mine.append(trainer.fit(ours, progress=False).summary["test_mse"])
        pgts.append(pgt_example_mse(theirs, seed, epochs))
    return {
        "chickenpox_mse": float(np.mean(mine)),
        "chickenpox_mse_pgt": float(np.mean(pgts)),
        "chickenpox_mse_runs": mine,
        "chickenpox_mse_pgt_runs": pgts,
        "chickenpox_epochs": epochs,
        "chickenpox_snapshots": ours.snapshot_count,
    }


# ---------------------------------------------------------------------------------------------- bitcoin
def bitcoin(seeds: list[int], epochs: int, negatives: int = 20) -> dict:
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    store = TemporalGraphStore()
    store.ingest(load("bitcoin_otc"))
    month = 30 * DAY
    spec = SnapshotSpec(kind="window", every=month, weight="count", undirected=True, degree_features=True)
    signal = build_signal(store, spec, target=NextLinks(negatives=negatives, seed=0))
    snaps = list(signal)
    cut = int(0.7 * len(snaps))  # as temporal_signal_split
    runs = []
    for seed in tqdm(seeds, desc="bitcoin seeds", leave=False):
        torch.manual_seed(seed)
        cfg = SnapshotTrainConfig(task="link", lr=0.01, epochs=epochs, bptt=1, train_ratio=0.7, seed=seed)
        result = SnapshotTrainer(GConvGRU(2, 32, 2), cfg).fit(snaps, progress=False)
        runs.append((result.mean("auc", "test"), result.mean("mrr", "test")))
    out = {
        "bitcoin_otc_snapshots": len(snaps),
        "bitcoin_otc_test_snapshots": len(snaps) - cut,
        "bitcoin_otc_negatives": negatives,
        "bitcoin_otc_epochs": epochs,
        "bitcoin_otc_auc": float(np.mean([a for a, _ in runs])),
        "bitcoin_otc_mrr": float(np.mean([m for _, m in runs])),
        "bitcoin_otc_auc_runs": [a for a, _ in runs],
    }
    for name, scorer in (
        ("edgebank", SnapshotEdgeBank(undirected=True)),
        ("pa", SnapshotPreferentialAttachment()),
    ):
        ms = evaluate_links(scorer, snaps, start=cut)
        out[f"bitcoin_otc_auc_{name}"] = float(np.nanmean([m.auc for m in ms]))
        out[f"bitcoin_otc_mrr_{name}"] = float(np.nanmean([m.mrr for m in ms]))
    return out


# ---------------------------------------------------------------------------------------------- report
def plot(results: dict, path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 7.5), tight_layout=True)
    FigureCanvasAgg(fig)
    (a, b), (c, d) = fig.subplots(2, 2)
    inc, reb = results["_travian_state_per_snapshot"]
    days = np.arange(1, len(inc) + 1)
    a.semilogy(days, np.array(inc) * 1e3, marker=".", label="incremental")
    a.semilogy(days, np.array(reb) * 1e3, marker=".", label="rebuilt from all events so far")
    a.set(xlabel="day", ylabel="ms per snapshot", title="Travian attacks, daily state snapshots")
    a.legend()
    held, snap, store = results["_memory_series"]
    k = np.arange(1, len(held) + 1)
    b.plot(k, np.array(store) / 1e6, label="store")
    b.plot(k, np.array(held) / 1e6, label="snapshot builder")
    b.plot(k, np.array(snap) / 1e6, label="live snapshot")
    b.set(xlabel="window snapshot", ylabel="MB", title=f"{results['memory_events'] / 1e6:g}M-event stream")
    b.legend()
    mine, pgts = results["chickenpox_mse_runs"], results["chickenpox_mse_pgt_runs"]
    x = np.arange(len(mine))
    c.bar(x - 0.2, mine, 0.4, label="our signal (store), SnapshotTrainer")
    c.bar(x + 0.2, pgts, 0.4, label="PGT's signal, PGT's example loop")
    c.set(xticks=x, xticklabels=[f"seed {i}" for i in x], ylabel="test MSE",
          title=f"Chickenpox GConvGRU, {results['chickenpox_epochs']} epochs")  # fmt: skip
    c.legend(loc="lower right")
    names = ["GConvGRU", "EdgeBank", "pref. attachment"]
    aucs = [results["bitcoin_otc_auc"], results["bitcoin_otc_auc_edgebank"], results["bitcoin_otc_auc_pa"]]
    mrrs = [results["bitcoin_otc_mrr"], results["bitcoin_otc_mrr_edgebank"], results["bitcoin_otc_mrr_pa"]]
    x = np.arange(3)
    d.bar(x - 0.2, aucs, 0.4, label="AUC")
    d.bar(x + 0.2, mrrs, 0.4, label="MRR")
    d.set(xticks=x, xticklabels=names, ylim=(0, 1), title="Bitcoin OTC, next-month links (test snapshots)")
    d.legend()
    fig.savefig(path, dpi=110)


PARTS = ("travian", "memory", "chickenpox", "bitcoin")


def collect(
    *,
    days: int,
    repeats: int,
    events: int,
    seeds: list[int],
    chickenpox_epochs: int,
    bitcoin_epochs: int,
    weeks: int = 521,
    parts: tuple[str, ...] = PARTS,
) -> dict:
    """The figures of ``parts`` (keys starting with ``_`` feed the plot only)."""
    run = {
        "travian": lambda: travian(days, repeats),
        "memory": lambda: memory(events),
        "chickenpox": lambda: chickenpox(seeds, chickenpox_epochs, weeks),
        "bitcoin": lambda: bitcoin(seeds, bitcoin_epochs),
    }
    results = {}
    for part in parts:
        results.update(run[part]())
    return {**results, "load_average": os.getloadavg()}


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(p.strip() for p in text.split(","))
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown parts {unknown}; choose from {', '.join(PARTS)}")
    return parts


HEADLINE = {
    "incremental_vs_rebuild": "daily state snapshots, incremental vs rebuilt, Travian attacks",
    "incremental_vs_rebuild_window": "daily window snapshots, incremental vs rebuilt, Travian attacks",
    "memory_builder_vs_snapshot": "builder memory vs one snapshot, synthetic {memory_events:,}-event stream",
    "chickenpox_mse": "test MSE, our signal + SnapshotTrainer, Chickenpox",
    "chickenpox_mse_pgt": "test MSE, PGT's signal + its example loop, Chickenpox",
    "bitcoin_otc_auc": "next-month link AUC, GConvGRU, Bitcoin OTC",
    "bitcoin_otc_auc_edgebank": "next-month link AUC, EdgeBank, Bitcoin OTC",
    "bitcoin_otc_auc_pa": "next-month link AUC, preferential attachment, Bitcoin OTC",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a run under a minute (smaller parts, 1 seed)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeats", type=positive_int, help="Travian passes (default 3; --quick 1)")
    ap.add_argument("--events", type=positive_int, help="memory stream length (default 10M; --quick 1M)")
    ap.add_argument("--epochs", type=positive_int, help="Chickenpox epochs (default 20; --quick 1)")
    ap.add_argument("--seeds", type=positive_int, help="seeds per model (default 3; --quick 1)")
    ap.add_argument(
        "--plot",
        type=output_file,
        default=None,
        help="write the four figures as one PNG, e.g. --plot snapshots.png",
    )
    ap.add_argument(
        "--only", type=_parts, default=PARTS, help=f"some of {', '.join(PARTS)}, e.g. --only memory"
    )
    args = ap.parse_args(argv)
    if args.plot and args.only != PARTS:
        ap.error("--plot draws every part: leave out --only")
    set_threads(1)
    quick = args.quick
    seeds = list(range(args.seeds or (1 if quick else 3)))
    results = collect(
        days=10 if quick else 30,
        repeats=args.repeats or (1 if quick else 3),
        events=args.events or (1_000_000 if quick else 10_000_000),
        seeds=seeds,
        chickenpox_epochs=args.epochs or (1 if quick else 20),
        bitcoin_epochs=3 if quick else 30,
        weeks=261 if quick else 521,
        parts=args.only,
    )
    if args.plot:
        plot(results, args.plot)
    shown = {k: v for k, v in results.items() if not k.startswith("_")}
    report(
        shown,
        args.json,
        "snapshots: incremental state, memory, PGT parity, link baselines",
        HEADLINE,
        args.quick,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
