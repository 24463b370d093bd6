"""How ``old_checkpoints.tar.xz`` was made: one small checkpoint of each layout before the one container,
written by the code at 5f5dddc (``git worktree add /tmp/old 5f5dddc``, then run this there with
``python write_old_checkpoints.py OUT`` and ``tar -cJf old_checkpoints.tar.xz -C OUT .``). It imports
modules that no longer exist, so it runs only against that commit; ``test_checkpoint_compat.py`` loads what
it wrote."""

import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch_geometric_temporal.nn import recurrent as R

from streamgnn.codec import encode_json_lines
from streamgnn.connectors.files import JsonLinesSource
from streamgnn.connectors.kafka.decoding import Schema
from streamgnn.events import EventBatch
from streamgnn.filters.graph_filter import GraphNN, GraphNNConfig
from streamgnn.jobs.routing import RoutingState
from streamgnn.nn import TGNConfig
from streamgnn.partition.config import PartitionerConfig
from streamgnn.shard import PartitionedReplay, ShardConfig, ShardedTrainer
from streamgnn.snapshots import NextLinks, SnapshotSpec
from streamgnn.snapshots.trainer import SnapshotTrainConfig, SnapshotTrainer
from streamgnn.store import StoreConfig, TemporalGraphStore
from streamgnn.store.checkpoint import write_checkpoint  # the old container's writer
from streamgnn.train import OnlineTrainer, TrainConfig


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rng = np.random.default_rng(3)
    n = 120
    ev = EventBatch.from_columns(
        src=rng.integers(0, 20, n),
        dst=rng.integers(20, 30, n),
        t=np.cumsum(rng.exponential(1.0, n)),
        eid=np.arange(n),
    )
    store = TemporalGraphStore(StoreConfig(num_partitions=2))  # "streamgnn-store" v2, two versions
    store.ingest(ev.take(slice(0, 60)))
    store.save(out / "store", source_offsets={"events:0": 60}, keep=2)
    store.ingest(ev.take(slice(60, None)))
    store.save(out / "store", source_offsets={"events:0": 120}, keep=2)

    routing = RoutingState(PartitionerConfig(name="hash"), 2)  # the manifest PartitionRouter._save wrote
    routing.route(ev)
    arrays, state = routing.checkpoint()
    manifest = {
        "kind": "partition-router",
        "in_topic": "raw",
        "out_topic": "events",
        "num_partitions": 2,
        "state": state,
        "schema": Schema(string_ids=False, feature_width=-1).to_dict(),
        "decode_dead_letters": 0,
        "source_offsets": {"raw:0": 120},
        "output_offsets": {"0": 0, "1": 0},
    }
    write_checkpoint(out / "router", arrays, manifest, keep=2)

    model = TGNConfig(
        memory_dim=4, time_dim=2, embedding_dim=4, num_neighbors=2, dropout=0.0, pair_features=False
    )
    common = {"model": model, "batch_size": 40, "lr": 1e-3, "eval_negatives": 2, "serve_every": 0}
    cfg = TrainConfig(**common, checkpoint_dir=str(out / "trainer"), checkpoint_every=2, checkpoint_keep=1)
    trainer = OnlineTrainer(cfg)  # step-000000003/{store,trainer}
    trainer.fit(ev.split(40), progress=False)
    torch.save(
        {"model": trainer.link_model.state_dict()["model"], "steps": trainer.steps},
        out / "trainer-expected.pt",
    )

    cfg = TrainConfig(
        **common,
        checkpoint_dir=str(out / "sharded"),
        checkpoint_every=3,
        sharding=ShardConfig(num_partitions=2),
    )
    sharded = ShardedTrainer.resume(None, config=cfg)
    offsets = sharded.start_offsets  # rank-00000/step-000000003/{store,trainer}
    sharded.fit(PartitionedReplay(ev, sharded.ownership, chunk=15, start_offsets=offsets), progress=False)

    torch.manual_seed(0)
    GraphNN(GraphNNConfig((2, 3), taps=2)).save(out / "graphnn.pt")  # a bare torch.save file

    path = out / "events.jsonl"
    rng = np.random.default_rng(4)
    path.write_bytes(
        encode_json_lines(
            EventBatch.from_columns(
                src=rng.integers(0, 12, 300),
                dst=rng.integers(0, 12, 300),
                t=np.sort(rng.uniform(0, 600, 300)),
                eid=np.arange(300),
            )
        )
    )
    torch.manual_seed(1)
    cfg = SnapshotTrainConfig(
        task="link",
        lr=0.01,
        bptt=2,
        checkpoint_dir=str(out / "snapshot"),
        checkpoint_every=2,
        checkpoint_keep=1,
    )
    snap = SnapshotTrainer(R.GConvGRU(2, 2, 1), cfg)  # step-000000002/{store,trainer}
    spec = SnapshotSpec(kind="window", every=100.0, start=100.0, degree_features=True, weight="count")
    snap.run_live(
        JsonLinesSource(path, batch_size=100),
        TemporalGraphStore(StoreConfig(allowed_lateness=0.0)),
        spec,
        target=NextLinks(negatives=2, seed=2),
        progress=False,
        max_snapshots=3,
    )
    path.unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
