"""``streamgnn produce``: load a dataset or an events file into a Kafka topic."""

from __future__ import annotations

import argparse

from ._args import positive_float, positive_int, topic_name


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..connectors.kafka import produce_dataset

    report = produce_dataset(
        args.bootstrap,
        args.topic,
        args.source,
        partitions=args.partitions,
        rate=args.rate,
        fmt=args.format,
        batch_size=args.batch_size,
        connect_timeout_s=args.connect_timeout,
    )
    print(
        f"produced {report.events:,} events in {report.messages:,} messages to {args.topic} "
        f"({report.seconds:.1f} s)"
    )
    return 0


def register(sub) -> None:
    pr = sub.add_parser(
        "produce",
        help="load a dataset or events file into a Kafka topic",
        description="Write events into a topic in time order, keyed by graph partition (creates the topic).",
        epilog="example:\n  streamgnn produce jodie_wikipedia --bootstrap localhost:9092 --topic events "
        "--partitions 4 --format binary --rate 1000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pr.add_argument("source", help="dataset name, or a .jsonl/.json events file or binary batch file")
    pr.add_argument("--bootstrap", required=True, help="Kafka, e.g. localhost:9092")
    pr.add_argument("--topic", type=topic_name, required=True, help="the topic to write, e.g. events")
    pr.add_argument("--partitions", type=positive_int, default=1, help="topic partitions (1)")
    pr.add_argument(
        "--rate", type=positive_float, default=None, help="events per second, e.g. 1000 (default: full speed)"
    )
    pr.add_argument("--format", choices=("json", "binary"), default="json", help="message format (json)")
    pr.add_argument("--batch-size", type=positive_int, default=1000, help="events per binary message (1000)")
    pr.add_argument(
        "--connect-timeout", type=float, default=10.0, metavar="SECONDS",
        help="give up, with one line naming the address, when no broker answers within this long "
        "(default 10, e.g. --connect-timeout 30)",
    )  # fmt: skip
    pr.set_defaults(func=_run)
