"""The parts of a sharded run that need no second process: ownership and the replicated index, owned
memory rows, the configuration switch, the README snippet, and every module's runnable docstring."""

from __future__ import annotations

import doctest
import importlib
import math

import numpy as np
import pytest

from streamgnn import EventBatch
from streamgnn.errors import ConfigError
from streamgnn.nn import TGNConfig
from streamgnn.shard import GlobalBatcher, GlobalIndex, OwnedMemory, Ownership, ShardConfig, ShardedTrainer
from streamgnn.store import TemporalGraphStore
from streamgnn.train import OnlineTrainer, TrainConfig


@pytest.mark.parametrize(
    "module",
    [
        "ownership",
        "comm",
        "memory",
        "cache",
        "source",
        "batches",
        "sampling",
        "compute",
        "trainer",
        "tgn_state",
        "checkpoint",
        "run",
    ],
)
def test_docstring_examples_run(module):
    mod = importlib.import_module(f"streamgnn.shard.{module}")
    assert doctest.testmod(mod, raise_on_error=False).failed == 0


def test_store_contract_docstring_runs():
    assert doctest.testmod(importlib.import_module("streamgnn.store.contract")).failed == 0


def test_ownership_spreads_whole_partitions_round_robin():
    own = Ownership(num_partitions=8, world_size=3, rank=2)
    assert own.partitions() == [2, 5] and own.partitions(0) == [0, 3, 6]
    assert own.rank_of(np.arange(8)).tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    ids = np.arange(1000)
    # the producer's partition of a vertex is the consumer's: one hash, whatever the world size
    assert np.array_equal(own.partition_of(ids), Ownership(8, 1).partition_of(ids))
    with pytest.raises(ConfigError, match="num_partitions"):
        Ownership(num_partitions=2, world_size=3)
    with pytest.raises(ConfigError, match="rank"):
        Ownership(num_partitions=4, world_size=2, rank=2)


def test_the_index_admits_as_one_store_ingests():
    """Global ids equal the internal ids one store gives; duplicates, late events and deletes of unknown
    vertices are refused the same way, with a dead letter each."""
    rng = np.random.default_rng(0)
    n = 600
    kind = rng.choice([0, 0, 0, 1, 2], n).astype(np.int8)
    events = EventBatch.from_columns(
        kind=kind, src=rng.integers(0, 80, n), dst=rng.integers(0, 80, n),
        t=np.sort(rng.uniform(0, 100, n)), eid=rng.integers(0, 500, n),  # repeated ids: duplicates
    )  # fmt: skip
    index, store = GlobalIndex(Ownership(4, 2, 0)), TemporalGraphStore()
    for batch in events.split(70):
        adm = index.admit(batch)
        report = store.ingest(batch)
        assert adm.duplicates == report.duplicates
        kept = batch.take(adm.rows)
        assert np.array_equal(adm.src, store.node_index(kept.src))
        adds = kept.kind == 0
        assert np.array_equal(adm.dst[adds], store.node_index(kept.dst[adds]))
        unknown = {d.index for d in adm.dead_letters if "unknown node" in d.reason}
        assert unknown == {d.index for d in report.dead_letters if "unknown node" in d.reason}
    assert index.num_nodes == store.num_nodes and index.watermark == store.watermark
    late = GlobalIndex(Ownership(4), allowed_lateness=1.0)
    late.admit(EventBatch.from_columns(src=[1], dst=[2], t=[10.0], eid=[0]))
    adm = late.admit(EventBatch.from_columns(src=[1, 3], dst=[2, 4], t=[5.0, 9.5], eid=[1, 2]))
    assert adm.rows.tolist() == [1] and "allowed_lateness" in adm.dead_letters[0].reason
    restored = GlobalIndex.from_state(*index.state(), Ownership(4))
    assert np.array_equal(restored.lookup(events.src), index.lookup(events.src))
    assert restored.watermark == index.watermark and restored.seen.contains(events.eid).all()


def test_checkpointed_arrays_are_writable_so_torch_takes_them_without_a_warning():
    """A sharded checkpoint turns these states into tensors: a read-only array (bytes seen through
    np.frombuffer) made torch warn on every sharded run."""
    index = GlobalIndex(Ownership(4))
    index.admit(EventBatch.from_columns(src=["a", "b"], dst=["b", "c"], t=[1.0, 2.0], eid=[0, 1]))
    batcher = GlobalBatcher(None, Ownership(4), None, 10)
    batcher.buffer = EventBatch.from_columns(src=[1], dst=[2], t=[3.0], eid=[2])
    batcher.keys = np.zeros(1, np.int64)
    for name, state in (("index", index.state()[0]), ("batcher", batcher.state())):
        for key, array in state.items():
            assert array.flags.writeable, f"{name}.{key}"
    restored = GlobalIndex.from_state(*index.state(), Ownership(4))
    assert restored.lookup(np.array(["c", "a"], dtype=object)).tolist() == [2, 0]


def test_owned_memory_keeps_rows_messages_and_versions():
    mem = OwnedMemory(memory_dim=3, edge_dim=1)
    mem.add_rows(np.array([7, 2, 7]))
    assert mem.size == 2 and sorted(mem.slots(np.array([2, 7])).tolist()) == [0, 1]
    with pytest.raises(ConfigError, match="not owned"):
        mem.slots(np.array([5]))
    mem.append_messages(np.array([7, 2, 7]), np.array([9, 7, 4]), np.array([1.0, 2.0, 3.0]),
                        np.ones((3, 1)), np.array([True, False, True]))  # fmt: skip
    rows = mem.export(np.array([2, 7]))
    assert rows.msg_owner.tolist() == [1, 0, 1] and rows.msg_other.tolist() == [9, 7, 4]  # storage order
    before = mem.export(np.array([7, 2])).version
    mem.commit(np.array([7]), np.ones((1, 3), np.float32), np.array([3.0]))
    assert mem.export(np.array([7])).msg_t.size == 0 and mem.export(np.array([2])).msg_t.tolist() == [2.0]
    after = mem.export(np.array([7, 2])).version
    assert after[0] > before[0] and after[1] == before[1]  # only the committed row's version moves
    again = OwnedMemory(3, 1)
    again.load_state(mem.state())
    assert np.array_equal(again.export(np.array([7, 2])).memory, mem.export(np.array([7, 2])).memory)


def test_sharding_is_one_config_switch():
    tgn = TGNConfig()
    config = TrainConfig(model=tgn, sharding=ShardConfig(num_partitions=4, mode="comm_free", staleness=3))
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="OnlineTrainer replicates"):
        OnlineTrainer(config)
    for bad in (dict(mode="fast"), dict(num_partitions=0), dict(staleness=0)):
        with pytest.raises(ConfigError):
            ShardConfig(**bad)
    with pytest.raises(ConfigError, match="sharding"):
        TrainConfig(sharding={"num_partitions": 4})
    with pytest.raises(ConfigError, match="id_range"):  # a shard's pool is the replicated seen destinations
        ShardedTrainer(TrainConfig(model=tgn, train_negative_pool="id_range", sharding=ShardConfig()))
    with pytest.raises(ConfigError, match="train_part"):  # an offline split's pool: no shard has one
        ShardedTrainer(TrainConfig(model=tgn, train_negative_pool="train_part", sharding=ShardConfig()))


def test_readme_sharded_snippet_runs():
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "docs/sharding.md").read_text()
    block = readme.split("# Scale out", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(block, "docs/sharding.md", "exec"), scope)
    events, ap = scope["result"].events, scope["result"].metrics.ap
    assert events == 4000 and 0.5 < ap <= 1.0 and not math.isnan(ap)
