"""Node affinity on the live job (issue 35): ``streamgnn train``'s job with ``task.kind: node_affinity``
reads labels that are distributions over classes (each node's share of its next period's interactions per
class, TGB's node property prediction), scores each at its time, takes it in only once its period has
passed (``task.horizon``: no prediction before then is helped by it), publishes each prediction, keeps all
of it in its checkpoints (a resumed job continues exactly), and the service's ``/predict`` ranks a node's
classes by the checkpoint's head over real HTTP, beside a real broker (Tansu)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_tasks_kafka import call, config, wait_for
from test_tasks_live import run, write_lines
from topic_records import read_topic

from streamgnn.connectors.files import CsvSource
from streamgnn.events import EventBatch
from streamgnn.jobs import TrainJob
from streamgnn.serve import EmbeddingService, ServeConfig
from streamgnn.tasks.affinity import RevealedShares, affinity_labels
from streamgnn.tasks.config import TaskConfig
from streamgnn.tasks.live_features import LiveFeatures
from streamgnn.tasks.metrics import ndcg_at_k
from streamgnn.tasks.online import OnlineHead
from streamgnn.train.checkpoint import load_tensors

torch.set_num_threads(1)

N, PERIOD, C, SOURCES = 1200, 100.0, 4, 24  # events (one per time unit), label period, classes, sources
BAD = {  # a label that is not a distribution over the C classes, and its dead letter's reason
    "[1, 0]": "is not a list of 4 shares",
    "[0, 0, 0, 0]": "the shares are all 0",
    "2": "is not a list of 4 shares",
    "[1, -1, 0, 0]": "each share is a finite number >= 0",
}


def write_stream(tmp_path) -> list[dict]:
    """Sources 0..23 (each seen in the first period) send 3 in 4 of their events to destinations of their
    favourite class (``node % 4``; destination ``d``'s class is ``d % 4``); returns the labels of every
    period after the first: each source's share per class of its events in the period."""
    rng = np.random.default_rng(11)
    src = np.r_[np.arange(SOURCES), np.arange(SOURCES), rng.integers(0, SOURCES, N - 2 * SOURCES)]
    cls = np.where(rng.random(N) < 0.75, src % C, rng.integers(0, C, N))
    dst = 100 + cls + C * rng.integers(0, 5, N)
    (tmp_path / "events.csv").write_text(
        "".join(f"{s},{d},{t}\n" for t, (s, d) in enumerate(zip(src, dst, strict=True)))
    )
    events = EventBatch.from_columns(src=src, dst=dst, t=np.arange(N, dtype=float), eid=np.arange(N))
    ids = np.arange(100, 120)
    bounds = np.arange(0, N + PERIOD, PERIOD)
    labels = affinity_labels(events, bounds, [(ids, ids % C)] * (len(bounds) - 1), C)
    return [
        {"node": int(n), "t": float(t), "y": y.tolist()}
        for n, t, y in zip(labels.node, labels.t, labels.y, strict=True)
        if t >= PERIOD
    ]


def affinity(tmp_path, labels_path, **kw):
    return run(
        tmp_path, tmp_path / "events.csv", labels_path, kind="node_affinity", classes=C, horizon=PERIOD, **kw
    )


def scores(job, model: str = "head") -> np.ndarray:
    return np.concatenate(job.labelled.head.records["score" if model == "head" else model])


def test_affinity_labels_are_scored_taken_in_after_their_period_and_beat_the_prior(tmp_path):
    rows = write_stream(tmp_path)
    bad = [f'{{"node": 0, "t": 150.0, "y": {y}}}' for y in BAD]
    write_lines(tmp_path / "labels.jsonl", rows[:30] + bad + rows[30:])
    job = affinity(tmp_path, tmp_path / "labels.jsonl")
    lab = job.labelled
    figures = lab.figures()
    assert figures["scored"] == len(rows) and figures["dead_letters"] == len(BAD)
    for y, why in BAD.items():
        assert any(y in d.reason and why in d.reason for d in lab.letters), y
    # the last period's labels are not known yet (the events end inside it); every other one was taken in
    last = sum(r["t"] + PERIOD > N - 1 for r in rows)
    assert figures["awaiting"] == last > 0 and lab.head._counts[-1] == len(rows) - last
    assert lab.head.steps > 0
    assert np.concatenate(lab.head.records["score"]).shape == (len(rows), C)
    # the head ranks each node's classes better than the classes' shares known so far (the prior)
    assert figures["all"]["head"]["ndcg10"] > figures["all"]["prior"]["ndcg10"]
    # each figure is TGB's mean (each label time's mean NDCG, then their mean), which differs here from
    # the mean over labels: the periods hold different numbers of labels
    t, y = (np.concatenate(lab.head.records[name]) for name in ("t", "y"))
    assert len(np.unique(np.unique(t, return_counts=True)[1])) > 1
    for model in ("head", "prior"):
        each = np.array([ndcg_at_k(s[None], r[None]) for s, r in zip(scores(job, model), y, strict=True)])
        per_time = np.mean([each[t == when].mean() for when in np.unique(t)])
        assert figures["all"][model]["ndcg10"] == pytest.approx(per_time, rel=1e-12)
        assert abs(per_time - each.mean()) > 1e-4
    assert figures["averaging"] == "NDCG: each label time's mean, then their mean (TGB's)"
    assert figures["averaging"] in lab.text()


def test_a_label_helps_no_prediction_before_its_period_ends_and_a_resumed_job_continues_exactly(tmp_path):
    rows = write_stream(tmp_path)
    write_lines(tmp_path / "a.jsonl", rows)
    k = next(i for i, r in enumerate(rows) if r["t"] == 3 * PERIOD and r["y"] != np.roll(r["y"], 2).tolist())
    # label k's shares moved two classes on; every other label as it was
    changed = [r if i != k else dict(r, y=np.roll(r["y"], 2).tolist()) for i, r in enumerate(rows)]
    write_lines(tmp_path / "b.jsonl", changed)
    whole = affinity(tmp_path, tmp_path / "a.jsonl", ckpt=tmp_path / "whole")
    other = affinity(tmp_path, tmp_path / "b.jsonl", ckpt=tmp_path / "other")
    t = np.array([r["t"] for r in rows])
    before = t < rows[k]["t"] + PERIOD
    np.testing.assert_array_equal(scores(other)[before], scores(whole)[before])
    assert not np.allclose(scores(other)[~before], scores(whole)[~before])
    # stopped part way (labels awaiting their period's end in its checkpoint), then resumed
    first = affinity(tmp_path, tmp_path / "a.jsonl", ckpt=tmp_path / "parts", max_events=500)
    assert 0 < first.labelled.head.seen < len(rows)
    resumed = affinity(tmp_path, tmp_path / "a.jsonl", ckpt=tmp_path / "parts")
    np.testing.assert_array_equal(scores(resumed), scores(whole))
    assert resumed.labelled.figures() == whole.labelled.figures()
    for name, value in whole.labelled.head.head.state_dict().items():
        torch.testing.assert_close(resumed.labelled.head.head.state_dict()[name], value, rtol=0, atol=0)


def test_predict_ranks_a_node_s_classes_by_the_job_s_head_and_each_prediction_is_published(
    kafka_bootstrap, make_topic, tmp_path
):
    rows = write_stream(tmp_path)
    write_lines(tmp_path / "labels.jsonl", rows)
    embeddings, predictions = make_topic(1, compacted=True), make_topic(1)
    task = TaskConfig(
        kind="node_affinity", classes=C, horizon=PERIOD, top_k=3, labels_file=str(tmp_path / "labels.jsonl"),
        predictions_topic=predictions,
    )  # fmt: skip
    job = TrainJob(
        config(tmp_path / "ckpt"), source=CsvSource(tmp_path / "events.csv", batch_size=200),
        bootstrap=kafka_bootstrap, embeddings_topic=embeddings, log_every_s=3600, task=task,
    )  # fmt: skip
    job.run(progress=False)
    published = [json.loads(r.value) for r in read_topic(kafka_bootstrap, predictions)]
    assert [(p["node"], p["t"]) for p in published] == [(r["node"], r["t"]) for r in rows]
    assert all(len(p["affinities"]) == 3 and "share" in p["affinities"][0] for p in published)

    state = load_tensors(tmp_path / "ckpt")[2]["task"]  # what the service reads: the newest checkpoint's
    head = OnlineHead.from_state(state["head"])
    revealed, features = (
        RevealedShares.from_state(state["revealed"]),
        LiveFeatures.from_state(state["features"]),
    )
    nodes = list(range(8))
    served = ServeConfig(port=0, log_every_s=0, checkpoint_dir=str(tmp_path / "ckpt"))
    with EmbeddingService(served, kafka_bootstrap, embeddings) as service:
        url = service.url
        wait_for(lambda: call(f"{url}/health")[1]["nodes"] == SOURCES + 20, "every node served")
        _, got = call(f"{url}/embeddings?ids={','.join(map(str, nodes))}")
        served_z = {e["id"]: np.array(e["embedding"], np.float32) for e in got["embeddings"]}
        z = np.stack([served_z[node] for node in nodes])
        status, got = call(f"{url}/predict?nodes={','.join(map(str, nodes))}")
        # a request's own k (query or body): every class ranked, or only the best; a bad k is a 400
        everything = call(f"{url}/predict?nodes={','.join(map(str, nodes))}&k={C}")
        best = call(f"{url}/predict", {"nodes": nodes, "k": 1})
        refused = {
            k: call(f"{url}/predict?nodes=0&k={k}")
            for k in ("0", str(C + 1), "x", "-1", "1.5", "", "10" * 40)
        }
        refused["2.0 (body)"] = call(f"{url}/predict", {"nodes": [0], "k": 2.0})
        refused["true (body)"] = call(f"{url}/predict", {"nodes": [0], "k": True})
    assert status == 200 and got["task"] == "node_affinity"
    assert everything[0] == best[0] == 200
    for k, (code, answer) in refused.items():
        assert code == 400 and answer["error"].startswith("k: expected an int from 1 to 4"), k
    rows_of = features.index(np.array(nodes))
    x = np.concatenate(
        [
            revealed.rows(nodes),
            z,
            features.rows(rows_of, None, np.full(len(nodes), float(state["watermark"]))),
        ],
        axis=1,
    )
    want = head.predict(x)
    tops = []
    for node, p, expect in zip(nodes, got["predictions"], want, strict=True):
        assert p["node"] == node and len(p["affinities"]) == 3
        ranked = [a["class"] for a in p["affinities"]]
        assert ranked == np.argsort(-expect, kind="stable")[:3].tolist()
        assert [a["share"] for a in p["affinities"]] == pytest.approx(expect[ranked].tolist(), rel=1e-6)
        tops.append(ranked[0] == node % C)
    for asked, k in ((everything[1], C), (best[1], 1)):
        assert [[a["class"] for a in p["affinities"]] for p in asked["predictions"]] == [
            np.argsort(-expect, kind="stable")[:k].tolist() for expect in want
        ]
    assert sum(tops) > len(nodes) / 2  # most nodes' favourite class ranked first: learned, not arbitrary


def test_streamgnn_train_learns_node_affinity_from_its_yaml_and_refuses_it_without_a_horizon(
    tmp_path, capsys
):
    from streamgnn.cli import main

    rows = write_stream(tmp_path)
    write_lines(tmp_path / "labels.jsonl", rows)
    model = (
        "train: {batch_size: 100, model: {memory_dim: 8, time_dim: 4, embedding_dim: 8, num_neighbors: 3}}\n"
    )
    task = f"kind: node_affinity, classes: {C}, labels_file: {tmp_path / 'labels.jsonl'}"
    (tmp_path / "job.yaml").write_text(model + f"task: {{{task}, horizon: {PERIOD}, top_k: 2}}\n")
    argv = [
        "train",
        "--config",
        str(tmp_path / "job.yaml"),
        "--file",
        str(tmp_path / "events.csv"),
        "--quiet",
    ]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    assert f"task node_affinity: {len(rows)} labels scored before learned: NDCG2" in capsys.readouterr().out
    figures = json.loads((tmp_path / "out" / "task.json").read_text())
    assert figures["scored"] == len(rows) and set(figures["all"]["head"]) == {"ndcg2"}

    (tmp_path / "bad.yaml").write_text(model + f"task: {{{task}}}\n")
    argv[2] = str(tmp_path / "bad.yaml")
    assert main(argv) == 2
    assert "task.horizon" in capsys.readouterr().err
