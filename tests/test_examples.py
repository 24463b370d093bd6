"""The examples a user copies from must run."""

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_replay_store_example(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["replay_store.py", "collegemsg"])
    runpy.run_path(str(EXAMPLES / "replay_store.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "collegemsg: 1,899 nodes, 59,835 edges" in out
    assert "restored equals original: True" in out
