"""``streamgnn ingest``: a topic or a file into a store checkpoint (no training), resumable."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ._args import output_dir, positive_float, positive_int, seconds
from ._dead_letters import Tally, count_text
from ._flags import add_config_option
from .train import add_source_options, event_source

HELP = "read a topic or file into a store checkpoint (no training)"

EXAMPLE = """examples:
  streamgnn ingest --kafka --bootstrap localhost:9092 --topic events --store out/store --idle-timeout 10
  streamgnn ingest --file edges.csv --columns src,dst,t --store out/store
  python -c "from streamgnn.store import TemporalGraphStore as S; print(S.load('out/store').num_edges)"

A store checkpoint holds the consumed Kafka offsets: run it again and it goes on after them. A file is read
again from its start; the store skips the event ids it already holds.
"""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..checkpoint import numbers
    from ..progress import IntervalLog, IntervalRate
    from ..store import TemporalGraphStore
    from ._config import config_from_args

    cfg = config_from_args(args)
    path = Path(args.store)
    resumed = bool(numbers(path)) or os.path.lexists(path / "LATEST")  # without LATEST: never written over
    store = TemporalGraphStore.load(path) if resumed else TemporalGraphStore(cfg.store)
    if resumed:
        print(f"resumed {path}: {store.num_edges:,} edges, offsets {store.source_offsets}", flush=True)
    counts = {"events": 0, "duplicates": 0}  # duplicates: event ids the store already held, skipped
    kafka = tally = None
    if args.kafka:
        from ..connectors.kafka import KafkaSource

        cfg.kafka.check_reachable()
        kafka = KafkaSource(
            cfg.kafka.events_topic, bootstrap_servers=cfg.kafka.bootstrap, store=store,
            dead_letter_topic=cfg.kafka.dead_letter_topic,
        )  # fmt: skip
        batches = kafka.stream(idle_timeout_s=args.idle_timeout)
    else:
        tally = Tally(event_source(args, 10_000)[0], args.file or args.dataset)
        batches = iter(tally)

    def dead() -> int:  # the Kafka source counts what it could not decode and what the store refused
        return kafka.stats.dead_letters if kafka is not None else len(tally.letters)

    speed = IntervalRate()
    log = IntervalLog(
        "ingest",
        lambda: (
            f"{counts['events']:,} events ({speed(counts['events']):,.0f}/s), "
            f"{store.num_edges:,} edges, {counts['duplicates']:,} duplicates, {dead():,} dead letters"
        ),
        args.log_every,
    )
    saved = time.monotonic()
    try:
        for batch in batches:
            if args.events is not None:
                batch = batch[: args.events - counts["events"]]
            report = store.ingest(batch)
            counts["events"] += len(batch)
            counts["duplicates"] += report.duplicates
            (kafka if kafka is not None else tally).report_dead_letters(report.dead_letters)
            if time.monotonic() - saved >= args.save_every:
                store.save(path, source_offsets=kafka.positions() if kafka else None)
                saved = time.monotonic()
            if args.events is not None and counts["events"] >= args.events:
                break
    finally:
        if kafka is not None:
            kafka.close()
        log.stop()
    if tally is not None:
        tally.show()
        tally.check_read_some()  # nothing saved: a store of nothing is no result
    store.save(path, source_offsets=kafka.positions() if kafka else None)
    letters = tally.text() if tally is not None else count_text(dead())
    print(
        f"{counts['events']:,} events read, {letters}; {path}: {store.num_edges:,} edges, "
        f"{store.num_nodes:,} nodes; {counts['duplicates']:,} duplicate events skipped (ids already stored)"
    )
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "ingest",
        help=HELP,
        description="Ingest events into a TemporalGraphStore and save it (atomic, with the Kafka offsets).",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(p, "kafka, store")
    add_source_options(p)
    p.add_argument(
        "--store",
        required=True,
        metavar="DIR",
        type=output_dir,
        help="the store checkpoint folder, e.g. out/store",
    )
    p.add_argument("--events", type=positive_int, help="stop after this many events, e.g. 100000")
    p.add_argument(
        "--idle-timeout", type=positive_float, default=None, metavar="S",
        help="with --kafka: stop after S seconds without data (default: follow until stopped), e.g. 10",
    )  # fmt: skip
    p.add_argument("--save-every", type=seconds, default=30.0, metavar="S", help="seconds between saves (30)")
    p.add_argument(
        "--log-every", type=seconds, default=10.0, metavar="S", help="seconds per status line (10)"
    )
    p.set_defaults(func=_run)
