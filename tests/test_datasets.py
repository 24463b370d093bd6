import csv
import datetime as dt
import gzip
import hashlib
import re
import time
import zipfile

import numpy as np
import pytest

from streamgnn import datasets
from streamgnn.datasets._formats import DATA_DIR, DATA_ENV, table
from streamgnn.errors import CodecError, ConfigError
from streamgnn.events import concat

# Figures from /work/shared/datasets/README.md: rows, nodes, and the time range (raw units, or UTC dates).
README = {
    "jodie_wikipedia": (157_474, 9_227, 0, 2_678_373),
    "bitcoin_otc": (35_592, 5_881, "2010-11-08", "2016-01-25"),
    "bitcoin_alpha": (24_186, 3_783, "2010-11-08", "2016-01-22"),
    "collegemsg": (59_835, 1_899, "2004-04-15", "2004-10-26"),
    "digg_reply": (87_627, 30_398, "2008-10-28", "2008-11-13"),
    "radoslaw_email": (82_927, 167, "2010-01-02", "2010-09-30"),
    "enron": (125_235, 184, 0, 113_740_399),
    "travian_attacks": (632_800, 4_418, "2009-12-01", "2009-12-31"),
    "travian_messages": (451_589, 3_092, "2009-12-01", "2009-12-31"),
    "travian_trades": (270_815, 2_648, "2009-12-01", "2009-12-31"),
    "pubmed": (44_335, 19_717, 1967, 2010),
    "uslegis": (60_396, 225, 0, 11),
    "canparl": (74_478, 734, 0, 410_227_200),
}


def utc_date(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).date().isoformat()


def raw_rows(filename: str, sep: str | None = None) -> list[list[str]]:
    """An independent parse of a shipped file: Python's line splitting, no numpy."""
    with gzip.open(DATA_DIR / filename, "rt") as f:
        text = f.read()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("%")]
    if sep == ",":
        return list(csv.reader(lines))
    return [re.split(r"\s+", line.strip()) for line in lines]


NOT_SHIPPED = {"mooc", "lastfm", "reddit", "socialevo", "untrade", "unvote", "contacts", "flights"}


def test_names_cover_every_dataset():
    assert sorted(datasets.names()) == sorted(set(README) | NOT_SHIPPED)
    assert {n for n in datasets.names() if not datasets.info(n).shipped} == NOT_SHIPPED


@pytest.fixture
def data_folder(tmp_path, monkeypatch):
    """``$STREAMGNN_DATA`` pointing at an empty folder; the loader's cache cleared before and after."""
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    datasets._raw.cache_clear()
    yield tmp_path
    datasets._raw.cache_clear()


def dyglib_csv(src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> str:
    rows = (f"{k},{u},{i},{ts},0.0,{k + 1}" for k, (u, i, ts) in enumerate(zip(src, dst, t, strict=True)))
    return ",u,i,ts,label,idx\n" + "\n".join(rows) + "\n"


def test_a_stream_not_shipped_without_its_file_names_the_file_and_the_folder(data_folder, monkeypatch):
    with pytest.raises(
        ConfigError, match=r"put ml_mooc.csv \(or ml_mooc.csv.gz\) in .*does not exist.*DyGLib"
    ):
        datasets.load("mooc")
    monkeypatch.delenv(DATA_ENV)
    with pytest.raises(
        ConfigError, match=r"'untrade' is not shipped.*ml_UNtrade.csv.*STREAMGNN_DATA is not set"
    ):
        datasets.load("untrade")


@pytest.fixture
def tiny_stream():
    """A stream registered as the streams too big to ship are (``_external_dyglib``), of 50 rows."""
    datasets._external_dyglib("tiny", "Tiny", 50, 12, "A test stream.")
    yield "tiny"
    del datasets._DATASETS["tiny"]


def test_a_stream_not_shipped_loads_from_the_folder_if_its_rows_match_dyglib(data_folder, tiny_stream):
    rng = np.random.default_rng(0)
    src, dst, t = rng.integers(1, 7, 50), rng.integers(7, 13, 50), np.sort(rng.integers(0, 99, 50)) * 1.0
    (data_folder / "ml_Tiny.csv").write_text(dyglib_csv(src, dst, t))
    batch = datasets.load(tiny_stream)
    assert batch.src.tolist() == src.tolist() and batch.dst.tolist() == dst.tolist()
    assert batch.t.tolist() == t.tolist()
    assert not datasets.info(tiny_stream).shipped
    # gzipped, one row short: read, then refused by DyGLib's row count
    (data_folder / "ml_Tiny.csv").unlink()
    short = dyglib_csv(src[:-1], dst[:-1], t[:-1]).encode()
    (data_folder / "ml_Tiny.csv.gz").write_bytes(gzip.compress(short))
    datasets._raw.cache_clear()
    with pytest.raises(CodecError, match=r"ml_Tiny.csv: 49 rows where DyGLib's table has 50: not DyGLib's"):
        datasets.load(tiny_stream)
    (data_folder / "ml_Tiny.csv.gz").write_bytes(short)  # not gzipped after all
    with pytest.raises(CodecError, match=r"ml_Tiny.csv.gz: not readable as gzipped text"):
        datasets.load(tiny_stream)


@pytest.mark.parametrize("name", sorted(README))
def test_load_matches_readme_and_info(name):
    rows, nodes, first, last = README[name]
    batch = datasets.load(name)
    meta = datasets.info(name)
    assert len(batch) == rows == meta.rows
    assert len(np.union1d(batch.src, batch.dst)) == nodes == meta.nodes
    if isinstance(first, str):
        assert (utc_date(batch.t[0]), utc_date(batch.t[-1])) == (first, last)
    else:
        assert (batch.t[0], batch.t[-1]) == (first, last)
    assert (batch.t[0], batch.t[-1]) == (meta.t_min, meta.t_max)
    assert np.all(np.diff(batch.t) >= 0)
    assert batch.eid.tolist() == list(range(rows))
    assert not batch.kind.any()
    assert (batch.weight is not None) == meta.weighted
    assert batch.src.dtype == np.int64 and batch.t.dtype == np.float64
    valid, letters = batch.validate()
    assert letters == [] and len(valid) == rows
    for filename in meta.files:
        assert (DATA_DIR / filename).is_file()
    assert meta.citation and meta.source and meta.license


@pytest.mark.parametrize("name", sorted(README))
def test_dedup_and_self_loop_counts_match_info(name):
    meta = datasets.info(name)
    full = datasets.load(name)
    assert int((full.src == full.dst).sum()) == meta.self_loops
    no_loops = datasets.load(name, drop_self_loops=True)
    assert len(no_loops) == meta.rows - meta.self_loops
    assert not np.any(no_loops.src == no_loops.dst)
    deduped = datasets.load(name, dedup=True)
    assert len(deduped) == meta.rows - meta.duplicate_rows
    assert deduped.eid.tolist() == list(range(len(deduped)))
    assert np.all(np.diff(deduped.t) >= 0)


def test_readme_quirk_counts():
    assert datasets.info("collegemsg").duplicate_rows == 37
    assert datasets.info("radoslaw_email").duplicate_rows == 313
    assert datasets.info("travian_messages").duplicate_rows == 70_795
    enron = datasets.info("enron")
    assert (enron.duplicate_rows, enron.self_loops) == (87_104, 16_410)
    both = datasets.load("enron", dedup=True, drop_self_loops=True)
    assert not np.any(both.src == both.dst)
    keys = set(zip(both.src.tolist(), both.dst.tolist(), both.t.tolist(), strict=True))
    assert len(keys) == len(both)


def test_collegemsg_dedup_matches_an_independent_parse():
    rows = raw_rows("CollegeMsg.txt.gz")
    unique = list(dict.fromkeys(tuple(map(int, r)) for r in rows))
    assert len(rows) - len(unique) == 37
    expected = sorted(unique, key=lambda r: r[2])  # stable, like the loader
    batch = datasets.load("collegemsg", dedup=True)
    got = list(zip(batch.src.tolist(), batch.dst.tolist(), batch.t.astype(int).tolist(), strict=True))
    assert got == expected


@pytest.mark.parametrize(
    ("name", "filename", "times"),
    [("uslegis", "ml_USLegis.csv.gz", 12), ("canparl", "ml_CanParl.csv.gz", 14)],
)
def test_dyglib_streams_match_an_independent_parse(name, filename, times):
    """DyGLib's ``ml_`` files: every row, in file order, as csv reads it; DyGLib's table's time span (12
    Congresses, 14 years) as the number of distinct times."""
    rows = raw_rows(filename, sep=",")
    assert rows[0] == ["", "u", "i", "ts", "label", "idx"]
    batch = datasets.load(name)
    assert batch.src.tolist() == [int(r[1]) for r in rows[1:]]
    assert batch.dst.tolist() == [int(r[2]) for r in rows[1:]]
    assert batch.t.tolist() == [float(r[3]) for r in rows[1:]]
    assert [int(r[5]) for r in rows[1:]] == list(range(1, len(batch) + 1))
    assert len(np.unique(batch.t)) == times


def test_bitcoin_alpha_unsorted_file_gives_stable_time_order():
    rows = [(int(s), int(d), int(r), int(t)) for s, d, r, t in raw_rows("soc-sign-bitcoinalpha.csv.gz", ",")]
    times = [r[3] for r in rows]
    assert times != sorted(times)  # the file really is unsorted
    expected = sorted(rows, key=lambda r: r[3])
    batch = datasets.load("bitcoin_alpha")
    assert batch.src.tolist() == [r[0] for r in expected]
    assert batch.dst.tolist() == [r[1] for r in expected]
    assert batch.weight.tolist() == [r[2] for r in expected]
    assert batch.t.tolist() == [r[3] for r in expected]
    assert int((batch.weight < 0).sum()) == 1_536 and batch.weight.min() == -10 and batch.weight.max() == 10


def test_bitcoin_otc_keeps_fractional_times_and_ratings():
    rows = raw_rows("soc-sign-bitcoinotc.csv.gz", ",")
    batch = datasets.load("bitcoin_otc")
    assert batch.t.tolist() == [float(r[3]) for r in rows]  # already sorted in the file
    assert batch.weight.tolist() == [float(r[2]) for r in rows]
    assert int((batch.weight < 0).sum()) == 3_563


def test_konect_comment_and_crlf_rows_parse_like_a_regex_split():
    rows = raw_rows("radoslaw_email.tsv.gz")
    assert len(rows) == 82_927 and all(len(r) == 4 for r in rows)
    batch = datasets.load("radoslaw_email")  # sorted in the file, so file order is kept
    assert batch.src.tolist() == [int(r[0]) for r in rows]
    assert batch.dst.tolist() == [int(r[1]) for r in rows]
    assert batch.t.tolist() == [float(r[3]) for r in rows]


def test_wikipedia_labels_and_bipartite_ids():
    batch = datasets.load("jodie_wikipedia")
    labels = datasets.load_labels("jodie_wikipedia")
    assert labels.shape == (157_474,) and int(labels.sum()) == 217
    assert batch.src.max() == 8_226 and batch.dst.min() == 8_227 and batch.dst.max() == 9_226
    rows = raw_rows("wikipedia.csv.gz", ",")[1:]
    assert labels.tolist() == [int(r[3]) for r in rows]
    with pytest.raises(ConfigError, match="jodie_wikipedia"):
        datasets.load_labels("enron")


def test_labels_stay_aligned_after_filtering():
    # The filters remove no wikipedia rows, so every positive label must still sit on its own edit.
    batch = datasets.load("jodie_wikipedia", drop_self_loops=True, dedup=True)
    labels = datasets.load_labels("jodie_wikipedia", drop_self_loops=True, dedup=True)
    positives = batch.take(labels == 1)
    rows = [r for r in raw_rows("wikipedia.csv.gz", ",")[1:] if r[3] == "1"]
    assert positives.src.tolist() == [int(r[0]) for r in rows]
    assert positives.t.tolist() == [float(r[2]) for r in rows]


def test_pubmed_node_labels():
    ids, labels = datasets.load_node_labels("pubmed")
    assert len(ids) == 19_717 == len(np.unique(ids))
    assert np.bincount(labels).tolist() == [0, 4_103, 7_875, 7_739]
    edges = datasets.load("pubmed")
    assert np.isin(np.union1d(edges.src, edges.dst), ids).all()
    with pytest.raises(ConfigError, match="pubmed"):
        datasets.load_node_labels("enron")


def test_travian_communities():
    days = datasets.load_communities()
    assert list(days) == [dt.date(2009, 12, d) for d in range(1, 31)]
    assert len(days[dt.date(2009, 12, 1)]) == 232
    members = {v for groups in days.values() for group in groups for v in group}
    attackers = set(datasets.load("travian_attacks").src.tolist())
    assert len(members & attackers) > 0.5 * len(attackers)


def test_travian_days_follow_the_files():
    batch = datasets.load("travian_trades")
    with zipfile.ZipFile(DATA_DIR / "travian-trades.zip") as zf:
        per_file = [len(zf.read(n).splitlines()) for n in sorted(zf.namelist())]
    day_start = dt.datetime(2009, 12, 1, 5, tzinfo=dt.timezone.utc).timestamp()
    per_day = np.bincount(((batch.t - day_start) // 86_400).astype(int))
    assert per_day.tolist() == per_file


def test_iter_batches_concatenate_to_load():
    parts = list(datasets.iter_batches("collegemsg", 10_000, dedup=True))
    assert [len(p) for p in parts] == [10_000] * 5 + [59_835 - 37 - 50_000]
    whole = concat(parts)
    expected = datasets.load("collegemsg", dedup=True)
    assert whole.eid.tolist() == expected.eid.tolist()
    assert whole.src.tolist() == expected.src.tolist()
    with pytest.raises(ConfigError, match="batch_size"):
        next(datasets.iter_batches("collegemsg", 0))


def test_unknown_name_lists_the_names():
    for call in (datasets.load, datasets.info, datasets.load_labels, datasets.load_node_labels):
        with pytest.raises(ConfigError, match="unknown dataset 'nope'.*jodie_wikipedia.*pubmed"):
            call("nope")


def test_loaded_batches_are_private_copies():
    first = datasets.load("enron")
    first.src[:] = -1
    first.t[:] = -1
    again = datasets.load("enron")
    assert again.src.min() == 1 and again.t[0] == 0


def test_wikipedia_loads_fast_from_cold():
    datasets._raw.cache_clear()
    start = time.perf_counter()
    batch = datasets.load("jodie_wikipedia")
    assert len(batch) == 157_474
    assert time.perf_counter() - start < 1.0


def test_shipped_files_match_their_readme_checksums():
    readme = (DATA_DIR / "README.md").read_text()
    listed = dict(re.findall(r"\| `([^`]+)` \| `([0-9a-f]{64})` \|", readme))
    shipped = sorted(p.name for p in DATA_DIR.iterdir() if p.name != "README.md")
    assert sorted(listed) == shipped
    needed = {f for name in README for f in datasets.info(name).files} | {"travian-communities.zip"}
    needed |= set(datasets.pgt.FILES.values())  # PyTorch Geometric Temporal's signals (load_signal)
    assert needed == set(shipped)
    for name, digest in listed.items():
        assert hashlib.sha256((DATA_DIR / name).read_bytes()).hexdigest() == digest, name


def test_table_refuses_malformed_text():
    assert table("1,2,3\r\n4 5\t6", 3, np.int64, "ok").tolist() == [[1, 2, 3], [4, 5, 6]]
    with pytest.raises(CodecError, match="not a valid int64"):
        table("1 2 3\n4 x 6\n", 3, np.int64, "bad")
    with pytest.raises(CodecError, match="expected 3 values on each of 2 lines"):
        table("1 2 3\n4 5\n", 3, np.int64, "short")
    assert table("", 2, np.int64, "empty").shape == (0, 2)
