"""``streamgnn snapshots``: cut snapshots from a dataset, events file or Kafka topic into a signal on disk."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._args import positive_int

EXAMPLES = """examples:
  streamgnn snapshots bitcoin_otc --out otc-monthly --kind window --every 2592000 --weight count \\
      --undirected --degree-features --target links --negatives 20
  streamgnn snapshots events.jsonl --out daily --every 86400 --weight decay --half-life 604800
  streamgnn snapshots ratings --bootstrap localhost:9092 --out live --every 3600 --lateness 60
read it back with streamgnn.snapshots.files.read_signal(FOLDER): a PyTorch Geometric Temporal signal."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def _times(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None


def _source(args: argparse.Namespace, store):
    if args.bootstrap:
        from ..connectors.kafka import KafkaSource

        return KafkaSource(args.source, bootstrap_servers=args.bootstrap, group_id=args.group, store=store)
    from ..connectors.files import DatasetSource, JsonLinesSource
    from ..errors import ConfigError

    path = Path(args.source)
    if path.is_file():
        return JsonLinesSource(path, batch_size=args.batch_size)
    if path.suffix or len(path.parts) > 1:
        raise ConfigError(
            f"no events file at {path}: give a JSON-lines events file, a dataset name or a topic"
        )
    return DatasetSource(args.source, batch_size=args.batch_size)


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    import numpy as np
    from tqdm import tqdm

    from ..snapshots import NextLinks, NodeTarget, SnapshotSpec, live_snapshots
    from ..snapshots.files import SignalWriter, check_output_folder
    from ..store import StoreConfig, TemporalGraphStore

    check_output_folder(args.out)  # before any long work
    spec = SnapshotSpec(
        kind=args.kind, every=args.every, start=args.start, times=args.times, width=args.width,
        weight=args.weight, half_life=args.half_life, undirected=args.undirected,
        degree_features=args.degree_features,
    )  # fmt: skip
    target = None
    if args.target == "links":
        target = NextLinks(negatives=args.negatives, seed=args.seed)
    elif args.target == "node":
        target = NodeTarget(column=args.column, horizon=args.horizon, lags=args.lags)
    store = TemporalGraphStore(StoreConfig(allowed_lateness=args.lateness))
    source = _source(args, store)
    writer = SignalWriter(args.out)
    snaps = live_snapshots(source, store, spec, target=target, idle_timeout_s=args.idle_timeout)
    most_nodes = edges = 0
    try:
        for snap in tqdm(snaps, unit="snapshot", disable=args.quiet, dynamic_ncols=True):
            writer.write(snap)
            most_nodes, edges = max(most_nodes, snap.num_nodes), edges + snap.num_edges
    finally:
        if callable(getattr(source, "close", None)):
            source.close()
    meta = {"source": args.source, "spec": spec.as_dict(), "target": args.target, "lateness": args.lateness}
    folder = writer.close(node_ids=store.external_ids(np.arange(most_nodes)), meta=meta)
    print(f"{len(writer.times):,} snapshots ({edges:,} edges in all, up to {most_nodes:,} nodes) in {folder}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "snapshots",
        help="cut snapshots from a dataset, events file or topic into a signal folder",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "source", help="dataset name (streamgnn datasets), a .jsonl events file, or a topic with --bootstrap"
    )
    p.add_argument(
        "--out", required=True, help="a new or empty folder for the signal, e.g. --out otc-monthly"
    )
    p.add_argument(
        "--every", type=_positive_float, help="seconds between snapshots, e.g. --every 86400 (daily)"
    )
    p.add_argument("--times", type=_times, help="explicit snapshot times instead, e.g. --times 100,200,350")
    p.add_argument("--start", type=float, help="time of the first snapshot (default: the first multiple of "
                   "--every after the first event)")  # fmt: skip
    p.add_argument("--kind", choices=("state", "window"), default="state",
                   help="state: edges valid at t (deletions respected); window: edges that arrived in "
                   "[t - width, t)")  # fmt: skip
    p.add_argument("--width", type=_positive_float, help="window width in seconds (default: --every)")
    p.add_argument("--weight", choices=("none", "count", "column", "decay"), default="none",
                   help="edge weight: 1, events per pair, sum of weights, decayed count")  # fmt: skip
    p.add_argument(
        "--half-life", type=_positive_float, help="decay half-life in seconds, e.g. 604800 (a week)"
    )
    p.add_argument("--undirected", action="store_true", help="one edge per unordered pair, both directions")
    p.add_argument("--degree-features", action="store_true", help="append log1p(out, in degree) to x")
    p.add_argument(
        "--target",
        choices=("none", "links", "node"),
        default="none",
        help="links: next-snapshot links with negatives; node: a feature column ahead",
    )
    p.add_argument(
        "--negatives", type=positive_int, default=1, help="negatives per next link (--target links)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the negatives")
    p.add_argument("--column", type=int, default=0, help="node feature column (--target node)")
    p.add_argument("--horizon", type=int, default=1, help="snapshots ahead (--target node)")
    p.add_argument("--lags", type=int, default=0, help="past values of the column as x (--target node)")
    p.add_argument("--lateness", type=float, default=0.0,
                   help="allowed lateness in seconds: a snapshot is cut once the watermark passes t + "
                   "lateness; older events are dead letters (default 0: a time-ordered replay)")  # fmt: skip
    p.add_argument("--bootstrap", help="Kafka bootstrap servers: SOURCE is then a topic, e.g. localhost:9092")
    p.add_argument("--group", default="streamgnn-snapshots", help="Kafka consumer group")
    p.add_argument("--idle-timeout", type=_positive_float, default=10.0,
                   help="a topic counts as finished after this many idle seconds (default 10)")  # fmt: skip
    p.add_argument(
        "--batch-size", type=positive_int, default=10_000, help="events per batch read from a file"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)
