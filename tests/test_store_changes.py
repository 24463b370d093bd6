"""The store's change logs: what a ChangeFeed reads is exactly what was appended, in O(change)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch, EventKind
from streamgnn.store import LogPosition, StoreConfig, TemporalGraphStore

ADD, DEL, UPD = int(EventKind.EDGE_ADD), int(EventKind.EDGE_DELETE), int(EventKind.NODE_UPDATE)


def make_batch(rows):
    """rows: (kind, src, dst, t, eid); adds weigh eid/10, updates carry [eid, t] as features."""
    kind, src, dst, t, eid = (np.array(c) for c in zip(*rows, strict=True))
    feats = np.stack([eid, t], axis=1).astype(np.float32)
    return EventBatch.from_columns(
        kind=kind, src=src, dst=dst, t=t.astype(float), eid=eid, weight=eid / 10.0, features=feats
    )


rows = st.lists(
    st.tuples(
        st.sampled_from([ADD, ADD, ADD, DEL, UPD]),
        st.integers(0, 5),
        st.integers(0, 5),
        st.integers(0, 20),
        st.integers(0, 80),
    ),
    min_size=1,
    max_size=60,
)


def concat(parts, name):
    return np.concatenate([getattr(p, name) for p in parts])


@settings(max_examples=40, deadline=None)
@given(rows, st.lists(st.integers(1, 9), min_size=1, max_size=8), st.sampled_from([math.inf, 4.0]))
def test_feed_reads_are_the_whole_log_in_pieces(events, cuts, lateness):
    store = TemporalGraphStore(StoreConfig(allowed_lateness=lateness))
    feed = store.change_feed()
    parts, i = [], 0
    for k, cut in enumerate(cuts * 10):
        if i >= len(events):
            break
        store.ingest(make_batch(events[i : i + cut]))
        i += cut
        if k % 2:
            parts.append(feed.read())
    parts.append(feed.read())
    assert feed.position == store.log_position()
    feed.close()
    full = store.changes_since(LogPosition())  # no feed open: one pass over the adjacency
    edges = store.edges()
    for got in (full.edges, *(p.edges for p in parts)):  # each read's rows are the edges with those ids
        assert np.array_equal(got.src, edges.src[got.eid]) and np.array_equal(got.dst, edges.dst[got.eid])
        assert np.array_equal(got.t, edges.t[got.eid])
        assert not len(got) or np.array_equal(got.weight, edges.weight[got.eid])
    assert np.array_equal(np.concatenate([p.edges.eid for p in parts]), np.arange(store.num_edges))
    for name in ("del_src", "del_dst", "del_t", "upd_node", "upd_t", "upd_index"):
        assert np.array_equal(concat(parts, name), getattr(full, name)), name
    if full.upd_features is not None:
        feats = np.concatenate([p.upd_features for p in parts if p.upd_features is not None])
        assert np.array_equal(feats, full.upd_features)
    assert np.array_equal(store.deleted_at(edges.eid), edges.deleted_at)
    for p in parts:  # a read's deletion times can only drop later, never rise
        assert (edges.deleted_at[p.edges.eid] <= p.edges.deleted_at).all()


@settings(max_examples=25, deadline=None)
@given(rows)
def test_edges_between_finds_every_instance_of_a_pair(events):
    store = TemporalGraphStore()
    store.ingest(make_batch(events))
    edges = store.edges()
    if not store.num_nodes:
        return
    nodes = np.arange(store.num_nodes)
    src, dst = np.repeat(nodes, len(nodes)), np.tile(nodes, len(nodes))
    pair, table = store.edges_between(src, dst)
    got = sorted(zip(src[pair].tolist(), dst[pair].tolist(), table.eid.tolist(), strict=True))
    want = sorted(zip(edges.src.tolist(), edges.dst.tolist(), edges.eid.tolist(), strict=True))
    assert got == want
    assert np.array_equal(table.src, src[pair]) and np.array_equal(
        table.deleted_at, edges.deleted_at[table.eid]
    )


def test_an_open_feed_reads_in_o_change_and_its_journal_stays_small(monkeypatch):
    store = TemporalGraphStore()
    store.ingest(
        EventBatch.from_columns(
            src=np.arange(1000) % 50, dst=np.arange(1000) % 7, t=np.arange(1000.0), eid=np.arange(1000)
        )
    )
    feed = store.change_feed()
    monkeypatch.setattr(store, "edges", lambda: pytest.fail("an open feed must not scan the adjacency"))
    for k in range(1, 21):
        lo = 1000 * k
        store.ingest(
            EventBatch.from_columns(
                src=np.arange(lo, lo + 1000) % 50, dst=np.arange(lo, lo + 1000) % 7,
                t=np.arange(lo, lo + 1000.0), eid=np.arange(lo, lo + 1000),
            )
        )  # fmt: skip
        changes = feed.read()
        assert len(changes.edges) == 1000 and changes.edges.eid[0] == lo
        assert np.array_equal(changes.edges.src, np.arange(lo, lo + 1000) % 50)
        assert store.nbytes()["change_journal"] <= 2 * 16 * 1024  # what one read needs, not the history
    feed.close()
    store.ingest(EventBatch.from_columns(src=[1], dst=[2], t=[1e6], eid=[10**6]))
    assert store.nbytes()["change_journal"] == 0  # nobody reads: nothing journaled


def test_a_dropped_feed_stops_the_journal():
    store = TemporalGraphStore()
    store.change_feed()  # not kept
    store.ingest(EventBatch.from_columns(src=[1], dst=[2], t=[1.0], eid=[0]))
    assert store.nbytes()["change_journal"] == 0


def test_a_restored_store_reads_the_same_changes(tmp_path):
    store = TemporalGraphStore()
    store.ingest(
        EventBatch.from_columns(
            kind=[ADD, ADD, DEL], src=[1, 2, 1], dst=[2, 3, 2], t=[1.0, 2.0, 3.0], eid=[0, 1, 2]
        )
    )
    pos = LogPosition(1, 0, 0)
    want = store.changes_since(pos)
    store.save(tmp_path)
    got = TemporalGraphStore.load(tmp_path).change_feed(pos).read()  # the journal starts after pos
    for name in ("eid", "src", "dst", "t", "deleted_at"):
        assert np.array_equal(getattr(got.edges, name), getattr(want.edges, name))
    assert got.del_t.tolist() == [3.0] and got.end == LogPosition(2, 1, 0)


def test_bad_positions_and_ids_are_refused():
    store = TemporalGraphStore()
    store.ingest(EventBatch.from_columns(src=[1], dst=[2], t=[1.0], eid=[0]))
    with pytest.raises(ConfigError, match="beyond"):
        store.changes_since(LogPosition(edges=5))
    with pytest.raises(ConfigError, match="LogPosition"):
        store.change_feed((0, 0, 0))
    with pytest.raises(ConfigError, match=">= 0"):
        LogPosition(edges=-1)
    with pytest.raises(ConfigError, match="edge ids"):
        store.deleted_at([3])
    with pytest.raises(ConfigError, match="internal node ids"):
        store.edges_between([0], [7])
    feed = store.change_feed()
    feed.close()
    with pytest.raises(ConfigError, match="closed"):
        feed.read()
