"""``streamgnn snapshots``: cut snapshots from a dataset, events file or Kafka topic into a signal on disk."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._args import output_dir, positive_float, positive_int
from ._dead_letters import Tally, count_text
from ._flags import add_config_option, override

HELP = "cut snapshots from a dataset, events file or topic into a signal folder"

EXAMPLES = """examples:
  streamgnn snapshots bitcoin_otc --out otc-monthly --kind window --every 2592000 --weight count \\
      --undirected --degree-features --target links --negatives 20
  streamgnn snapshots events.jsonl --out daily --every 86400 --weight decay --half-life 604800
  streamgnn snapshots ratings --bootstrap localhost:9092 --out live --every 3600 --lateness 60
  streamgnn snapshots bitcoin_otc --out otc --config snapshots.yaml   # snapshots.spec, .target, .links
read it back with streamgnn.snapshots.files.read_signal(FOLDER): a PyTorch Geometric Temporal signal."""


def _times(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None


def _source(args: argparse.Namespace, cfg, store):
    from ..errors import ConfigError

    if args.kafka or args.bootstrap_given:
        from ..connectors.kafka import KafkaSource

        cfg.kafka.check_reachable()
        topic = args.source or cfg.kafka.events_topic
        return KafkaSource(topic, bootstrap_servers=cfg.kafka.bootstrap, group_id=args.group, store=store)
    from ..connectors.files import DatasetSource, JsonLinesSource

    if args.source is None:
        raise ConfigError(
            "name a dataset, a .jsonl events file, or a topic with --kafka: streamgnn snapshots SOURCE"
        )
    path = Path(args.source)
    if path.is_file():
        return Tally(JsonLinesSource(path, batch_size=args.batch_size), str(path))
    if path.is_dir() or path.suffix or len(path.parts) > 1:
        raise ConfigError(
            f"no events file at {path}: give a JSON-lines events file, a dataset name or a topic"
        )
    return Tally(DatasetSource(args.source, batch_size=args.batch_size), args.source)


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    import numpy as np

    from ..errors import ConfigError
    from ..progress import progress_bar
    from ..snapshots import live_snapshots
    from ..snapshots.files import SignalWriter, check_output_folder
    from ..store import TemporalGraphStore
    from ._config import config_from_args

    check_output_folder(args.out)  # before any long work
    args.bootstrap_given = vars(args)["cfg:kafka.bootstrap"] is not None
    cfg = config_from_args(args)
    snaps_cfg = cfg.snapshots
    spec = snaps_cfg.spec
    if spec is None:
        raise ConfigError("say when snapshots are cut: --every SECONDS or --times T1,T2 (or snapshots.spec)")
    target = {"links": snaps_cfg.links, "node": snaps_cfg.node}.get(snaps_cfg.target)
    store = TemporalGraphStore(cfg.store)
    source = _source(args, cfg, store)
    writer = SignalWriter(args.out)
    snaps = live_snapshots(source, store, spec, target=target, idle_timeout_s=args.idle_timeout)
    most_nodes = edges = 0
    try:
        for snap in progress_bar(iterable=snaps, unit="snapshot", disable=args.quiet):
            writer.write(snap)
            most_nodes, edges = max(most_nodes, snap.num_nodes), edges + snap.num_edges
    finally:
        source.close()
    if isinstance(source, Tally):
        source.show()
        source.check_read_some()  # before the folder is finished: a failed run leaves no signal behind
    meta = {
        "source": args.source or cfg.kafka.events_topic, "spec": spec.to_dict(), "target": snaps_cfg.target,
        "lateness": cfg.store.allowed_lateness,
    }  # fmt: skip
    folder = writer.close(node_ids=store.external_ids(np.arange(most_nodes)), meta=meta)
    letters = source.text() if isinstance(source, Tally) else count_text(source.stats.dead_letters)
    print(
        f"{len(writer.times):,} snapshots ({edges:,} edges in all, up to {most_nodes:,} nodes) in {folder}"
        + f"; {letters}"
    )
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "snapshots",
        help=HELP,
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "source", nargs="?", metavar="SOURCE",
        help="dataset name (streamgnn datasets), a .jsonl events file, or a topic with --kafka",
    )  # fmt: skip
    p.add_argument(
        "--out",
        required=True,
        type=output_dir,
        help="a new or empty folder for the signal, e.g. --out otc-monthly",
    )
    add_config_option(p, "snapshots, store (allowed_lateness), kafka")
    _spec_options(p)
    _target_options(p)
    _source_options(p)
    p.set_defaults(func=_run, config_defaults={"store.allowed_lateness": 0.0})


def _spec_options(p: argparse.ArgumentParser) -> None:
    """What each snapshot is and when it is cut (``snapshots.spec``)."""
    spec = "snapshots.spec."
    override(
        p, "--every", key=spec + "every", type=positive_float,
        help="seconds between snapshots, e.g. --every 86400 (daily)",
    )  # fmt: skip
    override(
        p,
        "--times",
        key=spec + "times",
        type=_times,
        help="explicit snapshot times instead, e.g. 100,200,350",
    )
    override(p, "--start", key=spec + "start", type=float, help="time of the first snapshot (default: the "
             "first multiple of --every after the first event)")  # fmt: skip
    override(p, "--kind", key=spec + "kind", choices=("state", "window"),
             help="state (default): edges valid at t (deletions respected); window: edges that arrived in "
             "[t - width, t)")  # fmt: skip
    override(p, "--width", key=spec + "width", type=positive_float, help="window width in seconds (--every)")
    override(p, "--weight", key=spec + "weight", choices=("none", "count", "column", "decay"),
             help="edge weight: 1 (none, default), events per pair, sum of weights, decayed "
             "count")  # fmt: skip
    override(
        p, "--half-life", key=spec + "half_life", type=positive_float,
        help="decay half-life in seconds, e.g. 604800 (a week)",
    )  # fmt: skip
    override(
        p, "--undirected", key=spec + "undirected", action="store_true",
        help="one edge per unordered pair, both directions",
    )  # fmt: skip
    override(
        p, "--degree-features", key=spec + "degree_features", action="store_true",
        help="append log1p(out, in degree) to x",
    )  # fmt: skip


def _target_options(p: argparse.ArgumentParser) -> None:
    """The labels (``snapshots.target``, ``links``, ``node``)."""
    override(
        p, "--target", key="snapshots.target", choices=("none", "links", "node"),
        help="links: next-snapshot links with negatives; node: a feature column ahead",
    )  # fmt: skip
    override(
        p, "--negatives", key="snapshots.links.negatives", type=positive_int,
        help="negatives per next link (--target links)",
    )  # fmt: skip
    override(p, "--seed", key="snapshots.links.seed", type=int, help="seed of the negatives")
    override(p, "--column", key="snapshots.node.column", type=int, help="node feature column (--target node)")
    override(p, "--horizon", key="snapshots.node.horizon", type=int, help="snapshots ahead (--target node)")
    override(
        p,
        "--lags",
        key="snapshots.node.lags",
        type=int,
        help="past values of the column as x (--target node)",
    )


def _source_options(p: argparse.ArgumentParser) -> None:
    """Where the events come from, and how late they may be."""
    override(p, "--lateness", key="store.allowed_lateness", type=float,
             help="allowed lateness in seconds: a snapshot is cut once the watermark passes t + "
             "lateness; older events are dead letters (0: a time-ordered replay)")  # fmt: skip
    p.add_argument("--kafka", action="store_true", help="SOURCE (default kafka.events_topic) is a topic")
    override(
        p, "--bootstrap", key="kafka.bootstrap", metavar="HOST:PORT",
        help="Kafka bootstrap servers (implies --kafka), e.g. localhost:9092",
    )  # fmt: skip
    p.add_argument("--group", default="streamgnn-snapshots", help="Kafka consumer group")
    p.add_argument("--idle-timeout", type=positive_float, default=10.0,
                   help="a topic counts as finished after this many idle seconds (default 10)")  # fmt: skip
    p.add_argument(
        "--batch-size", type=positive_int, default=10_000, help="events per batch read from a file"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
