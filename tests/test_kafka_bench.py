"""The ingest benchmark's small path, so it cannot rot: one JSON object with the promised keys."""

from __future__ import annotations

import json

from streamgnn.benchmarks import ingest
from streamgnn.connectors.kafka import available_backends


def test_ingest_benchmark_prints_one_json_object_with_the_promised_keys(capsys):
    assert ingest.main(["--quick", "--json", "--events", "3000", "--repeats", "1"]) == 0
    result = json.loads(capsys.readouterr().out)  # the whole of stdout is one object
    keys = ["json_events_per_s", "json_vs_raw_kafka_python", "binary_events_per_s"]
    for client in (b.replace("-", "_") for b in available_backends()):
        keys += [f"{client}_json_vs_raw", f"raw_{client}_msgs_per_s", f"{client}_binary_events_per_s"]
    assert set(keys) <= set(result)
    assert all(isinstance(result[k], float) and result[k] > 0 for k in keys)
    assert result["json_events"] == result["binary_events"] == 3000
