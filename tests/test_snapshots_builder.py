"""Incremental snapshots equal snapshots built from scratch: deletes, late events, feature updates."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import ConfigError, SnapshotError
from streamgnn.events import EventBatch, EventKind
from streamgnn.snapshots import SnapshotBuilder, SnapshotSpec, snapshot_at
from streamgnn.store import StoreConfig, TemporalGraphStore

ADD, DEL, UPD = int(EventKind.EDGE_ADD), int(EventKind.EDGE_DELETE), int(EventKind.NODE_UPDATE)


# The stream declares its feature width first: a snapshot has the width the store knows when it is cut.
FIRST = (UPD, 0, 0, 0, 1000)


def make_batch(rows):
    """rows: (kind, src, dst, t, eid); adds weigh 1 + eid % 3, updates carry [eid, t]."""
    kind, src, dst, t, eid = (np.array(c) for c in zip(*rows, strict=True))
    return EventBatch.from_columns(
        kind=kind, src=src, dst=dst, t=t.astype(float), eid=eid, weight=1.0 + eid % 3,
        features=np.stack([eid, t], axis=1).astype(np.float32),
    )  # fmt: skip


def assert_same(got, want):
    a, b = got.canonical(), want.canonical()
    assert a.t == b.t and a.num_nodes == b.num_nodes, (a.t, a.num_nodes, b.num_nodes)
    assert np.array_equal(a.edge_index, b.edge_index), (a.t, a.edge_index, b.edge_index)
    np.testing.assert_allclose(a.edge_weight, b.edge_weight, rtol=1e-5, err_msg=f"t={a.t}")
    assert (a.x is None) == (b.x is None)
    if a.x is not None:
        assert np.array_equal(a.x, b.x), (a.t, a.x, b.x)


stream = st.lists(
    st.tuples(
        st.sampled_from([ADD, ADD, ADD, DEL, UPD]),
        st.integers(0, 6),
        st.integers(0, 6),
        st.integers(0, 24),
        st.integers(0, 90),
    ),
    min_size=1,
    max_size=70,
)
specs = st.builds(
    lambda kind, weight, undirected, step, degree: SnapshotSpec(
        kind=kind, every=step, start=step, weight=weight, half_life=3.0 if weight == "decay" else None,
        undirected=undirected, degree_features=degree, width=1.5 * step if kind == "window" else None,
    ),
    st.sampled_from(["state", "window"]),
    st.sampled_from(["none", "count", "column", "decay"]),
    st.booleans(),
    st.sampled_from([1.0, 2.5, 4.0]),
    st.booleans(),
)  # fmt: skip


def cut_all(store, builder, spec, batches, lateness, eager):
    """Ingest batch by batch, cutting each snapshot once the watermark has passed its time plus the
    lateness (``eager``: as soon as it passes the time); then the rest up to the last event."""
    out, t = [], spec.start
    for b in batches:
        store.ingest(b)
        wait = 0.0 if eager else lateness
        while store.watermark > t + wait:
            out.append(builder.advance(t))
            t += spec.every
    while t <= max(store.watermark, 0.0) + spec.every:
        out.append(builder.advance(t))
        t += spec.every
    return out


@settings(max_examples=150, deadline=None)
@given(
    stream, specs, st.lists(st.integers(1, 8), min_size=1, max_size=6), st.sampled_from([0.0, 3.0, math.inf])
)
def test_every_snapshot_equals_one_built_from_scratch(events, spec, cuts, lateness):
    store = TemporalGraphStore(StoreConfig(allowed_lateness=lateness))
    builder = SnapshotBuilder(store, spec)
    events = [FIRST, *events]
    batches, i = [], 0
    while i < len(events):
        cut = cuts[len(batches) % len(cuts)]
        batches.append(make_batch(events[i : i + cut]))
        i += cut
    for snap in cut_all(store, builder, spec, batches, lateness, eager=False):
        assert_same(snap, snapshot_at(store, snap.t, spec))


@settings(max_examples=100, deadline=None)
@given(stream, specs, st.integers(1, 6))
def test_events_later_than_their_snapshot_are_in_every_later_one(events, spec, cut):
    """Cut as soon as the watermark passes a time: late events miss that snapshot, but once the stream has
    ended every snapshot cut from then on is exact again."""
    store = TemporalGraphStore()
    builder = SnapshotBuilder(store, spec)
    events = [FIRST, *events]
    batches = [make_batch(events[i : i + cut]) for i in range(0, len(events), cut)]
    eager = cut_all(store, builder, spec, batches, math.inf, eager=True)
    t = eager[-1].t + spec.every
    for k in range(3):
        assert_same(builder.advance(t + k * spec.every), snapshot_at(store, t + k * spec.every, spec))


def test_a_builder_started_on_a_full_store_reads_it_once_and_matches():
    rng = np.random.default_rng(0)
    n = 3000
    kind = rng.choice([ADD] * 8 + [DEL, UPD], n)
    rows = list(
        zip(
            kind,
            rng.integers(0, 40, n),
            rng.integers(0, 40, n),
            rng.integers(0, 500, n),
            range(n),
            strict=True,
        )
    )
    store = TemporalGraphStore()
    store.ingest(make_batch(rows))
    spec = SnapshotSpec(every=50.0, start=0.0, weight="column")
    builder = SnapshotBuilder(store, spec)
    snaps = [builder.advance(t) for t in np.arange(0.0, 600.0, 50.0)]
    assert [s.index for s in snaps] == list(range(12))
    for s in snaps:
        assert_same(s, snapshot_at(store, s.t, spec))
    assert snaps[-1].num_edges > 100 and snaps[-1].x.shape == (40, 2)


def test_builder_state_round_trips_mid_stream():
    rows = [
        (ADD, 1, 2, 1.0, 0),
        (UPD, 2, 2, 2.0, 1),
        (ADD, 2, 3, 3.0, 2),
        (DEL, 1, 2, 4.0, 3),
        (ADD, 3, 1, 6.0, 4),
    ]
    spec = SnapshotSpec(every=2.0, start=2.0, weight="count", kind="window", width=3.0)
    a = TemporalGraphStore()
    a.ingest(make_batch(rows[:3]))
    builder = SnapshotBuilder(a, spec)
    builder.advance(2.0)
    arrays, values = builder.state()
    b = TemporalGraphStore()
    b.ingest(make_batch(rows[:3]))
    resumed = SnapshotBuilder.from_state(b, arrays, values)
    for store in (a, b):
        store.ingest(make_batch(rows[3:]))
    for t in (4.0, 6.0, 8.0):
        assert_same(resumed.advance(t), builder.advance(t))


def test_bad_specs_and_times_are_refused():
    with pytest.raises(ConfigError, match="exactly one"):
        SnapshotSpec()
    with pytest.raises(ConfigError, match="width"):
        SnapshotSpec(kind="window", times=(1.0,))
    with pytest.raises(ConfigError, match="half_life"):
        SnapshotSpec(every=1.0, weight="decay")
    with pytest.raises(ConfigError, match="increasing"):
        SnapshotSpec(times=(2.0, 1.0))
    with pytest.raises(ConfigError, match="kind"):
        SnapshotSpec(every=1.0, kind="daily")
    with pytest.raises(ConfigError, match="unknown key .step. for SnapshotSpec"):
        SnapshotSpec.from_dict({"every": 1.0, "step": 2})
    store = TemporalGraphStore()
    store.ingest(make_batch([(ADD, 1, 2, 1.0, 0), (ADD, 3, 4, 2.0, 1)]))
    builder = SnapshotBuilder(store, SnapshotSpec(every=1.0, num_nodes=3))
    with pytest.raises(SnapshotError, match="num_nodes=3"):
        builder.advance(5.0)
    builder = SnapshotBuilder(store, SnapshotSpec(every=1.0))
    builder.advance(5.0)
    with pytest.raises(SnapshotError, match="go back"):
        builder.advance(4.0)
