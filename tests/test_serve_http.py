"""The embeddings service over real HTTP (uvicorn on a free port) reading a real compacted topic: lookups,
top-k against a brute-force reference, link scores by the trained predictor, 4xx errors, metrics."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch

from streamgnn.checkpoint import read_latest
from streamgnn.connectors.sink import KafkaSink
from streamgnn.serve import EmbeddingService, ServeConfig

torch.set_num_threads(1)


def call(url: str, body=None, method: str | None = None, raw: bytes | None = None) -> tuple[int, dict | str]:
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
            status = resp.status
            ctype = resp.headers.get("content-type", "")
    except urllib.error.HTTPError as err:
        text, status, ctype = err.read().decode(), err.code, err.headers.get("content-type", "")
    return status, json.loads(text) if "json" in ctype else text


def wait_for(predicate, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def published(kafka_bootstrap, make_topic):
    """A 2-partition compacted embeddings topic holding 60 nodes' 8-d vectors (binary, as the trainer
    publishes), and the vectors."""
    topic = make_topic(2, compacted=True)
    vectors = np.random.default_rng(0).normal(size=(60, 8)).astype(np.float32)
    vectors[7] = 0.0  # a zero vector: cosine 0 against everything
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        sink.publish_embeddings(np.arange(60), vectors, t=5.0)
        sink.flush()
    return topic, vectors


def cosine_top(vectors: np.ndarray, q: np.ndarray, k: int, exclude: int | None) -> list[int]:
    norms = np.linalg.norm(vectors, axis=1)
    scores = np.where(norms > 0, vectors @ q / np.where(norms > 0, norms, 1) / np.linalg.norm(q), 0.0)
    if exclude is not None:
        scores[exclude] = -np.inf
    return np.argsort(-scores, kind="stable")[:k].tolist()


def test_lookups_topk_errors_updates_and_metrics(kafka_bootstrap, published):
    topic, vectors = published
    with EmbeddingService(ServeConfig(port=0, log_every_s=0), kafka_bootstrap, topic) as service:
        url = service.url
        health = wait_for(lambda: (h := call(f"{url}/health")[1])["caught_up"] and h, "catching up")
        assert health["nodes"] == 60 and health["dim"] == 8 and health["status"] == "ok"

        status, got = call(f"{url}/embeddings?ids=3,41")
        assert status == 200 and [e["id"] for e in got["embeddings"]] == [3, 41]
        np.testing.assert_allclose([e["embedding"] for e in got["embeddings"]], vectors[[3, 41]], rtol=1e-6)
        assert got["embeddings"][0]["t"] == 5.0
        status, got = call(f"{url}/embeddings", {"ids": [59, "0"]})  # an int id may come as a string
        assert status == 200 and [e["id"] for e in got["embeddings"]] == [59, 0]

        status, got = call(f"{url}/topk?id=3&k=5")
        assert status == 200 and got["metric"] == "cosine" and got["query"] == 3
        assert [n["id"] for n in got["neighbors"]] == cosine_top(vectors, vectors[3], 5, exclude=3)
        status, got = call(f"{url}/topk", {"vector": vectors[10].tolist(), "k": 3, "metric": "dot"})
        assert (
            status == 200
            and [n["id"] for n in got["neighbors"]] == np.argsort(-(vectors @ vectors[10]))[:3].tolist()
        )
        status, got = call(f"{url}/topk", {"id": 7, "k": 60})  # a zero vector: all scores 0, the rest listed
        assert status == 200 and len(got["neighbors"]) == 59
        assert {n["score"] for n in got["neighbors"]} == {0.0}

        status, got = call(f"{url}/score", {"pairs": [[1, 2], [3, 3]]})
        assert status == 200 and got["scorer"] == "cosine"  # no checkpoint given
        cos = vectors[1] @ vectors[2] / np.linalg.norm(vectors[1]) / np.linalg.norm(vectors[2])
        assert got["scores"][0]["score"] == pytest.approx(cos, rel=1e-5) and got["scores"][1]["score"] == (
            pytest.approx(1.0)
        )

        for path, body, code, text in [
            ("/embeddings?ids=3,999,1000", None, 404, "999"),
            ("/embeddings", {"ids": []}, 400, "non-empty list"),
            ("/embeddings", {"ids": "3"}, 400, "non-empty list"),
            ("/embeddings", {"ids": [1.5]}, 400, "node ids are ints or strings"),
            ("/embeddings", {"ids": ["alice"]}, 400, "not an int node id"),
            ("/embeddings", {"ids": list(range(10_001))}, 413, "max_ids"),
            ("/topk?id=3&k=0", None, 400, "k: expected an int >= 1"),
            ("/topk?id=3&k=x", None, 400, "k: expected an int >= 1"),
            ("/topk?id=3&k=5000", None, 413, "max_k"),
            ("/topk?id=3&metric=l2", None, 400, "metric"),
            ("/topk?id=12345", None, 404, "12345"),
            ("/topk", {"vector": [1, 2]}, 400, "give 8 numbers"),
            ("/topk", {"k": 3}, 400, "give the query node"),
            ("/score?src=1", None, 400, "give src and dst"),
            ("/score", {"pairs": [[1]]}, 400, "pairs"),
            ("/score", {"pairs": [[1, 404]]}, 404, "404"),
        ]:
            status, got = call(f"{url}{path}", body)
            assert status == code and text in got["error"], (path, body, status, got)
        status, got = call(f"{url}/embeddings?ids=3,999,1000")
        assert got["unknown"] == [999, 1000]
        status, got = call(f"{url}/embeddings", raw=b"{not json")
        assert status == 400 and "not JSON" in got["error"]

        # the stream goes on: a new vector for node 3 replaces the old one; bad messages are counted, skipped
        from kafka import KafkaProducer

        with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="json") as sink:
            sink.publish_embeddings([3], np.ones((1, 8)), t=9.0)
            sink.flush()
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
        f32 = [("content-type", b"application/x-streamgnn-embedding-f32")]
        producer.send(topic, b"\x00\x00\x80\x3f", key=b"4", headers=f32)  # 1-d in an 8-d table
        producer.send(topic, b"\x00\x00\x80", key=b"5", headers=f32)  # not whole float32s
        producer.send(topic, json.dumps({"embedding": [0.0] * 8}).encode(), key=b"carol")  # not an int id
        producer.flush()
        producer.close()
        got = wait_for(
            lambda: (e := call(f"{url}/embeddings?ids=3")[1]["embeddings"][0])["t"] == 9.0 and e, "the update"
        )
        assert got["embedding"] == [1.0] * 8
        lag_zero = f'streamgnn_consumer_lag_messages{{partition="0",topic="{topic}"}} 0.0'
        metrics = wait_for(  # the lag gauge is refreshed after the messages are applied: wait for both
            lambda: (
                (m := call(f"{url}/metrics")[1]).count("streamgnn_dead_letters_total{") >= 3
                and lag_zero in m
                and m
            ),
            "dead letters counted and the lag gauge back at 0",
        )
        assert 'reason="a vector of shape in a table of rows"} 1.0' in metrics
        assert 'reason="undecodable embedding message"} 1.0' in metrics
        assert 'reason="key is not an int node id"' in metrics
        assert "streamgnn_events_ingested_total 61.0" in metrics and "streamgnn_table_nodes 60.0" in metrics
        assert "streamgnn_embedding_freshness_seconds_count 61.0" in metrics
        assert 'streamgnn_http_request_seconds_count{route="topk",status="200"}' in metrics


def test_link_scores_come_from_the_trained_predictor(kafka_bootstrap, make_topic, tmp_path):
    from streamgnn.events import EventBatch
    from streamgnn.nn import TGNConfig
    from streamgnn.train import OnlineTrainer, TrainConfig

    rng = np.random.default_rng(1)
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, 600), dst=rng.integers(20, 30, 600), t=np.arange(600.0), eid=np.arange(600)
    )
    config = TrainConfig(
        model=TGNConfig(
            memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0, pair_features=False
        ),
        batch_size=100, lr=1e-2, eval_negatives=2, checkpoint_dir=str(tmp_path), checkpoint_every=1,
    )  # fmt: skip
    topic = make_topic(1, compacted=True)
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        trainer = OnlineTrainer(config, sink=sink)
        trainer.fit(events.split(100), progress=False)
    z = trainer.table.embeddings(np.array([0, 25]))
    with torch.no_grad():
        expected = torch.sigmoid(trainer.model.predictor(torch.from_numpy(z[:1]), torch.from_numpy(z[1:])))
    served = ServeConfig(port=0, log_every_s=0, checkpoint_dir=str(tmp_path))
    with EmbeddingService(served, kafka_bootstrap, topic) as service:
        wait_for(lambda: call(f"{service.url}/health")[1]["nodes"] == 30, "all 30 nodes")
        status, got = call(f"{service.url}/score?src=0&dst=25")
    assert status == 200 and got["scorer"] == "link_predictor"
    assert got["checkpoint"] == read_latest(tmp_path)[0]
    assert got["scores"][0]["score"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("walks", [False, True])
def test_link_scores_read_pair_features_from_the_trainers_store_and_say_so_without_it(
    kafka_bootstrap, make_topic, tmp_path, walks
):
    """A model with pair features scores through its pair encoder when the service holds the trainer's
    store (features as of just after its newest event, as the embeddings are; walk features too, kept by
    the service over that store); a service that reads only the topic answers by cosine and names why,
    never by the predictor with the pair part missing."""
    import math

    from streamgnn.events import EventBatch
    from streamgnn.nn import TGNConfig
    from streamgnn.sampling.pairs import PairFeatures
    from streamgnn.train import OnlineTrainer, TrainConfig

    rng = np.random.default_rng(1)
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, 600), dst=rng.integers(20, 30, 600), t=np.arange(600.0), eid=np.arange(600)
    )
    model = TGNConfig(
        memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_features=True, pair_walks=walks
    )
    config = TrainConfig(
        model=model,
        batch_size=100,
        lr=1e-3 if walks else 1e-2,
        eval_negatives=2,
        checkpoint_dir=str(tmp_path),
        checkpoint_every=1,
    )  # fmt: skip  (at 1e-2 the walk products' wide inputs can leave this run's predictor constant)
    topic = make_topic(1, compacted=True)
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        trainer = OnlineTrainer(config, sink=sink)
        trainer.fit(events.split(100), progress=False)
    store, tgn = trainer.store, trainer.model
    pairs = [[0, 25], [3, 21]]
    z = trainer.table.embeddings(np.array([0, 3, 25, 21]))
    t = float(np.nextafter(store.watermark, math.inf))
    features = PairFeatures.of(store, model)
    s, d = store.node_index(np.array([0, 3])), store.node_index(np.array([25, 21]))
    assert features.history(s, d, t)[0, 0] > 0  # 0 -> 25 did happen
    tgn.eval()
    with torch.no_grad():
        raw = [torch.from_numpy(x) for x in features.read(s, d, t)]
        pair = tgn.pair_encoder(*raw)
        z_src, z_dst = torch.from_numpy(z[:2]), torch.from_numpy(z[2:])
        expected = torch.sigmoid(tgn.predictor(z_src, z_dst, pair)).numpy()
        blinds = [torch.zeros_like(pair)] + (
            [tgn.pair_encoder(*raw[:2], torch.zeros_like(raw[2]))] if walks else []
        )
        for blind in blinds:  # the pair part (and the walk part of it) matters to these scores, far beyond
            blind = torch.sigmoid(tgn.predictor(z_src, z_dst, blind)).numpy()  # the tolerance below
            assert np.abs(blind - expected).max() > 1e-4
    served = ServeConfig(port=0, log_every_s=0, checkpoint_dir=str(tmp_path))
    with EmbeddingService(served, kafka_bootstrap, topic, store=store) as service:
        wait_for(lambda: call(f"{service.url}/health")[1]["nodes"] == 30, "all 30 nodes")
        status, got = call(f"{service.url}/score", {"pairs": pairs})
    assert status == 200, got
    assert (got["scorer"], got["pair_features"], got["as_of"]) == ("link_predictor", "store", t)
    assert got["checkpoint"] == read_latest(tmp_path)[0]
    assert [r["score"] for r in got["scores"]] == pytest.approx(expected.tolist(), rel=1e-5)
    with EmbeddingService(served, kafka_bootstrap, topic) as service:  # the topic only: no store
        wait_for(lambda: call(f"{service.url}/health")[1]["nodes"] == 30, "all 30 nodes")
        status, got = call(f"{service.url}/score?src=0&dst=25")
    assert status == 200 and got["scorer"] == "cosine" and "pair features" in got["why"]
    cosine = z[0] @ z[2] / (np.linalg.norm(z[0]) * np.linalg.norm(z[2]))
    assert got["scores"][0]["score"] == pytest.approx(float(cosine), rel=1e-5)
