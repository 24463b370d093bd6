"""The agents benchmark: its JSON has the promised keys (a reduced preset, so the test stays short)."""

from __future__ import annotations

import json

from streamgnn.agents.dsgd import DecentralizedConfig
from streamgnn.agents.experiments import DecentralizedSetup, SweepConfig
from streamgnn.agents.fit import FitConfig
from streamgnn.agents.source_loc import SourceLocConfig
from streamgnn.benchmarks import agents


def test_main_prints_one_json_object_with_the_promised_keys(capsys, monkeypatch, tmp_path):
    quick = agents.presets(quick=True)
    assert quick["task"].nodes == 50 and set(quick["sweep"].probs) == {0.0, 0.3}
    tiny = {
        "task": SourceLocConfig(nodes=16, communities=4, train=100, test=20),
        "sweep": SweepConfig(
            probs=(0.0, 0.3),
            variants=("plain", "res+normalized"),
            taps=3,
            hidden=8,
            fit=FitConfig(steps=10, batch=16),
        ),  # fmt: skip
        "flocking": None,
        "dsgd": DecentralizedSetup(
            DecentralizedConfig(steps=6, batch=8), ("none", agents.COMPRESSED), taps=3, hidden=8
        ),
    }
    monkeypatch.setattr(agents, "presets", lambda quick: tiny)
    assert agents.main(["--quick", "--json", "--plot", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)  # the whole of stdout is one object
    assert result["smoke"] is True  # quick figures say so
    keys = [
        "robust_retained_at_0_3",
        "plain_retained_at_0_3",
        "decentralized_acc_vs_central",
        "compressed_bytes_vs_full",
    ]
    assert all(isinstance(result[k], float) and result[k] > 0 for k in keys)
    assert 0.2 < result["compressed_bytes_vs_full"] < 0.3  # 8-bit messages plus a 4-byte scale
    assert set(result["source_loc_accuracy"]["bernoulli"]) == {"plain", "res+normalized"}
    assert {p.name for p in tmp_path.iterdir()} == {"agents_source_loc.png", "agents_decentralized.png"}
