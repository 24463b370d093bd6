"""``streamgnn train`` takes an allowed lateness (``--allowed-lateness``, YAML ``train.allowed_lateness``), as
the partition router and the store do: in a real run over a file an event within it is learned and one
beyond it is a dead letter whose reason says how late it was; a sharded run's index admits the same global
batches as one process does."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from streamgnn.cli import main
from streamgnn.errors import ConfigError
from streamgnn.train import TrainConfig

N = 300
MODEL = "  model: {memory_dim: 8, time_dim: 8, embedding_dim: 8, num_neighbors: 3, pair_walks: false}\n"


def write_events(path) -> None:
    """``N`` edges in time order, then one 3 behind the newest and one 49 behind."""
    rng = np.random.default_rng(0)
    rows = [
        f"{s},{d},{t}"
        for s, d, t in zip(rng.integers(0, 20, N), rng.integers(20, 30, N), range(N), strict=True)
    ]
    rows += [f"1,21,{N - 4}", f"2,22,{N - 50}"]
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("lateness", [None, 10])
def test_an_event_within_the_allowed_lateness_is_learned_and_one_beyond_it_is_a_dead_letter(
    tmp_path, capsys, lateness
):
    events, config, out = tmp_path / "e.csv", tmp_path / "c.yaml", tmp_path / "out"
    write_events(events)
    config.write_text("train:\n  batch_size: 100\n  eval_negatives: 2\n" + MODEL)
    argv = [
        "train",
        "--config",
        str(config),
        "--file",
        str(events),
        "--out",
        str(out),
        "--quiet",
        "--log-every",
        "0",
    ]
    argv += [] if lateness is None else ["--allowed-lateness", str(lateness)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    err = capsys.readouterr().err
    if lateness is None:  # inf: any order is learned
        assert summary["learned"] == N + 2 and "dead letter" not in err
        return
    assert summary["learned"] == N + 1  # the one 3 behind, not the one 49 behind
    newest, late = float(N - 1), float(N - 50)
    assert f"event at t={late} is 49 behind the stream (newest t={newest}), beyond allowed_lateness=10" in err


def test_the_yaml_key_is_the_flags_and_unknown_or_bad_values_are_named(tmp_path):
    from streamgnn.cli._config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("train:\n  allowed_lateness: 60\n")
    assert load_config(path).train.allowed_lateness == 60
    path.write_text("train:\n  allowed_latenes: 60\n")
    with pytest.raises(ConfigError, match="allowed_latenes"):
        load_config(path)
    with pytest.raises(ConfigError, match="allowed_lateness must be a number >= 0"):
        TrainConfig(allowed_lateness=-1.0)
    assert TrainConfig().allowed_lateness == math.inf
    with pytest.raises(SystemExit):
        main(["train", "--dataset", "x", "--allowed-lateness", "-1"])


def test_a_store_passed_in_must_admit_as_the_config_says(tmp_path):
    from streamgnn.store import StoreConfig, TemporalGraphStore
    from streamgnn.train import OnlineTrainer

    config = TrainConfig(allowed_lateness=5.0)
    with pytest.raises(ConfigError, match="StoreConfig\\(allowed_lateness=5.0\\)"):
        OnlineTrainer(config, TemporalGraphStore())
    assert (
        OnlineTrainer(
            config, TemporalGraphStore(StoreConfig(allowed_lateness=5.0))
        ).store.config.allowed_lateness
        == 5
    )


def test_a_resumed_run_admits_with_its_own_lateness(tmp_path):
    """A setting of the run, not of the checkpoint: a run resumed with another lateness admits with it."""
    from streamgnn.events import EventBatch
    from streamgnn.nn import TGNConfig
    from streamgnn.train import OnlineTrainer

    model = TGNConfig(memory_dim=8, time_dim=8, embedding_dim=8, num_neighbors=3, pair_walks=False)
    config = TrainConfig(
        model=model, batch_size=50, eval_negatives=2, checkpoint_dir=str(tmp_path), checkpoint_every=1
    )
    rng = np.random.default_rng(0)
    events = EventBatch.from_columns(
        src=rng.integers(0, 9, 100), dst=rng.integers(10, 19, 100), t=np.arange(100.0), eid=np.arange(100)
    )
    OnlineTrainer(config).fit(events.split(50), progress=False)
    late = EventBatch.from_columns(src=[1], dst=[11], t=[50.0], eid=[100])
    for allowed, letters in ((math.inf, 0), (10.0, 1)):
        import dataclasses

        trainer = OnlineTrainer.resume(
            tmp_path, config=dataclasses.replace(config, allowed_lateness=allowed, checkpoint_every=0)
        )
        assert len(trainer.step(late).dead_letters) == letters


def test_a_sharded_run_admits_by_the_same_lateness_as_one_process():
    """The sharded trainer's replicated index takes ``allowed_lateness`` too: over the same global batches
    (one rank), it learns and refuses what one process does, with the same reasons."""
    import dataclasses

    from streamgnn.events import EventBatch
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import ShardConfig, ShardedTrainer
    from streamgnn.train import OnlineTrainer

    model = TGNConfig(memory_dim=8, time_dim=8, embedding_dim=8, num_neighbors=3, pair_walks=False)
    config = TrainConfig(model=model, batch_size=50, eval_negatives=2, serve_every=0, allowed_lateness=10.0)
    rng = np.random.default_rng(0)
    t = np.r_[np.arange(100.0), 96.0, 50.0]  # the last two: 3 and 49 behind the newest
    events = EventBatch.from_columns(
        src=rng.integers(0, 9, 102), dst=rng.integers(10, 19, 102), t=t, eid=np.arange(102)
    )
    batches = [events.take(np.arange(0, 50)), events.take(np.arange(50, 102))]
    one = OnlineTrainer(config)
    sharded = ShardedTrainer(dataclasses.replace(config, sharding=ShardConfig(num_partitions=2)))
    for batch in batches:
        a, b = one.step(batch), sharded.step(batch)
        assert [(d.eid, d.reason) for d in a.dead_letters] == [(d.eid, d.reason) for d in b.dead_letters]
    assert one.learned == sharded.learned == 101
    assert [d.eid for d in b.dead_letters] == [101] and "beyond allowed_lateness=10" in b.dead_letters[
        0
    ].reason
