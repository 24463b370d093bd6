"""``streamgnn partition``: route a raw event topic into a topic keyed and placed by graph partition."""

from __future__ import annotations

import argparse
import json

from ._args import non_negative, output_dir, output_file, positive_int, seconds, topic_name
from ._flags import add_config_option, override

HELP = "route a raw event topic into one keyed and placed by graph partition (LDG, Fennel, HDRF, ...)"

EXAMPLE = """examples:
  streamgnn partition --bootstrap localhost:9092 --in-topic raw --out-topic events --partitions 8 \\
      --partitioner fennel --buffer-edges 4 --checkpoint router-ckpt --report router.json --plot router.png
  streamgnn partition --config cluster.yaml --checkpoint /router   # kafka.raw_topic -> kafka.events_topic

Sharded trainers (ShardConfig(placement="stream"), num_partitions = --partitions) then own each vertex
where the router put it: binary output carries every event's endpoint partitions (with a vertex
partitioner: hash, ldg, fennel; a buffered one holds an edge until both its ends are placed).

Killed and restarted with the same command, it resumes from its checkpoint with no event lost, doubled or
placed differently."""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..errors import ConfigError
    from ..jobs.router import PartitionRouter
    from ..progress import IntervalLog, IntervalRate
    from ._config import config_from_args

    cfg = config_from_args(args)
    k, r = cfg.kafka, cfg.partition
    if not k.raw_topic:
        raise ConfigError("give the topic to read: --in-topic, or kafka.raw_topic in --config")
    k.check_reachable()
    router = PartitionRouter(
        k.bootstrap, k.raw_topic, k.events_topic, k.partitions, r, fmt=k.format,
        dead_letter_topic=k.dead_letter_topic,
    )  # fmt: skip
    speed = IntervalRate()

    def status() -> str:
        counts = router.state.counts  # (a resumed router's state is the checkpoint's)
        return (
            f"{counts['events']:,} events routed ({speed(counts['events']):,.0f} events/s), "
            f"{counts['published']:,} published, {len(router.state.held):,} held, edge cut "
            f"{counts['cut_edges'] / max(counts['placed_edges'], 1):.3f}, "
            f"{counts['dead_letters'] + router.decode_dead_letter_count:,} dead letters"
        )

    log = IntervalLog("partition", status, r.log_every_s)
    try:
        report = router.run(max_events=args.max_events, idle_timeout_s=args.idle_timeout, flush=args.flush)
    finally:
        log.stop()
    if args.report:
        router.write_report(args.report)
    if args.plot:
        router.timeline.plot(args.plot, f"router {k.raw_topic} -> {k.events_topic} ({r.partitioner.name})")
    part = report.partitioning
    quality = (
        f"edge cut {part.edge_cut:.3f}" if part.edge_cut is not None else f"RF {part.replication_factor:.2f}"
    )
    print(
        f"routed {report.events:,} events into {k.events_topic} ({k.partitions} partitions, {quality}, "
        f"edge balance {part.edge_balance:.2f}); {report.held:,} held, "
        f"{report.dead_letter_count:,} dead letters"
    )
    print(json.dumps({"published": report.published, "skipped_on_resume": report.skipped_on_resume}))
    return 0


def register(sub) -> None:
    from ..partition import METHODS

    p = sub.add_parser(
        "partition",
        help=HELP,
        description=__doc__,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(p, "kafka (the output topic), partition")
    override(p, "--bootstrap", key="kafka.bootstrap", metavar="HOST:PORT", help="Kafka")
    override(
        p,
        "--in-topic",
        key="kafka.raw_topic",
        type=topic_name,
        help="the raw topic to read (kafka.raw_topic)",
    )
    override(
        p, "--out-topic", key="kafka.events_topic", type=topic_name,
        help="the topic to write, created with --partitions",
    )  # fmt: skip
    override(
        p, "--partitions", key="kafka.partitions", type=positive_int,
        help="graph partitions = output partitions",
    )  # fmt: skip
    override(
        p,
        "--partitioner",
        key="partition.partitioner.name",
        choices=METHODS,
        help="placement method",
    )
    buffer = "LDG/Fennel: edges a new vertex waits for before it is placed, e.g. 4 (1: at first sight)"
    override(p, "--buffer-edges", key="partition.partitioner.buffer_edges", type=positive_int, help=buffer)
    wait = "LDG/Fennel: the most stream time a new vertex waits, e.g. 3600 (default: no limit)"
    override(p, "--buffer-time", key="partition.partitioner.buffer_time", type=non_negative, help=wait)
    override(
        p, "--checkpoint", key="partition.checkpoint_dir", metavar="DIR", type=output_dir,
        help="checkpoint folder for resuming, e.g. router-ckpt",
    )  # fmt: skip
    override(
        p,
        "--checkpoint-every",
        key="partition.checkpoint_every",
        type=positive_int,
        help="input events",
    )
    override(p, "--format", key="kafka.format", choices=("binary", "json"), help="output messages")
    override(
        p,
        "--batch-size",
        key="partition.batch_size",
        type=positive_int,
        help="events per binary message",
    )
    override(
        p, "--dead-letter-topic", key="kafka.dead_letter_topic", type=topic_name,
        help="where undecodable or invalid events go",
    )  # fmt: skip
    override(
        p, "--allowed-lateness", key="partition.allowed_lateness", type=non_negative, metavar="T",
        help="stream time an event may lag the newest routed one; a later one is a dead letter, e.g. 60",
    )  # fmt: skip
    override(
        p, "--log-every", key="partition.log_every_s", type=seconds, metavar="S",
        help="seconds per status line, 0 for none",
    )  # fmt: skip
    p.add_argument("--max-events", type=positive_int, default=None, help="stop after this many input events")
    idle = "stop after this many seconds without input, e.g. 30 (default: run forever)"
    p.add_argument("--idle-timeout", type=non_negative, default=None, help=idle)
    p.add_argument("--flush", action="store_true", help="at the stop, place waiting vertices and publish")
    p.add_argument("--report", type=output_file, default=None, help="write the routing report here (JSON)")
    p.add_argument(
        "--plot", type=output_file, default=None, help="write cut/balance at each checkpoint here (PNG)"
    )
    p.set_defaults(func=_run, config_defaults={"kafka.partitions": 8})
