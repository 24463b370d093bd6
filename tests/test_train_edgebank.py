"""EdgeBank against a brute-force reference, and beside the learned model in online and offline runs."""

from __future__ import annotations

from dataclasses import astuple

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.train import ChronologicalSplit, OnlineTrainer, TrainConfig, fit_offline, reciprocal_ranks
from streamgnn.train.edgebank import EdgeBank

torch.set_num_threads(1)


def reference(history: list[tuple[int, int, float]], src, dst, ratio: float | None) -> np.ndarray:
    """1 where (src, dst) is a pair of ``history`` (within ``ratio`` of its time span of the newest)."""
    last: dict[tuple[int, int], float] = {}
    for s, d, t in history:
        last[(s, d)] = max(t, last.get((s, d), -np.inf))
    times = [t for _, _, t in history]
    since = -np.inf if ratio is None or not times else max(times) - ratio * (max(times) - min(times))
    return np.array([float((s, d) in last and last[(s, d)] >= since) for s, d in zip(src, dst, strict=True)])


@pytest.mark.parametrize("ratio", [None, 0.3])
def test_edgebank_matches_a_dictionary_through_many_merges(ratio):
    rng = np.random.default_rng(0)
    bank, history = EdgeBank(window_ratio=ratio), []
    for step in range(40):  # 40 x 500 mostly distinct pairs: the side array merges several times
        src, dst = rng.integers(0, 300, 500), rng.integers(0, 300, 500)
        t = np.sort(rng.uniform(step, step + 1, 500))
        q_src, q_dst = rng.integers(-1, 300, 2000), rng.integers(0, 300, 2000)
        got = bank.seen(q_src, q_dst)
        np.testing.assert_array_equal(got, reference(history, q_src, q_dst, ratio))
        bank.observe(src, dst, t, None)
        history += list(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True))
    assert len(bank._keys) > 4096 and 0 < got.mean() < 1


def test_edgebank_rejects_a_non_positive_window():
    with pytest.raises(ConfigError, match="window_ratio"):
        EdgeBank(window_ratio=0.0)
    with pytest.raises(ConfigError, match="baselines"):
        TrainConfig(baselines=("edgebank", "popularity"))


def repeating_stream(n: int = 800, seed: int = 0) -> EventBatch:
    """Each of 40 users writes to one of its 2 fixed friends: a stream EdgeBank predicts almost perfectly."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 40, n)
    dst = 100 + (src * 7 + rng.integers(0, 2, n)) % 60
    return EventBatch.from_columns(src=src, dst=dst, t=np.arange(n, dtype=float), eid=np.arange(n))


def small(**kw) -> TrainConfig:
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    return TrainConfig(**{"model": model, "batch_size": 50, "eval_negatives": 8, "window_events": 200, **kw})


def test_online_baselines_score_the_models_own_positives_and_negatives():
    events = repeating_stream(400)
    trainer = OnlineTrainer(small(serve_every=0))
    negatives = np.asarray(np.random.default_rng(1).integers(100, 160, (len(events), 8)))
    history: list[tuple[int, int, float]] = []
    for lo in range(0, len(events), 50):
        batch = events.take(slice(lo, lo + 50))
        res = trainer.step(batch, negatives=negatives[lo : lo + 50])
        if lo:  # the first batch has nothing to be scored against
            assert set(res.baselines) == {"edgebank", "edgebank_tw"}
            pos, neg, rr = res.baselines["edgebank"]
            np.testing.assert_array_equal(pos, reference(history, batch.src, batch.dst, None))
            np.testing.assert_array_equal(
                neg, reference(history, batch.src, negatives[lo : lo + 50, 0], None)
            )
            ranked = [reference(history, batch.src, negatives[lo : lo + 50, j], None) for j in range(8)]
            np.testing.assert_allclose(rr, reciprocal_ranks(pos, np.column_stack(ranked)))
        history += list(zip(batch.src.tolist(), batch.dst.tolist(), batch.t.tolist(), strict=True))


def test_a_model_losing_to_edgebank_is_flagged_and_baselines_resume(tmp_path):
    events = repeating_stream(800)
    cfg = small(lr=1e-6, serve_every=0, checkpoint_dir=str(tmp_path), checkpoint_every=5)  # barely learns
    full = OnlineTrainer(cfg).fit(events.split(50), progress=False)
    assert full.baselines["edgebank"].ap > 0.9 and full.baselines["edgebank"].ap > full.metrics.ap
    assert any(f.startswith("TGN loses to edgebank on AP") for f in full.flags)
    assert [w.end_events for w in full.baseline_windows["edgebank"]] == [w.end_events for w in full.windows]

    partial = OnlineTrainer(
        small(lr=1e-6, serve_every=0, checkpoint_dir=str(tmp_path / "p"), checkpoint_every=5)
    )
    partial.fit(events.take(slice(0, 500)).split(50), progress=False)  # checkpoint at 10 batches, then stop
    resumed = OnlineTrainer.resume(tmp_path / "p")
    rest = resumed.fit(events.split(50), progress=False)  # a replayed source: skips what the checkpoint had
    for name in ("edgebank", "edgebank_tw"):  # the same windows, wall-clock speed aside
        np.testing.assert_equal(
            [w[:-1] for w in map(astuple, rest.baseline_windows[name])],
            [w[:-1] for w in map(astuple, full.baseline_windows[name])],
        )


def test_offline_runs_report_baselines_for_every_part():
    events = repeating_stream(1000)
    split = ChronologicalSplit.make(events, by_time=False, new_node_fraction=0.1)
    result = fit_offline(events, small(lr=1e-6), split=split)
    for name in ("edgebank", "edgebank_tw"):
        assert set(result.baselines[name]) == {"val", "val_inductive", "test", "test_inductive"}
    assert result.baselines["edgebank"]["test"].ap > result.test.ap
    assert any(f.startswith("test: TGN loses to edgebank") for f in result.flags)
    assert result.as_dict()["baselines"]["edgebank"]["test"]["ap"] == result.baselines["edgebank"]["test"].ap


def test_a_restored_bank_keeps_the_whole_streams_window_when_its_store_holds_a_shard():
    """A sharded rank's store holds only the edges of its shard: the time window (over the span of every
    event the bank saw) comes back from the checkpointed state, not from those edges."""
    from streamgnn.store import StoreConfig, TemporalGraphStore

    src, dst, t = np.array([0, 2, 2, 4]), np.array([1, 3, 7, 5]), np.array([0.0, 6.0, 9.0, 10.0])
    bank = EdgeBank(window_ratio=0.5)
    bank.observe(src, dst, t, None)
    shard = TemporalGraphStore(StoreConfig(dense_ids=True))  # the rank owning vertex 2
    shard.ingest(EventBatch.from_columns(src=src[1:3], dst=dst[1:3], t=t[1:3], eid=[1, 2]))
    restored = EdgeBank(window_ratio=0.5)
    restored.attach(shard)
    pair = (np.array([2]), np.array([3]))
    assert restored.seen(*pair).tolist() == [0.0]  # the shard's own span [6, 9]: seen before 7.5
    restored.load_state_dict(bank.state_dict())
    assert restored.seen(*pair).tolist() == bank.seen(*pair).tolist() == [1.0]  # the stream's [0, 10]


def test_a_bank_holding_some_sources_keeps_their_pairs_over_the_whole_streams_window():
    """A sharded rank's bank keeps the pairs of the sources it owns, while its window spans every event."""
    src, dst, t = np.array([0, 2, 2, 1]), np.array([5, 7, 8, 6]), np.array([4.0, 6.0, 8.0, 10.0])
    held = EdgeBank(window_ratio=0.5, holds=lambda s: s % 2 == 0)
    whole = EdgeBank(window_ratio=0.5)
    for bank in (held, whole):
        bank.observe(src, dst, t, None)
    query = (np.array([0, 1, 2, 2]), np.array([5, 6, 7, 8]))
    # the window starts at 10 - 0.5 * (10 - 4) = 7 for both (the held events alone would start it at 6)
    assert held.seen(*query).tolist() == [0.0, 0.0, 0.0, 1.0]  # (1, 6) is not held
    assert whole.seen(*query).tolist() == [0.0, 1.0, 0.0, 1.0]
