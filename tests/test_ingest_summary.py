"""``streamgnn ingest``'s summary accounts for every line: events stored, dead letters, and duplicates (ids
the store already held, skipped); crafted lines around a valid one cannot hide it."""

from __future__ import annotations

import re

from streamgnn.cli import main
from streamgnn.store import TemporalGraphStore

E = '{{"src":{0},"dst":{1},"t":{2},"eid":{3}}}'


def test_the_summary_says_how_many_duplicates_were_skipped(tmp_path, capsys):
    path = tmp_path / "e.jsonl"
    lines = [E.format(1, 2, 1, 1), E.format(2, 3, 2, 2), E.format(1, 2, 1, 1), E.format(3, 4, 3, 3)]
    path.write_text("\n".join(lines) + "\n")
    argv = ["ingest", "--file", str(path), "--store", str(tmp_path / "store"), "--log-every", "0"]
    assert main(argv) == 0
    assert "4 events read, 0 dead letters; " in (out := capsys.readouterr().out), out
    assert re.search(r"3 edges, .*; 1 duplicate events skipped", out), out
    assert main(argv) == 0  # again: every event id is already stored
    assert "; 4 duplicate events skipped" in capsys.readouterr().out


def test_crafted_lines_around_a_valid_one_cannot_hide_it(tmp_path, capsys):
    """The issue's file: two crafted lines around the valid event 3 -> 4 absorbed it (4 events read, 0 dead
    letters, the event neither stored nor dead-lettered)."""
    path = tmp_path / "e.jsonl"
    lines = [
        '{"src":1,"dst":2,"t":0,"eid":1,"x":[1',
        E.format(3, 4, 1, 7),
        '1]},null,{"src":5,"dst":6,"t":2,"eid":2},null,{"src":5,"dst":6,"t":3,"eid":3}',
    ]
    path.write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    assert main(["ingest", "--file", str(path), "--store", str(store), "--log-every", "0"]) == 0
    assert "1 events read, 2 dead letters" in capsys.readouterr().out
    loaded = TemporalGraphStore.load(store)
    assert loaded.num_edges == 1
