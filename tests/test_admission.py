"""One admission for the store, the sharded index and the router: the same events kept and refused, for the
same reasons, and admission state that checkpoints round-trip bit for bit."""

import doctest
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamgnn.store.admission
from streamgnn.events import ID_TYPE, EventBatch
from streamgnn.jobs.routing import RoutingState
from streamgnn.shard.ownership import GlobalIndex, Ownership
from streamgnn.store import StoreConfig, TemporalGraphStore
from streamgnn.store.admission import REASONS, TOO_LATE, UNKNOWN_NODE

ADD, DEL, UPD = 0, 1, 2

events = st.lists(
    st.tuples(
        st.sampled_from([ADD, ADD, ADD, ADD, DEL, DEL, UPD, 7]),  # 7: no such kind
        st.integers(0, 8),
        st.integers(0, 8),
        st.sampled_from([float(x) for x in range(30)] * 4 + [-1.0, math.nan, math.inf]),
        st.integers(0, 40),  # ids repeat: duplicates, within a batch and across batches
        st.sampled_from([1.5] * 12 + [math.nan]),
    ),
    min_size=1,
    max_size=50,
)


def make_batch(rows, string_ids: bool) -> EventBatch:
    kind, src, dst, t, eid, w = (list(c) for c in zip(*rows, strict=True))
    if string_ids:
        src, dst = [f"v{s}" for s in src], [f"v{d}" for d in dst]
    return EventBatch.from_columns(kind=kind, src=src, dst=dst, t=t, eid=eid, weight=np.array(w, np.float32))


def sites(lateness: float):
    """A store, a sharded run's index and a router, each admitting with ``lateness``."""
    store = TemporalGraphStore(StoreConfig(allowed_lateness=lateness))
    index = GlobalIndex(Ownership(4, 2, 1), allowed_lateness=lateness)
    router = RoutingState("hash", 4, allowed_lateness=lateness)
    return store, index, router


def refused(letters) -> list[tuple[int, int, str]]:
    """(row, event id, reason) of admission's dead letters (a store also dead-letters deletes that match no
    live edge after admission, a fate the others cannot see)."""
    return sorted((d.index, d.eid, d.reason) for d in letters if not d.reason.startswith("delete matched"))


@settings(max_examples=120, deadline=None)
@given(events, st.sampled_from([math.inf, 4.0, 0.0]), st.integers(1, 9), st.booleans())
def test_store_index_and_router_admit_and_refuse_the_same_events_for_the_same_reasons(
    rows, lateness, chunk, string_ids
):
    """Random streams of duplicates, late events, bad fields (kind, time, weight) and deletes of unknown
    nodes, cut anywhere: each batch's refusals (row, event id, reason) and duplicate count agree across
    the three, and so does the admission state they end in (ids in order, seen ids, watermark)."""
    store, index, router = sites(lateness)
    reasons, duplicates = set(), 0
    for i in range(0, len(rows), chunk):
        b = make_batch(rows[i : i + chunk], string_ids)
        report, adm, (_, letters) = store.ingest(b), index.admit(b), router.route(b)
        assert refused(report.dead_letters) == refused(adm.dead_letters) == refused(letters)
        assert report.duplicates == adm.duplicates
        duplicates += adm.duplicates
        kept = sorted(set(range(len(b))) - {d.index for d in adm.dead_letters})
        assert len(kept) == len(adm.rows) + adm.duplicates  # every row kept, skipped or refused
        reasons.update(r for _, _, r in refused(adm.dead_letters))
    assert router.counts["duplicates"] == duplicates
    for other in (index, router):
        assert other.ids.id_type == store.ids.id_type
        assert np.array_equal(other.ids.all_external(), store.ids.all_external())
        assert other.watermark == store.watermark and len(other.seen) == len(store.seen)
        assert all(
            np.array_equal(a, b)
            for a, b in zip(other.seen.state().values(), store.seen.state().values(), strict=True)
        )
    assert not any("np." in r for r in reasons), reasons


def test_each_reason_reads_the_same_at_every_site():
    """A late event and a delete of an unknown node, the reasons the three wrote three ways."""
    b = EventBatch.from_columns(
        kind=[0, 1, 0], src=[1, 8, 2], dst=[2, 9, 3], t=[10.0, 10.0, 2.0], eid=[0, 1, 2]
    )
    late = TOO_LATE.format(t=2.0, behind=8.0, newest=10.0, allowed=1.0)
    unknown = UNKNOWN_NODE.format(src=8, dst=9)
    assert late == "event at t=2.0 is 8 behind the stream (newest t=10.0), beyond allowed_lateness=1"
    store, index, router = sites(1.0)
    for letters in (store.ingest(b).dead_letters, index.admit(b).dead_letters, router.route(b)[1]):
        assert [(d.index, d.eid, d.reason) for d in letters] == [(1, 1, unknown), (2, 2, late)]
    assert len(set(REASONS)) == len(REASONS)


def test_a_batch_that_does_not_fit_the_stream_is_refused_whole_by_all_three():
    """Another id type: every row dead-lettered with one reason, nothing seen, mapped or advanced."""
    first = EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[1.0, 2.0], eid=[0, 1])
    other = EventBatch.from_columns(src=["a", "b"], dst=["b", "c"], t=[5.0, 6.0], eid=[2, 3])
    store, index, router = sites(math.inf)
    for site_letters in (
        lambda b: store.ingest(b).dead_letters,
        lambda b: index.admit(b).dead_letters,
        lambda b: router.route(b)[1],
    ):
        assert not site_letters(first)
        letters = site_letters(other)
        assert [(d.index, d.reason) for d in letters] == [
            (0, ID_TYPE.format(kind="str", stream="int")),
            (1, ID_TYPE.format(kind="str", stream="int")),
        ]
    for site in (store, index, router):
        assert site.ids.size == 3 and site.watermark == 2.0 and len(site.seen) == 2


def _stream(n=300, seed=0) -> EventBatch:
    rng = np.random.default_rng(seed)
    return EventBatch.from_columns(
        kind=rng.choice([0, 0, 0, 1, 2], n), src=rng.integers(0, 40, n), dst=rng.integers(0, 40, n),
        t=np.sort(rng.uniform(0, 100, n)) + rng.choice([0.0, -3.0], n, p=[0.9, 0.1]),
        eid=rng.integers(0, 400, n),
    )  # fmt: skip


def test_admission_state_round_trips_through_the_router_and_index_checkpoints_bit_for_bit():
    """Seen ids, id map and watermark: restored, checkpointed again, the same arrays; and a restored
    router or index admits the rest of the stream exactly as the uninterrupted one."""
    events = _stream()
    head, tail = events[:150], events[150:]
    router, index = RoutingState("ldg", 4, allowed_lateness=2.0), GlobalIndex(Ownership(4), 2.0)
    router.route(head)
    index.admit(head)
    arrays, meta = router.state()
    assert math.isfinite(meta["watermark"])
    back = RoutingState.from_state(arrays, meta, 4, allowed_lateness=2.0)
    again, _ = back.state()
    assert again.keys() == arrays.keys() and all(np.array_equal(again[k], arrays[k]) for k in arrays)
    index_arrays, index_values = index.state()
    index_back = GlobalIndex.from_state(index_arrays, index_values, Ownership(4), 2.0)
    assert index_back.state()[1] == index_values
    assert all(np.array_equal(index_back.state()[0][k], v) for k, v in index_arrays.items())
    for a, b in ((router, back), (index, index_back)):
        letters_a = a.route(tail)[1] if a is router else a.admit(tail).dead_letters
        letters_b = b.route(tail)[1] if b is back else b.admit(tail).dead_letters
        assert [(d.index, d.reason) for d in letters_a] == [(d.index, d.reason) for d in letters_b]
        assert a.watermark == b.watermark


@pytest.mark.parametrize("string_ids", [False, True])
def test_the_store_the_index_and_the_router_save_one_admission_layout(string_ids):
    """One admission state, one persistence: after the same events all three owners save the same
    admission arrays and values (``Admission.state``), whatever else each keeps beside them."""
    events = _stream(seed=2)
    if string_ids:
        events = EventBatch.from_columns(
            kind=events.kind, src=[f"v{x}" for x in events.src], dst=[f"v{x}" for x in events.dst],
            t=events.t, eid=events.eid,
        )  # fmt: skip
    store = TemporalGraphStore(StoreConfig(allowed_lateness=2.0))
    index, router = GlobalIndex(Ownership(4), 2.0), RoutingState("hash", 4, allowed_lateness=2.0)
    store.ingest(events)
    index.admit(events)
    router.route(events)
    want_arrays, want_values = store.admission.state()
    assert want_values["id_kind"] == ("str" if string_ids else "int")
    (store_arrays, store_values), (index_arrays, index_values), (router_arrays, router_values) = (
        store.state(),
        index.state(),
        router.state(),
    )
    for arrays, values in ((store_arrays, store_values), (index_arrays, index_values),
                           (router_arrays, router_values)):  # fmt: skip
        assert {k: values[k] for k in want_values} == want_values
        assert all(np.array_equal(arrays[k], v) for k, v in want_arrays.items())


def test_checkpoints_from_before_one_admission_layout_still_load():
    """Router checkpoints written before routing had lateness hold no watermark: one restores as -inf (no
    event admitted yet), which with the default allowed_lateness of inf refuses nothing. Router and index
    checkpoints that kept the watermark in an array (and the index its id type in which arrays are there)
    restore to the same state."""
    events = _stream(seed=1)
    router = RoutingState("hash", 4)
    router.route(events[:100])
    arrays, meta = router.state()
    del meta["watermark"]
    old = RoutingState.from_state(arrays, meta, 4)
    assert old.watermark == -math.inf
    assert [d.index for d in old.route(events[100:])[1]] == [d.index for d in router.route(events[100:])[1]]
    arrays, meta = router.state()
    old_arrays = {**arrays, "watermark": np.array([meta.pop("watermark")])}
    assert RoutingState.from_state(old_arrays, meta, 4).watermark == router.watermark
    for string_ids in (False, True):
        index = GlobalIndex(Ownership(4))
        index.admit(EventBatch.from_columns(src=["a", "b"] if string_ids else [1, 2], dst=["b", "c"] if
                                            string_ids else [2, 3], t=[1.0, 2.0], eid=[0, 1]))  # fmt: skip
        arrays, values = index.state()
        old_arrays = {**arrays, "watermark": np.array([values["watermark"]])}
        back = GlobalIndex.from_state(old_arrays, None, Ownership(4))
        assert (
            back.state()[1] == values
            and back.external([0, 1, 2]).tolist() == index.external([0, 1, 2]).tolist()
        )


def test_the_module_example_runs():
    result = doctest.testmod(streamgnn.store.admission)
    assert result.attempted and not result.failed
