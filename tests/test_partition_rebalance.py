"""Rebalancing: moves keep every query answer, are logged with a reason, counted, and handed to hooks."""

import logging

import numpy as np
import pytest

from streamgnn.datasets import load
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.partition import Moves, PartitionerConfig, PartitionTimeline, partition_report
from streamgnn.sampling import TemporalSampler
from streamgnn.store import StoreConfig, TemporalGraphStore


def answers(store, nodes, times):
    """Everything a consumer can ask: neighbors, snapshots, windows, PyG views and samples."""
    out = []
    for v in nodes:
        nb = store.neighbors(v, t=times[len(times) // 2])
        out.append((nb.eid.tolist(), nb.src.tolist(), nb.dst.tolist(), nb.t.tolist()))
    for t in times:
        snap = store.snapshot(t)
        out.append((snap.eid.tolist(), snap.src.tolist(), snap.dst.tolist()))
    win = store.window(times[0], times[-1])
    out.append(win.eid.tolist())
    data = store.to_pyg(win)
    out.append(data.edge_index.tolist())
    roots = store.node_index(nodes)
    at = np.full(len(roots), times[-1])
    for strategy in ("recent", "uniform"):
        sub = TemporalSampler(store, fanouts=(5, 5), strategy=strategy, seed=3).sample(roots, at)
        out.append([(h.nbr.tolist(), h.eid.tolist(), h.t.tolist()) for h in sub.hops])
    return out


def test_every_query_answers_the_same_after_a_move(caplog):
    events = load("collegemsg")[:15000]
    store = TemporalGraphStore(
        StoreConfig(num_partitions=4, partitioner={"name": "fennel", "buffer_edges": 3})
    )
    store.ingest(events)
    nodes = np.unique(events.src)[:25]
    times = [float(np.quantile(events.t, q)) for q in (0.2, 0.5, 0.9)]
    before = answers(store, nodes, times)
    labels_before = store.partition[: store.num_nodes].copy()
    seen: list[Moves] = []
    store.partitioner.on_move.append(seen.append)
    with caplog.at_level(logging.INFO, logger="streamgnn.partition.rebalance"):
        moves = store.partitioner.rebalance(store.partition, store.view())
    moved = sum(len(m) for m in moves)
    assert moved > 50 and seen == moves
    after_labels = store.partition[: store.num_nodes]
    assert int((after_labels != labels_before).sum()) == moved
    for m in moves:
        assert m.reason == "manual" and (m.old != m.new).all()
        assert np.array_equal(labels_before[m.vertices], m.old) and np.array_equal(
            after_labels[m.vertices], m.new
        )
    assert answers(store, nodes, times) == before
    assert any("moved" in r.message and "manual" in r.message for r in caplog.records)
    report = partition_report(store)
    assert report.vertices_moved == moved and report.moves_by_reason["manual"] == moved
    cap = 1.1 * store.partitioner.vertices_seen / 4  # Fennel's capacity (waiting vertices count in n) holds
    assert max(report.vertex_loads) <= cap


def test_streaming_rebalance_lowers_the_cut_and_keeps_answers():
    events = load("bitcoin_otc")
    plain = TemporalGraphStore(StoreConfig(num_partitions=4, partitioner="fennel"))
    moving = TemporalGraphStore(
        StoreConfig(num_partitions=4, partitioner={"name": "fennel", "rebalance": {"every_edges": 3000}})
    )
    timeline = PartitionTimeline(every_edges=5000)
    for piece in events.split(1000):
        plain.ingest(piece)
        moving.ingest(piece)
        timeline.record(moving)
    timeline.record(moving, force=True)
    assert moving.partitioner.moved > 0
    assert moving.partitioner.rebalance_state.by_reason["window_cut"] == moving.partitioner.moved
    assert moving.edge_cut() < 0.85 * plain.edge_cut()
    nodes = np.unique(events.src)[:20]
    times = [float(np.quantile(events.t, q)) for q in (0.3, 0.95)]
    assert answers(moving, nodes, times) == answers(plain, nodes, times)
    rows = timeline.rows
    assert len(rows) >= 8 and rows[-1]["vertices_moved"] == moving.partitioner.moved
    assert [r["edges"] for r in rows] == sorted(r["edges"] for r in rows)


def test_an_overfull_partition_is_drained():
    rng = np.random.default_rng(0)
    n = 4000
    src, dst = rng.integers(0, 400, n), rng.integers(0, 400, n)
    config = PartitionerConfig("ldg", rebalance={"max_imbalance": 1.15})
    store = TemporalGraphStore(StoreConfig(num_partitions=4, partitioner=config))
    store.ingest(EventBatch.from_columns(src=src, dst=dst, t=np.arange(n, dtype=float), eid=np.arange(n)))
    placed = np.flatnonzero(store.partition[: store.num_nodes] >= 0)
    store.partitioner.move(store.partition, placed[:150], np.zeros(150, np.int32))  # pile onto partition 0
    sizes = store.partition_sizes()
    assert sizes.max() > 1.15 * sizes.mean()
    moves = store.partitioner.rebalance(store.partition, store.view())
    assert moves[0].reason == "imbalance" and (moves[0].old == np.argmax(sizes)).all()
    after = store.partition_sizes()
    assert after.max() <= 1.15 * after.mean() and np.array_equal(after, store.partitioner.sizes)


def test_timeline_plot_is_written(tmp_path):
    store = TemporalGraphStore(StoreConfig(num_partitions=4, partitioner="hdrf"))
    timeline = PartitionTimeline(every_edges=2000)
    for piece in load("collegemsg")[:10000].split(1000):
        store.ingest(piece)
        timeline.record(store)
    timeline.record(store, force=True)
    timeline.plot(tmp_path / "partition.png")
    assert (tmp_path / "partition.png").stat().st_size > 10_000
    last = timeline.rows[-1]
    assert last["edge_cut"] is None and 1.0 < last["replication_factor"] < 4.0
    PartitionTimeline().plot(tmp_path / "empty.png")  # nothing recorded yet (a benchmark's untracked run)
    assert (tmp_path / "empty.png").stat().st_size > 0
    assert sum(last["edge_loads"]) == store.num_edges


def test_a_timeline_past_its_row_cap_thins_older_rows_and_keeps_the_first_and_newest():
    rng = np.random.default_rng(2)
    store = TemporalGraphStore(StoreConfig(num_partitions=2, partitioner="ldg"))
    timeline = PartitionTimeline(every_edges=100, max_rows=8)
    for i in range(40):  # 40 rows recorded, at most 8 kept at any time
        src = rng.integers(0, 300, 100)
        store.ingest(
            EventBatch.from_columns(
                src=src,
                dst=(src + 1 + rng.integers(0, 50, 100)) % 300,
                t=np.full(100, float(i)),
                eid=np.arange(100 * i, 100 * i + 100),
            )
        )
        timeline.record(store)
        assert len(timeline.rows) <= 8
    edges = [r["edges"] for r in timeline.rows]
    assert edges[0] == 100 and edges[-1] == 4000  # the first row and the newest stay
    assert edges == sorted(edges) and len(set(edges)) == len(edges) >= 4
    assert timeline.rows[-1] == {"stream_time": 39.0, **partition_report(store).to_dict()}
    with pytest.raises(ConfigError):
        PartitionTimeline(max_rows=1)


def test_the_rebalancing_counters_come_back_from_their_state():
    from streamgnn.partition.rebalance import REASONS, RebalanceState

    state = RebalanceState()
    state.by_reason[REASONS[0]], state.checks, state.last_cut = 7, 3, 0.25
    back = RebalanceState.from_state(state.state())
    assert (back.by_reason, back.checks, back.last_cut) == (state.by_reason, 3, 0.25)
    assert RebalanceState.from_state({}).checks == 0  # a partitioner saved without rebalancing
    with pytest.raises(ValueError, match="wrong shape or are negative"):
        RebalanceState.from_state({**state.state(), "rebalance_counts": -np.ones(len(REASONS) + 1, np.int64)})
