"""The one config converter (streamgnn.configs): every config dataclass round-trips through plain JSON, a
mistake names the key and where, dicts written by older versions still load, CLI help shows the
dataclasses' defaults."""

from __future__ import annotations

import dataclasses
import doctest
import json
import math
import re

import pytest

import streamgnn.configs
from streamgnn.cli import build_parser
from streamgnn.cli._config import JobConfig
from streamgnn.configs import field_default, from_dict, to_dict
from streamgnn.errors import ConfigError
from streamgnn.filters.graph_filter import GraphNNConfig
from streamgnn.nn import DyGFormerConfig, TGNConfig
from streamgnn.partition import PartitionerConfig
from streamgnn.snapshots import SnapshotSpec
from streamgnn.snapshots.trainer import SnapshotTrainConfig
from streamgnn.store import StoreConfig
from streamgnn.train.config import ShardConfig, TrainConfig


def test_module_examples_run():
    result = doctest.testmod(streamgnn.configs)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    "config",
    [
        JobConfig(),  # every section of the CLI's file, nested configs included
        TrainConfig(
            model=TGNConfig(pair_features=False),
            sharding=ShardConfig(num_partitions=4),
            baselines=("edgebank",),
        ),
        TrainConfig(
            model=DyGFormerConfig(sequence_length=8)
        ),  # the other model: a registry msgspec cannot read
        StoreConfig(partitioner={"name": "fennel", "buffer_time": math.inf, "rebalance": {"every_edges": 5}}),
        SnapshotSpec(times=(1.0, 2.5), kind="window", width=2.0),
        SnapshotTrainConfig(lr=0.5),
        GraphNNConfig((3, 8, 2), aggregation={"max_age": 2}),
    ],
    ids=lambda c: type(c).__name__,
)
def test_every_config_round_trips_through_plain_json(config):
    text = json.dumps(to_dict(config), allow_nan=False)  # non-finite floats travel as strings
    assert from_dict(type(config), json.loads(text)) == config


def test_a_mistake_names_the_key_the_class_and_where():
    with pytest.raises(
        ConfigError, match=r"^ckpt: model: unknown key 'memory_dims' for TGNConfig; known keys"
    ):
        TrainConfig.from_dict({"model": {"memory_dims": 5}}, where="ckpt")
    with pytest.raises(ConfigError, match=r"^model: pair_decays: 1: expected float, got 'x'$"):
        TrainConfig.from_dict({"model": {"pair_decays": [1.0, "x"]}})
    with pytest.raises(
        ConfigError, match=r"^sharding: mode: expected one of \[.exact., .comm_free.\], got .fast.$"
    ):  # a Literal
        TrainConfig.from_dict({"sharding": {"mode": "fast"}})
    with pytest.raises(ConfigError, match=r"^partitioner: expected PartitionerConfig \| str, got \[1\]$"):
        StoreConfig.from_dict({"partitioner": [1]})
    with pytest.raises(ConfigError, match=r"^expected a mapping of SnapshotSpec keys, got str$"):
        SnapshotSpec.from_dict("daily")


def test_a_train_config_as_the_old_code_wrote_it_into_checkpoints_still_loads():
    # TrainConfig.as_dict (dataclasses.asdict) of a checkpoint written before the time and pool options,
    # the baselines and the pair features: tuples as JSON lists, the removed merge switch still named
    saved = json.loads(
        '{"model": {"memory_dim": 32, "time_dim": 32, "embedding_dim": 32, "edge_feature_dim": 0, '
        '"node_feature_dim": 0, "num_neighbors": 10, "num_layers": null, "num_heads": 2, "dropout": 0.1, '
        '"message": "identity", "message_dim": null, "aggregator": "last", "variant": "tgn", '
        '"time_scale": 1.0, "merge": "mlp"}, "batch_size": 100, "lr": 0.0001, "seed": 3, '
        '"sampling": "recent", "train_negatives": "random", "eval_negatives": 100, '
        '"eval_strategy": "random", "query_time": "batch", "window_events": 10000, "checkpoint_dir": "c", '
        '"checkpoint_every": 5, "checkpoint_keep": 2, "serve_every": 1, "publish_every": 10, '
        '"device": "cpu", "sharding": {"num_partitions": 4, "mode": "exact", "staleness": 10, '
        '"cache_rows": 20000, "placement": "hash"}}'
    )
    old = TrainConfig.from_checkpoint(saved, "step-5")
    assert (old.batch_size, old.seed, old.model.memory_dim, old.sharding.num_partitions) == (100, 3, 32, 4)
    assert (old.model.neighbor_time, old.model.time_init, old.train_negative_pool) == (
        "query",
        "geometric",
        "seen",
    )
    assert old.baselines == ("edgebank", "edgebank_tw") and not old.model.pair_features  # today's defaults
    saved["model"]["merge"] = "linear_skip"
    with pytest.raises(ConfigError, match="^step-5: TGNConfig.merge='linear_skip' is no longer built"):
        TrainConfig.from_checkpoint(saved, "step-5")


def test_a_store_config_as_the_old_checkpoints_wrote_it_still_loads():
    # the store's manifest before the partitioner and dense ids existed, then PartitionerConfig.to_dict's
    # JSON-safe "inf"; json.dumps wrote the lateness as Infinity
    oldest = json.loads('{"num_partitions": 2, "allowed_lateness": Infinity}')
    assert StoreConfig.from_dict(oldest) == StoreConfig(num_partitions=2)
    old = {"num_partitions": 3, "allowed_lateness": 5.0, "partitioner": {"name": "ldg", "buffer_time": "inf"}}
    cfg = StoreConfig.from_dict(old)
    assert cfg.partitioner == PartitionerConfig("ldg") and cfg.allowed_lateness == 5.0 and not cfg.dense_ids


def test_cli_help_takes_its_defaults_from_the_dataclasses():
    assert field_default(JobConfig, "train.model.memory_dim") == TGNConfig().memory_dim
    assert field_default(JobConfig, "snapshots.spec.every") is None  # below a field whose default is None
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    helps = {a.dest: a.help for a in commands["train"]._actions}
    assert helps["cfg:train.batch_size"].endswith(f"(default {TrainConfig().batch_size})")
    agents = commands["agents"]._subparsers._group_actions[0].choices
    taps = {
        name: {a.dest: a.help for a in agents[name]._actions}["cfg:agents.sweep.taps"]
        for name in ("flocking", "source-loc")
    }
    # flocking's own config_defaults win over the dataclass's
    assert taps["flocking"].endswith("(default 3)") and taps["source-loc"].endswith("(default 5)")


def test_a_choice_is_checked_once_however_the_config_is_built():
    """A ``Literal`` field holds one of its values whether the config came from a dict (the converter) or
    from Python (``Config``'s one check, before the class's own), in the same words; a subclass that adds
    a ``__post_init__`` of its own keeps the check."""
    from streamgnn.serve.config import ServeConfig
    from streamgnn.train.config import FollowConfig

    with pytest.raises(ConfigError, match=r"^mode: expected one of \['every_event', 'budget'\], got 'fast'$"):
        FollowConfig(mode="fast")
    with pytest.raises(
        ConfigError, match=r"^follow: mode: expected one of \['every_event', 'budget'\], got 'fast'$"
    ):
        TrainConfig.from_dict({"follow": {"mode": "fast"}})
    with pytest.raises(ConfigError, match=r"^query_time: expected one of \['batch', 'event'\], got 'now'$"):
        TrainConfig(query_time="now")
    with pytest.raises(ConfigError, match=r"^metric: expected one of"):
        ServeConfig(metric="l2")

    @dataclasses.dataclass(frozen=True)
    class Checked(FollowConfig):
        extra: int = 0

        def __post_init__(self) -> None:
            if self.extra < 0:
                raise ConfigError("extra must be >= 0")

    with pytest.raises(ConfigError, match="^mode: expected one of"):
        Checked(mode="fast")
    with pytest.raises(ConfigError, match="^extra must be"):
        Checked(extra=-1)
    assert FollowConfig(mode="budget").mode == "budget"


@pytest.mark.parametrize(
    "cls, field, value, expected",
    [
        (TrainConfig, "checkpoint_min_pause_s", True, "float"),  # was read as a 1 s pause
        (TrainConfig, "batch_size", True, "int"),
        (TrainConfig, "lr", False, "float"),
        (TGNConfig, "memory_dim", True, "int"),
        (StoreConfig, "allowed_lateness", True, "float"),
    ],
)
def test_a_bool_in_a_number_field_is_refused_however_the_config_is_built(cls, field, value, expected):
    """``True`` is an int to Python: a config built in Python took it as 1 where ``from_dict`` refused it."""
    with pytest.raises(ConfigError, match=rf"^{field}: expected {expected}"):
        cls(**{field: value})
    with pytest.raises(ConfigError, match=field):
        from_dict(cls, {field: value})


@pytest.mark.parametrize(
    "cls, field, value, options",
    [
        (TGNConfig, "variant", "gru", ["tgn", "jodie", "tgat"]),
        (TGNConfig, "message", "gru", ["identity", "mlp"]),
        (TGNConfig, "aggregator", "max", ["last", "mean"]),
        (TGNConfig, "neighbor_time", "now", ["query", "last_update"]),
        (TGNConfig, "time_init", "zeros", ["geometric", "uniform"]),
        (SnapshotSpec, "kind", "daily", ["state", "window"]),
        (SnapshotSpec, "weight", "sum", ["none", "count", "column", "decay"]),
        (SnapshotTrainConfig, "task", "ranking", ["regression", "classification", "link"]),
        (PartitionerConfig, "name", "metis", ["hash", "ldg", "fennel", "hdrf", "dbh"]),
    ],
)
def test_every_choice_of_a_config_is_a_literal_checked_by_config(cls, field, value, options):
    """The choices once checked by hand in each class's ``__post_init__`` are ``Literal`` fields: refused in
    ``Config``'s words whether the config is built in Python or from a dict, each option accepted."""
    from streamgnn.sampling import SamplerConfig
    from streamgnn.snapshots import NextLinks

    base = {"every": 1.0} if cls is SnapshotSpec else {}
    message = rf"^{field}: expected one of {re.escape(str(options))}, got '{value}'$"
    with pytest.raises(ConfigError, match=message):
        cls(**base, **{field: value})
    with pytest.raises(ConfigError, match=rf"^{field}: expected one of"):
        cls.from_dict({**base, field: value})
    for option in options:
        needs = {"half_life": 1.0} if option == "decay" else {}  # a decayed weight's own parameter
        assert getattr(cls(**base, **needs, **{field: option}), field) == option
    for other, name, bad in ((SamplerConfig, "strategy", "latest"), (SamplerConfig, "direction", "up"),
                             (NextLinks, "strategy", "popular")):  # fmt: skip
        with pytest.raises(ConfigError, match=rf"^{name}: expected one of .*, got '{bad}'$"):
            other(**{name: bad})


@dataclasses.dataclass(frozen=True)
class ToyConfig(streamgnn.configs.Config):
    """A model config that no module of streamgnn knows: registered by the test alone."""

    width: int = 3
    variant: str = "toy"


class ToyModel:
    def __init__(self, config, *, device, dist) -> None:
        self.config = config


@pytest.fixture
def toy_registered():
    """``ToyConfig`` registered as a model for the test's length, then taken out again (the conformance
    suite runs over every registered family)."""
    from streamgnn.train import models
    from streamgnn.train.config import MODEL_CONFIGS

    models.register(ToyConfig, ToyModel)
    yield
    del models.MODELS[ToyConfig], MODEL_CONFIGS.classes["toy"]


def test_a_model_registered_elsewhere_is_built_by_its_variant_without_editing_train_config(
    toy_registered, tmp_path
):
    """Adding a model is one ``register`` call: a file, a checkpoint's config and Python all reach it."""
    from streamgnn.cli._config import load_config
    from streamgnn.train.distributed import DistContext
    from streamgnn.train.models import make_link_model

    path = tmp_path / "toy.yaml"
    path.write_text("train:\n  model: {variant: toy, width: 7}\n")
    config = load_config(path, env={}).train
    assert config.model == ToyConfig(width=7)
    written = streamgnn.configs.stamp(config.to_dict())  # as a checkpoint holds it
    assert TrainConfig.from_checkpoint(written) == config == TrainConfig(model=ToyConfig(width=7))
    assert TrainConfig().model == TGNConfig()  # the default is still the first registered
    model = make_link_model(config, device="cpu", dist=DistContext())
    assert isinstance(model, ToyModel) and model.config is config
    with pytest.raises(ConfigError, match=r"^toy\.yaml: model: unknown key 'depth' for ToyConfig"):
        TrainConfig.from_dict({"model": {"variant": "toy", "depth": 2}}, "toy.yaml")


def test_an_unknown_model_variant_names_the_file_the_key_and_the_known_variants(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("train:\n  model: {variant: dygformr}\n")
    with pytest.raises(ConfigError) as err:
        streamgnn.cli._config.load_config(path, env={})
    assert str(err.value) == (
        f"{path}: train: model: variant: unknown model variant 'dygformr'; "
        "known variants: dygformer, jodie, tgat, tgn, tpnet"
    )
    with pytest.raises(ConfigError, match=r"^ckpt: model: variant: unknown model variant \[1\]; known"):
        TrainConfig.from_checkpoint({"model": {"variant": [1]}}, "ckpt")
    with pytest.raises(ConfigError, match=r"^model: expected a registered model config \(DyGFormerConfig, "):
        TrainConfig(model=GraphNNConfig((3, 8, 2)))  # a config, but of no registered model


def test_a_variant_two_model_configs_claim_is_refused():
    from streamgnn.train.config import MODEL_CONFIGS

    @dataclasses.dataclass(frozen=True)
    class Impostor(streamgnn.configs.Config):
        variant: str = "tgat"

    with pytest.raises(ConfigError, match="model: variant 'tgat' is TGNConfig's"):
        MODEL_CONFIGS.register(Impostor)
    assert MODEL_CONFIGS.classes["tgat"] is TGNConfig
