import gzip
import time
from itertools import islice

import numpy as np
import pytest

from streamgnn import datasets
from streamgnn.codec import decode_json_lines, encode_json_lines, fast_rows
from streamgnn.connectors.files import CsvSource, DatasetSource, JsonLinesSource, replay
from streamgnn.errors import ConfigError, ConnectorError
from streamgnn.events import EventBatch, concat


def edges(n: int, span: float = 100.0, weight: bool = False) -> EventBatch:
    rng = np.random.default_rng(n)
    return EventBatch.from_columns(
        src=rng.integers(0, 20, n),
        dst=rng.integers(0, 20, n),
        t=np.linspace(0, span, n),
        eid=np.arange(n) + 100,
        weight=rng.integers(-5, 5, n) if weight else None,
    )


def test_csv_source_batches_columns_and_dead_letters(tmp_path):
    path = tmp_path / "edges.csv"
    path.write_text(
        "t,ignored,from,to,w\n"
        "% a comment\n"
        "1.5,x,1,2,0.5\n"
        "2,x,2,3,1\n"
        "\n"
        "2.5,x,3,oops,1\n"
        "3,x,3\n"
        "nan,x,3,4,1\n"
        "4,x,4,5,-2\n"
        "-1,x,5,6,1\n"
        "5,x,5,6,3\n"
    )
    source = CsvSource(
        path, columns=("t", None, "src", "dst", "weight"), batch_size=3, header=True, comment="%"
    )
    batches = list(source)
    whole = concat(batches)
    assert whole.src.tolist() == [1, 2, 4, 5]
    assert whole.dst.tolist() == [2, 3, 5, 6]
    assert whole.t.tolist() == [1.5, 2.0, 4.0, 5.0]
    assert whole.weight.tolist() == [0.5, 1.0, -2.0, 3.0]
    assert whole.eid.tolist() == [0, 1, 5, 7]  # numbered by data row, bad rows included
    assert all(len(b) <= 3 for b in batches)
    letters = {d.where: d for d in source.dead_letters}
    assert list(letters) == [f"{path}:line {n}" for n in (6, 7, 8, 10)]
    assert "bad value" in letters[f"{path}:line 6"].reason
    assert letters[f"{path}:line 6"].payload == "2.5,x,3,oops,1"
    assert "expected 5 fields" in letters[f"{path}:line 7"].reason
    assert "NaN" in letters[f"{path}:line 8"].reason
    assert "negative" in letters[f"{path}:line 10"].reason

    assert len(concat(list(source))) == 4  # a second pass replays from the start
    assert len(source.dead_letters) == 4  # and reports that pass only


def test_csv_source_whitespace_gzip_kinds_and_string_ids(tmp_path):
    path = tmp_path / "edges.txt.gz"
    with gzip.open(path, "wt") as f:
        f.write("alice  bob 10 edge_add 7\r\nbob\tcarol 11 1 8\r\n")
        f.write("carol carol 12 node_update 9\nx y 13 teleport 10\n")
    source = CsvSource(path, columns=("src", "dst", "t", "kind", "eid"), delimiter=None, string_ids=True)
    (batch,) = list(source)
    assert batch.src.tolist() == ["alice", "bob", "carol"]
    assert batch.dst.tolist() == ["bob", "carol", "carol"]
    assert batch.kind.tolist() == [0, 1, 2]
    assert batch.eid.tolist() == [7, 8, 9]
    assert [d.where for d in source.dead_letters] == [f"{path}:line 4"]
    assert "teleport" in source.dead_letters[0].reason


@pytest.mark.parametrize("string_ids", [False, True])
def test_csv_source_skips_a_byte_order_mark(tmp_path, string_ids):
    """Spreadsheet exports start with a BOM, which would spoil the first row's first field."""
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeff1,2,0.5\n3,4,1.0\n".encode())
    source = CsvSource(path, string_ids=string_ids)
    batch = concat(list(source))
    assert source.dead_letters == []
    assert batch.src.tolist() == (["1", "3"] if string_ids else [1, 3])
    assert batch.eid.tolist() == [0, 1]


@pytest.mark.parametrize(
    "head",
    ["", "\ufeff", "\n", "# exported 2024\n", "\n# exported\n\n"],
    ids=["plain", "bom", "blank", "comment", "both"],
)
@pytest.mark.parametrize("delimiter", [",", None])
def test_csv_header_is_the_first_row_that_is_not_blank_or_a_comment(tmp_path, head, delimiter):
    path = tmp_path / "edges.csv"
    sep = delimiter or " "
    rows = ["src,dst,t", "1,2,0.5", "# late note", "3,4,1.0"]
    path.write_text(head + "\n".join(row.replace(",", sep) for row in rows) + "\n", encoding="utf-8")
    source = CsvSource(path, header=True, comment="#", delimiter=delimiter)
    batch = concat(list(source))
    assert source.dead_letters == []
    assert batch.src.tolist() == [1, 3]
    assert batch.eid.tolist() == [0, 1]  # numbered by data row: the header is not one


def test_csv_source_reads_a_shipped_konect_file_like_the_loader():
    from streamgnn.datasets._formats import DATA_DIR

    path = DATA_DIR / "radoslaw_email.tsv.gz"
    source = CsvSource(
        path, columns=("src", "dst", None, "t"), delimiter=None, comment="%", batch_size=50_000
    )
    whole = concat(list(source))
    expected = datasets.load("radoslaw_email")  # the file is time-sorted, so the orders agree
    assert source.dead_letters == []
    assert whole.src.tolist() == expected.src.tolist()
    assert whole.t.tolist() == expected.t.tolist()


def test_csv_source_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown CSV column"):
        CsvSource(tmp_path / "x.csv", columns=("src", "dst", "time"))
    with pytest.raises(ConfigError, match="lack \\['t'\\]"):
        CsvSource(tmp_path / "x.csv", columns=("src", "dst"))
    with pytest.raises(ConfigError, match="twice"):
        CsvSource(tmp_path / "x.csv", columns=("src", "dst", "t", "t"))
    with pytest.raises(ConfigError, match="batch_size"):
        CsvSource(tmp_path / "x.csv", batch_size=0)
    with pytest.raises(ConfigError, match="speed"):
        CsvSource(tmp_path / "x.csv", speed=0)
    with pytest.raises(ConnectorError, match="cannot read"):
        list(CsvSource(tmp_path / "missing.csv"))


def test_json_lines_source_decodes_in_chunks_with_file_line_numbers(tmp_path):
    batch = edges(25, weight=True)
    lines = encode_json_lines(batch).splitlines()
    lines.insert(12, b'{"src": 1, "dst": 2}')
    lines.insert(20, b"")
    lines.insert(21, b"not json")
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    source = JsonLinesSource(path, batch_size=10)
    batches = list(source)
    assert [len(b) for b in batches] == [10, 9, 6]
    whole = concat(batches)
    assert whole.eid.tolist() == batch.eid.tolist()
    assert whole.weight.tolist() == batch.weight.tolist()
    assert [(d.where, d.payload) for d in source.dead_letters] == [
        (f"{path}:line 13", b'{"src": 1, "dst": 2}'),
        (f"{path}:line 22", b"not json"),
    ]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"weight": [0.5, 2.0, 1.0, 3.0]},
        {"features": np.arange(8, dtype=np.float32).reshape(4, 2)},
        {"src": ["a", "b", "c", "d"], "dst": ["b", "c", "d", "a"]},
    ],
)
def test_a_json_lines_file_takes_the_fast_path_and_decodes_as_the_careful_one(tmp_path, extra):
    columns = {"src": [1, 2, 3, 4], "dst": [2, 3, 4, 1], "t": [0.0, 1.0, 2.5, 3.0], "eid": range(4), **extra}
    data = encode_json_lines(EventBatch.from_columns(**columns))
    lines = [line for line in data.split(b"\n") if line]
    assert fast_rows(lines, "f") is not None  # a file of plain events is the fast path's to read
    path = tmp_path / "e.jsonl"
    path.write_bytes(
        b"\n" + data.replace(b"\n", b"\r\n", 1)
    )  # a blank line and a CRLF: still the same events
    got = concat(list(JsonLinesSource(path)))
    careful, letters = decode_json_lines(path.read_bytes(), "f", fast=False)
    assert not letters and len(got) == 4
    for name in ("kind", "src", "dst", "t", "eid", "weight", "features"):
        a, b = getattr(got, name), getattr(careful, name)
        assert (a is None) == (b is None) and (a is None or (a.dtype == b.dtype and (a == b).all())), name


def test_json_lines_source_reads_gzip(tmp_path):
    batch = edges(7)
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(gzip.compress(encode_json_lines(batch)))
    (out,) = list(JsonLinesSource(path))
    assert out.src.tolist() == batch.src.tolist() and out.t.tolist() == batch.t.tolist()


def test_dataset_source_matches_iter_batches():
    source = DatasetSource("collegemsg", batch_size=5_000, dedup=True)
    got = list(islice(source, 3))
    expected = list(islice(datasets.iter_batches("collegemsg", 5_000, dedup=True), 3))
    assert [b.eid.tolist() for b in got] == [b.eid.tolist() for b in expected]
    assert [b.src.tolist() for b in got] == [b.src.tolist() for b in expected]
    with pytest.raises(ConfigError, match="unknown dataset"):
        DatasetSource("nope")


def test_replay_paces_batches_by_stream_time():
    batch = edges(40, span=3.0)  # 3 stream seconds at speed 10: at least 0.3 wall seconds
    released = []
    start = time.monotonic()
    for part in replay(batch.split(8), speed=10.0):
        released.append((time.monotonic() - start, float(part.t.max())))
    elapsed = time.monotonic() - start
    assert elapsed >= 0.3
    assert elapsed < 3.0  # paced by speed, not by raw stream time
    for wall, latest in released:
        assert wall >= latest / 10.0 - 1e-3  # never released before its events happen


def test_sources_replay_paced_and_unpaced(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(encode_json_lines(edges(30, span=1_000.0)))
    start = time.monotonic()
    assert len(concat(list(JsonLinesSource(path, batch_size=7)))) == 30
    assert time.monotonic() - start < 1.0  # speed=None never sleeps, even over 1000 stream seconds
    start = time.monotonic()
    assert len(concat(list(JsonLinesSource(path, batch_size=7, speed=4_000.0)))) == 30
    assert time.monotonic() - start >= 0.25


def test_replay_refuses_bad_speed():
    for speed in (0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="speed"):
            replay([], speed)
