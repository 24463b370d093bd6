"""EventBatch construction and row validation."""

import numpy as np
import pytest

from streamgnn.errors import EventValidationError
from streamgnn.events import EventBatch, EventKind, concat
from streamgnn.store import TemporalGraphStore


def test_from_columns_coerces_types_and_kind_names():
    b = EventBatch.from_columns(
        kind=["edge_add", "edge_delete", "node_update"],
        src=[1, 2, 3],
        dst=[4, 5, 3],
        t=[1, 2, 3],
        eid=[0, 1, 2.0],
    )
    assert b.kind.dtype == np.int8 and b.t.dtype == np.float64 and b.eid.dtype == np.int64
    assert b.kind.tolist() == [EventKind.EDGE_ADD, EventKind.EDGE_DELETE, EventKind.NODE_UPDATE]
    assert b.src.dtype == np.int64 and not b.string_ids


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"src": [1, 2], "dst": [1], "t": [0, 1], "eid": [0, 1]}, "'dst' has 1 rows"),
        ({"src": [[1, 2]], "t": [0], "eid": [0]}, "'src' must be 1-D"),
        ({"src": [1, "a"], "t": [0, 1], "eid": [0, 1]}, "mixes int and str"),
        ({"src": [1.5], "t": [0], "eid": [0]}, "non-integer floats"),
        ({"src": [1], "t": ["x"], "eid": [0]}, "'t' must be numeric"),
        ({"src": [1], "t": [0], "eid": [0.5]}, "'eid' row 0 holds 0.5: non-integer"),
        # ids beyond int64 are refused, never wrapped onto another node or event (a wrapped eid was then
        # dropped as a duplicate of an earlier event)
        ({"src": [1], "t": [0], "eid": np.array([2**64 - 1], np.uint64)}, "above the int64 range"),
        ({"src": [1], "t": [0], "eid": [2**63]}, "above the int64 range"),
        ({"src": [1], "t": [0], "eid": [1e19]}, "outside the int64"),
        ({"src": [np.uint64(2**62 + 1), 1], "t": [0, 0], "eid": [0, 1]}, "beyond 2\\*\\*53"),
        ({"src": [1e19, -1], "t": [0, 0], "eid": [0, 1]}, "'src' row 0"),
        ({"src": [-1, 2**63], "t": [0, 0], "eid": [0, 1]}, "outside the int64"),
        ({"src": [2**64], "t": [0], "eid": [0]}, "outside the int64 range"),
        ({"src": [1], "dst": [np.uint64(2**64 - 1)], "t": [0], "eid": [0]}, "above the int64 range"),
        ({"src": [1], "t": [0], "eid": [0], "kind": [1.7]}, "'kind' row 0 holds 1.7"),
        ({"src": [1, 2], "t": [0, 1], "eid": [0, 1], "features": [[1.0], [1.0, 2.0]]}, "not a rectangular"),
        ({"src": [1], "t": [0], "eid": [0], "features": [1.0]}, "'features' must be 2-D"),
        ({"src": [1], "t": [0], "eid": [0], "kind": ["teleport"]}, "kind"),
        ({"src": [True], "t": [0], "eid": [0]}, "node ids"),
    ],
)
def test_structural_errors_name_the_column(kwargs, message):
    with pytest.raises(EventValidationError, match=message):
        EventBatch.from_columns(**kwargs)


def test_validate_splits_bad_rows_with_reasons():
    b = EventBatch.from_columns(
        kind=[0, 0, 0, 5, 0],
        src=[1, 2, 3, 4, 5],
        dst=[2, 3, 4, 5, 6],
        t=[1.0, np.inf, -2.0, 3.0, 4.0],
        eid=[0, 1, 2, 3, 4],
        weight=[1.0, 1.0, 1.0, 1.0, np.nan],
        features=[[0.0], [0.0], [0.0], [0.0], [0.0]],
    )
    good, letters = b.validate("src-x")
    assert good.eid.tolist() == [0]
    assert [d.eid for d in letters] == [1, 2, 3, 4]
    assert [d.where for d in letters] == ["src-x"] * 4
    assert "infinite" in letters[0].reason and "negative" in letters[1].reason
    assert "kind" in letters[2].reason and "weight" in letters[3].reason


def test_string_ids_and_empty_id_rejected_per_row():
    b = EventBatch.from_columns(src=["a", ""], dst=["b", "c"], t=[0, 1], eid=[0, 1])
    good, letters = b.validate()
    assert b.string_ids and good.src.tolist() == ["a"] and "empty node id" in letters[0].reason


def test_sorted_split_concat_round_trip():
    rng = np.random.default_rng(0)
    b = EventBatch.from_columns(
        src=rng.integers(0, 9, 50),
        dst=rng.integers(0, 9, 50),
        t=rng.random(50),
        eid=np.arange(50),
        features=rng.random((50, 3)),
    )
    s = b.sorted_by_time()
    assert np.all(np.diff(s.t) >= 0)
    again = concat(list(s.split(7)))
    assert np.array_equal(again.eid, s.eid) and np.array_equal(again.features, s.features.astype(np.float32))
    with pytest.raises(EventValidationError, match="feature widths"):
        concat([b.take(slice(0, 2)), EventBatch.from_columns(src=[1], t=[0], eid=[99])])


def test_string_ids_that_are_not_utf8_are_dead_letters():
    batch = EventBatch.from_columns(
        src=["a", "\ud800", "b"], dst=["x", "y", "z\udfff"], t=[1.0, 2.0, 3.0], eid=[0, 1, 2]
    )
    valid, letters = batch.validate()
    assert [d.index for d in letters] == [1, 2] and "UTF-8" in letters[0].reason
    assert valid.src.tolist() == ["a"]
    store = TemporalGraphStore()
    report = store.ingest(batch)
    assert report.applied == 1 and len(report.dead_letters) == 2
    assert store.external_ids([0, 1]).tolist() == ["a", "x"]


def hand_built(src, dst, eid=(0, 1), **cols):
    n = len(eid)
    kind, t = cols.get("kind", np.zeros(n, np.int8)), cols.get("t", np.arange(n, dtype=float))
    return EventBatch(kind, src, dst, t, np.array(eid))


def test_a_hand_built_batch_of_text_ids_is_refused_whole_by_an_int_stream_and_changes_nothing():
    """Numpy text ('U') ids are string ids. An int stream refuses such a batch row by row with a reason
    and nothing else changes: its event ids stay unseen, so the corrected events are taken afterwards."""
    s = TemporalGraphStore()
    s.ingest(EventBatch.from_columns(src=[1], dst=[2], t=[0.0], eid=[100]))
    before = s.content_hash()
    report = s.ingest(hand_built(np.array(["a", "b"]), np.array(["b", "c"])))
    assert report.applied == 0 and all("str node ids" in d.reason for d in report.dead_letters)
    assert len(report.dead_letters) == 2 and s.content_hash() == before
    assert s.ingest(hand_built(np.array([1, 2]), np.array([2, 3]))).applied == 2


def test_digit_strings_in_a_text_array_are_string_ids_not_ints():
    b = hand_built(np.array(["1", "2"]), np.array(["2", "3"]))
    assert b.string_ids and b.src.tolist() == ["1", "2"]
    s = TemporalGraphStore()
    s.ingest(b)
    assert s.ids.id_type == "str" and s.node_index(["1"]).tolist() == [0]
    assert s.node_index([1], strict=False).tolist() == [-1]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"src": np.array(["a", 1], object), "dst": np.array(["b", "c"], object)}, "mixes int and str"),
        ({"src": np.array(["a", 1.5], object), "dst": np.array(["b", "c"], object)}, "row 1: node id"),
        ({"src": np.array([True, False]), "dst": np.array([1, 2])}, "dtype bool"),
        ({"src": np.array([1, 2]), "dst": np.array(["b", "c"])}, "src holds int64 ids but dst holds object"),
        ({"src": np.array([[1, 2]]), "dst": np.array([1, 2])}, "'src' must be 1-D"),
        ({"src": np.array([1, 2]), "dst": np.array([1, 2]), "kind": np.array([0.5, 0])}, "'kind' row 0"),
        ({"src": np.array([1, 2]), "dst": np.array([1, 2]), "t": np.array(["x", "y"])}, "'t' must be"),
        ({"src": np.array([1.5, 2]), "dst": np.array([1, 2])}, "non-integer floats"),
    ],
)
def test_a_malformed_hand_built_batch_raises_a_streamgnn_error_before_any_store_sees_it(columns, message):
    s = TemporalGraphStore()
    s.ingest(EventBatch.from_columns(src=[1], dst=[2], t=[0.0], eid=[100]))
    before = s.content_hash()
    with pytest.raises(EventValidationError, match=message):
        s.ingest(hand_built(**columns))
    assert s.content_hash() == before
    assert s.ingest(hand_built(np.array([1, 2]), np.array([2, 3]))).applied == 2
