"""EmbeddingTable: consistent reads from other threads while training writes, publishing, latency."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
import torch

from streamgnn.embeddings.latency import RELATIVE_ACCURACY
from streamgnn.errors import ConfigError, UnknownNodeError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.serve import EmbeddingTable, LatencyTracker
from streamgnn.train import OnlineTrainer, TrainConfig

torch.set_num_threads(1)


def test_readers_never_see_torn_rows_while_the_table_grows():
    table = EmbeddingTable(dim=64)
    stop = threading.Event()
    problems: list[str] = []

    def read() -> None:
        rng = np.random.default_rng()
        while not stop.is_set():
            n = len(table)
            if not n:
                continue
            ids = rng.integers(0, n, 50) * 7  # ids are inserted in order, so the first n are known
            rows = table.embeddings(ids)
            if not (rows == rows[:, :1]).all():  # every update writes one value across the whole row
                problems.append("torn row")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for step in range(200):
        ids = np.arange(0, 10 * (step + 1)) * 7
        table.update(ids, np.full((len(ids), 64), float(step), np.float32), t=float(step))
    stop.set()
    for r in readers:
        r.join()
    assert not problems
    assert len(table) == 2000
    np.testing.assert_array_equal(table.updated_at([0, 7 * 1999]), [199.0, 199.0])


def test_unknown_ids_raise_and_string_ids_work():
    table = EmbeddingTable(dim=2)
    table.update(np.array(["a", "b"], dtype=object), np.eye(2), t=1.0)
    np.testing.assert_array_equal(table.embeddings(["b"]), [[0.0, 1.0]])
    with pytest.raises(UnknownNodeError, match="'c'"):
        table.embeddings(["a", "c"])


class FlakySink:
    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []
        self.fail_next = False

    def publish_embeddings(self, node_ids, embeddings, t=None) -> int:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("broker down")
        self.calls.append((np.asarray(node_ids), np.asarray(embeddings), t))
        return len(node_ids)


def test_publish_sends_changed_rows_once_and_retries_after_a_failure():
    table, sink = EmbeddingTable(dim=3), FlakySink()
    table.update(np.array([1, 2, 3]), np.ones((3, 3)), t=1.0)
    assert table.publish(sink) == 3
    assert table.publish(sink) == 0
    table.update(np.array([2]), np.full((1, 3), 5.0), t=2.0)
    sink.fail_next = True
    with pytest.raises(ConnectionError):
        table.publish(sink)
    table.update(np.array([4]), np.zeros((1, 3)), t=3.0)
    assert table.publish(sink) == 2
    (ids2, vectors2, t2), (ids4, _, t4) = sink.calls[-2:]  # one call per computation time
    np.testing.assert_array_equal(ids2, [2])
    np.testing.assert_array_equal(vectors2, [[5.0, 5.0, 5.0]])
    assert (t2, t4, ids4.tolist()) == (2.0, 3.0, [4])


def test_a_row_rewritten_while_the_sink_works_goes_out_again():
    """Same stream time, new vector (the watermark did not move): the newer row must still be published."""
    table = EmbeddingTable(dim=2)
    table.update(np.array([1]), [[1.0, 1.0]], t=10.0)

    class RewritingSink(FlakySink):
        def publish_embeddings(self, node_ids, embeddings, t=None) -> int:
            if not self.calls:  # the trainer refreshes node 1 while the first publish is in flight
                table.update(np.array([1]), [[2.0, 2.0]], t=10.0)
            return super().publish_embeddings(node_ids, embeddings, t)

    sink = RewritingSink()
    assert [table.publish(sink), table.publish(sink), table.publish(sink)] == [1, 1, 0]
    assert [c[1].tolist() for c in sink.calls] == [[[1.0, 1.0]], [[2.0, 2.0]]]


def test_plain_lists_of_string_ids_work_and_mixed_kinds_are_refused():
    table = EmbeddingTable(dim=2)
    table.update(["a", "b"], np.eye(2), t=1.0)
    np.testing.assert_array_equal(table.embeddings(["b"]), [[0.0, 1.0]])
    with pytest.raises(ConfigError):
        table.update([3], np.eye(2)[:1], t=2.0)


def test_latency_percentiles_weight_each_batch_by_its_events():
    lat = LatencyTracker()
    lat.record(0.0, 0.010, events=98)
    lat.record(0.0, 1.000, events=2)
    assert lat.events == 100
    assert lat.percentile(50) == pytest.approx(0.010, rel=RELATIVE_ACCURACY)
    assert lat.percentile(98) == pytest.approx(0.010, rel=RELATIVE_ACCURACY)
    assert lat.percentile(99) == pytest.approx(1.000, rel=RELATIVE_ACCURACY)


def _exact_percentile(latency: np.ndarray, count: np.ndarray, q: float) -> float:
    """Nearest-rank per-event percentile of batches (each latency repeated by its count)."""
    order = np.argsort(latency, kind="stable")
    cum = np.cumsum(count[order])
    return float(latency[order][np.searchsorted(cum, max(1, np.ceil(q / 100 * cum[-1])))])


def test_latency_percentiles_stay_within_the_sketch_accuracy_and_its_size_stays_fixed():
    rng = np.random.default_rng(3)
    latency = rng.lognormal(mean=-3.0, sigma=1.5, size=60_000)  # ~1 ms to seconds, a long tail
    count = rng.integers(1, 500, size=len(latency))
    lat = LatencyTracker()
    sizes = []
    for i, (x, n) in enumerate(zip(latency, count, strict=True)):
        lat.record(10.0, 10.0 + x, int(n))
        if i + 1 in (6_000, 60_000):
            sizes.append(len(pickle.dumps(lat)))
    assert lat.events == int(count.sum())
    for q in (50, 90, 99, 99.9):
        # the sketch's accuracy, with slack for its rank convention (one event apart from nearest-rank)
        exact = _exact_percentile(latency, count, q)
        assert lat.percentile(q) == pytest.approx(exact, rel=1.5 * RELATIVE_ACCURACY)
    assert sizes[1] <= sizes[0] + 512  # ten times the batches, the same few buckets
    assert LatencyTracker().percentile(50) != LatencyTracker().percentile(50)  # NaN before any event


def test_trainer_serves_fresh_embeddings_queryable_during_training():
    rng = np.random.default_rng(0)
    n = 600
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, n), dst=rng.integers(20, 30, n), t=np.arange(n, dtype=float), eid=np.arange(n)
    )
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    sink = FlakySink()
    trainer = OnlineTrainer(
        TrainConfig(model=model, batch_size=50, eval_negatives=5, serve_every=1, publish_every=4), sink=sink
    )
    publishes = []
    publish = trainer.table.publish
    trainer.table.publish = lambda sink: publishes.append(publish(sink))
    seen: list[np.ndarray] = []
    stop = threading.Event()

    def query() -> None:
        while not stop.is_set():
            if len(trainer.table) >= 30:
                seen.append(trainer.table.embeddings(np.arange(30)))
            time.sleep(0.001)

    reader = threading.Thread(target=query)
    reader.start()
    before = None
    for i, batch in enumerate(events.split(50)):
        trainer.step(batch)
        if i == 5:
            before = trainer.table.embeddings([3]).copy()
            stamp = trainer.table.updated_at([3])[0]
    stop.set()
    reader.join()
    assert seen and all(np.isfinite(s).all() for s in seen)
    assert trainer.table.updated_at([3])[0] > stamp
    assert not np.allclose(trainer.table.embeddings([3]), before)
    assert len(publishes) == 3  # 12 refreshes, one publish every 4
    published = np.concatenate([ids for ids, _, _ in sink.calls])
    assert set(published) == set(range(30))
    # A table row is the model's embedding of the node just after the newest event it has seen.
    row = trainer.table.embeddings([7])
    trainer.refresh(trainer.store.node_index([7]))
    np.testing.assert_allclose(trainer.table.embeddings([7]), row, rtol=0, atol=1e-6)
    assert trainer.latency.events == n


def test_clearing_while_a_sink_publishes_loses_no_new_row():
    table = EmbeddingTable(dim=2)
    table.update(np.array([1, 2]), np.ones((2, 2)), t=1.0)

    class ClearingSink(FlakySink):
        def publish_embeddings(self, node_ids, embeddings, t=None) -> int:
            if not self.calls:  # a new pass starts while the old rows are in flight
                table.clear()
                table.update(np.array([7, 8]), np.full((2, 2), 5.0), t=9.0)
            return super().publish_embeddings(node_ids, embeddings, t)

    sink = ClearingSink()
    table.publish(sink)
    assert table.publish(sink) == 2 and sink.calls[-1][0].tolist() == [7, 8]


def test_resume_publishes_only_the_trained_model_s_embeddings(tmp_path):
    rng = np.random.default_rng(0)
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, 200), dst=rng.integers(20, 30, 200), t=np.arange(200.0), eid=np.arange(200)
    )
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    cfg = TrainConfig(
        model=model, batch_size=50, eval_negatives=5, serve_every=1, publish_every=1,
        checkpoint_dir=str(tmp_path), checkpoint_every=2,
    )  # fmt: skip
    trainer = OnlineTrainer(cfg, sink=FlakySink())
    trainer.fit(list(events.split(50)), progress=False)
    sink = FlakySink()
    resumed = OnlineTrainer.resume(tmp_path, sink=sink)
    nodes = np.arange(30)  # served as the run served them, not re-embedded at the resume
    np.testing.assert_array_equal(resumed.table.embeddings(nodes), trainer.table.embeddings(nodes))
    np.testing.assert_array_equal(resumed.table.updated_at(nodes), trainer.table.updated_at(nodes))
    assert not sink.calls  # every row went out before the checkpoint: the resume sends nothing again
    resumed.step(
        EventBatch.from_columns(src=[1, 2], dst=[21, 22], t=[300.0, 301.0], eid=[300, 301])
    )  # publishes the rows it touched
    assert sink.calls
    for ids, vectors, _ in sink.calls:  # nothing the untrained model computed went out
        np.testing.assert_allclose(vectors, resumed.table.embeddings(ids), atol=1e-6)


@pytest.mark.parametrize("ids", [[3, 1, 2], ["c", "a", "b"]])
def test_a_table_state_restores_rows_times_and_what_is_still_to_publish(ids):
    table = EmbeddingTable(dim=2)
    table.update(np.array(ids, dtype=object if isinstance(ids[0], str) else None), np.eye(3, 2), t=1.0)
    table.publish(FlakySink())
    table.update(np.array(ids[1:2], dtype=object if isinstance(ids[0], str) else None), [[7.0, 7.0]], t=2.0)
    copy = EmbeddingTable(dim=2)
    copy.load_state_dict(table.state_dict())
    np.testing.assert_array_equal(copy.embeddings(ids), table.embeddings(ids))
    np.testing.assert_array_equal(copy.updated_at(ids), [1.0, 2.0, 1.0])
    sink = FlakySink()
    assert copy.publish(sink) == 1 and sink.calls[0][0].tolist() == ids[1:2]
    with pytest.raises(ConfigError, match="does not fit"):
        EmbeddingTable(dim=3).load_state_dict(table.state_dict())
