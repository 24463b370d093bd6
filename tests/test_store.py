"""TemporalGraphStore: time-travel answers, deletions, lateness, duplicates, features, partitions."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import ConfigError, EventValidationError, UnknownNodeError
from streamgnn.events import EventBatch, EventKind
from streamgnn.partition import hash_partition
from streamgnn.store import StoreConfig, TemporalGraphStore

ADD, DEL, UPD = int(EventKind.EDGE_ADD), int(EventKind.EDGE_DELETE), int(EventKind.NODE_UPDATE)


def batch(rows, features=None, weight=None):
    """rows: (kind, src, dst, t, eid)."""
    kind, src, dst, t, eid = (list(c) for c in zip(*rows, strict=True))
    return EventBatch.from_columns(
        kind=kind, src=src, dst=dst, t=t, eid=eid, features=features, weight=weight
    )


class Reference:
    """Brute-force model of the store's documented semantics, event by event."""

    def __init__(self, lateness=math.inf):
        self.lateness = lateness
        self.edges = []  # [src, dst, t, deleted_at]
        self.deletions = []  # (src, dst, t)
        self.seen = set()
        self.wm = -math.inf

    def apply(self, kind, src, dst, t, eid):
        if eid in self.seen:
            return "dup"
        self.seen.add(eid)
        if t < self.wm - self.lateness:
            return "late"
        late = t < self.wm
        self.wm = max(self.wm, t)
        known = {e[0] for e in self.edges} | {e[1] for e in self.edges}
        if kind == ADD:
            later = [d for (s, x, d) in self.deletions if s == src and x == dst and d > t] if late else []
            self.edges.append([src, dst, t, min(later, default=math.inf)])
        elif kind == DEL:
            if src not in known or dst not in known:
                return "unknown"
            hit = 0
            for e in self.edges:
                if e[0] == src and e[1] == dst and e[2] <= t and e[3] > t:
                    e[3] = t
                    hit += 1
            if not hit:
                return "nomatch"  # a dead letter changes nothing: it covers no late add either
            self.deletions.append((src, dst, t))
        return "applied"  # a node update changes no edge

    def snapshot(self, t):
        return sorted((s, d, te) for s, d, te, de in self.edges if te <= t and de > t)

    def incident(self, v):
        """(neighbor, time, is_out) in the store's order: by time, then arrival (out before in)."""
        out = []
        for s, d, te, de in self.edges:
            if s == v:
                out.append((d, te, True, de))
            if d == v:
                out.append((s, te, False, de))
        return sorted(out, key=lambda r: r[1])


def store_snapshot(store, t):
    snap = store.snapshot(t)
    ext = store.external_ids
    return sorted(zip(ext(snap.src).tolist(), ext(snap.dst).tolist(), snap.t.tolist(), strict=True))


def rows(kinds, nodes, **size):
    """Lists of ``(kind, src, dst, t, eid)`` rows."""
    node = st.integers(0, nodes)
    row = st.tuples(st.sampled_from(kinds), node, node, st.integers(0, 30).map(float), st.integers(0, 60))
    return st.lists(row, **size)


events = rows([ADD, ADD, ADD, DEL], 6, min_size=1, max_size=60)
# Streams that open with deletes and node updates (before the store holds any edge), then mix in adds:
# times are drawn at random, so many adds arrive late, after deletes of their pair.
opening_first = st.tuples(
    rows([DEL, UPD], 4, min_size=1, max_size=8), rows([ADD, ADD, DEL, UPD], 4, max_size=40)
).map(lambda parts: parts[0] + parts[1])
any_stream = st.one_of(events, opening_first)


@settings(max_examples=200, deadline=None)
@given(any_stream, st.sampled_from([math.inf, 5.0, 0.0]), st.integers(1, 7), st.booleans())
def test_store_matches_reference(rows, lateness, chunk, dense):
    """Either id scheme: a hash map, or the ids themselves (``dense_ids``, a shard in global ids)."""
    ref = Reference(lateness)
    store = TemporalGraphStore(StoreConfig(num_partitions=3, allowed_lateness=lateness, dense_ids=dense))
    for i in range(0, len(rows), chunk):
        store.ingest(batch(rows[i : i + chunk]))
    for r in rows:
        ref.apply(*r)
    for t in sorted({r[3] for r in rows}) + [100.0]:
        assert store_snapshot(store, t) == ref.snapshot(t)
    for v in range(7):
        want = ref.incident(v)
        if not want:
            continue
        got = store.neighbors(v, t=math.inf)
        got_rows = [
            (int(store.external_ids([d if s == store.node_index([v])[0] else s])[0]), float(te))
            for s, d, te in zip(got.src, got.dst, got.t, strict=True)
        ]
        assert [(n, te) for n, te, _, de in want if de == math.inf] == got_rows


@settings(max_examples=150, deadline=None)
@given(any_stream, st.lists(st.integers(1, 20), min_size=1, max_size=8), st.sampled_from([3.0, math.inf]))
def test_content_independent_of_batch_boundaries(rows, cuts, lateness):
    whole = TemporalGraphStore(StoreConfig(allowed_lateness=lateness))
    whole.ingest(batch(rows))
    pieces = TemporalGraphStore(StoreConfig(allowed_lateness=lateness))
    i, k = 0, 0
    while i < len(rows):
        c = cuts[k % len(cuts)]
        pieces.ingest(batch(rows[i : i + c]))
        i, k = i + c, k + 1
    assert whole.content_hash() == pieces.content_hash()


def test_a_delete_before_any_edge_leaves_the_same_state_whatever_the_batch_boundaries(tmp_path):
    """Nodes made by feature updates, a delete of their pair while the store holds no edge, then a late add
    of the pair: the delete ended nothing (a dead letter), so the add stays live, in one batch or two, and
    the saved state is byte for byte the same (the deletion times too, not [] in one run and [inf] in the
    other)."""
    rows = [(UPD, 1, 1, 1.0, 0), (UPD, 2, 2, 2.0, 1), (DEL, 1, 2, 5.0, 2), (ADD, 1, 2, 3.0, 3)]
    whole, parts = TemporalGraphStore(), TemporalGraphStore()
    report = whole.ingest(batch(rows))
    parts.ingest(batch(rows[:3]))
    parts.ingest(batch(rows[3:]))
    assert [(d.eid, "matched no live edge" in d.reason) for d in report.dead_letters] == [(2, True)]
    for store in (whole, parts):
        assert store_snapshot(store, 10.0) == [(1, 2, 3.0)]
    assert whole.content_hash() == parts.content_hash()
    whole.save(tmp_path / "whole")
    parts.save(tmp_path / "parts")
    saved = [np.load(next((tmp_path / run).glob("ckpt-*/edge_del.npy"))) for run in ("whole", "parts")]
    assert saved[0].tobytes() == saved[1].tobytes()


@pytest.mark.parametrize(
    "history",
    [
        [],  # the delete names nodes never seen: "unknown node"
        [(UPD, 1, 1, 0.0, 10), (UPD, 2, 2, 0.0, 11)],  # known from feature updates: "matched no live edge"
        [(ADD, 1, 3, 0.0, 10), (ADD, 3, 2, 0.0, 11)],  # known from edges of other pairs
        [(ADD, 1, 2, 0.0, 10), (DEL, 1, 2, 1.0, 11)],  # the pair's only instance already ended
        [(ADD, 1, 2, 9.0, 10)],  # the pair's instance is newer than the delete
    ],
)
def test_a_dead_lettered_delete_changes_nothing_whatever_the_endpoints_history(history):
    """One rule: a delete that ends no live edge when it arrives is a dead letter and is not kept, so a late
    add of its pair arriving afterwards stays live, whether or not the endpoints appeared elsewhere."""
    s = TemporalGraphStore()
    if history:
        s.ingest(batch(history))
    before = s.content_hash()
    report = s.ingest(batch([(DEL, 1, 2, 5.0, 20)]))
    assert report.applied == 0 and [d.eid for d in report.dead_letters] == [20]
    assert s.content_hash() != before  # the event id is seen and the stream's time has moved, nothing else
    s.ingest(batch([(ADD, 1, 2, 3.0, 21)]))
    live = [e for e in store_snapshot(s, 100.0) if e == (1, 2, 3.0)]
    assert live == [(1, 2, 3.0)]


def test_an_applied_delete_still_ends_a_late_add_it_covers():
    s = TemporalGraphStore()
    s.ingest(batch([(ADD, 1, 2, 1.0, 0), (DEL, 1, 2, 5.0, 1)]))
    s.ingest(batch([(ADD, 1, 2, 3.0, 2), (ADD, 1, 2, 6.0, 3)]))
    assert store_snapshot(s, 4.0) == [(1, 2, 1.0), (1, 2, 3.0)]
    assert store_snapshot(s, 5.0) == [] and store_snapshot(s, 100.0) == [(1, 2, 6.0)]


def test_equal_add_and_delete_times_apply_in_arrival_order():
    """A delete ends the adds at or before its time that came before it; an add at the delete's time that
    comes after it (in order or late) is a new instance, whatever the batch boundaries."""
    rows = [
        (ADD, 1, 2, 5.0, 0),
        (DEL, 1, 2, 5.0, 1),
        (ADD, 3, 4, 9.0, 2),
        (ADD, 1, 2, 5.0, 3),
        (ADD, 1, 2, 4.0, 4),
    ]
    for cut in range(len(rows) + 1):
        s = TemporalGraphStore()
        for part in (rows[:cut], rows[cut:]):
            if part:
                s.ingest(batch(part))
        assert [e for e in store_snapshot(s, 100.0) if e[0] == 1] == [(1, 2, 5.0)], cut


def test_same_content_whatever_the_arrival_order_of_event_ids(tmp_path):
    """The seen-id set is saved and hashed in one form, wherever ids sit in memory (bitmap or outliers:
    that depends on the order they came in and on a restore mid-stream), and -0.0 and 0.0 are one
    watermark."""

    def edges(eids, t=None):
        n = len(eids)
        t = np.zeros(n) if t is None else np.asarray(t, float)
        return EventBatch.from_columns(src=np.zeros(n, np.int64), dst=np.ones(n, np.int64), t=t, eid=eids)

    late_big = TemporalGraphStore()
    late_big.ingest(edges([600_000]))  # beyond the bitmap while the set is small: an outlier
    late_big.ingest(edges(list(range(300_001))))
    at_once = TemporalGraphStore()
    at_once.ingest(edges([600_000, *range(300_001)]))
    assert late_big.content_hash() == at_once.content_hash()

    run = TemporalGraphStore()
    run.ingest(edges([*range(40_001), 530_000]))
    run.save(tmp_path)
    restored = TemporalGraphStore.load(tmp_path)
    for store in (run, restored):
        store.ingest(edges([700_000]))
    assert restored.content_hash() == run.content_hash()
    assert restored.ingest(edges([700_000, 530_000, 5, -3])).duplicates == 3

    for times in ([0.0, -0.0], [-0.0, 0.0]):
        whole, parts = TemporalGraphStore(), TemporalGraphStore()
        whole.ingest(edges([1, 2], times))
        parts.ingest(edges([1], times[:1]))
        parts.ingest(edges([2], times[1:]))
        assert whole.content_hash() == parts.content_hash()
        assert math.copysign(1.0, whole.watermark) == 1.0


def general_path_only(store: TemporalGraphStore) -> TemporalGraphStore:
    store.admission._screen = lambda batch, widths: None
    return store


def outcome(store, report):
    letters = [(d.reason, d.where, d.payload, d.index, d.eid) for d in report.dead_letters]
    return report.applied, report.duplicates, report.late, letters, store.watermark, len(store.seen)


messy_events = st.lists(
    st.tuples(
        st.sampled_from([ADD, ADD, ADD, ADD, DEL, UPD, 5]),
        st.integers(0, 6),
        st.integers(0, 6),
        st.sampled_from([float(x) for x in range(30)] * 4 + [-1.0, math.nan, math.inf]),
        st.integers(-2, 60),
        st.sampled_from([0.5] * 10 + [math.nan]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(messy_events, st.sampled_from([math.inf, 5.0, 0.0]), st.integers(1, 7), st.booleans())
def test_fast_path_for_clean_batches_matches_the_general_path(rows, lateness, chunk, payloads):
    """Batches of clean and dirty rows (bad kind or time, NaN weight or feature, seen, repeated or
    out-of-bitmap ids, late, unknown-node or unmatched deletes): same reports and content either way."""
    cfg = StoreConfig(num_partitions=3, allowed_lateness=lateness)
    fast, general = TemporalGraphStore(cfg), general_path_only(TemporalGraphStore(cfg))
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        w = np.array([r[5] for r in part], np.float32)
        extra = dict(weight=w, features=np.stack([w, np.ones_like(w)], 1)) if payloads else {}
        b = batch([r[:5] for r in part], **extra)
        assert outcome(fast, fast.ingest(b)) == outcome(general, general.ingest(b))
    assert fast.content_hash() == general.content_hash()


def test_fast_path_changes_nothing_unless_the_whole_batch_is_clean():
    s = TemporalGraphStore(StoreConfig(allowed_lateness=1.0))
    first = batch([(ADD, 1, 2, 5.0, 0), (ADD, 2, 3, 4.5, 1)])
    assert s.admission._screen(first, ())[0].tolist() == [False, True]
    assert s.ingest(first).late == 1
    state = (s.watermark, len(s.seen), s.seen.bits.copy())
    for rows in (
        [(ADD, 1, 2, 6.0, 2), (ADD, 1, 2, 7.0, 2)],  # an id repeated in the batch
        [(ADD, 1, 2, 6.0, 3), (ADD, 1, 2, 7.0, 0)],  # an id seen before
        [(ADD, 1, 2, 6.0, 4), (ADD, 1, 2, 3.0, 5)],  # too late
        [(ADD, 1, 2, 6.0, 6), (9, 1, 2, 7.0, 7)],  # unknown kind
        [(ADD, 1, 2, 6.0, 8), (ADD, 1, 2, 7.0, 10**9)],  # an id beyond the bitmap
    ):
        b = batch(rows)
        assert s.admission._screen(b, ()) is None or not s.seen.mark_new(b.eid)
        assert (s.watermark, len(s.seen)) == state[:2] and np.array_equal(s.seen.bits, state[2])


def test_partition_hash_is_pinned():
    """Producers and consumers in other processes and versions must agree on it."""
    ids = np.array([0, 1, 2, -1, 123456789, 2**62, -(2**63)])
    assert hash_partition(ids, 7).tolist() == [2, 2, 4, 0, 5, 4, 6]
    assert hash_partition(ids, 1000).tolist() == [535, 465, 110, 936, 897, 75, 915]
    assert hash_partition(ids.reshape(7, 1), 7).tolist() == [[2], [2], [4], [0], [5], [4], [6]]
    assert hash_partition(np.int64(123456789), 7) == 5
    with pytest.raises(ConfigError, match="num_partitions"):
        hash_partition(ids, 0)


def test_both_paths_keep_the_watermark_of_negative_zero():
    """The watermark is part of the content hash: a clean batch and a dirty one end on the same value."""
    clean, dirty = TemporalGraphStore(), TemporalGraphStore()
    clean.ingest(batch([(ADD, 1, 2, 0.0, 0), (ADD, 2, 3, -0.0, 1)]))
    dirty.ingest(batch([(ADD, 1, 2, 0.0, 0), (ADD, 2, 3, -0.0, 1), (ADD, 1, 2, math.nan, 2)]))
    assert repr(clean.watermark) == repr(dirty.watermark)
    assert clean.content_hash() == dirty.content_hash()


def test_hand_built_columns_of_other_dtypes_ingest_like_coerced_ones():
    rows = [(ADD, 1, 2, 1.0, 0), (ADD, 2, 3, 2.0, 1)]
    ref = TemporalGraphStore()
    ref.ingest(batch(rows, weight=np.array([0.5, 2.0], np.float32)))
    b = batch(rows)
    odd = EventBatch(
        b.kind.astype(np.float64), b.src, b.dst, b.t, b.eid, weight=np.array([0.5, 2.0], np.float16)
    )
    s = TemporalGraphStore()
    assert s.ingest(odd).applied == 2
    assert s.content_hash() == ref.content_hash()


def test_a_batch_whose_only_rows_of_its_width_are_duplicates_writes_no_features():
    s = TemporalGraphStore()
    s.ingest(batch([(UPD, 1, 1, 1.0, 1)], features=np.ones((1, 2), np.float32)))
    s.ingest(batch([(ADD, 1, 2, 1.0, 0)]))  # an edge without features: the edge width is still open
    before = s.content_hash()
    report = s.ingest(batch([(ADD, 1, 2, 1.0, 0)], features=np.ones((1, 3), np.float32)))
    assert report.duplicates == 1 and report.applied == 0 and not report.dead_letters
    assert s.content_hash() == before


def test_query_sees_edges_up_to_t_not_deleted_at_t():
    s = TemporalGraphStore()
    s.ingest(batch([(ADD, 1, 2, 1.0, 0), (ADD, 1, 3, 2.0, 1), (ADD, 1, 2, 3.0, 2), (DEL, 1, 2, 4.0, 3)]))
    assert store_snapshot(s, 0.5) == []
    assert store_snapshot(s, 2.0) == [(1, 2, 1.0), (1, 3, 2.0)]
    assert store_snapshot(s, 3.9) == [(1, 2, 1.0), (1, 2, 3.0), (1, 3, 2.0)]
    assert store_snapshot(s, 4.0) == [(1, 3, 2.0)]
    s.ingest(batch([(ADD, 1, 2, 5.0, 4)]))  # re-added after the deletion
    assert store_snapshot(s, 6.0) == [(1, 2, 5.0), (1, 3, 2.0)]
    assert [int(x) for x in s.external_ids(s.neighbors(2, t=6.0, direction="in").src)] == [1]
    assert len(s.neighbors(1, t=6.0, direction="out")) == 2
    assert len(s.neighbors(1, t=6.0, direction="in")) == 0


def test_window_returns_arrivals_in_half_open_interval():
    s = TemporalGraphStore()
    s.ingest(batch([(ADD, 0, 1, float(t), t) for t in range(10)]))
    w = s.window(3.0, 6.0)
    assert w.t.tolist() == [3.0, 4.0, 5.0]


def test_late_events_within_lateness_are_placed_in_time_order_and_beyond_are_dead_lettered():
    s = TemporalGraphStore(StoreConfig(allowed_lateness=10.0))
    s.ingest(batch([(ADD, 1, 2, 100.0, 0), (ADD, 1, 3, 120.0, 1)]))
    r = s.ingest(batch([(ADD, 1, 4, 115.0, 2), (ADD, 1, 5, 50.0, 3)]))
    assert r.applied == 1 and r.late == 1
    assert len(r.dead_letters) == 1
    dl = r.dead_letters[0]
    assert "allowed_lateness" in dl.reason and dl.eid == 3 and '"src":1' in dl.payload.replace(" ", "")
    nb = s.neighbors(1)
    assert nb.t.tolist() == [100.0, 115.0, 120.0]


def test_duplicate_event_ids_apply_once():
    s = TemporalGraphStore()
    r1 = s.ingest(batch([(ADD, 1, 2, 1.0, 7), (ADD, 1, 2, 1.0, 7), (ADD, 2, 3, 2.0, 8)]))
    r2 = s.ingest(batch([(ADD, 2, 3, 2.0, 8), (ADD, 5, 6, 3.0, 9)]))
    assert (r1.applied, r1.duplicates, r2.applied, r2.duplicates) == (2, 1, 1, 1)
    assert s.num_edges == 3


def test_bad_rows_become_dead_letters_and_the_rest_applies():
    s = TemporalGraphStore()
    b = EventBatch.from_columns(
        kind=[0, 0, 9, 0, 1, 1],
        src=[1, 2, 3, 4, 1, 42],
        dst=[2, 3, 4, 5, 2, 43],
        t=[1.0, np.nan, 2.0, -1.0, 0.5, 3.0],
        eid=[0, 1, 2, 3, 4, 5],
    )
    r = s.ingest(b, where="unit")
    reasons = {d.eid: d.reason for d in r.dead_letters}
    assert r.applied == 1 and s.num_edges == 1
    assert "NaN" in reasons[1] and "kind" in reasons[2] and "negative" in reasons[3]
    assert (
        reasons[4] == "delete matched no live edge 1 -> 2 at t=0.5"
        and "unknown node (42 -> 43)" in reasons[5]
    )
    assert all(d.where == "unit" and d.payload for d in r.dead_letters)


def test_id_type_and_feature_width_are_fixed_per_stream():
    s = TemporalGraphStore()
    s.ingest(batch([(ADD, 1, 2, 1.0, 0)], features=np.ones((1, 3))))
    r = s.ingest(batch([(ADD, 1, 2, 2.0, 1)], features=np.ones((1, 4))))
    assert r.applied == 0 and "width changed from 3 to 4" in r.dead_letters[0].reason
    r = s.ingest(EventBatch.from_columns(src=["a"], dst=["b"], t=[3.0], eid=[2]))
    assert r.applied == 0 and "str node ids" in r.dead_letters[0].reason


def test_string_ids_round_trip():
    s = TemporalGraphStore()
    s.ingest(EventBatch.from_columns(src=["alice", "bob"], dst=["bob", "carol"], t=[1.0, 2.0], eid=[0, 1]))
    assert s.num_nodes == 3
    nb = s.neighbors("bob")
    assert sorted(s.external_ids(np.concatenate([nb.src, nb.dst])).tolist()) == [
        "alice",
        "bob",
        "bob",
        "carol",
    ]
    with pytest.raises(UnknownNodeError, match="dave"):
        s.node_index(["dave"])


def test_queries_with_odd_ids_never_name_another_node():
    s = TemporalGraphStore()
    s.ingest(batch([(0, -1, 7, 0.0, 0)], features=[[1.0]]))
    assert s.node_index([2**64 - 1], strict=False).tolist() == [-1]  # would wrap onto node -1
    assert s.node_index(np.array([7.0, 7.5]), strict=False).tolist() == [1, -1]  # 7.0 is 7, as at ingest
    with pytest.raises(UnknownNodeError):
        s.neighbors(2**64 - 1)
    with pytest.raises(ConfigError, match="1-D"):
        s.node_index([[7]])
    assert s.edge_features([0]).tolist() == [[1.0]]
    for bad in ([-1], [1], [0.0]):  # -1 would read the last (spare) row, 1 one past the edges
        with pytest.raises(ConfigError, match="edge ids"):
            s.edge_features(bad)
    with pytest.raises(EventValidationError, match="num_partitions"):
        StoreConfig(num_partitions=2.5)


def test_node_features_are_versioned_by_time():
    s = TemporalGraphStore()
    rows = [(UPD, 1, 1, 5.0, 0), (UPD, 1, 1, 10.0, 1), (ADD, 1, 2, 11.0, 2), (UPD, 1, 1, 7.0, 3)]
    feats = np.array([[1.0, 1.0], [2.0, 2.0], [9.0, 9.0], [3.0, 3.0]])
    s.ingest(batch(rows, features=feats))
    got = s.features([1, 1, 1, 1, 2], t=np.array([4.0, 5.0, 8.0, 20.0, 20.0]))
    assert got[:, 0].tolist() == [0.0, 1.0, 3.0, 2.0, 0.0]
    assert s.edge_features([0]).tolist() == [[9.0, 9.0]]


def test_weights_and_pyg_snapshot():
    s = TemporalGraphStore()
    s.ingest(batch([(ADD, 1, 2, 1.0, 0), (ADD, 2, 3, 2.0, 1), (ADD, 3, 1, 3.0, 2)], weight=[0.5, 1.5, 2.5]))
    data = s.to_pyg(s.snapshot(2.5))
    assert data.num_nodes == 3 and data.edge_index.shape == (2, 2)
    assert data.edge_weight.tolist() == [0.5, 1.5]
    assert data.edge_time.tolist() == [1.0, 2.0]


def test_partitions_cover_every_vertex_and_are_stable():
    s = TemporalGraphStore(StoreConfig(num_partitions=4))
    n = 2000
    rng = np.random.default_rng(1)
    s.ingest(
        EventBatch.from_columns(
            src=rng.integers(0, 500, n),
            dst=rng.integers(0, 500, n),
            t=np.arange(n, dtype=float),
            eid=np.arange(n),
        )
    )
    sizes = s.partition_sizes()
    assert sizes.sum() == s.num_nodes and (sizes > 0).all()
    other = TemporalGraphStore(StoreConfig(num_partitions=4))
    other.ingest(EventBatch.from_columns(src=[7], dst=[8], t=[0.0], eid=[0]))
    assert other.partition[other.node_index([7, 8])].tolist() == s.partition[s.node_index([7, 8])].tolist()
    assert 0.5 < s.edge_cut() < 0.95


def test_growth_keeps_blocks_and_answers_across_many_small_batches():
    s = TemporalGraphStore()
    rng = np.random.default_rng(0)
    n = 30000
    src, dst = rng.zipf(1.5, n) % 300, rng.integers(0, 3000, n)
    b = EventBatch.from_columns(src=src, dst=dst, t=np.arange(n, dtype=float), eid=np.arange(n))
    for part in b.split(100):
        s.ingest(part)
    e = s.edges()
    assert np.array_equal(s.external_ids(e.src), src) and np.array_equal(s.external_ids(e.dst), dst)
    hub = int(np.bincount(src).argmax())
    nb = s.neighbors(hub, direction="out")
    assert len(nb) == int((src == hub).sum()) and np.all(np.diff(nb.t) >= 0)
    total = s.nbytes()["total"]
    assert total / n < 200


def test_config_errors_are_clear():
    with pytest.raises(EventValidationError, match="num_partitions"):
        StoreConfig(num_partitions=0)
    with pytest.raises(EventValidationError, match="direction"):
        s = TemporalGraphStore()
        s.ingest(batch([(ADD, 1, 2, 1.0, 0)]))
        s.neighbors(1, direction="sideways")


def test_outlier_event_id_stays_a_duplicate_after_the_bitmap_grows():
    s = TemporalGraphStore()
    big = 5_000_000  # beyond the initial bitmap: kept as an outlier first
    assert s.ingest(batch([(ADD, 1, 2, 1.0, big)])).applied == 1
    s.ingest(
        EventBatch.from_columns(
            src=np.ones(600_000, np.int64),
            dst=np.full(600_000, 2),
            t=np.full(600_000, 2.0),
            eid=np.arange(600_000),
        )
    )
    s.ingest(batch([(ADD, 1, 2, 3.0, big + 3)]))  # grows the bitmap past `big`
    assert len(s.seen.bits) * 8 > big
    r = s.ingest(batch([(ADD, 1, 2, 4.0, big)]))
    assert (r.applied, r.duplicates) == (0, 1)
    assert s.seen.contains(np.array([big, big + 3, big + 1, -7])).tolist() == [True, True, False, False]


def test_lookup_before_any_event_returns_unknown():
    s = TemporalGraphStore()
    assert s.node_index(["x", "y"], strict=False).tolist() == [-1, -1]
    assert s.node_index([3], strict=False).tolist() == [-1]
    with pytest.raises(UnknownNodeError):
        s.node_index(["x"])


def test_a_dense_id_store_keeps_no_id_map_refuses_what_is_not_a_dense_id_and_restores(tmp_path):
    store = TemporalGraphStore(StoreConfig(dense_ids=True))
    store.ingest(batch([(ADD, 3, 7, 1.0, 0), (ADD, 7, 0, 2.0, 1)]))
    assert store.num_nodes == 8 and store.nbytes()["id_map"] == 0
    assert store.node_index([7, 5, 8], strict=False).tolist() == [7, 5, -1]  # 5: known, no edges yet
    assert len(store.neighbors(5)) == 0 and len(store.neighbors(7)) == 2
    before = store.content_hash()
    for bad, why in (
        (batch([(ADD, 1, -2, 3.0, 2), (ADD, 1, 2, 3.0, 3)]), "dense node ids (ints >= 0)"),
        (EventBatch.from_columns(src=["a"], dst=["b"], t=[3.0], eid=[4]), "str node ids"),
    ):
        report = store.ingest(bad)
        assert report.applied == 0 and len(report.dead_letters) == len(bad)
        assert all(why in d.reason for d in report.dead_letters)
    assert store.content_hash() == before  # refused whole: nothing half-applied
    report = store.ingest(batch([(DEL, 9, 3, 4.0, 5)]))  # an id past the largest: unknown, as with a map
    assert "unknown node" in report.dead_letters[0].reason and len(store.snapshot(math.inf)) == 2
    store.save(tmp_path / "s")
    back = TemporalGraphStore.load(tmp_path / "s")
    assert back.config.dense_ids and back.content_hash() == store.content_hash() and back.num_nodes == 8
    back.ingest(batch([(ADD, 9, 5, 5.0, 6)]))
    assert back.num_nodes == 10 and back.external_ids(back.neighbors(5).src).tolist() == [9]
