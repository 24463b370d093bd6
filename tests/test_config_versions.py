"""Config versions (``streamgnn.configs``: ``stamp``, ``upgrade``, ``STEPS``): a config written to disk
carries ``config_version``; an old one (no stamp: version 1), from a checkpoint or a YAML job file, is
read through the one upgrade path; a version newer than this streamgnn reads is refused naming the file;
what is written again carries the current stamp. The same holds for every other config a checkpoint
holds: the store's, the router's partitioner, a task head's, a snapshot stream's spec, a sharded rank's
``shard``, GraphNN's."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from forgery import reseal

from streamgnn import checkpoint
from streamgnn.cli._config import JobConfig, load_config
from streamgnn.configs import CONFIG_VERSION, STEPS, VERSION_KEY, upgrade
from streamgnn.errors import ConfigError
from streamgnn.nn import TGNConfig
from streamgnn.train import TrainConfig

ARCHIVE = Path(__file__).parent / "data" / "old_checkpoints.tar.xz"  # tests/data/write_old_checkpoints.py


@pytest.fixture
def old_trainer(tmp_path) -> Path:
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path / "old", filter="data")
    return tmp_path / "old" / "trainer"


def test_the_versions_are_a_list_of_steps_one_apart():
    assert [step.version for step in STEPS] == list(range(2, CONFIG_VERSION + 1))
    assert all(step.why for step in STEPS)


def test_an_old_checkpoints_config_loads_through_the_one_path_and_is_written_back_stamped(
    old_trainer, tmp_path
):
    from streamgnn.train import OnlineTrainer

    manifest = next(old_trainer.glob("step-*/trainer/ckpt-*/manifest.json"))
    saved = json.loads(manifest.read_text())["config"]
    assert VERSION_KEY not in saved and "pair_walks" not in saved["model"]  # written before both existed
    trainer = OnlineTrainer.resume(old_trainer)
    # the keys version 2 added take the values runs had then (the old model's weights fit), not today's
    assert trainer.config.model.pair_walks is False and trainer.config.model.pair_endpoints is False
    assert TGNConfig().pair_walks is True and TGNConfig().pair_endpoints is True
    assert trainer.config == TrainConfig.from_checkpoint({**saved, "checkpoint_dir": str(old_trainer)})
    trainer.config = TrainConfig.from_checkpoint(
        {**trainer.config.to_dict(), "checkpoint_dir": str(tmp_path / "new")}
    )
    path = trainer.save_checkpoint(trainer.store.source_offsets)
    written = checkpoint.load(path, "trainer").manifest["config"]
    assert written[VERSION_KEY] == CONFIG_VERSION and written["model"]["pair_walks"] is False
    again = OnlineTrainer.resume(tmp_path / "new")
    assert again.config == trainer.config


def test_a_current_record_is_not_filled_with_the_old_values():
    """A stamped config lacking a key (hand-edited) is not mistaken for an old one: no step applies."""
    data = {VERSION_KEY: CONFIG_VERSION, "model": {"memory_dim": 8}}
    config = TrainConfig.from_checkpoint(data)
    assert (
        config.model.pair_features is True and config.train_negative_pool == TrainConfig().train_negative_pool
    )
    old = TrainConfig.from_checkpoint({"model": {"memory_dim": 8}})
    assert old.model.pair_features is False and old.train_negative_pool == "seen"


def test_a_budget_checkpoint_of_version_2_resumes_with_the_floor_it_ran_with(tmp_path):
    """Version 3 added ``FollowConfig.min_learn_fraction`` (default 0.2): a budget run checkpointed before
    had no floor, and resumes without one; a current checkpoint keeps the floor it names."""
    from streamgnn.train import FollowConfig, OnlineTrainer

    config = TrainConfig(model=TGNConfig(memory_dim=4, time_dim=2, embedding_dim=4),
                         follow=FollowConfig(mode="budget", min_learn_fraction=0.5),
                         checkpoint_dir=str(tmp_path / "ck"))  # fmt: skip
    path = OnlineTrainer(config).save_checkpoint({})
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["config"][VERSION_KEY] == CONFIG_VERSION >= 3
    assert OnlineTrainer.resume(path).config.follow.min_learn_fraction == 0.5
    del manifest["config"]["follow"]["min_learn_fraction"]  # as version 2 wrote it
    manifest["config"][VERSION_KEY] = 2
    reseal(path, manifest)
    resumed = OnlineTrainer.resume(path).config.follow
    assert resumed.mode == "budget" and resumed.min_learn_fraction == 0.0
    assert FollowConfig().min_learn_fraction == 0.2  # (what it would have picked up)
    stamped = {VERSION_KEY: CONFIG_VERSION, "follow": {"mode": "budget"}}  # hand-edited: today's default
    assert TrainConfig.from_checkpoint(stamped).follow.min_learn_fraction == 0.2


def test_an_old_yaml_loads_through_the_one_path_with_todays_defaults(tmp_path):
    """A YAML file names only what its author chose: the removed key is upgraded away; the keys it does not
    name take today's defaults (a file is not a complete record), stamped or not."""
    path = tmp_path / "old.yaml"
    path.write_text("train:\n  batch_size: 50\n  model: {memory_dim: 32, merge: mlp}\n")
    cfg = load_config(path, env={})
    assert cfg.train.batch_size == 50 and cfg.train.model.memory_dim == 32
    assert cfg.train.model == TGNConfig(memory_dim=32)
    stamped = tmp_path / "new.yaml"
    stamped.write_text(f"{VERSION_KEY}: {CONFIG_VERSION}\ntrain:\n  model: {{memory_dim: 32}}\n")
    assert load_config(stamped, env={}) == JobConfig(train=TrainConfig(model=TGNConfig(memory_dim=32)))
    stamped.write_text(f"{VERSION_KEY}: {CONFIG_VERSION}\ntrain:\n  model: {{merge: mlp}}\n")
    with pytest.raises(ConfigError, match="unknown key 'merge' for TGNConfig"):  # gone at the current version
        load_config(stamped, env={})


@pytest.mark.parametrize(
    "value, message",
    [
        (CONFIG_VERSION + 1, f"config_version {CONFIG_VERSION + 1} is newer than this streamgnn reads"),
        (0, "config_version must be a whole number >= 1, got 0"),
        ("'2'", "config_version must be a whole number >= 1, got '2'"),
        ("true", "config_version must be a whole number >= 1, got True"),
    ],
)
def test_a_yaml_of_an_unknown_version_is_refused_naming_the_file(tmp_path, value, message):
    path = tmp_path / "future.yaml"
    path.write_text(f"{VERSION_KEY}: {value}\ntrain: {{batch_size: 5}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_checkpoint_of_a_newer_version_is_refused_naming_it(tmp_path):
    from streamgnn.train import OnlineTrainer

    trainer = OnlineTrainer(TrainConfig(model=TGNConfig(memory_dim=4, time_dim=2, embedding_dim=4),
                                        checkpoint_dir=str(tmp_path / "ck")))  # fmt: skip
    path = trainer.save_checkpoint({})
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["config"][VERSION_KEY] == CONFIG_VERSION
    manifest["config"][VERSION_KEY] = CONFIG_VERSION + 1
    reseal(path, manifest)
    with pytest.raises(ConfigError, match=rf"{path}: config: config_version {CONFIG_VERSION + 1} is newer"):
        OnlineTrainer.resume(path)


def test_upgrade_leaves_the_callers_dict_alone():
    data = {"train": {"model": {"merge": "mlp"}}}
    assert upgrade(data, complete=True)["train"]["model"]["time_init"] == "geometric"
    assert data == {"train": {"model": {"merge": "mlp"}}}


def test_the_snapshot_trainers_config_is_stamped_and_read_through_the_same_path():
    from streamgnn.configs import from_record, stamp
    from streamgnn.snapshots import SnapshotTrainConfig

    config = SnapshotTrainConfig(task="link", epochs=2)
    written = stamp(config.to_dict())
    assert written[VERSION_KEY] == CONFIG_VERSION
    assert from_record(SnapshotTrainConfig, written, "ckpt: config", "snapshot_train") == config
    assert from_record(SnapshotTrainConfig, config.to_dict(), "ckpt: config", "snapshot_train") == config
    with pytest.raises(ConfigError, match=rf"^ckpt: config: config_version {CONFIG_VERSION + 1} is newer"):
        from_record(SnapshotTrainConfig, {**written, VERSION_KEY: CONFIG_VERSION + 1}, "ckpt: config")


# ---------------------------------------------------------------- every other config a checkpoint holds
NEWER = CONFIG_VERSION + 1


def _restamp(config: dict, version: int | None) -> dict:
    """``config`` as a checkpoint written by another version holds it: unstamped (None) or ``version``."""
    body = {key: value for key, value in config.items() if key != VERSION_KEY}
    return body if version is None else {VERSION_KEY: version, **body}


def _store_checkpoint(tmp_path) -> Path:
    from streamgnn.events import EventBatch
    from streamgnn.store import StoreConfig, TemporalGraphStore

    store = TemporalGraphStore(StoreConfig(num_partitions=2, partitioner={"name": "ldg"}))
    store.ingest(EventBatch.from_columns(src=[1, 2, 3], dst=[2, 3, 1], t=[1.0, 2.0, 3.0], eid=[0, 1, 2]))
    return store.save(tmp_path / "store")


def test_a_store_checkpoints_config_is_stamped_an_old_one_loads_and_a_newer_one_is_refused(tmp_path):
    from streamgnn.errors import CheckpointError
    from streamgnn.store import TemporalGraphStore

    path = _store_checkpoint(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["config"][VERSION_KEY] == CONFIG_VERSION
    saved = TemporalGraphStore.load(tmp_path / "store")
    manifest["config"] = _restamp(manifest["config"], None)  # as before the stamp
    reseal(path, manifest)
    old = TemporalGraphStore.load(tmp_path / "store")
    assert old.config == saved.config and old.content_hash() == saved.content_hash()
    manifest["config"] = _restamp(manifest["config"], NEWER)
    reseal(path, manifest)
    where = tmp_path / "store"
    with pytest.raises(CheckpointError, match=rf"^{where}: store config: config_version {NEWER} is newer"):
        TemporalGraphStore.load(tmp_path / "store")


def test_a_routers_partitioner_is_stamped_an_old_one_loads_and_a_newer_one_is_refused():
    from streamgnn.events import EventBatch
    from streamgnn.jobs.routing import RoutingState
    from streamgnn.partition import PartitionerConfig

    state = RoutingState(PartitionerConfig.from_dict({"name": "fennel", "buffer_edges": 3}), 4)
    state.route(
        EventBatch.from_columns(src=[1, 2, 3, 4], dst=[2, 3, 4, 1], t=[1.0, 2.0, 3.0, 4.0], eid=[0, 1, 2, 3])
    )
    arrays, meta = state.state()
    assert meta["partitioner"][VERSION_KEY] == CONFIG_VERSION
    old = {**meta, "partitioner": _restamp(meta["partitioner"], None)}
    restored = RoutingState.from_state(arrays, old, 4, where="router/ckpt-000001")
    assert restored.partitioner.config == state.partitioner.config and restored.counts == state.counts
    newer = {**meta, "partitioner": _restamp(meta["partitioner"], NEWER)}
    with pytest.raises(ConfigError, match=rf"^router/ckpt-000001: partitioner: config_version {NEWER} is"):
        RoutingState.from_state(arrays, newer, 4, where="router/ckpt-000001")


def test_a_task_heads_config_is_stamped_an_old_one_loads_and_a_newer_one_is_refused():
    from streamgnn.tasks.config import TaskConfig
    from streamgnn.tasks.online import OnlineHead

    config = TaskConfig(kind="node_classification", classes=2, labels_file="x", hidden=(4,))
    state = OnlineHead(config, 6, features=2).state()
    assert state["config"][VERSION_KEY] == CONFIG_VERSION
    old = OnlineHead.from_state({**state, "config": _restamp(state["config"], None)}, "ckpt-000004: task")
    assert old.config == config
    with pytest.raises(ConfigError, match=rf"^ckpt-000004: task: config: config_version {NEWER} is newer"):
        OnlineHead.from_state({**state, "config": _restamp(state["config"], NEWER)}, "ckpt-000004: task")


def test_a_snapshot_streams_spec_is_stamped_an_old_one_loads_and_a_newer_one_is_refused(tmp_path):
    from streamgnn.events import EventBatch
    from streamgnn.snapshots import SnapshotSpec
    from streamgnn.snapshots.stream import SnapshotStream
    from streamgnn.store import TemporalGraphStore

    spec = SnapshotSpec(kind="window", every=2.0, width=4.0)
    store = TemporalGraphStore()
    stream = SnapshotStream(store, spec, lateness=0.0)
    store.ingest(EventBatch.from_columns(src=[1, 2, 3], dst=[2, 3, 1], t=[1.0, 2.0, 9.0], eid=[0, 1, 2]))
    assert list(stream.ready())  # a snapshot cut: the builder has state to save
    path = stream.save(tmp_path / "snaps")
    manifest = json.loads((path / "manifest.json").read_text())
    values = manifest["stream"]["builder"]
    assert values["spec"][VERSION_KEY] == CONFIG_VERSION
    values["spec"] = _restamp(values["spec"], None)
    reseal(path, manifest)
    assert SnapshotStream.load(tmp_path / "snaps").builder.spec == spec
    values["spec"] = _restamp(values["spec"], NEWER)
    reseal(path, manifest)
    with pytest.raises(ConfigError, match=rf"^{path}: spec: config_version {NEWER} is newer"):
        SnapshotStream.load(tmp_path / "snaps")


def test_a_graph_nn_config_is_stamped_an_old_one_loads_and_a_newer_one_is_refused(tmp_path):
    from streamgnn.filters.graph_filter import GraphNN, GraphNNConfig

    model = GraphNN(GraphNNConfig((2, 4, 3), taps=2))
    path = model.save(tmp_path / "gnn")
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["config"][VERSION_KEY] == CONFIG_VERSION
    manifest["config"] = _restamp(manifest["config"], None)
    reseal(path, manifest)
    assert GraphNN.load(tmp_path / "gnn").config == model.config
    manifest["config"] = _restamp(manifest["config"], NEWER)
    reseal(path, manifest)
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'gnn'}: config: config_version {NEWER} is newer"):
        GraphNN.load(tmp_path / "gnn")


def test_a_sharded_ranks_shard_config_is_read_through_the_one_path_and_a_newer_one_is_refused(
    old_trainer, tmp_path
):
    """The old (unstamped) rank's ``shard`` loads in ``test_checkpoint_compat``; here it is made newer."""
    from streamgnn.shard import ShardConfig, ShardedTrainer

    root = old_trainer.parent / "sharded"
    manifest_path = next(root.glob("rank-00000/step-*/trainer/ckpt-*/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    assert VERSION_KEY not in manifest["shard"]
    manifest["shard"] = {VERSION_KEY: CONFIG_VERSION + 1, **manifest["shard"]}
    reseal(manifest_path.parent, manifest)
    model = TGNConfig(
        memory_dim=4, time_dim=2, embedding_dim=4, num_neighbors=2, dropout=0.0, pair_features=False
    )
    config = TrainConfig(model=model, batch_size=40, lr=1e-3, eval_negatives=2, serve_every=0,
                         checkpoint_dir=str(root), sharding=ShardConfig(num_partitions=2))  # fmt: skip
    with pytest.raises(ConfigError) as err:
        ShardedTrainer.resume(None, config=config)
    step = manifest_path.parents[2]  # the rank's step folder: the checkpoint the refusal names
    assert str(err.value).startswith(f"{step}: shard: config_version {CONFIG_VERSION + 1} is newer")
