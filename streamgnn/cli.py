"""The ``streamgnn`` command."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Before torch loads: OpenMP threads that spin while waiting made a 2-core machine 5-18x slower (the demo's
# trainer against its own broker and Kafka client); a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

BENCHMARKS = ("store", "sampler", "ingest", "train")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _bench(args: argparse.Namespace, rest: list[str]) -> int:
    module = importlib.import_module(f"streamgnn.benchmarks.{args.name}")
    return int(module.main(rest) or 0)


def _demo(args: argparse.Namespace, rest: list[str]) -> int:
    from .demo import run_demo

    return run_demo(events=args.events, out=args.out, dataset=args.dataset, quiet=args.quiet)


def _produce(args: argparse.Namespace, rest: list[str]) -> int:
    from .connectors.kafka import produce_dataset

    report = produce_dataset(
        args.bootstrap,
        args.topic,
        args.source,
        partitions=args.partitions,
        rate=args.rate,
        fmt=args.format,
        batch_size=args.batch_size,
    )
    print(
        f"produced {report.events:,} events in {report.messages:,} messages to {args.topic} "
        f"({report.seconds:.1f} s)"
    )
    return 0


def _datasets(args: argparse.Namespace, rest: list[str]) -> int:
    from . import datasets

    for name in datasets.names():
        info = datasets.info(name)
        print(f"{name:18s} {info.rows:>9,d} events  {info.nodes:>7,d} nodes  {info.source}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamgnn", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "bench", add_help=False, help="run a benchmark (other flags go to it: --quick, --json, --help)"
    )
    b.add_argument("name", choices=BENCHMARKS)
    b.set_defaults(func=_bench)
    d = sub.add_parser("demo", help="the end-to-end job on an embedded default")
    d.add_argument("--events", type=_positive_int, default=None, help="stop after this many events")
    d.add_argument("--out", default="out/demo", help="report folder (plot, JSON summary)")
    d.add_argument("--dataset", default="jodie_wikipedia")
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=_demo)
    pr = sub.add_parser("produce", help="load a dataset or events file into a Kafka topic")
    pr.add_argument("source", help="dataset name, or a .jsonl/.json events file or binary batch file")
    pr.add_argument("--bootstrap", required=True)
    pr.add_argument("--topic", required=True)
    pr.add_argument("--partitions", type=_positive_int, default=1)
    pr.add_argument("--rate", type=float, default=None, help="events per second (default: full speed)")
    pr.add_argument("--format", choices=("json", "binary"), default="json")
    pr.add_argument("--batch-size", type=_positive_int, default=1000)
    pr.set_defaults(func=_produce)
    ds = sub.add_parser("datasets", help="list the bundled datasets")
    ds.set_defaults(func=_datasets)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from .errors import StreamGNNError

    try:
        return args.func(args, rest)
    except StreamGNNError as exc:  # a user's mistake or a broken input: the message says what to do
        print(f"streamgnn: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
