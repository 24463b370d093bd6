"""Every long-running job says what it is doing in one line per ``--log-every`` interval (and once more when
it stops): produce, the partition router, ingest, train and serve, each driven from a ``--config`` file.
The lines are checked by content, never by how many came in how long (the last one always comes)."""

from __future__ import annotations

import re

import numpy as np

from streamgnn.cli import main
from streamgnn.codec import encode_json_lines
from streamgnn.connectors.kafka import KafkaSource
from streamgnn.events import concat

LINE = r"^\d\d:\d\d:\d\d \[{name}\] (.*)$"


def lines(text: str, name: str) -> list[str]:
    return re.findall(LINE.format(name=re.escape(name)), text, flags=re.M)


def test_produce_and_the_partition_router_log_from_a_config_file(
    kafka_bootstrap, make_events, tmp_path, capsys
):
    events = make_events(3000, num_nodes=200)
    (tmp_path / "e.jsonl").write_bytes(encode_json_lines(events))
    run = tmp_path.name[-12:].replace("_", "-")
    raw, routed = f"raw-{run}", f"events-{run}"
    (tmp_path / "c.yaml").write_text(
        f"kafka: {{bootstrap: '{kafka_bootstrap}', raw_topic: {raw}, events_topic: {routed}, partitions: 3, "
        "format: binary}\n"
        f"produce: {{source: '{tmp_path / 'e.jsonl'}', batch_size: 100, log_every_s: 0.01}}\n"
        f"partition: {{partitioner: {{name: fennel}}, log_every_s: 0.01}}\n"
    )
    config = ["--config", str(tmp_path / "c.yaml")]
    assert main(["produce", *config, "--topic", raw, "--partitions", "2"]) == 0  # flags win over the file
    out = capsys.readouterr().out
    said = lines(out, f"produce {raw}")
    assert said and said[-1] == "3,000 of 3,000 events sent (" + said[-1].split("(")[1]
    assert "events/s" in said[-1] and "messages" in said[-1]

    assert main(["partition", *config, "--max-events", "3000"]) == 0
    out = capsys.readouterr().out
    said = lines(out, "partition")
    assert said and said[-1].startswith("3,000 events routed (") and "events/s" in said[-1]
    assert "edge cut" in said[-1] and said[-1].endswith("0 dead letters")
    with KafkaSource(routed, bootstrap_servers=kafka_bootstrap) as source:
        got = concat(list(source.stream(idle_timeout_s=0)))
        assert len(source.positions()) == 3  # kafka.partitions from the file
    assert np.array_equal(np.sort(got.eid), events.eid)


def test_ingest_and_train_log_events_per_second_and_quality(tmp_path, capsys):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 30, 400), rng.integers(30, 50, 400)
    rows = [f"{s},{d},{t}" for t, (s, d) in enumerate(zip(src, dst, strict=True))]
    (tmp_path / "e.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "c.yaml").write_text(
        "store: {num_partitions: 2}\n"
        "train: {batch_size: 50, window_events: 100, eval_negatives: 5, model: {memory_dim: 8, time_dim: 4, "
        "embedding_dim: 8, num_neighbors: 3}}\n"
    )
    common = ["--file", str(tmp_path / "e.csv"), "--config", str(tmp_path / "c.yaml"), "--log-every", "0.01"]
    assert main(["ingest", *common, "--store", str(tmp_path / "store")]) == 0
    said = lines(capsys.readouterr().out, "ingest")
    assert said and re.match(
        r"400 events \([\d,]+/s\), 400 edges, 0 duplicates, 0 dead letters$", said[-1]
    ), said

    assert main(["train", *common, "--quiet"]) == 0
    said = lines(capsys.readouterr().out, "train rank 0")
    assert said and re.match(
        # the live job's budget (streamgnn train's default): the figures are of a sample, and say so
        r"rank 0/1: 400 events \([\d,]+/s\), step \d+, window AP [\d.]+ MRR [\d.]+ "
        r"\(a sample: [\d,]+ events scored\), learned from 100% of events$",
        said[-1],
    )


def test_the_embeddings_service_logs_nodes_rate_and_lag(kafka_bootstrap, make_topic, capsys):
    from streamgnn.connectors.sink import KafkaSink
    from streamgnn.serve import ServeConfig
    from streamgnn.serve.service import EmbeddingService

    topic = make_topic(1, compacted=True)
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        sink.publish_embeddings(list(range(20)), np.ones((20, 4)), t=1.0)
        sink.flush()
    with EmbeddingService(ServeConfig(port=0, log_every_s=0.01), kafka_bootstrap, topic) as service:
        assert service.reader.wait_caught_up(timeout_s=120)
    said = lines(capsys.readouterr().out, "serve")
    assert said and re.match(
        r"20 nodes served; [\d,]+ embeddings/s; lag 0 messages; 0 dead letters", said[-1]
    )
