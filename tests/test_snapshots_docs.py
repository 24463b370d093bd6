"""What a user copies runs (the README's snapshot blocks run in tests/test_readme_blocks.py): the example
script (stopped, then resumed from its checkpoint) and ``streamgnn snapshots`` (a signal folder equal to the
snapshots built in Python)."""

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

from streamgnn.cli import main as cli
from streamgnn.codec import encode_json_lines
from streamgnn.events import EventBatch
from streamgnn.snapshots import NextLinks, SnapshotSpec, build_signal
from streamgnn.snapshots.files import read_signal
from streamgnn.store import TemporalGraphStore

ROOT = Path(__file__).resolve().parent.parent


def test_snapshot_example_stops_and_resumes(tmp_path, monkeypatch, capsys):
    script = str(ROOT / "examples/snapshot_training.py")
    for stop in ("6", "9"):
        monkeypatch.setattr("sys.argv", [script, "--out", str(tmp_path), "--max-snapshots", stop])
        runpy.run_path(script, run_name="__main__")
    out = capsys.readouterr().out
    assert "resumed after 6 snapshots" in out  # where the first run stopped and "9 snapshots online" in out
    summary = json.loads((tmp_path / "bitcoin_otc/summary.json").read_text())
    assert summary["snapshots"] == 9 and 0 <= summary["edgebank"]["auc"] <= 1
    assert (tmp_path / "bitcoin_otc/online.png").exists()


def test_cli_writes_the_signal_python_builds(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 4000
    events = EventBatch.from_columns(src=rng.integers(0, 50, n), dst=rng.integers(0, 50, n),
                                     t=np.sort(rng.uniform(0, 1000, n)), eid=np.arange(n))  # fmt: skip
    path = tmp_path / "events.jsonl"
    path.write_bytes(encode_json_lines(events))
    out = tmp_path / "signal"
    args = [str(path), "--out", str(out), "--every", "100", "--kind", "window", "--weight", "count",
            "--degree-features", "--target", "links", "--negatives", "3", "--quiet"]  # fmt: skip
    assert cli(["snapshots", *args]) == 0
    assert "9 snapshots" in capsys.readouterr().out
    got = read_signal(out)
    store = TemporalGraphStore()
    store.ingest(events)
    spec = SnapshotSpec(kind="window", every=100.0, weight="count", degree_features=True)
    want = build_signal(store, spec, target=NextLinks(negatives=3))
    assert got.snapshot_count == want.snapshot_count == 9
    for key in ("edge_indices", "edge_weights", "features", "targets", "link_index"):
        for a, b in zip(getattr(got, key), getattr(want, key), strict=True):
            assert np.array_equal(a, b), key
    assert got.node_ids.tolist() == want.node_ids.tolist() and got.meta["spec"]["every"] == 100.0
    assert cli(["snapshots", *args]) == 2  # the folder is not empty now: refused before any work
    assert "not an empty folder" in capsys.readouterr().err


DOCUMENTED = "spec snapshot pairs queue builder scratch targets stream signal cells files baselines metrics"


@pytest.mark.parametrize("module", DOCUMENTED.split())
def test_the_examples_in_the_docstrings_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"streamgnn.snapshots.{module}"))
    assert result.attempted and not result.failed
