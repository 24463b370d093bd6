"""PyTorch Geometric Temporal's JSON datasets, read from the package: the signals PGT's loaders return.

PGT's loader classes download their JSON at run time; these functions read the same files shipped in
``data/`` (see its README) and build the same signals, array for array (tested against PGT's own classes):

=================  ===========================  =========================================================
name               signal                       options (PGT's defaults)
=================  ===========================  =========================================================
chickenpox         StaticGraphTemporalSignal    ``lags=4``
pedalme            StaticGraphTemporalSignal    ``lags=4``
england_covid      DynamicGraphTemporalSignal   ``lags=8``
montevideo_bus     StaticGraphTemporalSignal    ``lags=4, target_var="y", feature_vars=("y",)``
twitter_tennis     DynamicGraphTemporalSignal   ``event_id="rg17", N=None, feature_mode="encoded",
                                                target_offset=1``
=================  ===========================  =========================================================

``series_events(name)`` turns a static-graph dataset into a stream (edge adds, then one node-feature
update per node and period at ``t = period``), so it can go through the store and ``snapshots`` like any
live stream.

    >>> signal = load_signal("chickenpox")
    >>> type(signal).__name__, signal.snapshot_count, signal[0].x.shape
    ('StaticGraphTemporalSignal', 517, torch.Size([20, 4]))
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache

import numpy as np

from ..errors import ConfigError
from ..events import EventBatch, EventKind
from ._formats import data_path

FILES = {
    "chickenpox": "chickenpox.json",
    "pedalme": "pedalme_london.json",
    "england_covid": "england_covid.json.gz",
    "montevideo_bus": "montevideo_bus.json.gz",
    "twitter_tennis_rg17": "twitter_tennis_rg17.json.gz",
    "twitter_tennis_uo17": "twitter_tennis_uo17.json.gz",
}
# What load_signal returns for each name, and the PGT loader class it stands in for.
SIGNALS = {
    "chickenpox": ("StaticGraphTemporalSignal", "ChickenpoxDatasetLoader"),
    "pedalme": ("StaticGraphTemporalSignal", "PedalMeDatasetLoader"),
    "england_covid": ("DynamicGraphTemporalSignal", "EnglandCovidDatasetLoader"),
    "montevideo_bus": ("StaticGraphTemporalSignal", "MontevideoBusDatasetLoader"),
    "twitter_tennis": ("DynamicGraphTemporalSignal", "TwitterTennisDatasetLoader"),
}
NAMES = tuple(SIGNALS)


@lru_cache(maxsize=2)
def _parsed(filename: str) -> dict:
    raw = data_path(filename).read_bytes()
    return json.loads(gzip.decompress(raw) if filename.endswith(".gz") else raw)


def read_json(name: str) -> dict:
    """The dataset's JSON as PGT's loaders hold it (``self._dataset``); ``twitter_tennis_rg17``/``_uo17``.
    The dict is shared: do not modify it."""
    if name not in FILES:
        raise ConfigError(f"unknown PGT dataset file {name!r}; choose one of: {', '.join(FILES)}")
    return _parsed(FILES[name])


def _windows(series: np.ndarray, lags: int, periods: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """PGT's forecasting layout: features ``series[i : i + lags].T``, target ``series[i + lags]``."""
    if not isinstance(lags, int) or not 0 < lags < len(series):
        raise ConfigError(f"lags must be an int in [1, {len(series) - 1}], got {lags!r}")
    return [series[i : i + lags].T for i in range(periods)], [series[i + lags].T for i in range(periods)]


def _standardize(a: np.ndarray, eps: float = 0.0) -> np.ndarray:
    return (a - np.mean(a, axis=0)) / (np.std(a, axis=0) + eps)


def chickenpox(lags: int = 4):
    from torch_geometric_temporal.signal import StaticGraphTemporalSignal

    d = read_json("chickenpox")
    series = np.array(d["FX"])
    edges = np.array(d["edges"]).T
    features, targets = _windows(series, lags, len(series) - lags)
    return StaticGraphTemporalSignal(edges, np.ones(edges.shape[1]), features, targets)


def pedalme(lags: int = 4):
    from torch_geometric_temporal.signal import StaticGraphTemporalSignal

    d = read_json("pedalme")
    series = np.array(d["X"])
    features, targets = _windows(series, lags, len(series) - lags)
    return StaticGraphTemporalSignal(np.array(d["edges"]).T, np.array(d["weights"]).T, features, targets)


def england_covid(lags: int = 8):
    from torch_geometric_temporal.signal import DynamicGraphTemporalSignal

    d = read_json("england_covid")
    periods = d["time_periods"] - lags
    mapping = d["edge_mapping"]
    edges = [np.array(mapping["edge_index"][str(t)]).T for t in range(periods)]
    weights = [np.array(mapping["edge_weight"][str(t)]) for t in range(periods)]
    features, targets = _windows(_standardize(np.array(d["y"]), 1e-10), lags, periods)
    return DynamicGraphTemporalSignal(edges, weights, features, targets)


def montevideo_bus(lags: int = 4, target_var: str = "y", feature_vars: tuple[str, ...] = ("y",)):
    from torch_geometric_temporal.signal import StaticGraphTemporalSignal

    d = read_json("montevideo_bus")
    nodes = d["nodes"]
    index = {node.get("bus_stop"): i for i, node in enumerate(nodes)}
    edges = np.array([(index[link["source"]], index[link["target"]]) for link in d["links"]]).T
    weights = np.array([link["weight"] for link in d["links"]]).T
    cols = np.stack([np.array(node.get("X").get(v)) for node in nodes for v in feature_vars]).T
    target = np.stack([np.array(node.get(target_var)) for node in nodes]).T
    periods = len(cols) - lags
    features, _ = _windows(_standardize(cols), lags, periods)
    _, targets = _windows(_standardize(target), lags, periods)
    return StaticGraphTemporalSignal(edges, weights, features, targets)


def _tennis_features(x: np.ndarray, cutoff: int = 4) -> np.ndarray:
    """PGT's "encoded" mode: one-hot of min(ceil(log(1 + degree)), cutoff) and of floor(10 * transitivity)."""
    degree = np.minimum(np.ceil(np.log(x[:, 0] + 1.0)), cutoff).astype(np.int64)
    transitivity = np.floor(x[:, 1] * 10).astype(np.int64)
    return np.concatenate([np.eye(cutoff + 1)[degree], np.eye(11)[transitivity]], axis=1)


def twitter_tennis(
    event_id: str = "rg17", N: int | None = None, feature_mode: str | None = "encoded", target_offset: int = 1
):  # noqa: N803 (PGT's name)
    from torch_geometric_temporal.signal import DynamicGraphTemporalSignal

    if event_id not in ("rg17", "uo17"):
        raise ConfigError(
            f"event_id must be 'rg17' (Roland-Garros 2017) or 'uo17' (US Open 2017), got {event_id!r}"
        )
    if feature_mode not in (None, "diagonal", "encoded"):
        raise ConfigError(f"feature_mode must be None, 'diagonal' or 'encoded', got {feature_mode!r}")
    d = read_json(f"twitter_tennis_{event_id}")
    periods = d["time_periods"]
    edges, weights, features, targets = [], [], [], []
    for t in range(periods):
        snap = d[str(t)]
        e, w, x = np.array(snap["edges"]), np.array(snap["weights"]), np.array(snap["X"])
        if N is not None:
            keep = np.where((e[:, 0] < N) & (e[:, 1] < N))
            e, w, x = e[keep], w[keep], x[:N]
        edges.append(e.T)
        weights.append(w)
        if feature_mode == "diagonal":
            x = np.identity(x.shape[0])
        elif feature_mode == "encoded":
            x = _tennis_features(x)
        features.append(x)
        y = np.log(1.0 + np.array(d[str(min(t + target_offset, periods - 1))]["y"]))
        targets.append(y if N is None else y[:N])
    return DynamicGraphTemporalSignal(edges, weights, features, targets)


_LOADERS = {
    "chickenpox": chickenpox,
    "pedalme": pedalme,
    "england_covid": england_covid,
    "montevideo_bus": montevideo_bus,
    "twitter_tennis": twitter_tennis,
}


def load_signal(name: str, **options):
    """The PGT signal of dataset ``name`` (see the table above for ``options``)."""
    if name not in _LOADERS:
        raise ConfigError(f"unknown PGT dataset {name!r}; choose one of: {', '.join(NAMES)}")
    return _LOADERS[name](**options)


def series_events(name: str) -> EventBatch:
    """A static-graph dataset (chickenpox, pedalme) as events: at ``t = 0`` node 0..n-1's first values (so
    internal ids equal the dataset's), then the edges (weighted), then each later period's values at
    ``t = period``; node features are one column, the series."""
    if name not in ("chickenpox", "pedalme"):
        raise ConfigError(
            f"series_events covers the static-graph datasets chickenpox and pedalme, not {name!r}"
        )
    d = read_json(name)
    series = np.array(d["FX" if name == "chickenpox" else "X"], np.float64)
    edges = np.array(d["edges"], np.int64)
    weight = np.ones(len(edges)) if name == "chickenpox" else np.array(d["weights"], np.float64)
    periods, n = series.shape
    nodes = np.tile(np.arange(n), periods)
    upd_t = np.repeat(np.arange(periods, dtype=np.float64), n)
    first = n  # the first period's updates lead, then the edges
    kind = np.concatenate([np.full(first, EventKind.NODE_UPDATE), np.full(len(edges), EventKind.EDGE_ADD),
                           np.full(len(nodes) - first, EventKind.NODE_UPDATE)]).astype(np.int8)  # fmt: skip
    src = np.concatenate([nodes[:first], edges[:, 0], nodes[first:]])
    dst = np.concatenate([nodes[:first], edges[:, 1], nodes[first:]])
    t = np.concatenate([upd_t[:first], np.zeros(len(edges)), upd_t[first:]])
    feats = np.concatenate(
        [series.reshape(-1, 1)[:first], np.zeros((len(edges), 1)), series.reshape(-1, 1)[first:]]
    )
    w = np.concatenate([np.ones(first), weight, np.ones(len(nodes) - first)])
    return EventBatch.from_columns(
        kind=kind, src=src, dst=dst, t=t, eid=np.arange(len(t)), weight=w, features=feats.astype(np.float32)
    )
