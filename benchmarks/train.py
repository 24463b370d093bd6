"""Training throughput and accuracy: our TGN trainer against PyG's TGN on JODIE Wikipedia, same settings.

python benchmarks/train.py [--quick] [--json] [--epochs N] [--device cuda] [--plot PATH]
(also: streamgnn bench train)

Both sides (ours: TGN alone, without the default model's pair features): chronological 70/15/15 split by
row, dims 100, batch 200, 10 latest neighbors, one attention layer, Adam 1e-4, no edge features; train
events/s is the median over epochs. After the last epoch the
validation part is replayed into memory and the test part is scored test-then-observe against the same
fixed negatives (AP: the first one, mean over batches; MRR: all 100); EdgeBank is scored beside ours on
the same negatives. The embedding latency is measured
separately, in our online loop (test-then-train plus serving-table refresh) over the head of the stream.
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

try:
    from .common import report, set_threads
    from .pyg_tgn import BATCH_SIZE, eval_negatives, split_points, train_pyg_tgn
except ImportError:  # run as a script
    from common import report, set_threads
    from pyg_tgn import BATCH_SIZE, eval_negatives, split_points, train_pyg_tgn

from streamgnn.cli._args import device, output_file, positive_int
from streamgnn.datasets import load
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.train import ChronologicalSplit, OnlineTrainer, TrainConfig, fit_offline

QUICK_FRACTION = 0.2
QUICK_LATENCY_EVENTS = 10_000
WARMUP_EVENTS = 1_000


def train_ours(
    events: EventBatch, epochs: int, negatives, config: TrainConfig, test_with: dict | None = None, **kw
):
    """``fit_offline`` on PyG's split (by row, no withheld nodes), test ranked against ``negatives`` and
    each of ``test_with`` (``eval_negatives``' arrays, ``-1`` padding left out); ``kw``: more of
    ``fit_offline``'s arguments (``patience``)."""
    split = ChronologicalSplit.make(events, by_time=False, new_node_fraction=0.0)
    more = {name: _masked(neg) for name, neg in (test_with or {}).items()}
    return fit_offline(
        events, config, epochs=epochs, split=split, test_negatives=_masked(negatives), test_with=more,
        score_val=False, **kw,
    )  # fmt: skip


def _masked(negatives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, valid)`` of an ``eval_negatives`` array: padding becomes a copy of column 0, masked."""
    valid = negatives >= 0
    return np.where(valid, negatives, negatives[:, :1]), valid


def online_latency(events: EventBatch, config: TrainConfig):
    """Our online loop over ``events`` in batches that arrive as the loop pulls them (no backlog)."""
    return OnlineTrainer(config).fit(events.split(config.batch_size), progress=False)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def plot(results: dict, path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.2), tight_layout=True)
    FigureCanvasAgg(fig)
    speed, score = fig.subplots(1, 2)
    names, colors = ["streamgnn", "PyG TGN"], ["tab:blue", "tab:gray"]
    speed.bar(names, [results["train_events_per_s"], results["train_events_per_s_pyg"]], color=colors)
    speed.set_ylabel("train events / s")
    speed.set_title(f"{results['train_vs_pyg']:.2f}x PyG")
    width = 0.38
    for i, (name, suffix) in enumerate(zip(names, ["", "_pyg"], strict=True)):
        vals = [results["ap" + suffix] or 0.0, results["mrr" + suffix] or 0.0]
        score.bar([j + (i - 0.5) * width for j in range(2)], vals, width, label=name, color=colors[i])
    score.set_xticks([0, 1], ["test AP", "test MRR"])
    score.set_ylim(0, 1)
    score.legend()
    fig.suptitle(f"TGN on {results['dataset']} ({results['events']:,} events, {results['epochs']} epoch(s))")
    fig.savefig(path, dpi=110)


def training_parser(doc: str, quick: str, plot: str, epochs: int | None) -> argparse.ArgumentParser:
    """The flags both training benchmarks (this one, ``quality``) take; ``doc`` is the help text."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--epochs", type=positive_int, default=epochs, help="passes over training, e.g. 3")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch and Numba threads, both sides")
    ap.add_argument("--device", type=device, default="cpu", help="torch device of both sides, e.g. cuda")
    ap.add_argument("--plot", type=output_file, default=None, help=plot)
    ap.add_argument("--events", type=positive_int, default=None, help=argparse.SUPPRESS)  # cap (tests)
    return ap


HEADLINE = {
    "train_events_per_s": "training events/s, JODIE Wikipedia ({events:,} events, {threads} thread(s))",
    "train_vs_pyg": "training speed vs PyG's TGN, JODIE Wikipedia",
    "ap": "test AP, ours, JODIE Wikipedia",
    "ap_pyg": "test AP, PyG's TGN, JODIE Wikipedia",
    "ap_edgebank": "test AP, EdgeBank, JODIE Wikipedia",
    "mrr": "test MRR, ours, JODIE Wikipedia",
    "mrr_pyg": "test MRR, PyG's TGN, JODIE Wikipedia",
    "mrr_edgebank": "test MRR, EdgeBank, JODIE Wikipedia",
    "embedding_latency_p99_ms": "arrival->queryable p99 (ms), JODIE Wikipedia ({latency_events:,} events)",
}


def main(argv: list[str] | None = None) -> int:
    quick = "a run under a minute: the first 20%% of the stream"
    ap = training_parser(__doc__, quick, "write throughput and test scores as a PNG, e.g. train.png", 1)
    args = ap.parse_args(argv)
    set_threads(args.threads)

    events = load("jodie_wikipedia")
    n = int(QUICK_FRACTION * len(events)) if args.quick else len(events)
    events = events.take(slice(0, min(n, args.events or n)))
    _, val_end = split_points(len(events))
    negatives = eval_negatives(events, val_end)
    # TGN alone, as PyG's side (the default model also reads pair features: `bench pairs` and `bench quality`
    # measure what those add)
    config = TrainConfig(model=TGNConfig(pair_features=False), batch_size=BATCH_SIZE, device=args.device)

    # Numba compiles (or loads cached kernels) on first use: keep that out of the timed epochs.
    online_latency(events.take(slice(0, min(WARMUP_EVENTS, len(events)))), config)
    pyg = train_pyg_tgn(events, args.epochs, negatives=negatives, device=args.device)
    ours = train_ours(events, args.epochs, negatives, config)
    latency_events = min(len(events), QUICK_LATENCY_EVENTS) if args.quick else len(events)
    online = online_latency(events.take(slice(0, latency_events)), config)

    rate, rate_pyg = statistics.median(ours.train_events_per_s), statistics.median(pyg.train_events_per_s)
    results = {
        "dataset": "jodie_wikipedia",
        "events": len(events),
        "epochs": args.epochs,
        "threads": args.threads,
        "device": args.device,
        "train_events_per_s": rate,
        "train_events_per_s_pyg": rate_pyg,
        "train_vs_pyg": rate / rate_pyg,
        "ap": _finite(ours.test.ap),
        "ap_pyg": _finite(pyg.ap),
        "mrr": _finite(ours.test.mrr),
        "mrr_pyg": _finite(pyg.mrr),
        "ap_edgebank": _finite(ours.baselines["edgebank"]["test"].ap),
        "mrr_edgebank": _finite(ours.baselines["edgebank"]["test"].mrr),
        "flags": ours.flags,
        "embedding_latency_p50_ms": _finite(online.latency_p50_ms),
        "embedding_latency_p99_ms": _finite(online.latency_p99_ms),
        "latency_events": latency_events,
        "online_events_per_s": online.events_per_s,
    }
    if args.plot:
        plot(results, args.plot)
    report(results, args.json, "train: streamgnn vs PyG TGN, JODIE Wikipedia", HEADLINE, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
