"""The sharded trainer carries no model's state: TGN's memory rows, halo and embedder live with TGN's
sharded backends (``shard.tgn_state``), handed to the trainer as a ``RankState``; a model without such state
(DyGFormer) makes none, and every rank still reports every byte part. The trainer's source names none of
TGN's parts, so it stays so."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import streamgnn.shard.trainer
from streamgnn.datasets import load
from streamgnn.errors import ConfigError
from streamgnn.nn import DyGFormerConfig, TGNConfig
from streamgnn.shard import PartitionedReplay, ShardConfig, ShardedTrainer
from streamgnn.shard.state import PARTS
from streamgnn.train import TrainConfig
from streamgnn.train import checkpoint as trainer_checkpoint

# TGN's parts and the trainer's former hooks into them
TGN_NAMES = {"TGNConfig", "TGN", "OwnedMemory", "HaloCache", "Embedder", "TGNShardState", "halo", "embedder",
             "memory_dim", "uses_memory", "node_feature_dim", "mark_replicas", "_mark_replicas", "_sync_halo",
             "pairs"}  # fmt: skip


def code_names(source: str) -> set[str]:
    """Every identifier the code uses (names, attributes, imports, definitions), docstrings apart."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def test_the_sharded_trainer_names_no_part_of_tgn():
    names = code_names(Path(streamgnn.shard.trainer.__file__).read_text())
    assert "step" in names and "states" in names  # the scan sees the code
    assert not names & TGN_NAMES, sorted(names & TGN_NAMES)
    # ``self.owned``: the former memory rows (``self.index.owned(...)``, the index's mask, is not one)
    tree = ast.parse(Path(streamgnn.shard.trainer.__file__).read_text())
    on_self = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and getattr(n.value, "id", None) == "self"
    }
    assert "owned" not in on_self and "index" in on_self


def small(model, mode: str = "exact", **train) -> TrainConfig:
    sharding = ShardConfig(num_partitions=4, mode=mode)
    return TrainConfig(model=model, batch_size=100, eval_negatives=4, seed=2, sharding=sharding, **train)


def test_a_sharded_dygformer_run_keeps_no_rank_state_and_reports_every_part():
    model = DyGFormerConfig(sequence_length=4, patch_size=2, channel_dim=4, time_dim=4, embedding_dim=4)
    trainer = ShardedTrainer(small(model, mode="comm_free"))
    events = load("jodie_wikipedia")[:400]
    assert trainer.fit(PartitionedReplay(events, trainer.ownership), progress=False).events == 400
    assert trainer.states == []
    parts = trainer.nbytes()
    baselines = [f"baseline.{name}" for name in trainer.baselines]
    assert list(parts) == [*PARTS, *baselines, "total"] and baselines  # the benchmark's columns, in order
    assert parts["memory"] == parts["halo"] == parts["cache"] == parts["walks"] == 0
    assert parts["store"] > 0 and parts["index"] > 0 and all(parts[b] > 0 for b in baselines)
    assert parts["total"] == sum(v for k, v in parts.items() if k != "total")


def test_tgn_state_reports_its_bytes_and_checkpoints_under_the_names_it_always_had(tmp_path):
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_walks=False)
    config = small(model, "comm_free", checkpoint_dir=str(tmp_path), checkpoint_every=2)
    trainer = ShardedTrainer(config)
    events = load("jodie_wikipedia")[:500]
    trainer.fit(PartitionedReplay(events, trainer.ownership), progress=False)
    (state,) = trainer.states
    parts = trainer.nbytes()
    assert parts["memory"] == state.owned.nbytes() > 0 and parts["halo"] == state.halo.nbytes()
    assert parts["cache"] == state.embedder.cache.nbytes() and parts["walks"] == 0  # (no walk features)
    assert state.owned.size == trainer.index.num_nodes  # alone, this rank owns every vertex
    ckpt = trainer_checkpoint.load(Path(trainer.save_checkpoint({})), trainer.device, "sharded-trainer")
    names = set(ckpt.state)
    assert {f"owned.{k}" for k in state.owned.state()} <= names and "halo.gid" in names
    resumed = ShardedTrainer.resume(None, config=config)
    (again,) = resumed.states
    for part, arrays in state.state().items():
        for key, value in arrays.items():
            np.testing.assert_array_equal(again.state()[part][key], value, err_msg=f"{part}.{key}")


@pytest.mark.parametrize(
    ("change", "message"), [(dict(node_feature_dim=3), "node features"), (dict(variant="tgat"), "tgat")]
)
def test_tgn_refuses_what_its_sharded_backend_cannot_do(change, message):
    with pytest.raises(ConfigError, match=message):
        ShardedTrainer(small(TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, **change)))
