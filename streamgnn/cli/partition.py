"""``streamgnn partition``: route a raw event topic into a topic keyed and placed by graph partition."""

from __future__ import annotations

import argparse
import json
import os

from ._args import positive_int

EXAMPLE = """example:
  streamgnn partition --bootstrap localhost:9092 --in-topic raw --out-topic events --partitions 8 \\
      --partitioner fennel --buffer-edges 4 --checkpoint router-ckpt --report router.json --plot router.png

Killed and restarted with the same command, it resumes from its checkpoint with no event lost, doubled or
placed differently."""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..errors import ConfigError
    from ..partition import PartitionerConfig
    from ..partition.router import PartitionRouter

    for path in (args.report, args.plot):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ConfigError(f"no directory for {path}")
    config = PartitionerConfig(args.partitioner, buffer_edges=args.buffer_edges, buffer_time=args.buffer_time)
    router = PartitionRouter(
        args.bootstrap,
        args.in_topic,
        args.out_topic,
        args.partitions,
        partitioner=config,
        checkpoint_dir=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        fmt=args.format,
        batch_size=args.batch_size,
        dead_letter_topic=args.dead_letter_topic,
    )
    report = router.run(max_events=args.max_events, idle_timeout_s=args.idle_timeout, flush=args.flush)
    if args.report:
        router.write_report(args.report)
    if args.plot:
        router.timeline.plot(args.plot, f"router {args.in_topic} -> {args.out_topic} ({args.partitioner})")
    part = report.partitioning
    quality = (
        f"edge cut {part.edge_cut:.3f}" if part.edge_cut is not None else f"RF {part.replication_factor:.2f}"
    )
    print(
        f"routed {report.events:,} events into {args.out_topic} ({args.partitions} partitions, {quality}, "
        f"edge balance {part.edge_balance:.2f}); {report.held:,} held, {report.dead_letters:,} dead letters"
    )
    print(json.dumps({"published": report.published, "skipped_on_resume": report.skipped_on_resume}))
    return 0


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def register(sub) -> None:
    from ..partition import METHODS

    p = sub.add_parser(
        "partition",
        help="route a raw event topic into one keyed and placed by graph partition (LDG, Fennel, HDRF, ...)",
        description=__doc__,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, e.g. localhost:9092")
    p.add_argument("--in-topic", required=True, help="the raw topic to read, e.g. raw")
    p.add_argument(
        "--out-topic", required=True, help="the topic to write (created with --partitions), e.g. events"
    )
    p.add_argument(
        "--partitions", type=positive_int, default=8, help="graph partitions = output partitions (8)"
    )
    p.add_argument("--partitioner", choices=METHODS, default="fennel", help="placement method (fennel)")
    buffer = "LDG/Fennel: edges a new vertex waits for before it is placed, e.g. 4 (1: at first sight)"
    p.add_argument("--buffer-edges", type=positive_int, default=1, help=buffer)
    wait = "LDG/Fennel: the most stream time a new vertex waits, e.g. 3600 (default: no limit)"
    p.add_argument("--buffer-time", type=_non_negative, default=float("inf"), help=wait)
    p.add_argument("--checkpoint", default=None, help="checkpoint folder for resuming, e.g. router-ckpt")
    p.add_argument("--checkpoint-every", type=positive_int, default=100_000, help="input events (100000)")
    p.add_argument("--format", choices=("binary", "json"), default="binary", help="output messages (binary)")
    p.add_argument("--batch-size", type=positive_int, default=1000, help="events per binary message (1000)")
    p.add_argument("--dead-letter-topic", default=None, help="where undecodable or invalid events go")
    p.add_argument("--max-events", type=positive_int, default=None, help="stop after this many input events")
    idle = "stop after this many seconds without input, e.g. 30 (default: run forever)"
    p.add_argument("--idle-timeout", type=_non_negative, default=None, help=idle)
    p.add_argument("--flush", action="store_true", help="at the stop, place waiting vertices and publish")
    p.add_argument("--report", default=None, help="write the routing report here (JSON)")
    p.add_argument("--plot", default=None, help="write cut/balance at each checkpoint here (PNG)")
    p.set_defaults(func=_run)
