"""The JSON fast path decides nothing on its own: whatever it accepts, the codec's careful path accepts
identically, and everything else goes to the careful path (no broker needed)."""

from __future__ import annotations

import json

import numpy as np

from streamgnn.codec import decode_json_lines
from streamgnn.codec.fastjson import _Poll, _scanned, _whole, fast_rows

TRICKY = [
    b'{"src":1,"dst":2,"t":1.0,"eid":1}',
    b'{"src":1,"dst":2,"t":3,"eid":2,"weight":0.5}',
    b'{"kind":"edge_delete","src":1,"dst":2,"t":4.0,"eid":3}',
    b'{"kind":1,"src":1,"dst":2,"t":4.0,"eid":4,"features":[1,2.5]}',
    b'{"src":"a","dst":"b","t":1.0,"eid":5}',
    b'{"src":1,"dst":2,"t":1.0,"eid":6,"extra":{"x":[1,2]}}',
    b'{"src":1,"src":7,"dst":2,"t":1.0,"eid":7}',  # a repeated key: the last one counts, as in json
    b' {"src":1,"dst":2,"t":1.0,"eid":8}\n',
    b'{"src":1,"dst":2,"t":-1.0,"eid":9}',
    b'{"src":1,"dst":2,"t":NaN,"eid":10}',
    b'{"src":1,"dst":2,"t":1e400,"eid":11}',
    b'{"src":true,"dst":2,"t":1.0,"eid":12}',
    b'{"src":1,"dst":2,"t":1.0,"eid":9223372036854775808}',
    b'{"src":18446744073709551616,"dst":2,"t":1.0,"eid":13}',
    b'{"src":"","dst":"b","t":1.0,"eid":14}',
    b'{"src":"\\ud800","dst":"b","t":1.0,"eid":15}',
    b'{"src":1,"t":1.0,"eid":16}',
    b'{"kind":"node_update","src":1,"t":1.0,"eid":17,"features":[0.5,0.5]}',
    b'{"kind":7,"src":1,"dst":2,"t":1.0,"eid":18}',
    b'{"src":1,"dst":2,"t":1.0,"eid":19,"weight":1e39}',
    b'{"src":1,"dst":2,"t":1.0,"eid":20}\n{"src":1,"dst":2,"t":2.0,"eid":21}',
    b'{"src":1,"dst":2,"t":1.0,"eid":22',
    b'[{"src":1,"dst":2,"t":1.0,"eid":23}]',
    b'\xef\xbb\xbf{"src":1,"dst":2,"t":1.0,"eid":24}',
    b'{"src":1,"dst":"b","t":1.0,"eid":25}',
    b'{"src":1,"dst":2,"t":"1","eid":26}',
    b'{"src":1,\n"dst":2,"t":1.0,"eid":27}',  # two lines, neither a JSON object
    b'\n{"src":1,"dst":2,"t":1.0,"eid":28}\r\n',
    b'{"src":1,\r"dst":2,"t":-0,"eid":29}',
]


def same(a, b) -> bool:
    cols = ("kind", "src", "dst", "t", "eid", "weight", "features")
    return all(
        (getattr(a, c) is None and getattr(b, c) is None)
        or (
            getattr(a, c) is not None
            and getattr(b, c) is not None
            and np.array_equal(getattr(a, c), getattr(b, c))
        )
        for c in cols
    )


def test_every_message_the_fast_path_accepts_decodes_exactly_as_the_codec_decodes_it():
    accepted = 0
    for value in TRICKY:
        fast = fast_rows([value], "t:0")
        careful, letters = decode_json_lines(value, "t:0")
        if fast is not None:
            accepted += 1
            assert not letters and len(careful) == 1 and same(fast, careful), value
    assert accepted >= 7  # the plain shapes do take the fast path


def test_a_run_is_accepted_only_whole_and_only_with_one_id_type_and_feature_width():
    rng = np.random.default_rng(0)
    ends = rng.integers(0, 50, (500, 2)).tolist()
    plain = [
        json.dumps({"src": s, "dst": d, "t": float(i), "eid": i}).encode() for i, (s, d) in enumerate(ends)
    ]
    batch = fast_rows(plain, "t:0")
    careful, letters = decode_json_lines(b"\n".join(plain), "t:0")
    assert batch is not None and not letters and same(batch, careful)
    for odd in (TRICKY[4], TRICKY[3], TRICKY[9], TRICKY[20]):  # str ids, features, NaN, two lines
        assert fast_rows([*plain[:10], odd, *plain[10:20]], "t:0") is None


def careful_or_none(values: list[bytes]):
    """What the careful path makes of messages that are each meant to be one event: their events if every
    message alone is exactly one valid event and together they form one stream, else None."""
    for value in values:
        batch, letters = decode_json_lines(value, "t:0")
        if letters or len(batch) != 1:
            return None
    batch, letters = decode_json_lines(b"\n".join(values), "t:0")
    return None if letters else batch


def test_a_whole_poll_in_one_call_agrees_with_the_codec_message_by_message():
    rng = np.random.default_rng(1)
    plain = [json.dumps({"src": int(s), "dst": int(d), "t": float(i), "eid": i}).encode()
             for i, (s, d) in enumerate(rng.integers(0, 9, (30, 2)))]  # fmt: skip
    accepted = 0
    for odd in TRICKY:
        for at in (0, 15, 30):
            values = [*plain[:at], odd, *plain[at:]]
            fast, careful = fast_rows(values, "t:0"), careful_or_none(values)
            if fast is not None:  # (None is always allowed: the careful path then decides)
                accepted += 1
                assert careful is not None and same(fast, careful), odd
    assert accepted >= 6 * 3  # plain, weighted, a delete, an unknown field, a repeated key, spaces


def test_messages_that_are_no_event_alone_never_join_into_events_across_the_joints():
    # each is invalid on its own; joined with "," (and without the raw newline in the joint, or the
    # first/last byte checks) they would read as three events
    spans_a_string = [
        b'{"src":"}',
        b'{","dst":"b","t":1,"eid":1}',
        b'{"src":"a","dst":"b","t":2,"eid":2},{"src":"a","dst":"b","t":3,"eid":3}',
    ]
    spans_an_array = [
        b'{"src":1,"dst":2,"t":1,"eid":1,"features":[1.0',
        b"2.0]}",
        b'{"src":1,"dst":2,"t":2,"eid":2,"features":[1,2]},{"src":1,"dst":2,"t":3,"eid":3,"features":[1,2]}',
    ]
    for values in (spans_a_string, spans_an_array):
        assert careful_or_none(values) is None
        assert fast_rows(values, "t:0") is None
        assert _whole(_Poll(values), None) is None


def test_a_poll_the_strict_tier_refuses_is_read_message_by_message():
    # an unknown field, spaces around the object: not the strict tier's shape, still one event each
    values = [b'{"src":1,"dst":2,"t":1.0,"eid":1,"note":{"x":[1]}}', b' {"src":2,"dst":3,"t":2.0,"eid":2}\n']
    batch = fast_rows(values, "t:0")
    assert _whole(_Poll(values), None) is None and batch is not None and same(batch, careful_or_none(values))
    assert _whole(_Poll(values[1:2]), None) is None and _whole(_Poll([values[1].strip()]), None) is not None
    strings = [b'{"src":"a","dst":"b","t":1.0,"eid":1}', b'{"src":"b","dst":"c","t":2.0,"eid":2}']
    for hint in (None, True, False):  # a wrong hint costs a retry, not a wrong answer
        batch = fast_rows(strings, "t:0", hint)
        assert batch is not None and batch.string_ids and same(batch, careful_or_none(strings))


def _number_texts(rng) -> list[str]:
    """JSON numbers the scanner reads and ones it must leave to the others (or that are no JSON)."""
    texts = [repr(float(x)) for x in rng.normal(0, 1e3, 40)]
    texts += [str(int(x)) for x in rng.integers(-1e6, 1e6, 20)]
    for _ in range(60):  # decimal strings with exponents: Clinger's range and beyond it
        digits = "".join(map(str, rng.integers(0, 10, rng.integers(1, 22))))
        point = rng.integers(0, len(digits) + 1)
        text = (digits[:point].lstrip("0") or "0") + ("." + digits[point:] if point < len(digits) else "")
        if rng.random() < 0.5:
            text += f"e{rng.choice(['', '+', '-'])}{rng.integers(0, 30)}"
        texts.append(("-" if rng.random() < 0.3 else "") + text)
    return texts + [
        "0", "-0", "-0.0", "0e5", "-0e5", "1E+2", "9007199254740993", "9007199254740992.0",
        "123456789012345678", "1234567890123456789", "01", "1.", ".5", "1e", "--1", "+1", "1.5e400",
        "1e-400", "0.1e-30", "1e22", "1e23", "NaN", "Infinity", "null", "true", '"1"',
    ]  # fmt: skip


def _bits(batch) -> tuple:
    """Every column's bytes: -0.0 and 0.0 differ here, as they do in the store."""
    cols = (batch.kind, batch.src, batch.dst, batch.t, batch.eid, batch.weight)
    return tuple(None if c is None else (c.dtype.str, c.tobytes()) for c in cols)


def test_the_scanner_reads_exactly_what_the_codec_reads_or_leaves_the_message_alone():
    rng = np.random.default_rng(7)
    numbers = _number_texts(rng)
    kinds = ['"edge_add"', '"edge_delete"', '"node_update"', '"EDGE_ADD"', '"edge_add "', "0", "1", "2", "-1",
             "-0", "1.0", "null", "true"]  # fmt: skip
    spaces = ["", "", "", " ", "\t", "\r"]  # inside the object; a line break there is two lines
    around = [*spaces, "\n", " \n "]
    scanned = 0
    for i in range(3000):
        fields = {"src": rng.choice(numbers[40:60]), "dst": rng.choice(numbers[40:60] + ["-0"]),
                  "t": rng.choice(numbers), "eid": str(i)}  # fmt: skip
        if rng.random() < 0.4:
            fields["kind"] = rng.choice(kinds)
        if rng.random() < 0.3:
            fields["weight"] = rng.choice([*numbers, "null"])
        if rng.random() < 0.2:  # ids and eids of any shape, a missing field, an odd key
            fields[rng.choice(["src", "dst", "eid"])] = rng.choice(numbers)
        if rng.random() < 0.05:
            fields.pop(rng.choice(list(fields)))
        if rng.random() < 0.05:
            fields[rng.choice(["note", "\\u0073rc", "src ", "Src"])] = "1"
        items = [f'"{k}"{rng.choice(spaces)}:{rng.choice(spaces)}{v}' for k, v in fields.items()]
        order = rng.permutation(len(items))
        if rng.random() < 0.05:  # a repeated key
            order = [*order, order[0]]
        body = ("," + rng.choice(spaces)).join(items[j] for j in order)
        if rng.random() < 0.05:
            body = body.replace(",", ",\n", 1)
        message = (
            f"{rng.choice(around)}{{{rng.choice(spaces)}{body}{rng.choice(spaces)}}}{rng.choice(around)}"
        )
        value = message.encode()
        careful = careful_or_none([value])
        batch = _scanned(_Poll([value]))
        if batch is not None:  # (fast_rows then validates it; an invalid event goes the careful path)
            scanned += 1
            if batch.validate("t:0")[1]:
                assert careful is None, value
            else:
                assert careful is not None and _bits(batch) == _bits(careful), value
    assert scanned >= 500  # the test reaches the scanner's accepting side, not only its refusals
