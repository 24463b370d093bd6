"""Sharded online TGN training from a Kafka topic: each rank reads only its own topic partitions and holds
only its graph partitions' adjacency, memory rows and negative history.

    torchrun --nproc_per_node 2 examples/train_sharded_kafka.py --bootstrap localhost:9092 --produce
    torchrun --nnodes 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint host0:29400 --nproc_per_node 2 \\
        examples/train_sharded_kafka.py --bootstrap broker:9092 --topic edges      # and node-rank 1 on host1

The topic must have ``--partitions`` partitions, keyed by graph partition (``streamgnn produce`` and
``produce_dataset`` write it so by hash; ``streamgnn partition`` by LDG/Fennel: then give
``--placement stream``, so that each rank owns the vertices the router put in its partitions); they are
spread round-robin over the ranks. ``--produce`` has rank 0 write ``--dataset`` into a new topic first (and
create ``--embeddings-topic``, compacted). Checkpoints go under ``--checkpoint-dir`` per rank; run the same
command again (or let ``torchrun --max-restarts`` do it) and every rank resumes from the newest step all of
them saved, its Kafka offsets included. ``--embeddings-topic``: each rank publishes the embeddings of the
vertices it owns there, for ``streamgnn serve``.

The job is ``TrainJob``'s, the one ``streamgnn train`` runs: with a YAML config whose ``train.sharding`` is
set, ``torchrun ... $(which streamgnn) train --config cluster.yaml --kafka --publish`` runs the same job.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import torch
import torch.distributed as dist

from streamgnn.connectors.kafka import create_topic, produce_dataset
from streamgnn.jobs import TrainJob
from streamgnn.nn import TGNConfig
from streamgnn.shard import ShardConfig
from streamgnn.train import TrainConfig, init_distributed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, e.g. localhost:9092")
    ap.add_argument("--topic", default="edges")
    ap.add_argument("--partitions", type=int, default=8, help="topic partitions = graph partitions")
    ap.add_argument("--mode", default="exact", choices=("exact", "comm_free"), help="see ShardConfig")
    ap.add_argument(
        "--placement", default="hash", choices=("hash", "stream"),
        help="vertex -> partition: hash of the id, or the stream's (a partition router's output)",
    )  # fmt: skip
    ap.add_argument("--produce", action="store_true", help="rank 0 writes --dataset into the topic first")
    ap.add_argument("--dataset", default="jodie_wikipedia")
    ap.add_argument("--events", type=int, default=None, help="stop after this many global events")
    ap.add_argument("--idle-timeout", type=float, default=10.0, help="a rank's partitions end after this")
    ap.add_argument("--out", default="out/train_sharded_kafka", help="rank 0 writes its report here")
    ap.add_argument("--checkpoint-dir", default=None, help="default: <out>/checkpoints")
    ap.add_argument("--checkpoint-every", type=int, default=50, help="global batches between checkpoints")
    ap.add_argument("--embeddings-topic", default=None, help="publish each rank's vertices' embeddings here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    d = init_distributed()
    if args.produce:
        if d.is_main:
            report = produce_dataset(args.bootstrap, args.topic, args.dataset, args.partitions, fmt="binary")
            print(f"produced {report.events:,} events into {args.topic}", flush=True)
            if args.embeddings_topic:
                create_topic(args.bootstrap, args.embeddings_topic, 1, compacted=True)
        if d.active:
            dist.barrier()  # every rank starts reading once the topic is written
    config = TrainConfig(
        model=TGNConfig(memory_dim=100, time_dim=100, embedding_dim=100, num_neighbors=10),  # pairs read
        serve_every=1 if args.embeddings_topic else 0,  # 0: no table kept, nothing published
        checkpoint_dir=args.checkpoint_dir or f"{args.out}/checkpoints",
        checkpoint_every=args.checkpoint_every,
        sharding=ShardConfig(num_partitions=args.partitions, mode=args.mode, placement=args.placement),
    )
    # each rank reads its own topic partitions, from where its checkpoint left off
    job = TrainJob(
        config, topic=args.topic, bootstrap=args.bootstrap, embeddings_topic=args.embeddings_topic,
        out_dir=args.out, log_every_s=0,
    )  # fmt: skip
    result = job.run(idle_timeout_s=args.idle_timeout, max_events=args.events)
    if d.is_main:
        m = result.metrics
        print(
            f"{result.events:,} events on {d.world_size} ranks in {result.seconds:.1f}s "
            f"({result.events_per_s:,.0f} events/s); online AP {m.ap:.4f}  MRR {m.mrr:.4f}; "
            f"report: {result.summary_path}"
        )


if __name__ == "__main__":
    main()
