"""Online TGN training from a Kafka topic, publishing node embeddings to a compacted topic.

    python examples/train_kafka.py --events 20000                  # starts a throwaway local broker (Tansu)
    python examples/train_kafka.py --bootstrap host:9092 --topic edges --no-produce

The trainer reads ``--topic`` through ``KafkaSource`` and checkpoints the store, model and the consumed
offsets together, so a restart with the same ``--checkpoint-dir`` continues exactly after the last
checkpoint (the source seeks to the saved offsets). Embeddings go to ``<topic>-embeddings``, keyed by node.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import torch

from streamgnn.connectors.broker import LocalBroker
from streamgnn.connectors.kafka import KafkaSource, create_topic, produce_dataset
from streamgnn.connectors.sink import KafkaSink
from streamgnn.nn import TGNConfig
from streamgnn.train import OnlineTrainer, TrainConfig
from streamgnn.train.report import latency_text, plot_windows, scores_text, write_summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default=None, help="a running Kafka (default: start a local broker)")
    ap.add_argument("--topic", default="edges")
    ap.add_argument("--dataset", default="jodie_wikipedia", help="what to produce into the topic first")
    ap.add_argument("--no-produce", action="store_true", help="the topic is already being written")
    ap.add_argument(
        "--events",
        type=int,
        default=None,
        help="stop once this many events of the topic are learned, those of a resumed checkpoint included",
    )
    ap.add_argument("--idle-timeout", type=float, default=10.0, help="stop after this long without data")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="out/train_kafka")
    ap.add_argument("--checkpoint-dir", default=None, help="default: out/train_kafka/<topic>/checkpoints")
    args = ap.parse_args()
    checkpoint_dir = args.checkpoint_dir or f"out/train_kafka/{args.topic}/checkpoints"
    torch.set_num_threads(args.threads)

    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap or stack.enter_context(LocalBroker()).bootstrap
        if not args.no_produce:
            report = produce_dataset(bootstrap, args.topic, args.dataset, partitions=1, fmt="binary")
            print(
                f"produced {report.events:,} events into {args.topic} ({report.events_per_s:,.0f} events/s)"
            )
        embeddings_topic = f"{args.topic}-embeddings"
        create_topic(bootstrap, embeddings_topic, 1, compacted=True)
        sink = stack.enter_context(KafkaSink(bootstrap, embeddings_topic=embeddings_topic, fmt="binary"))
        config = TrainConfig(
            model=TGNConfig(memory_dim=100, time_dim=100, embedding_dim=100, num_neighbors=10),
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=100,
            publish_every=20,
        )
        if (Path(checkpoint_dir) / "LATEST").exists():
            trainer = OnlineTrainer.resume(checkpoint_dir, config=config, sink=sink)
            print(f"resumed at {trainer.position:,} events, offsets {trainer.store.source_offsets}")
        else:
            trainer = OnlineTrainer(config, sink=sink)
        # The restored store carries the offsets of its checkpoint: the source starts right after them.
        source = stack.enter_context(
            KafkaSource(args.topic, bootstrap_servers=bootstrap, store=trainer.store, max_batch_events=10_000)
        )
        result = trainer.fit(
            source.stream(idle_timeout_s=args.idle_timeout),
            positions=source.positions,
            max_events=None if args.events is None else max(0, args.events - trainer.position),
        )
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        plot_windows(result.windows, out / "metrics.png", result.baseline_windows)
        write_summary(result, out / "summary.json")
        print(
            f"{result.events:,} events in {result.seconds:.1f}s ({result.events_per_s:,.0f} events/s); "
            f"{scores_text(result)}; {latency_text(result)}; "
            f"{len(trainer.table):,} embeddings in {embeddings_topic}"
        )


if __name__ == "__main__":
    main()
