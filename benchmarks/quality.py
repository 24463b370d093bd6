"""Learning quality: our TGN, PyG's TGN and EdgeBank on every bundled interaction stream.

python benchmarks/quality.py [--quick] [--json] [--seeds 0 1] [--epochs 3 | --max-epochs 30 --patience 3]
    [--streams NAME ...] [--plot PATH] [--protocol fixed|dyglib [--negatives random historical inductive]]
    (also: streamgnn bench quality)

``--protocol dyglib`` scores our model (and EdgeBank) under DyGLib's protocol instead, the one TPNet's and
DyGFormer's tables use: ``benchmarks/dyglib.py`` says how it differs. The default, ``--protocol fixed``:
the protocol of ``benchmarks/train.py`` on each stream: events sorted by time (stably), times shifted to
start at 0, no edge features; chronological 70/15/15 split by row; dims 100, batch 200, the 10 latest
neighbors, Adam 1e-4. Training is converged by default (DyGLib's protocol): up to ``--max-epochs`` passes
over the training part, stopping ``--patience`` epochs past the best validation AP and scoring with the
best epoch's weights; ``--epochs N`` trains exactly N passes instead (the older 3-epoch protocol:
``--epochs 3``). Then validation is replayed into memory and the test part is scored test-then-observe
against the same 100 fixed negatives per event on both sides, twice: random over the stream's destinations
(keys ``ap_<stream>`` ...) and historical (TGB's: half destinations the source met before the test, keys
``ap_historical_<stream>`` ...). AP is against the first negative, averaged over batches; MRR against all.
Where a stream (or its ``--quick`` prefix) has fewer candidates than 100, each event is ranked against every
one it has (TGB's rule), on every side; ``negatives_<stream>`` is the fewest any test event had, and a flag
says so.
EdgeBank, unlimited and time-window (``TrainConfig.baselines``), is scored by our trainer beside our model on
the very same positives and negatives; ``worst_gap_to_edgebank`` is the largest EdgeBank-minus-ours over
streams, AP and MRR, both negative kinds and both EdgeBanks. Each figure is the mean over ``--seeds``;
``runs`` holds every seed's values. ``--quick``: the first 4,000 events of each stream, one epoch, seed 0.

Our side is the default model (``TrainConfig()``'s: TGN whose link predictor reads pair features) unless
``--ours`` says otherwise. Beside the streams, two figures of the issue's targets: ``pair_vs_tgn_speed``
(``benchmarks/pairs.py``'s training speed with pair features over the TGN alone, on JODIE Wikipedia's first
30,000 events, or ``--events``: the median of 5 alternating rounds' ratios, 3 with ``--quick``; the rounds'
ratios and spread beside it) and the demo's online scores: ``streamgnn demo``'s trainer settings and store
on its stream (all of JODIE Wikipedia, or ``--events``), replayed in process in batches of the configured size
rather than through a broker, test-then-train: ``demo_ap``, ``demo_mrr`` and each EdgeBank's
(``demo_ap_edgebank``, ``demo_ap_edgebank_tw``, ...); ``demo_gap_to_edgebank`` is the largest
EdgeBank-minus-ours of the four. ``--no-demo`` skips both.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

import numpy as np
from tqdm import tqdm

try:
    from . import dyglib, tgb
    from .common import report, set_threads
    from .pairs import train_speed
    from .pyg_tgn import (
        BATCH_SIZE,
        NUM_EVAL_NEGATIVES,
        PygRecipe,
        eval_negatives,
        negative_counts,
        split_points,
        train_pyg_tgn,
    )
    from .train import train_ours, training_parser
except ImportError:  # run as a script
    import dyglib
    import tgb
    from common import report, set_threads
    from pairs import train_speed
    from pyg_tgn import (
        BATCH_SIZE,
        NUM_EVAL_NEGATIVES,
        PygRecipe,
        eval_negatives,
        negative_counts,
        split_points,
        train_pyg_tgn,
    )
    from train import train_ours, training_parser

from streamgnn.cli._args import positive_int
from streamgnn.datasets import load
from streamgnn.demo import demo_config, demo_store
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.jobs import run_online
from streamgnn.train import TrainConfig
from streamgnn.train.config import model_config

STREAMS = ("jodie_wikipedia", "collegemsg", "bitcoin_otc", "bitcoin_alpha", "digg_reply", "enron")
# The other streams of DyGLib's and TPNet's tables (#36), run when named: US Legis. and Can. Parl. ship, the
# others are read from $STREAMGNN_DATA (streamgnn.datasets: ``shipped``)
TABLE_STREAMS = (
    "uslegis", "canparl", "mooc", "lastfm", "reddit", "socialevo", "untrade", "unvote", "contacts", "flights",
)  # fmt: skip
NEGATIVE_KINDS = ("random", "historical")  # keys: ap_<stream> for random, ap_historical_<stream>
BASELINES = ("edgebank", "edgebank_tw")
QUICK_EVENTS = 4_000
PROTOCOLS = ("fixed", "dyglib", "tgb")
DEMO_DATASET, SPEED_EVENTS = "jodie_wikipedia", 30_000


def prepare(name: str, events: int | None = None) -> EventBatch:
    """Stream ``name`` sorted by time, its first ``events`` rows, times from 0, no features, eids 0..n-1."""
    raw = load(name)
    raw = raw.take(np.argsort(raw.t, kind="stable"))
    n = len(raw) if events is None else min(events, len(raw))
    raw = raw.take(slice(0, n))
    return EventBatch.from_columns(src=raw.src, dst=raw.dst, t=raw.t - raw.t.min(), eid=np.arange(n))


def overrides(pairs: list[str], flag: str) -> dict:
    """``["model.neighbor_time=query", "lr=3e-4"]`` -> ``{"model": {"neighbor_time": "query"}, "lr": 3e-4}``
    (values as JSON where they parse, else strings)."""
    out: dict = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or not key:
            raise ConfigError(f"{flag} takes KEY=VALUE pairs, got {pair!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def run_stream(
    name: str,
    events: EventBatch,
    seeds: list[int],
    epochs: int,
    device: str = "cpu",
    ours: dict | None = None,
    recipe: PygRecipe | None = None,
    patience: int | None = None,
) -> list[dict]:
    """One run per seed of both models on ``events``: test AP/MRR with random and historical negatives,
    epochs trained and the best (whose weights were scored), our validation AP per epoch, training events/s,
    EdgeBank's scores.

    ``ours``: ``TrainConfig`` fields to change (``model``: a dict of ``TGNConfig`` fields, or of
    ``DyGFormerConfig`` fields with ``variant="dygformer"``); ``recipe``: PyG's;
    ``patience``: train up to ``epochs`` until validation stops improving (None: exactly ``epochs``).
    """
    _, val_end = split_points(len(events))
    negatives = eval_negatives(events, val_end)
    historical = {"historical": eval_negatives(events, val_end, strategy="historical")}
    fewest = int(min(negative_counts(neg).min() for neg in (negatives, historical["historical"])))
    ours = dict(ours or {})
    model = model_config(ours.pop("model", {}))
    runs = []
    for seed in seeds:
        pyg = train_pyg_tgn(
            events, epochs, patience=patience, negatives=negatives, with_negatives=historical, seed=seed,
            device=device, recipe=recipe,
        )  # fmt: skip
        config = TrainConfig(
            **{"batch_size": BATCH_SIZE, "seed": seed, "device": device, **ours}, model=model
        )
        ours_result = train_ours(events, epochs, negatives, config, patience=patience, test_with=historical)
        ours_h, pyg_h = ours_result.test_with["historical"], pyg.test_with["historical"]
        run = {
            "stream": name,
            "seed": seed,
            "events": len(events),
            "negatives": fewest,
            "ap": ours_result.test.ap,
            "mrr": ours_result.test.mrr,
            "ap_pyg": pyg.ap,
            "mrr_pyg": pyg.mrr,
            "train_events_per_s": statistics.median(ours_result.train_events_per_s),
            "train_events_per_s_pyg": statistics.median(pyg.train_events_per_s),
            "ap_historical": ours_h.ap,
            "mrr_historical": ours_h.mrr,
            "ap_historical_pyg": pyg_h.ap,
            "mrr_historical_pyg": pyg_h.mrr,
            "epochs": ours_result.epochs,
            "epochs_pyg": pyg.epochs,
            "best_epoch": ours_result.best_epoch,
            "best_epoch_pyg": pyg.best_epoch,
            "val_ap_per_epoch": list(ours_result.val_ap_per_epoch),
        }
        for base in BASELINES:
            for m in ("ap", "mrr"):
                run[f"{m}_{base}"] = getattr(ours_result.baselines[base]["test"], m)
                run[f"{m}_historical_{base}"] = getattr(ours_result.baselines[base]["test_historical"], m)
        runs.append(run)
    return runs


def demo_scores(events: int | None) -> dict:
    """The demo's online run on its stream's first ``events`` (None: all), without the broker (see the
    module docstring): the model's AP/MRR, each EdgeBank's, and the largest EdgeBank-minus-ours."""
    stream = load(DEMO_DATASET)
    stream = stream[:events] if events is not None else stream
    config = dataclasses.replace(
        demo_config(len(stream), "unused", follow="every_event"),  # (test-then-train, as published)
        checkpoint_dir=None,
        checkpoint_every=None,
        serve_every=0,
    )
    result = run_online(stream.split(config.batch_size), demo_store(), config, progress=False)
    out = {"demo_events": result.events, "demo_ap": result.metrics.ap, "demo_mrr": result.metrics.mrr}
    for base, metrics in result.baselines.items():
        out[f"demo_ap_{base}"], out[f"demo_mrr_{base}"] = metrics.ap, metrics.mrr
    out["demo_gap_to_edgebank"] = max(
        out[f"demo_{m}_{base}"] - out[f"demo_{m}"] for base in result.baselines for m in ("ap", "mrr")
    )
    return out


def summarize(runs: list[dict]) -> dict:
    """Per-stream means over seeds (``ap_<stream>``, ``ap_pyg_<stream>``, ...), the worst gaps to PyG, the
    streams where we lose to EdgeBank, and every run."""
    out: dict = {}
    gaps_ap, gaps_mrr, flags = [], [], []
    metrics = ["ap", "mrr", "ap_pyg", "mrr_pyg", "train_events_per_s", "train_events_per_s_pyg"]
    metrics += ["ap_historical", "mrr_historical", "ap_historical_pyg", "mrr_historical_pyg"]
    metrics += ["epochs", "epochs_pyg"]
    metrics += [f"{m}{kind}_{b}" for b in BASELINES for m in ("ap", "mrr") for kind in ("", "_historical")]
    gaps_bank = []
    for stream in dict.fromkeys(r["stream"] for r in runs):
        mine = [r for r in runs if r["stream"] == stream]
        mean = {m: float(np.mean([r[m] for r in mine])) for m in metrics}
        out.update({f"{m}_{stream}": value for m, value in mean.items()})
        out[f"events_{stream}"] = mine[0]["events"]
        out[f"negatives_{stream}"] = fewest = mine[0]["negatives"]
        if fewest < NUM_EVAL_NEGATIVES:
            flags.append(
                f"{stream}: some test events have only {fewest} candidate negatives, not "
                f"{NUM_EVAL_NEGATIVES}: their MRR ranks among fewer"
            )
        gaps_ap.append(mean["ap_pyg"] - mean["ap"])
        gaps_mrr.append(mean["mrr_pyg"] - mean["mrr"])
        for b in BASELINES:
            for m in ("ap", "mrr"):
                for kind in ("", "_historical"):
                    ours, bank = mean[f"{m}{kind}"], mean[f"{m}{kind}_{b}"]
                    gaps_bank.append(bank - ours)
                    if ours < bank:
                        negs = "historical" if kind else "random"
                        flags.append(
                            f"{stream}: ours loses to {b} on {m.upper()} ({negs} negatives): "
                            f"{ours:.4f} < {bank:.4f}"
                        )
    out["worst_ap_gap"] = max(gaps_ap)
    out["worst_mrr_gap"] = max(gaps_mrr)
    out["worst_gap_to_edgebank"] = max(gaps_bank)
    out["flags"] = flags
    out["runs"] = runs
    return out


def plot(summary: dict, streams: list[str], path: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6), tight_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    sides = [("ours", ""), ("PyG TGN", "_pyg"), ("EdgeBank", "_edgebank"), ("EdgeBank tw", "_edgebank_tw")]
    width = 0.2
    for ax, metric in zip(axes, ("ap", "mrr"), strict=True):
        for i, (label, suffix) in enumerate(sides):
            values = [summary[f"{metric}{suffix}_{s}"] for s in streams]
            ax.bar(np.arange(len(streams)) + (i - 1.5) * width, values, width, label=label)
        ax.set_xticks(range(len(streams)), [s.replace("_", "\n") for s in streams], fontsize=8)
        ax.set_ylabel(f"test {metric.upper()}")
        ax.set_ylim(0, 1)
    axes[0].legend(fontsize=8)
    fig.savefig(path, dpi=110)


def _parser():
    quick = "the first 4,000 events of each stream, 1 epoch, seed 0"
    ap = training_parser(__doc__, quick, "write AP and MRR per stream as a PNG, e.g. quality.png", None)
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="e.g. --seeds 0 1 (default 0 1)")
    ap.add_argument(
        "--max-epochs", type=positive_int, default=30, help="converged training's most epochs (default 30)"
    )
    ap.add_argument(
        "--patience", type=positive_int, default=3,
        help="epochs without a better validation AP before training stops (default 3; DyGLib's is 20)",
    )  # fmt: skip
    ap.add_argument(
        "--streams", nargs="+", choices=STREAMS + TABLE_STREAMS, default=list(STREAMS),
        help=f"e.g. collegemsg (default: {' '.join(STREAMS)}; also DyGLib's {' '.join(TABLE_STREAMS)})",
    )  # fmt: skip
    ap.add_argument(
        "--ours", nargs="+", default=[], metavar="KEY=VALUE",
        help="TrainConfig fields for our side, for ablations, e.g. --ours model.neighbor_time=query lr=3e-4; "
        "model.variant=dygformer: the DyGFormer-style model",
    )  # fmt: skip
    ap.add_argument(
        "--pyg", nargs="+", default=[], metavar="KEY=VALUE",
        help="PygRecipe fields for PyG's side, e.g. --pyg neighbor_time=query negatives=seen",
    )  # fmt: skip
    ap.add_argument(
        "--no-demo", action="store_true", help="skip the demo's online run and the pair-feature speed ratio"
    )
    ap.add_argument(
        "--protocol", choices=PROTOCOLS, default="fixed",
        help="fixed (default): the protocol above, row split, 100 fixed negatives per event, PyG's TGN and "
        "EdgeBank beside; dyglib: DyGLib's (benchmarks/dyglib.py: time split, one negative edge per "
        "positive, AP/AUC per batch; our model and EdgeBank), keys ap_dyglib_<stream> ... (the tables' "
        "names: collegemsg is uci); tgb: TGB's (benchmarks/tgb.py: TGB's negatives and Evaluator, needs "
        "py-tgb), keys mrr_tgb_<dataset> (DyGLib_TGB's view: a test edge sees its batch's earlier ones) "
        "and mrr_tgb_batch_<dataset> (the stricter view: nothing of its batch)",
    )  # fmt: skip
    ap.add_argument(
        "--tgb-datasets", nargs="+", default=["tgbl-wiki"], metavar="NAME",
        help=f"--protocol tgb's datasets (default tgbl-wiki: bundled; others read TGB's files under "
        f"${tgb.ROOT_ENV})",
    )  # fmt: skip
    ap.add_argument(
        "--tgb-groups", metavar="DIR",
        help="--protocol tgb: also group the test edges by the source's history with the true destination "
        "(repeat by recency rank, new) with our MRR and simple heuristics' per group (benchmarks/"
        "tgb_groups.py; runs[i].groups), each edge's reciprocal ranks saved in DIR",
    )  # fmt: skip
    ap.add_argument(
        "--negatives", nargs="+", choices=dyglib.STRATEGIES, default=["random", "historical"],
        help="--protocol dyglib's negative kinds (default random historical; random is always scored: "
        "keys ap_dyglib_<stream>, the others ap_dyglib_<kind>_<stream>)",
    )  # fmt: skip
    ap.add_argument(
        "--sees-batch", action=argparse.BooleanOptionalAction, default=True,
        help="--protocol dyglib and tgb: train as DyGLib's (DyGLib_TGB's) trainer, each event seeing its "
        "batch's earlier events (default; fit_offline(sees_batch=True); the test always does); "
        "--no-sees-batch: each training batch from the state before it",
    )  # fmt: skip
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:  # refuse a bad field or value now, not after hours of training
        ours, recipe = overrides(args.ours, "--ours"), PygRecipe(**overrides(args.pyg, "--pyg"))
        TrainConfig(**{**ours, "model": model_config(ours.get("model", {}))})
    except (TypeError, ConfigError) as exc:
        ap.error(str(exc))
    set_threads(args.threads)
    seeds = args.seeds or ([0] if args.quick else [0, 1])
    fixed = args.epochs or (1 if args.quick else None)
    epochs, patience = (fixed, None) if fixed else (args.max_epochs, args.patience)
    cap = args.events or (QUICK_EVENTS if args.quick else None)
    if args.protocol == "dyglib":
        return _main_dyglib(args, ours, seeds, epochs, patience, cap)
    if args.protocol == "tgb":
        return _main_tgb(args, ours, seeds, epochs, patience, cap)
    return _main_fixed(args, ours, recipe, seeds, epochs, patience, cap)


def _main_fixed(args, ours: dict, recipe, seeds: list[int], epochs, patience: int | None, cap) -> int:
    """``--protocol fixed``: ours, PyG's TGN and EdgeBank on each stream; the demo's scores and speed."""
    runs = []
    bar = tqdm(args.streams, unit="stream", disable=args.json)
    for name in bar:
        bar.set_postfix_str(name)
        runs += run_stream(name, prepare(name, cap), seeds, epochs, args.device, ours, recipe, patience)
    summary = summarize(runs)
    if not args.no_demo:
        speed_events = min(cap or SPEED_EVENTS, SPEED_EVENTS)
        summary.update(train_speed(load(DEMO_DATASET)[:speed_events], 3 if args.quick else 5))
        summary["speed_events"] = speed_events
        summary.update(demo_scores(cap))
    summary.update(seeds=seeds, epochs=epochs, patience=patience, threads=args.threads, device=args.device)
    summary["ours"] = ours
    summary["pyg"] = dataclasses.asdict(recipe)
    if args.plot:
        plot(summary, args.streams, args.plot)
    headline = {
        "worst_ap_gap": "worst AP gap to PyG's TGN (theirs - ours), over the streams below",
        "worst_mrr_gap": "worst MRR gap to PyG's TGN (theirs - ours), over the streams below",
        "worst_gap_to_edgebank": "worst gap to either EdgeBank (theirs - ours), AP/MRR, both negative kinds",
        "pair_vs_tgn_speed": "training events/s with pair features / without ({speed_events:,} Wikipedia)",
        "demo_ap": "the demo's online AP ({demo_events:,} events of JODIE Wikipedia)",
        "demo_ap_edgebank": "the demo's online AP, EdgeBank",
        "demo_ap_edgebank_tw": "the demo's online AP, time-window EdgeBank",
        "demo_mrr": "the demo's online MRR",
        "demo_mrr_edgebank": "the demo's online MRR, EdgeBank",
        "demo_mrr_edgebank_tw": "the demo's online MRR, time-window EdgeBank",
    }
    for stream in args.streams:
        for side, suffix in (("ours", ""), ("PyG's TGN", "_pyg"), ("EdgeBank", "_edgebank")):
            headline[f"ap{suffix}_{stream}"] = f"test AP, {side}, {stream}"
    report(
        summary,
        args.json,
        "quality: our TGN vs PyG's TGN vs EdgeBank, test AP/MRR",
        headline,
        args.quick,
    )
    return 0


def _main_dyglib(args, ours: dict, seeds: list[int], epochs: int, patience: int | None, cap) -> int:
    """``--protocol dyglib``: our model (and EdgeBank) on each stream under DyGLib's protocol."""
    runs = []
    streams = {name: prepare(name, cap) for name in args.streams}  # a missing file fails now, not hours in
    for name, events in tqdm(streams.items(), unit="stream", disable=args.json):
        for seed in seeds:
            config = _config(ours, seed, args.device)
            runs.append(
                dyglib.run_stream(name, events, config, args.negatives, epochs, patience, args.sees_batch)
            )
    summary = dyglib.summarize(runs)
    summary.update(
        protocol="dyglib", negatives=args.negatives, sees_batch=args.sees_batch, seeds=seeds, epochs=epochs,
        patience=patience, threads=args.threads, device=args.device, ours=ours,
    )  # fmt: skip
    headline = {"worst_gap_to_tpnet": "worst AP gap to TPNet's published (TPNet - ours), streams below"}
    for stream in args.streams:
        name = dyglib.published(stream)  # the key names the stream as the published tables do
        headline[f"ap_dyglib_{name}"] = f"test AP, DyGLib's protocol, random negatives, {stream}"
        headline[f"ap_dyglib_batch_{name}"] = f"test AP, same, each batch from the state before it, {stream}"
        headline[f"ap_dyglib_edgebank_{name}"] = f"test AP, same, EdgeBank, {stream}"
        headline[f"ap_dyglib_edgebank_tw_{name}"] = f"test AP, same, time-window EdgeBank, {stream}"
        headline[f"tpnet_ap_dyglib_{name}"] = f"TPNet's published AP (Table 1), random negatives, {stream}"
        for kind in args.negatives:
            if kind != "random":
                headline[f"ap_dyglib_{kind}_{name}"] = (
                    f"test AP, DyGLib's protocol, {kind} negatives, {stream}"
                )
    report(summary, args.json, "quality under DyGLib's protocol: ours vs EdgeBank", headline, args.quick)
    return 0


def _main_tgb(args, ours: dict, seeds: list[int], epochs: int, patience: int | None, cap) -> int:
    """``--protocol tgb``: our model on each TGB dataset, TGB's negatives and ``Evaluator``."""
    tgb.require_tgb()  # (errors: ConfigError, one line from the CLI)
    runs = []
    with tgb.workdir() as tmp:
        for name in tqdm(args.tgb_datasets, unit="dataset", disable=args.json):
            data = tgb.open_dataset(name, tmp, lambda stream: prepare(stream, cap))
            for seed in seeds:
                config = _config(ours, seed, args.device)
                runs.append(tgb.run(data, config, epochs, patience, args.tgb_groups, args.sees_batch))
    summary = tgb.summarize(runs)
    summary.update(
        protocol="tgb", sees_batch=args.sees_batch, seeds=seeds, epochs=epochs, patience=patience,
        threads=args.threads,
        device=args.device, ours=ours,
    )  # fmt: skip
    headline = {}
    for name in args.tgb_datasets:
        key = tgb.short(name)
        headline[f"mrr_tgb_{key}"] = (
            f"test MRR, TGB's protocol and Evaluator, DyGLib_TGB's view (the batch's earlier edges), {name}"
        )
        headline[f"mrr_tgb_batch_{key}"] = f"test MRR, same, each batch seeing nothing of itself, {name}"
        headline[f"gap_to_leader_tgb_{key}"] = f"the leaderboard's best minus ours, {name}"
    report(summary, args.json, "quality under TGB's protocol", headline, args.quick)
    return 0


def _config(ours: dict, seed: int, device: str) -> TrainConfig:
    """Our side's ``TrainConfig``: the benchmark's batch size, ``seed``, and the ``--ours`` overrides."""
    fields = {k: v for k, v in ours.items() if k != "model"}
    model = model_config(ours.get("model", {}))
    return TrainConfig(**{"batch_size": BATCH_SIZE, "seed": seed, "device": device, **fields}, model=model)


if __name__ == "__main__":
    raise SystemExit(main())
