"""Our PGT dataset loaders return what PyTorch Geometric Temporal's own loader classes build from the same
JSON (fed the bundled file instead of their download)."""

import numpy as np
import pytest
import torch_geometric_temporal.dataset as pgt_datasets

from streamgnn.datasets import load_signal, pgt
from streamgnn.errors import ConfigError

CASES = [
    ("chickenpox", "ChickenpoxDatasetLoader", "chickenpox", {}, {"lags": 4}),
    ("chickenpox", "ChickenpoxDatasetLoader", "chickenpox", {}, {"lags": 8}),
    ("pedalme", "PedalMeDatasetLoader", "pedalme", {}, {"lags": 4}),
    ("england_covid", "EnglandCovidDatasetLoader", "england_covid", {}, {"lags": 8}),
    ("montevideo_bus", "MontevideoBusDatasetLoader", "montevideo_bus", {}, {"lags": 4}),
    ("twitter_tennis", "TwitterTennisDatasetLoader", "twitter_tennis_rg17", {}, {}),
    ("twitter_tennis", "TwitterTennisDatasetLoader", "twitter_tennis_uo17", {"event_id": "uo17"}, {}),
    ("twitter_tennis", "TwitterTennisDatasetLoader", "twitter_tennis_rg17",
     {"N": 500, "feature_mode": None, "target_offset": 2}, {}),
    ("twitter_tennis", "TwitterTennisDatasetLoader", "twitter_tennis_uo17",
     {"event_id": "uo17", "N": 300, "feature_mode": "diagonal"}, {}),
]  # fmt: skip


def pgt_signal(monkeypatch, cls_name, json_name, init, get):
    cls = getattr(pgt_datasets, cls_name)
    data = pgt.read_json(json_name)
    monkeypatch.setattr(cls, "_read_web_data", lambda self: setattr(self, "_dataset", data))
    return cls(**init).get_dataset(**get)


def fields(signal):
    if hasattr(signal, "edge_indices"):
        return {"edges": signal.edge_indices, "weights": signal.edge_weights}
    return {"edges": [signal.edge_index], "weights": [signal.edge_weight]}


@pytest.mark.parametrize(("name", "cls_name", "json_name", "init", "get"), CASES)
def test_signal_equals_pgts_own_loader(monkeypatch, name, cls_name, json_name, init, get):
    want = pgt_signal(monkeypatch, cls_name, json_name, init, get)
    got = load_signal(name, **init, **get)
    assert type(got) is type(want) and got.snapshot_count == want.snapshot_count
    pairs = {**{k: (v, fields(want)[k]) for k, v in fields(got).items()},
             "features": (got.features, want.features), "targets": (got.targets, want.targets)}  # fmt: skip
    for key, (mine, theirs) in pairs.items():
        assert len(mine) == len(theirs), key
        for a, b in zip(mine, theirs, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), key
    first_got, first_want = got[0], want[0]  # and the Data objects PGT hands to models
    for key in ("x", "edge_index", "edge_attr", "y"):
        assert (first_got[key] == first_want[key]).all(), key


def test_unknown_names_and_options_are_refused():
    with pytest.raises(ConfigError, match="chickenpox"):
        load_signal("chikenpox")
    with pytest.raises(ConfigError, match="event_id"):
        load_signal("twitter_tennis", event_id="wimbledon")
    with pytest.raises(ConfigError, match="lags"):
        load_signal("pedalme", lags=40)
