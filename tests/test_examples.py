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


def test_readme_store_snippet_runs(tmp_path):
    readme = (EXAMPLES.parent / "README.md").read_text()
    block = readme.split("## Use it", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(block.replace('"ckpt/"', "CKPT"), "README.md", "exec"), {"CKPT": str(tmp_path)}, scope)
    store = scope["store"]
    assert store.num_edges == 2 and len(store.snapshot(25.0)) == 1
