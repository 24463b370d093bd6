"""The online trainer end to end: no leakage, learning, duplicates and dead letters, reports."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.jobs import run_online
from streamgnn.nn import TGNConfig
from streamgnn.sources import IterableSource
from streamgnn.store import TemporalGraphStore
from streamgnn.train import OnlineTrainer, TrainConfig
from streamgnn.train.config import DEFAULT_CHECKPOINT_EVERY

torch.set_num_threads(1)


def stream(n: int = 1200, users: int = 30, items: int = 15, seed: int = 0) -> EventBatch:
    """Users pick items (ids after the users') by a skewed popularity, so the destination is predictable."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, items + 1) ** 2
    src = rng.integers(0, users, n)
    dst = rng.choice(items, n, p=popularity / popularity.sum()) + users
    t = np.cumsum(rng.exponential(1.0, n))
    return EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(n))


def config(**kw) -> TrainConfig:
    model = TGNConfig(memory_dim=16, time_dim=8, embedding_dim=16, num_neighbors=5, dropout=0.0)
    base = dict(model=model, batch_size=50, lr=3e-3, eval_negatives=10, window_events=200)
    return TrainConfig(**{**base, **kw})


def scores_by_eid(events: EventBatch, cfg: TrainConfig) -> dict[int, tuple[float, float, float]]:
    trainer = OnlineTrainer(cfg)
    out = {}
    for batch in events.split(cfg.batch_size):
        res = trainer.step(batch)
        out.update({int(e): (p, q, r) for e, p, q, r in zip(res.eid, res.pos, res.neg, res.rr, strict=True)})
    return out


@pytest.mark.parametrize("query_time", ["batch", "event"])
def test_no_score_depends_on_its_own_or_a_later_event(query_time):
    events = stream(400)
    cut = 233  # in the middle of the fifth batch: its first rows are scored with the perturbed rows present
    rng = np.random.default_rng(1)
    src, dst = events.src.copy(), events.dst.copy()
    src[cut:] = rng.integers(0, 30, len(src) - cut)
    dst[cut:] = rng.integers(30, 45, len(dst) - cut)
    changed = EventBatch.from_columns(src=src, dst=dst, t=events.t, eid=events.eid)
    cfg = config(query_time=query_time)
    a, b = scores_by_eid(events, cfg), scores_by_eid(changed, cfg)
    before = [e for e in a if e < cut]
    assert len(before) > 150
    np.testing.assert_allclose([a[e] for e in before], [b[e] for e in before], rtol=0, atol=1e-6)
    after = [e for e in a if e >= cut + cfg.batch_size]  # model and memory have seen the change by then
    diff = np.abs(np.array([a[e][:2] for e in after]) - np.array([b[e][:2] for e in after]))
    assert np.median(diff) > 1e-3


def test_query_time_must_be_batch_or_event():
    with pytest.raises(ConfigError, match="query_time"):
        config(query_time="root")


def test_learns_the_pattern_test_then_train():
    cfg = config()
    result = OnlineTrainer(cfg).fit(stream(1600).split(100), progress=False)
    first, last = result.windows[0], result.windows[-1]
    assert result.events == 1600 and result.learned == 1600
    assert last.ap > 0.8 and last.ap > first.ap + 0.1
    assert last.mrr > 0.6  # chance with 10 negatives is about 0.27
    assert last.loss < first.loss


@pytest.mark.parametrize("variant", ["jodie", "tgat"])
def test_other_variants_train_and_score(variant):
    layers = {"jodie": 0, "tgat": 2}[variant]
    model = TGNConfig(
        memory_dim=16, time_dim=8, embedding_dim=16, num_neighbors=3, dropout=0.1, variant=variant
    )
    cfg = config(model=model, batch_size=40)
    assert model.num_layers == layers
    result = OnlineTrainer(cfg).fit(stream(400).split(40), progress=False)
    assert result.learned == 400
    assert all(np.isfinite([w.ap, w.auc, w.mrr, w.loss]).all() for w in result.windows)


def test_duplicates_and_dead_letters_are_never_learned_twice_or_scored():
    events = stream(150)
    trainer = OnlineTrainer(config())
    trainer.step(events[:100])
    before = trainer.store.content_hash()
    again = trainer.step(events[:100])  # a replay (e.g. at-least-once delivery): the store skips it
    assert again.learned == 0 and len(again.pos) == 0 and math.isnan(again.loss)
    assert trainer.store.content_hash() == before
    tail = events[100:]
    t = tail.t.copy()
    t[3] = np.nan
    eid = tail.eid.copy()
    eid[7] = eid[6]  # a repeated event id inside the batch: the first one wins
    messy = EventBatch.from_columns(src=tail.src, dst=tail.dst, t=t, eid=eid)
    res = trainer.step(messy)
    assert res.learned == 48 and len(res.pos) == 48
    assert [d.index for d in res.dead_letters] == [3]
    assert set(res.eid) == set(eid) - {eid[3]}
    assert trainer.learned == 148 and trainer.store.num_edges == 148


def test_run_online_writes_plot_and_summary_and_serves_every_node(tmp_path):
    events = stream(600)
    cfg = config(serve_every=2)
    result = run_online(events.split(100), TemporalGraphStore(), cfg, out_dir=tmp_path, progress=False)
    assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads(result.summary_path.read_text())
    assert summary["events"] == 600 and len(summary["windows"]) == len(result.windows) == 3
    assert summary["metrics"]["ap"] == pytest.approx(result.metrics.ap)
    assert 0 < result.latency_p50_ms <= result.latency_p99_ms
    assert result.events_per_s > 0


def test_string_ids_node_updates_and_features_flow_through():
    rng = np.random.default_rng(4)
    n = 300
    kind = np.where(rng.random(n) < 0.2, 2, 0)  # a fifth are node updates, carrying node features
    src = np.array([f"u{i}" for i in rng.integers(0, 20, n)], dtype=object)
    dst = np.where(kind == 2, src, np.array([f"i{i}" for i in rng.integers(0, 10, n)], dtype=object))
    events = EventBatch.from_columns(
        kind=kind, src=src, dst=dst, t=np.arange(n, dtype=float), eid=np.arange(n),
        features=rng.normal(size=(n, 3)).astype(np.float32),
    )  # fmt: skip
    model = TGNConfig(
        memory_dim=8, time_dim=4, embedding_dim=8, edge_feature_dim=3, node_feature_dim=3, num_neighbors=3
    )
    trainer = OnlineTrainer(config(model=model))
    result = trainer.fit(events.split(60), progress=False)
    assert result.learned == int((kind == 0).sum())
    assert trainer.store.num_node_updates == int((kind == 2).sum())
    assert np.isfinite(result.metrics.ap) and np.isfinite(result.metrics.mrr)
    assert trainer.table.embeddings(["u3", "i4"]).shape == (2, 8)


class CountingSource(IterableSource):
    """A source held in memory whose offsets work as ``KafkaSource``'s do (not a ``replay``): a batch counts
    as consumed once it has been handed out."""

    replay = False
    position_key = "p0"

    def __init__(self, events: EventBatch, size: int) -> None:
        super().__init__(list(events.split(size)))


def test_max_events_inside_a_source_batch_never_checkpoints_its_offsets(tmp_path):
    cfg = config(batch_size=200, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    trainer = OnlineTrainer(cfg)  # the second source batch is one global batch, cut to its first 50 events
    result = trainer.fit(CountingSource(stream(600), 150), max_events=200, progress=False)
    assert result.events == 200 and trainer.store.num_edges == 200
    saved = OnlineTrainer.resume(tmp_path)
    assert saved.store.source_offsets == {"p0": 150}  # not 300: 100 events of that batch were never learned
    assert saved.position == 150


def test_a_checkpoint_dir_alone_checkpoints_at_the_default_cadence(tmp_path):
    """``streamgnn train --checkpoint-dir DIR`` promises a resume: naming the folder must be enough."""
    assert TrainConfig().checkpoint_interval == 0  # no folder: nowhere to write
    assert config(checkpoint_dir=str(tmp_path), checkpoint_every=0).checkpoint_interval == 0  # asked: none
    assert config(checkpoint_dir=str(tmp_path), checkpoint_every=7).checkpoint_interval == 7
    cfg = config(checkpoint_dir=str(tmp_path))
    assert cfg.checkpoint_every is None and cfg.checkpoint_interval == DEFAULT_CHECKPOINT_EVERY
    OnlineTrainer(cfg).fit(stream(150).split(50), progress=False)  # 3 batches: the end's checkpoint
    assert OnlineTrainer.resume(tmp_path).position == 150


def test_consecutive_fits_and_replays_after_reset_learn_every_event():
    events = stream(300)
    trainer = OnlineTrainer(config())
    first = trainer.fit(events[:150].split(50), progress=False)
    second = trainer.fit(events[150:].split(50), progress=False)
    assert (first.events, second.events) == (150, 150) and trainer.store.num_edges == 300
    served = trainer.table.updated_at(trainer.store.external_ids(np.arange(trainer.store.num_nodes)))
    assert len(trainer.table) == trainer.store.num_nodes and served.max() >= events.t[-1]
    trainer.reset_stream()
    assert len(trainer.table) == 0  # the old pass's rows are not served as current
    assert trainer.fit(events[:100].split(50), progress=False).events == 100
    assert len(trainer.table) == trainer.store.num_nodes
    assert trainer.table.updated_at(trainer.store.external_ids([0])).max() < events.t[100]
    assert trainer.fit(events[100:].split(50), progress=False).events == 200
    assert trainer.store.num_edges == 300


def test_feature_models_run_before_the_store_has_features():
    events = stream(200)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, node_feature_dim=3, num_neighbors=3)
    trainer = OnlineTrainer(config(model=model))  # edges first: no node update has arrived yet
    assert trainer.fit(events.split(50), progress=False).events == 200
    history = TemporalGraphStore()
    history.ingest(events[:100])  # history without edge features
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, edge_feature_dim=2, num_neighbors=3)
    trainer = OnlineTrainer(config(model=model), history)
    tail = events[100:]
    feats = np.ones((len(tail), 2), np.float32)
    tail = EventBatch.from_columns(src=tail.src, dst=tail.dst, t=tail.t, eid=tail.eid, features=feats)
    assert trainer.fit(tail.split(50), progress=False).events == 100
    with pytest.raises(ConfigError, match="edge_feature_dim=2"):
        OnlineTrainer(config(), trainer.store)


def test_node_updates_are_served_and_refresh_their_rows():
    events = stream(200)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, edge_feature_dim=2, node_feature_dim=3)
    trainer = OnlineTrainer(config(model=model))
    edges = EventBatch.from_columns(
        src=events.src, dst=events.dst, t=events.t, eid=events.eid, features=np.ones((200, 2), np.float32)
    )
    trainer.fit(edges.split(50), progress=False)

    def updates(nodes, t, eid, value):
        n = len(nodes)
        return EventBatch.from_columns(
            kind=np.full(n, 2), src=nodes, dst=nodes, t=np.full(n, t), eid=np.arange(eid, eid + n),
            features=np.full((n, 3), value, np.float32),
        )  # fmt: skip

    trainer.step(updates([99, 3], edges.t[-1] + 1, 1000, 0.0))  # node 99 exists only through its update
    before = trainer.table.embeddings([3]).copy()
    assert trainer.table.embeddings([99]).shape == (1, 8)
    trainer.step(updates([3], edges.t[-1] + 2, 1002, 5.0))
    assert not np.allclose(trainer.table.embeddings([3]), before)


def test_history_nodes_are_served_from_the_start():
    history = TemporalGraphStore()
    history.ingest(stream(100))
    trainer = OnlineTrainer(config(), history)
    known = history.external_ids(np.arange(history.num_nodes))
    assert trainer.table.embeddings(known).shape == (history.num_nodes, 16)


def test_negative_strategies_that_cannot_hold_online_are_refused():
    with pytest.raises(ConfigError, match="train_negatives='inductive'"):
        config(train_negatives="inductive")
    trainer = OnlineTrainer(config(eval_strategy="inductive"))
    events = stream(100)
    trainer.step(events[:50])
    with pytest.raises(ConfigError, match="needs fixed negatives"):
        trainer.step(events[50:])


def test_resume_checkpoints_into_the_folder_it_was_loaded_from(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    trainer = OnlineTrainer(config(checkpoint_dir=str(old), checkpoint_every=2))
    trainer.fit(stream(300)[:200].split(50), progress=False)
    old.rename(new)
    resumed = OnlineTrainer.resume(new)
    resumed.fit(stream(300).split(50), progress=False)
    assert not old.exists() and resumed.store.num_edges == 300
    assert OnlineTrainer.resume(new).position == 300


def test_rows_a_file_source_could_not_parse_count_as_dead_letters(tmp_path):
    """The result's dead letters include the source's own (an undeclared header, a malformed row), not only
    the store's (a delete naming a node never seen)."""
    from streamgnn.connectors.files import CsvSource

    rows = ["src,dst,t,eid,kind"] + [f"{i % 7},{10 + i % 5},{i},{i},0" for i in range(300)]
    rows[100] = "3,oops,99"
    rows.append("1,999,400,300,1")
    path = tmp_path / "events.csv"
    path.write_text("\n".join(rows) + "\n")
    source = CsvSource(path, columns=("src", "dst", "t", "eid", "kind"), batch_size=60)
    result = OnlineTrainer(config()).fit(source, progress=False)
    assert result.events == 300 and len(source.dead_letters) == 2
    assert result.dead_letters == 3


def test_run_online_ends_at_the_same_event_whether_or_not_it_was_interrupted(tmp_path):
    """``max_events`` counts from the stream's start: rerunning the same call after an interruption (here a
    run that stopped at its checkpoint after 300 events) ends where the uninterrupted call ends, in the same
    state, instead of 300 events later."""
    events = stream(600)

    def job(folder, max_events):
        cfg = config(checkpoint_dir=str(tmp_path / folder), checkpoint_every=2)
        run_online(events.split(100), TemporalGraphStore(), cfg, max_events=max_events, progress=False)
        return OnlineTrainer.resume(tmp_path / folder)

    whole = job("whole", 500)
    job("cut", 300)
    rerun = job("cut", 500)
    assert rerun.position == whole.position == 500
    assert rerun.store.content_hash() == whole.store.content_hash()
    for key, value in whole.model.state_dict().items():
        assert torch.equal(rerun.model.state_dict()[key], value), key
