"""``streamgnn topics``: create the topics a config file names (the cluster's topic-init job)."""

from __future__ import annotations

import argparse

from ._args import positive_int, topic_name
from ._flags import add_config_option, override

HELP = "create the Kafka topics a config names (idempotent)"

EXAMPLE = """examples:
  streamgnn topics --config cluster.yaml  # events (kafka.partitions), embeddings, raw, dead letters
  streamgnn topics --bootstrap localhost:9092 --partitions 4
  streamgnn topics --bootstrap localhost:9092 --topic ratings --dead-letter-topic ratings-dlq
"""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..connectors.kafka import create_topic
    from ._config import config_from_args

    k = config_from_args(args).kafka
    k.check_reachable()
    topics = [(k.events_topic, k.partitions, False), (k.embeddings_topic, k.embeddings_partitions, True)]
    if k.raw_topic:
        topics.append((k.raw_topic, k.raw_partitions, False))
    if k.dead_letter_topic:
        topics.append((k.dead_letter_topic, 1, False))
    for name, partitions, compacted in topics:
        have = create_topic(k.bootstrap, name, partitions, compacted=compacted)
        print(f"topic {name}: {have} partition(s){', compacted' if compacted else ''}", flush=True)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "topics",
        help=HELP,
        description="Create kafka.events_topic with kafka.partitions partitions, the compacted "
        "kafka.embeddings_topic, kafka.raw_topic (a partition router's input) and kafka.dead_letter_topic; "
        "existing topics with the same counts are fine (with no count given, any count is).",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(p)
    override(p, "--bootstrap", key="kafka.bootstrap", metavar="HOST:PORT", help="Kafka, e.g. localhost:9092")
    override(
        p, "--partitions", key="kafka.partitions", type=positive_int,
        help="events topic partitions, e.g. 4 (default: an existing topic's, else 1)",
    )  # fmt: skip
    override(p, "--topic", key="kafka.events_topic", type=topic_name, help="the events topic")
    override(
        p, "--embeddings-topic", key="kafka.embeddings_topic", type=topic_name,
        help="the compacted embeddings topic",
    )  # fmt: skip
    override(p, "--raw-topic", key="kafka.raw_topic", type=topic_name, help="a router's input, e.g. raw")
    override(p, "--dead-letter-topic", key="kafka.dead_letter_topic", type=topic_name, help="e.g. events-dlq")
    p.set_defaults(func=_run)
