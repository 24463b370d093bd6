import json
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamgnn.codec import (
    CONTENT_BINARY,
    CONTENT_JSON,
    decode,
    decode_binary,
    decode_json_lines,
    encode_binary,
    encode_json_event,
    encode_json_lines,
)
from streamgnn.errors import CodecError
from streamgnn.events import EventBatch, EventKind


def assert_same(a: EventBatch, b: EventBatch) -> None:
    assert len(a) == len(b)
    for name in ("kind", "src", "dst", "t", "eid"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert x.tolist() == y.tolist(), name
    for name in ("weight", "features"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.shape == y.shape and x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y)


def sample(string_ids=False, weight=False, dim=None, n=5) -> EventBatch:
    rng = np.random.default_rng(n)
    src = rng.integers(0, 50, n)
    dst = rng.integers(0, 50, n)
    if string_ids:
        src = np.array([f"ü-{v}" for v in src], dtype=object)
        dst = np.array([f'd"{v}\n' for v in dst], dtype=object)
    kind = np.zeros(n, np.int8)
    kind[1::3] = EventKind.EDGE_DELETE
    kind[2::3] = EventKind.NODE_UPDATE
    dst = np.where(kind == EventKind.NODE_UPDATE, src, dst)  # JSON carries no dst for node updates
    return EventBatch.from_columns(
        src=src,
        dst=dst,
        t=np.sort(rng.random(n)) * 1e6,
        eid=np.arange(n) * 7 - 3,
        kind=kind,
        weight=rng.standard_normal(n) if weight else None,
        features=rng.standard_normal((n, dim)) if dim is not None else None,
    )


VARIANTS = [
    {},
    {"weight": True},
    {"dim": 3},
    {"dim": 0},
    {"weight": True, "dim": 4},
    {"string_ids": True},
    {"string_ids": True, "weight": True, "dim": 2},
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_json_round_trip(variant):
    batch = sample(**variant)
    out, letters = decode_json_lines(encode_json_lines(batch))
    assert letters == []
    if len(batch):
        assert_same(out, batch)
    else:  # an empty payload carries no id type, weight or feature width
        assert len(out) == 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_binary_round_trip(variant):
    batch = sample(**variant)
    assert_same(decode_binary(encode_binary(batch)), batch)


def test_empty_batches_round_trip():
    assert encode_json_lines(EventBatch.empty()) == b""
    out, letters = decode_json_lines(b"")
    assert len(out) == 0 and letters == []
    for empty in (EventBatch.empty(), EventBatch.empty(feature_dim=3, weighted=True)):
        assert_same(decode_binary(encode_binary(empty)), empty)
    strings = sample(string_ids=True).take(slice(0, 0))
    assert_same(decode_binary(encode_binary(strings)), strings)


def test_json_event_matches_lines_and_checks_range():
    batch = sample(weight=True, dim=2)
    lines = encode_json_lines(batch).splitlines()
    assert [encode_json_event(batch, i) for i in range(len(batch))] == lines
    assert encode_json_event(batch, -1) == lines[-1]
    with pytest.raises(IndexError):
        encode_json_event(batch, len(batch))
    node_update = json.loads(lines[2])
    assert node_update["kind"] == "node_update" and "dst" not in node_update


def test_json_refuses_to_encode_nan():
    batch = EventBatch.from_columns(src=[1, 2], dst=[3, 4], t=[0.0, float("nan")], eid=[0, 1])
    with pytest.raises(CodecError, match="row 1: 't'"):
        encode_json_lines(batch)


GOOD = '{"src": 1, "dst": 2, "t": 5, "eid": 10}'

MALFORMED = [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('"just a string"', "not a JSON object"),
    ('{"dst": 2, "t": 1, "eid": 1}', "missing 'src'"),
    ('{"src": 1, "t": 1, "eid": 1}', "missing 'dst'"),
    ('{"src": 1, "dst": 2, "eid": 1}', "missing 't'"),
    ('{"src": 1, "dst": 2, "t": 1}', "missing 'eid'"),
    ('{"src": true, "dst": 2, "t": 1, "eid": 1}', "got bool"),
    ('{"src": 1, "dst": false, "t": 1, "eid": 1}', "got bool"),
    ('{"src": 1.5, "dst": 2, "t": 1, "eid": 1}', "got float"),
    ('{"src": 1, "dst": "b", "t": 1, "eid": 1}', "same id type"),
    ('{"src": 1, "dst": 2, "t": "noon", "eid": 1}', "'t' must be a finite number"),
    ('{"src": 1, "dst": 2, "t": true, "eid": 1}', "'t' must be a finite number"),
    ('{"src": 1, "dst": 2, "t": 1, "eid": 1.0}', "'eid' must be an int"),
    ('{"src": 1, "dst": 2, "t": 1, "eid": 99999999999999999999}', "int64 range"),
    ('{"src": 1, "dst": 2, "t": 1, "eid": 1, "weight": "heavy"}', "'weight'"),
    ('{"src": 1, "dst": 2, "t": 1, "eid": 1, "features": [1, true]}', "'features'"),
    ('{"kind": "edge_move", "src": 1, "dst": 2, "t": 1, "eid": 1}', "unknown kind"),
    ('{"kind": 7, "src": 1, "dst": 2, "t": 1, "eid": 1}', "unknown kind"),
    ('{"kind": true, "src": 1, "dst": 2, "t": 1, "eid": 1}', "unknown kind"),
    ('{"src": 1, "dst": 2, "t": NaN, "eid": 1}', "NaN"),
    ('{"src": 1, "dst": 2, "t": -Infinity, "eid": 1}', "Infinity"),
    ('{"src": 1, "dst": 2, "t": 1e999, "eid": 1}', "NaN or infinite"),
    ('{"src": 1, "dst": 2, "t": -3, "eid": 1}', "negative"),
    ('{"src": "x", "dst": "y", "t": 1, "eid": 1}', "one id type"),
    ('{"src": "", "dst": 2, "t": 1, "eid": 1}', "empty string"),
]


@pytest.mark.parametrize(("line", "reason"), MALFORMED)
@pytest.mark.parametrize("as_bytes", [True, False])
def test_malformed_line_becomes_dead_letter_and_others_decode(line, reason, as_bytes):
    text = "\n".join([GOOD, line, GOOD.replace("10}", "11}")]) + "\n"
    batch, letters = decode_json_lines(text.encode() if as_bytes else text, where="topic/3")
    assert batch.eid.tolist() == [10, 11]
    assert len(letters) == 1
    letter = letters[0]
    assert reason in letter.reason
    assert letter.where == "topic/3:line 2"
    assert letter.index == 1
    assert letter.payload == (line.encode() if as_bytes else line)


def test_feature_width_is_set_by_first_good_line():
    lines = [
        "garbage",
        '{"src": 1, "dst": 2, "t": 1, "eid": 1, "features": [1, 2]}',
        '{"src": 1, "dst": 2, "t": 2, "eid": 2, "features": [1, 2, 3]}',
        '{"src": 1, "dst": 2, "t": 3, "eid": 3}',
        '{"src": 1, "dst": 2, "t": 4, "eid": 4, "features": [0.5, -1]}',
    ]
    batch, letters = decode_json_lines("\n".join(lines))
    assert batch.eid.tolist() == [1, 4]
    assert batch.features.tolist() == [[1, 2], [0.5, -1]]
    assert [d.where for d in letters] == ["json:line 1", "json:line 3", "json:line 4"]
    assert "3 features but line 2 set 2 features" in letters[1].reason
    assert "no features" in letters[2].reason


def test_non_utf8_line_is_dead_lettered_alone():
    data = (
        GOOD.encode() + b"\n" + b'{"src": "\xff\xfe", "dst": "a", "t": 1, "eid": 1}' + b"\n" + GOOD.encode()
    )
    batch, letters = decode_json_lines(data)
    assert len(batch) == 2
    assert [(d.where, d.payload) for d in letters] == [("json:line 2", data.split(b"\n")[1])]
    assert "UTF-8" in letters[0].reason


def test_first_line_offsets_line_numbers():
    batch, letters = decode_json_lines(f"{GOOD}\n\nnope\n{GOOD}", where="f.jsonl", first_line=41)
    assert len(batch) == 2
    assert [(d.where, d.index, d.payload) for d in letters] == [("f.jsonl:line 43", 42, "nope")]


def test_kinds_defaults_blank_lines_and_weights():
    text = "\n".join(
        [
            '{"src": 1, "dst": 2, "t": 1, "eid": 1}',
            "",
            '{"kind": 1, "src": 1, "dst": 2, "t": 2.5, "eid": 2, "weight": 3}',
            "   ",
            '{"kind": "node_update", "src": 7, "t": 3, "eid": 3}',
            '{"kind": 2, "src": 8, "dst": 99, "t": 4, "eid": 4}',
        ]
    )
    batch, letters = decode_json_lines(text)
    assert letters == []
    assert batch.kind.tolist() == [0, 1, 2, 2]
    assert batch.dst.tolist() == [2, 2, 7, 8]
    assert batch.weight.tolist() == [1.0, 3.0, 1.0, 1.0]
    assert batch.t.tolist() == [1.0, 2.5, 3.0, 4.0]


def test_one_bad_line_does_not_change_how_good_lines_decode():
    good = encode_json_lines(sample(weight=True, dim=3, n=40))
    bulk, _ = decode_json_lines(good)
    lines = good.splitlines()
    lines.insert(17, b'{"src": 1,')
    mixed, letters = decode_json_lines(b"\n".join(lines))
    assert [d.where for d in letters] == ["json:line 18"]
    assert_same(mixed, bulk)


def test_lines_that_only_parse_when_joined_are_all_dead():
    # Lines 1 and 2 glue into one event and line 3 holds three values, so the bulk parse yields as many
    # elements as it expects; only the misplaced sentinels give the glue away.
    lines = [
        '{"src": 1, "dst": 2, "t": 0, "eid": 0, "x": [{}',
        "{}]}",
        '{"src": 3, "dst": 4, "t": 1, "eid": 1}, {"eid": 2}, {"eid": 3}',
    ]
    batch, letters = decode_json_lines("\n".join(lines))
    assert len(batch) == 0
    assert [d.where for d in letters] == ["json:line 1", "json:line 2", "json:line 3"]
    assert all(d.reason.startswith("invalid JSON") for d in letters)


def test_a_valid_line_between_glued_ones_is_decoded_not_blamed():
    # The bulk parse lines up ([1 ... 2], 1, event) but line 2's own event would be blamed as "not an
    # object" and line 3 accepted: any line that is not an object sends the message down the careful path.
    e1, e3 = '{"src":1,"dst":2,"t":1,"eid":1}', '{"src":5,"dst":6,"t":3,"eid":3}'
    batch, letters = decode_json_lines("\n".join(["[1", e1, "2],null,1,null," + e3]))
    assert batch.eid.tolist() == [1]
    assert [d.where for d in letters] == ["json:line 1", "json:line 3"]
    assert all(d.reason.startswith("invalid JSON") for d in letters)


def test_string_cannot_span_lines():
    batch, letters = decode_json_lines('{"src": "a", "dst": "b", "t": 0, "eid": 0, "s": "\n"}')
    assert len(batch) == 0
    assert [d.where for d in letters] == ["json:line 1", "json:line 2"]


def test_binary_columns_are_aligned_views():
    payload = encode_binary(sample(weight=True, dim=3, n=13))
    batch = decode_binary(payload)
    for col in (batch.t, batch.eid, batch.src, batch.dst, batch.weight, batch.features):
        assert col.flags.aligned
        assert not col.flags.owndata  # a view on the payload, not a copy


def _patch_header(payload: bytes, **fields) -> bytes:
    magic, version, flags, n, dim, crc = struct.unpack_from("<4sHHIII", payload)
    values = {"magic": magic, "version": version, "flags": flags, "n": n, "dim": dim, "crc": crc, **fields}
    return struct.pack("<4sHHIII", *values.values()) + payload[20:]


@pytest.mark.parametrize("variant", [{"weight": True, "dim": 2}, {"string_ids": True}])
def test_binary_truncation_and_trailing_bytes_refused(variant):
    payload = encode_binary(sample(n=9, **variant))
    for cut in range(len(payload)):
        with pytest.raises(CodecError, match="truncated"):
            decode_binary(payload[:cut])
    with pytest.raises(CodecError, match="truncated"):
        decode_binary(payload[:-8])
    with pytest.raises(CodecError, match="trailing"):
        decode_binary(payload + b"\0" * 8)


def test_binary_tampering_refused():
    payload = bytearray(encode_binary(sample(weight=True, n=9)))
    for pos in (20, 60, len(payload) - 1):
        tampered = bytearray(payload)
        tampered[pos] ^= 0x10
        with pytest.raises(CodecError, match="CRC mismatch"):
            decode_binary(bytes(tampered))


def test_binary_header_checks():
    payload = encode_binary(sample(n=4))
    with pytest.raises(CodecError, match="bad magic"):
        decode_binary(b"XXXX" + payload[4:])
    with pytest.raises(CodecError, match="unsupported binary version 2"):
        decode_binary(_patch_header(payload, version=2))
    with pytest.raises(CodecError, match="unknown flags"):
        decode_binary(_patch_header(payload, flags=0x80))
    with pytest.raises(CodecError, match="feature_dim"):
        decode_binary(_patch_header(payload, dim=3))
    with pytest.raises(CodecError, match="header"):
        decode_binary(payload[:10])


def test_binary_bad_string_ids_refused_even_with_valid_crc():
    payload = bytearray(encode_binary(EventBatch.from_columns(src=["ab"], dst=["cd"], t=[1.0], eid=[0])))
    blob_at = payload.index(b"ab")
    payload[blob_at] = 0xFF
    body = bytes(payload[20:])
    fixed = _patch_header(bytes(payload), crc=zlib.crc32(body))
    with pytest.raises(CodecError, match="UTF-8"):
        decode_binary(fixed)


def test_decode_dispatches_and_dead_letters_bad_payloads():
    batch = sample(weight=True, n=6)
    for ctype in (None, CONTENT_JSON, CONTENT_JSON + "; charset=utf-8", "application/json"):
        out, letters = decode(encode_json_lines(batch), ctype, "w")
        assert_same(out, batch)
        assert letters == []
    for ctype in (CONTENT_BINARY, None):  # without a content type the magic identifies binary
        out, letters = decode(encode_binary(batch), ctype, "w")
        assert_same(out, batch)
        assert letters == []

    broken = encode_binary(batch)[:-3]
    out, letters = decode(broken, CONTENT_BINARY, "orders/0@17")
    assert len(out) == 0
    assert len(letters) == 1
    assert letters[0].payload == broken and letters[0].where == "orders/0@17"
    assert "truncated" in letters[0].reason

    out, letters = decode(b"<xml/>", "text/xml", "w")
    assert len(out) == 0 and "unsupported content type" in letters[0].reason

    for ctype in (None, CONTENT_BINARY):  # a tombstone (no value) is a dead letter, not a crash
        out, letters = decode(None, ctype, "w")
        assert len(out) == 0 and "no value" in letters[0].reason


def test_decode_binary_rows_still_validated():
    batch = EventBatch.from_columns(src=[1, 2, 3], dst=[4, 5, 6], t=[1.0, float("nan"), 3.0], eid=[7, 8, 9])
    out, letters = decode(encode_binary(batch), CONTENT_BINARY, "w")
    assert out.eid.tolist() == [7, 9]
    assert [(d.eid, d.where) for d in letters] == [(8, "w")]
    assert "NaN" in letters[0].reason


ids_int = st.integers(-(2**63), 2**63 - 1)
ids_str = st.text(min_size=1, max_size=12)
finite64 = st.floats(min_value=0, max_value=1e15, allow_nan=False)
finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def batches(draw):
    n = draw(st.integers(0, 12))
    ids = ids_str if draw(st.booleans()) else ids_int
    src = draw(st.lists(ids, min_size=n, max_size=n))
    dst = draw(st.lists(ids, min_size=n, max_size=n))
    kind = draw(st.lists(st.sampled_from([0, 1, 2]), min_size=n, max_size=n))
    dst = [s if k == EventKind.NODE_UPDATE else d for s, d, k in zip(src, dst, kind, strict=True)]
    dim = draw(st.one_of(st.none(), st.integers(0, 4)))
    weight = draw(st.one_of(st.none(), st.lists(finite32, min_size=n, max_size=n)))
    features = (
        None
        if dim is None
        else draw(st.lists(st.lists(finite32, min_size=dim, max_size=dim), min_size=n, max_size=n))
    )
    return EventBatch.from_columns(
        src=np.array(src, dtype=object),
        dst=np.array(dst, dtype=object),
        t=np.array(draw(st.lists(finite64, min_size=n, max_size=n)), dtype=np.float64),
        eid=np.array(draw(st.lists(ids_int, min_size=n, max_size=n)), dtype=np.int64),
        kind=np.array(kind, dtype=np.int8),
        weight=None if weight is None else np.array(weight, dtype=np.float32),
        features=None if dim is None else np.array(features, dtype=np.float32).reshape(n, dim),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_round_trip_property(batch):
    assert_same(decode_binary(encode_binary(batch)), batch)
    out, letters = decode_json_lines(encode_json_lines(batch))
    assert letters == []
    if len(batch):
        assert_same(out, batch)
    else:  # an empty payload carries no id type, weight or feature width
        assert len(out) == 0


def _string_batch_with_src_offsets(offsets: list[int]) -> bytes:
    """A valid-CRC binary batch of src ids ["é", "a"] whose src offsets are replaced by ``offsets``."""
    payload = bytearray(
        encode_binary(EventBatch.from_columns(src=["é", "a"], dst=["b", "c"], t=[1.0, 2.0], eid=[0, 1]))
    )
    at = 56  # header 20, kind padded to 24, t 16, eid 16: the src offsets follow
    assert np.frombuffer(bytes(payload[at : at + 12]), "<u4").tolist() == [0, 2, 3]
    payload[at : at + 12] = np.array(offsets, "<u4").tobytes()
    return _patch_header(bytes(payload), crc=zlib.crc32(bytes(payload[20:])))


def test_binary_string_offsets_splitting_a_character_are_a_dead_letter_not_a_crash():
    crafted = _string_batch_with_src_offsets([0, 1, 3])  # cuts "é" (2 bytes) in half
    with pytest.raises(CodecError, match="splits a UTF-8 character"):
        decode_binary(crafted)
    out, letters = decode(crafted, None, "edges:0@4")
    assert len(out) == 0
    assert [(d.where, d.payload) for d in letters] == [("edges:0@4", crafted)]
    assert "splits a UTF-8 character" in letters[0].reason


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "a\\udc80b"])
def test_lone_surrogate_string_ids_are_dead_letters(escape):
    """Valid JSON, but no UTF-8 can carry the id: the store, binary batches and message keys would fail."""
    lines = [
        '{"src": "ok", "dst": "fine", "t": 1, "eid": 1}',
        '{"src": "ESC", "dst": "b", "t": 2, "eid": 2}'.replace("ESC", escape),
        '{"src": "a", "dst": "ESC", "t": 3, "eid": 3}'.replace("ESC", escape),
        '{"src": "\\ud83d\\ude00", "dst": "b", "t": 4, "eid": 4}',  # a surrogate pair is one character
    ]
    out, letters = decode("\n".join(lines).encode(), None, "w")
    assert out.eid.tolist() == [1, 4] and out.src.tolist() == ["ok", "\U0001f600"]
    assert [(d.index, d.eid) for d in letters] == [(1, 2), (2, 3)]
    assert "'src' holds a lone surrogate" in letters[0].reason
    assert "'dst' holds a lone surrogate" in letters[1].reason
    encode_binary(out)  # what was accepted can be encoded


def test_bad_binary_row_dead_letter_carries_the_row_as_a_replayable_batch():
    batch = EventBatch.from_columns(
        src=["a", "b", "c"], dst=["x", "y", "z"], t=[1.0, -5.0, 3.0], eid=[7, 8, 9], weight=[1, 2, 3]
    )
    out, letters = decode(encode_binary(batch), CONTENT_BINARY, "w")
    assert out.eid.tolist() == [7, 9]
    assert [(d.index, d.eid) for d in letters] == [(1, 8)]
    assert_same(decode_binary(letters[0].payload), batch[1:2])


@pytest.mark.parametrize("payload", [b"", b" ", b"\n", b"\r\n\t", b"\n\n  \n", "  "])
@pytest.mark.parametrize("ctype", [None, CONTENT_JSON])
def test_message_without_events_is_a_dead_letter(payload, ctype):
    out, letters = decode(payload, ctype, "edges:0@9")
    assert len(out) == 0
    assert [(d.where, d.payload) for d in letters] == [("edges:0@9", payload)]
    assert "no events" in letters[0].reason
