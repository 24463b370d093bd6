"""Checkpoints written before the one container (by the code at 5f5dddc:
``tests/data/write_old_checkpoints.py``) still load: the ``streamgnn-store`` v2 container of a store and
of a partition router, the trainers' old ``step-N/{store,trainer}`` layout (online, a sharded rank's
``rank-R/step-N``, the snapshot trainer), and GraphNN's bare ``torch.save`` file. A container of a format
this version does not read is refused with one line that says how to proceed."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from forgery import reseal

from streamgnn import checkpoint
from streamgnn.errors import CheckpointError
from streamgnn.store import TemporalGraphStore

ARCHIVE = Path(__file__).parent / "data" / "old_checkpoints.tar.xz"
TGN = {
    "memory_dim": 4,
    "time_dim": 2,
    "embedding_dim": 4,
    "num_neighbors": 2,
    "dropout": 0.0,
    "pair_features": False,
}  # fmt: skip  (the writer's model)


@pytest.fixture
def old(tmp_path) -> Path:
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path / "old", filter="data")
    return tmp_path / "old"


def test_an_old_store_container_loads_every_version(old):
    store = TemporalGraphStore.load(old / "store")  # verified, and its content hash reproduced
    assert (store.num_edges, store.source_offsets) == (120, {"events:0": 120})
    first = TemporalGraphStore.load(old / "store", version=1)
    assert (first.num_edges, first.source_offsets) == (60, {"events:0": 60})
    assert json.loads((old / "store/ckpt-000002/manifest.json").read_text())["format"] == "streamgnn-store"


def test_an_old_router_container_restores_its_routing_state(old):
    from streamgnn.jobs.routing import RoutingState

    ckpt = checkpoint.load(old / "router", "partition-router")
    state = RoutingState.from_state(ckpt.arrays, ckpt.manifest["state"], 2)
    assert state.counts["events"] == state.counts["published"] == 120 and state.ids.size == 30
    with pytest.raises(CheckpointError, match="holds a 'partition-router' checkpoint, not a store"):
        TemporalGraphStore.load(old / "router")


def test_an_old_trainer_step_resumes_and_saves_the_new_container(old, tmp_path):
    from streamgnn.train import OnlineTrainer

    trainer = OnlineTrainer.resume(old / "trainer")
    assert (trainer.steps, trainer.position, trainer.store.num_edges) == (3, 120, 120)
    expected = torch.load(old / "trainer-expected.pt", weights_only=True)
    got = trainer.link_model.state_dict()["model"]
    assert expected["model"].keys() == got.keys()
    assert all(torch.equal(expected["model"][k], got[k]) for k in got)
    trainer.config = trainer.config.__class__.from_checkpoint(
        {**trainer.config.to_dict(), "checkpoint_dir": str(tmp_path / "new")}
    )
    path = trainer.save_checkpoint(trainer.store.source_offsets)
    assert path.name == "ckpt-000003" and checkpoint.load(path, "trainer").manifest["steps"] == 3
    again = OnlineTrainer.resume(tmp_path / "new")
    assert again.store.content_hash() == trainer.store.content_hash()
    pairs = zip(again.link_model.model.parameters(), trainer.link_model.model.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_an_old_sharded_rank_resumes(old):
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig

    config = TrainConfig(model=TGNConfig(**TGN), batch_size=40, lr=1e-3, eval_negatives=2, serve_every=0,
                         checkpoint_dir=str(old / "sharded"), checkpoint_every=3,
                         sharding=ShardConfig(num_partitions=2))  # fmt: skip
    trainer = ShardedTrainer.resume(None, config=config)
    offsets = trainer.start_offsets
    assert (trainer.steps, trainer.position) == (3, 120)
    assert sum(offsets.values()) == 120 and trainer.store.num_edges > 0


def test_an_old_snapshot_trainer_resumes(old):
    from torch_geometric_temporal.nn import recurrent as R

    from streamgnn.snapshots import NextLinks, SnapshotTrainer

    trainer = SnapshotTrainer.resume(
        old / "snapshot", cell=R.GConvGRU(2, 2, 1), target=NextLinks(negatives=2, seed=2)
    )
    assert trainer.steps == 2 and len(trainer.metrics) == 2 and trainer.stream.consumed > 0


def test_an_old_graph_nn_file_loads_and_a_new_one_is_a_container(old, tmp_path):
    from streamgnn.filters.graph_filter import GraphNN

    model = GraphNN.load(old / "graphnn.pt")
    assert model.config.features == (2, 3)
    model.save(tmp_path / "gnn")
    back = GraphNN.load(tmp_path / "gnn")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), back.parameters(), strict=True))
    assert checkpoint.load(tmp_path / "gnn", "graph-nn").manifest["format"] == checkpoint.FORMAT


def test_a_container_of_an_unknown_format_is_refused_in_one_line_saying_how(tmp_path):
    store = TemporalGraphStore()
    d = store.save(tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    reseal(d, {**manifest, "format_version": 99})
    with pytest.raises(CheckpointError, match="start a new checkpoint folder") as err:
        TemporalGraphStore.load(tmp_path)
    assert "\n" not in str(err.value) and "v99" in str(err.value)
    assert np.array_equal(checkpoint.numbers(tmp_path), [1])
