"""``streamgnn train``: online (test-then-train) TGN training from a dataset, a file or a Kafka topic."""

from __future__ import annotations

import argparse

from ._args import device, input_file, non_negative, output_dir, port, positive_float, positive_int, seconds
from ._dead_letters import Tally, count_text
from ._flags import add_config_option, override

HELP = "online TGN training from a dataset, a file or a Kafka topic"

EXAMPLE = """examples:
  streamgnn train --dataset jodie_wikipedia --events 20000 --out out/train
  streamgnn train --file edges.csv --columns src,dst,t --checkpoint-dir out/ckpt
  streamgnn train --config cluster.yaml --kafka --metrics-port 9100   # follow kafka.events_topic forever
  torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint host0:29400 \\
      $(which streamgnn) train --config cluster.yaml --kafka            # data parallel across machines
  torchrun --nproc-per-node 2 $(which streamgnn) train --config sharded.yaml --kafka --publish
      # with train.sharding in the file: each rank reads, trains on and publishes its own partitions

Run it again with the same checkpoint folder and it resumes where the last checkpoint left off; a
checkpoint of another source, trainer kind or model is refused (see docs/checkpoints.md):
  streamgnn train --file edges.csv --resume-from out/ckpt/ckpt-000002 --checkpoint-dir out/ckpt2
"""


def event_source(args: argparse.Namespace, batch_size: int):
    """``(source, total events or None)`` for ``--dataset``/``--file``."""
    from ..connectors.files import CsvSource, DatasetSource, JsonLinesSource

    if args.dataset:
        from ..datasets import info

        return DatasetSource(args.dataset, batch_size=batch_size), info(args.dataset).rows
    path = args.file
    if ".jsonl" in path.suffixes or ".json" in path.suffixes:
        return JsonLinesSource(path, batch_size=batch_size), None
    columns = [None if c == "-" else c for c in args.columns.split(",")]
    return CsvSource(path, columns=columns, header=args.header, batch_size=batch_size), None


def add_source_options(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--dataset", metavar="NAME", help="a bundled dataset (streamgnn datasets), e.g. jodie_wikipedia"
    )
    src.add_argument(
        "--file",
        metavar="PATH",
        type=input_file,
        help="a .csv (see --columns) or .jsonl events file, e.g. edges.csv",
    )
    src.add_argument("--kafka", action="store_true", help="the topic kafka.events_topic at kafka.bootstrap")
    p.add_argument(
        "--columns", default="src,dst,t", help="CSV columns in file order, '-' skips one (src,dst,t)"
    )
    p.add_argument("--header", action="store_true", help="the CSV's first row names its columns")
    override(p, "--bootstrap", key="kafka.bootstrap", metavar="HOST:PORT", help="Kafka, e.g. localhost:9092")
    override(p, "--topic", key="kafka.events_topic", help="events topic (with --kafka), e.g. events")


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    import torch

    from ..jobs import TrainJob
    from ..train.report import latency_text, scores_text
    from ._config import config_from_args

    cfg = config_from_args(args)
    train = cfg.train
    torch.set_num_threads(args.threads)
    total = tally = None
    kafka = dict(bootstrap=cfg.kafka.bootstrap) if args.kafka or args.publish else {}
    if args.kafka:
        cfg.kafka.check_reachable()
        kafka.update(topic=cfg.kafka.events_topic, dead_letter_topic=cfg.kafka.dead_letter_topic)
    else:
        source, total = event_source(args, train.batch_size)
        kafka["source"] = tally = Tally(source, str(args.file or args.dataset))
    if args.publish:
        kafka["embeddings_topic"] = cfg.kafka.embeddings_topic
    if cfg.task is not None and (cfg.task.labels_topic or cfg.task.predictions_topic) is not None:
        kafka["bootstrap"] = cfg.kafka.bootstrap
    job = TrainJob(
        train, metrics_port=args.metrics_port, log_every_s=args.log_every, out_dir=args.out,
        resume=cfg.resume, task=cfg.task, **kafka,
    )  # fmt: skip
    result = job.run(
        idle_timeout_s=args.idle_timeout, max_events=args.events, progress=not args.quiet, total=total
    )
    if tally is not None:
        if job.dist.is_main:
            tally.show()
        tally.check_read_some()
    if job.dist.is_main and result.events:
        print(
            f"{result.events:,} events in {result.seconds:.1f}s ({result.events_per_s:,.0f} events/s); "
            f"{scores_text(result)}; {latency_text(result)}; " + count_text(result.dead_letters)
        )
        if result.summary_path:
            print(f"report: {result.summary_path}, {result.plot_path}")
    if job.dist.is_main and job.labelled is not None:
        print(job.labelled.text())
        for letter in job.labelled.letters[:5]:
            print(f"  label dead letter: {letter.where}: {letter.reason}")
    return 0


# A live job keeps up with its source: state for every event, learning and evaluation on a budget
# (docs/following.md); ``--follow every_event`` is the benchmarks' test-then-train on every event.
LIVE_DEFAULTS = {"train.follow.mode": "budget"}


def add_follow_option(p: argparse.ArgumentParser) -> None:
    from ..train.config import FOLLOW_MODES

    override(
        p, "--follow", key="train.follow.mode", choices=FOLLOW_MODES,
        help="budget: every event updates the state, learning and a sample of evaluation as the source's "
        "lag allows; every_event: test-then-train on every event",
    )  # fmt: skip


def register(sub) -> None:
    from ..tasks.config import KINDS
    from ..train.config import DEFAULT_CHECKPOINT_EVERY

    p = sub.add_parser(
        "train",
        help=HELP,
        description="Update the store, memory and served embeddings with every event; score and train "
        "(test-then-train) on every batch, or on the share a lagging source leaves time for (--follow, "
        "docs/following.md); checkpoints make a rerun resume; --metrics-port serves Prometheus metrics.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(p, "kafka, train, resume, task")
    add_source_options(p)
    p.add_argument(
        "--events",
        type=positive_int,
        help="stop once this many events are learned (a resumed run's included)",
    )
    p.add_argument(
        "--idle-timeout", type=positive_float, metavar="S",
        help="with --kafka: stop after S seconds without data (default: follow the topic), e.g. 30",
    )  # fmt: skip
    p.add_argument("--publish", action="store_true", help="publish embeddings to kafka.embeddings_topic")
    p.add_argument(
        "--out",
        metavar="DIR",
        type=output_dir,
        help="write metrics.png and summary.json here, e.g. out/train",
    )
    override(
        p, "--checkpoint-dir", key="train.checkpoint_dir", metavar="DIR", type=output_dir,
        help=f"checkpoint here (every {DEFAULT_CHECKPOINT_EVERY} batches and at the end) and resume from it, "
        "e.g. out/ckpt",
    )  # fmt: skip
    override(
        p, "--checkpoint-every", key="train.checkpoint_every", type=int, metavar="N",
        help=f"batches between checkpoints ({DEFAULT_CHECKPOINT_EVERY} with --checkpoint-dir; 0: none), "
        "e.g. 500",
    )  # fmt: skip
    override(
        p, "--resume-from", key="resume.checkpoint", metavar="CKPT",
        help="resume from this one checkpoint (a checkpoint folder's ckpt-NNNNNN) instead of the newest in "
        "--checkpoint-dir, e.g. out/ckpt/ckpt-000002",
    )  # fmt: skip
    override(
        p, "--resume-anyway", key="resume.mismatch", action="store_const", const="allow",
        help="resume even from a checkpoint of another source or trainer kind: sets resume.mismatch to allow",
    )  # fmt: skip
    override(p, "--batch-size", key="train.batch_size", type=int, help="events per global batch")
    override(p, "--lr", key="train.lr", type=positive_float, help="Adam learning rate")
    override(p, "--device", key="train.device", type=device, help="cpu or cuda")
    override(
        p, "--allowed-lateness", key="train.allowed_lateness", type=non_negative, metavar="T",
        help="stream time an event may lag the newest learned one and still be learned; a later one is a "
        "dead letter, e.g. 60",
    )  # fmt: skip
    add_follow_option(p)
    override(
        p, "--task", key="task.kind", choices=sorted(KINDS),
        help="learn a labelled task beside link prediction, its labels from --labels or task.labels_topic "
        "(docs/tasks.md)",
    )  # fmt: skip
    override(
        p, "--labels", key="task.labels_file", metavar="FILE", type=input_file,
        help="the task's labels, JSON lines {node, t, y[, dst]}, e.g. labels.jsonl",
    )  # fmt: skip
    override(
        p, "--task-predictions", key="task.predictions_topic", metavar="TOPIC",
        help="publish each label's prediction (made before the head learns from it) to this topic of "
        "kafka.bootstrap, e.g. task-predictions",
    )  # fmt: skip
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads per process (1)")
    p.add_argument("--metrics-port", type=port, metavar="PORT", help="serve Prometheus metrics, e.g. 9100")
    p.add_argument(
        "--log-every", type=seconds, default=10.0, metavar="S", help="seconds per status line (10)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run, config_defaults=LIVE_DEFAULTS)
