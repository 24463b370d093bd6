"""``streamgnn produce``: load a dataset or an events file into a Kafka topic."""

from __future__ import annotations

import argparse

from ._args import positive_float, positive_int, seconds, topic_name
from ._dead_letters import Tally
from ._flags import add_config_option, override

HELP = "load a dataset or events file into a Kafka topic"

EXAMPLE = """examples:
  streamgnn produce jodie_wikipedia --bootstrap localhost:9092 --topic events --partitions 4 --rate 1000
  streamgnn produce edges.jsonl --format json --log-every 5
  streamgnn produce --config cluster.yaml     # produce.source, produce.rate; kafka.events_topic, partitions
"""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..connectors.kafka import produce_dataset
    from ..connectors.kafka.producer import events_source
    from ..errors import ConfigError
    from ..events import concat
    from ._config import config_from_args

    cfg = config_from_args(args)
    k, p = cfg.kafka, cfg.produce
    if p.source is None:
        raise ConfigError("name a dataset or an events file: streamgnn produce SOURCE (or produce.source)")
    # read it all first: unparseable lines are dead-lettered, and a file with no valid event is refused
    # before the topic is created
    tally = Tally(events_source(p.source), str(p.source))
    events = list(tally)
    tally.show()
    tally.check_read_some()
    report = produce_dataset(
        k.bootstrap,
        k.events_topic,
        concat(events),
        partitions=k.partitions,
        rate=p.rate,
        fmt=k.format,
        batch_size=p.batch_size,
        connect_timeout_s=k.connect_timeout_s,
        log_every_s=p.log_every_s,
    )
    print(
        f"produced {report.events:,} events in {report.messages:,} messages to {k.events_topic} "
        f"({report.seconds:.1f} s); {tally.text()}"
    )
    return 0


def register(sub) -> None:
    pr = sub.add_parser(
        "produce",
        help=HELP,
        description="Write events into a topic in time order, keyed by graph partition (creates the topic).",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(pr, "kafka, produce")
    override(
        pr, key="produce.source", metavar="SOURCE",
        help="dataset name, or a .jsonl/.json events file or binary batch file, e.g. jodie_wikipedia",
    )  # fmt: skip
    override(pr, "--bootstrap", key="kafka.bootstrap", metavar="HOST:PORT", help="Kafka")
    override(pr, "--topic", key="kafka.events_topic", type=topic_name, help="the topic to write")
    override(
        pr,
        "--partitions",
        key="kafka.partitions",
        type=positive_int,
        help="topic partitions (default: an existing topic's, else 1)",
    )
    override(
        pr, "--rate", key="produce.rate", type=positive_float,
        help="events per second, e.g. 1000 (default: full speed)",
    )  # fmt: skip
    override(pr, "--format", key="kafka.format", choices=("json", "binary"), help="message format")
    override(
        pr,
        "--batch-size",
        key="produce.batch_size",
        type=positive_int,
        help="events per binary message",
    )
    override(
        pr, "--connect-timeout", key="kafka.connect_timeout_s", type=positive_float, metavar="SECONDS",
        help="give up, with one line naming the address, when no broker answers within this long "
        "(e.g. --connect-timeout 30)",
    )  # fmt: skip
    override(
        pr, "--log-every", key="produce.log_every_s", type=seconds, metavar="S",
        help="seconds per status line, 0 for none",
    )  # fmt: skip
    pr.set_defaults(func=_run)
