"""Every line of a JSON-lines payload is one event or one dead letter, whatever its neighbours hold.

The codec parses a payload's lines in one bulk call and must only trust that parse where it is the lines'
own: lines crafted to leave containers open, to close them, or to spell the bulk parse's joints must never
absorb, split or hide a valid neighbour.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamgnn.codec import decode_json_lines

# Fragments that are harmless alone but change the meaning of what follows when lines are glued: open and
# close containers, the old joint (",null,") and the new one (",NaN,"), strings, keys, and lines that are
# only whitespace (skipped, never counted).
FRAGMENTS = [
    "[1,", "]", "[", "{", "}", "]}", "}]", "{}]}", "[{}", "1]", "2],null,1,null,", ",null,", ",NaN,", "NaN",
    "null", "1", '"', '"x"', "{}", "[]", ',"a":', '{"a":[', '{"a":[1', "1]},NaN,{}", "1]},null,{},null,{}",
    '{"src": 1, "dst": 2, "t": 0, "eid": 0, "x": [{}', '{"src": 3, "dst": 4, "t": 1, "eid": 1}, {"eid": 2}',
    '{"src":1,"dst":2,"t":NaN,"eid":5}', '{"src":1,"dst":2,"t":Infinity,"eid":5}', "\ufeff{}", "\r",
    "[" * 5000, "]" * 5000, "9" * 5000,
]  # fmt: skip


def _event(eid: int, t: float) -> str:
    return json.dumps({"src": eid % 7, "dst": eid % 5 + 10, "t": t, "eid": eid})


@st.composite
def hostile_lines(draw) -> tuple[list[str], dict[int, int]]:
    """Lines (valid events, crafted fragments, arbitrary text) and, for each valid event, its line's index."""
    kinds = draw(st.lists(st.sampled_from(["event", "fragment", "text"]), min_size=1, max_size=30))
    lines: list[str] = []
    valid: dict[int, int] = {}
    for i, kind in enumerate(kinds):
        if kind == "event":
            eid = 1_000 + i  # no fragment or text below can be a whole event with this id
            valid[eid] = len(lines)
            lines.append(_event(eid, draw(st.floats(0, 1e6))))
        elif kind == "fragment":
            lines.append(draw(st.sampled_from(FRAGMENTS)))
        else:
            lines.append(draw(st.text(st.characters(blacklist_characters="\n"), max_size=40)))
    return lines, valid


def _counted(lines: list[str]) -> int:
    """Lines the decoder reads: it skips empty and whitespace-only lines (a leading BOM is dropped)."""
    return sum(
        1 for i, line in enumerate(lines) if (line[1:] if i == 0 and line[:1] == "\ufeff" else line).strip()
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=hostile_lines(), as_bytes=st.booleans())
def test_every_line_is_one_event_or_one_dead_letter(case, as_bytes):
    lines, valid = case
    text = "\n".join(lines)
    data = text.encode(errors="surrogatepass") if as_bytes else text
    batch, letters = decode_json_lines(data, "f.jsonl")
    assert len(batch) + len(letters) == _counted(lines)
    assert set(valid) <= set(batch.eid.tolist()), letters
    lettered = {int(d.where.rsplit(" ", 1)[1]) - 1 for d in letters}
    assert not lettered & set(valid.values())  # no valid line is blamed
    assert len(lettered) == len(letters)  # one letter per line at most


@settings(max_examples=200, deadline=None)
@given(case=hostile_lines())
def test_a_payload_decodes_as_its_lines_do_one_by_one(case):
    """The bulk parse is never wrong where it is used: the events are those of each line decoded alone."""
    lines, _ = case
    batch, letters = decode_json_lines("\n".join(lines))
    alone = [decode_json_lines(line) for line in lines]
    assert batch.eid.tolist() == [e for b, _ in alone for e in b.eid.tolist()]
    bom = {i for i, line in enumerate(lines) if i and line.startswith("\ufeff")}  # skipped at the start only
    got = [(int(d.where.rsplit(" ", 1)[1]) - 1, d.reason) for d in letters]
    want = [(i, d.reason) for i, (_, ds) in enumerate(alone) for d in ds]
    assert [x for x in got if x[0] not in bom] == [x for x in want if x[0] not in bom]


def test_two_crafted_lines_around_a_valid_one_do_not_absorb_it():
    # The old bulk parse (lines joined with ",null,") read these three lines as one array element holding
    # the valid event, plus two events spelled out by line 3, and counted the lines as lined up.
    valid = '{"src":3,"dst":4,"t":1,"eid":7}'
    lines = [
        '{"src":1,"dst":2,"t":0,"eid":1,"x":[1',
        valid,
        '1]},null,{"src":5,"dst":6,"t":2,"eid":2},null,{"src":5,"dst":6,"t":3,"eid":3}',
    ]
    batch, letters = decode_json_lines("\n".join(lines), "f.jsonl")
    assert batch.eid.tolist() == [7]
    assert [d.where for d in letters] == ["f.jsonl:line 1", "f.jsonl:line 3"]


def test_lines_spelling_the_joint_are_read_one_by_one():
    lines = ['{"src":1,"dst":2,"t":0,"eid":1,"x":[1', _event(7, 1.0), "1]},NaN,{},NaN,{}"]
    batch, letters = decode_json_lines("\n".join(lines))
    assert batch.eid.tolist() == [7]
    assert len(letters) == 2


def test_a_string_holding_the_joint_token_still_decodes():
    lines = ['{"src": "NaN", "dst": "b", "t": 0, "eid": 1}', '{"src": "a", "dst": "NaN", "t": 1, "eid": 2}']
    batch, letters = decode_json_lines("\n".join(lines))
    assert letters == [] and batch.src.tolist() == ["NaN", "a"]
