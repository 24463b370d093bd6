"""Labels on the live job (issue 35): a labels file read by ``streamgnn train``'s job beside its events,
each label scored by the online head before it is learned from, bad labels dead letters naming their line,
the head's state in the checkpoints (a resumed job continues exactly), and the head's round trip through
the checkpoint container."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from streamgnn.checkpoint import tensor_blob, tensors
from streamgnn.connectors.files import CsvSource
from streamgnn.errors import CheckpointError, ConfigError
from streamgnn.events import EventBatch
from streamgnn.jobs import TrainJob
from streamgnn.nn import TGNConfig
from streamgnn.tasks import Labels, stream_features
from streamgnn.tasks.config import TaskConfig
from streamgnn.tasks.features import NODE
from streamgnn.tasks.live_features import LiveFeatures, Recent
from streamgnn.tasks.online import OnlineHead
from streamgnn.train import TrainConfig
from streamgnn.train.tgn_model import TGNLinkModel

torch.set_num_threads(1)

N_EVENTS = 1200
MODEL = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)


def write_events(tmp_path, n: int = N_EVENTS):
    """A CSV of ``n`` events: sources 0..39 rate destinations 40..59, one per time unit (t == row)."""
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 40, n), rng.integers(40, 60, n)
    path = tmp_path / "events.csv"
    path.write_text("".join(f"{s},{d},{t}\n" for t, (s, d) in enumerate(zip(src, dst, strict=True))))
    return path, src, dst


def node_labels(src: np.ndarray, every: int = 3) -> list[dict]:
    """A label on every ``every``-th event's source at the event's time: 1 for even nodes."""
    return [
        {"node": int(src[i]), "t": float(i), "y": int(src[i] % 2 == 0)} for i in range(0, len(src), every)
    ]


def write_lines(path, rows: list) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def run(tmp_path, events, labels_path, *, max_events=None, ckpt=None, kind="node_classification", **task):
    config = TrainConfig(
        model=MODEL, batch_size=50, eval_negatives=5, checkpoint_dir=None if ckpt is None else str(ckpt),
        checkpoint_every=4 if ckpt is not None else 0, serve_every=0,
    )  # fmt: skip
    job = TrainJob(
        config, source=CsvSource(events, batch_size=200), log_every_s=3600,
        task=TaskConfig(kind=kind, labels_file=str(labels_path), **task),
    )  # fmt: skip
    job.run(max_events=max_events, progress=False)
    return job


def scores(job) -> np.ndarray:
    return np.concatenate(job.labelled.head.records["score"])


def test_bad_labels_are_dead_letters_naming_their_line_and_the_rest_are_scored(tmp_path):
    events, src, _ = write_events(tmp_path)
    good = node_labels(src)
    bad = [
        "not json",
        {"node": 1, "t": 5.0},  # no y
        {"node": 1, "t": 5.0, "y": 2},  # not a class of a binary task
        {"node": 1, "t": "soon", "y": 1},  # not a time
        {"node": 1, "t": 5.0, "y": 1, "dst": 41},  # an edge label for a node task
        {"node": 1, "t": 5.0, "y": 1, "colour": "red"},  # unknown field
        {"node": 12345, "t": 7.0, "y": 1},  # a node no event has
    ]
    rows = good[:10] + bad + good[10:]
    write_lines(tmp_path / "labels.jsonl", rows)
    job = run(tmp_path, events, tmp_path / "labels.jsonl")
    lab = job.labelled
    assert lab.head.seen == len(good) and lab.waiting() == 0
    assert lab.dead_letters == len(bad)
    where = sorted(int(d.where.rsplit("line ", 1)[1]) for d in lab.letters)
    assert where == list(range(11, 11 + len(bad)))  # each names its own line
    reasons = " | ".join(d.reason for d in lab.letters)
    for part in ("not JSON", "missing field 'y'", "not a class", "not a finite number", "has no 'dst'",
                 "unknown field 'colour'", "unknown node 12345"):  # fmt: skip
        assert part in reasons
    # the labels were scored in time order, and the job learned from them
    assert np.all(np.diff(np.concatenate(lab.head.records["t"])) >= 0) and lab.head.steps > 0
    figures = json.loads(json.dumps(lab.figures()))
    assert set(figures["all"]["head"]) == {"auc", "ap"} and figures["scored"] == len(good)


def test_a_label_is_scored_before_it_is_learned_from(tmp_path):
    """Flipping one label's value changes no score up to its own, and changes later ones (the head learned
    from it after scoring it)."""
    events, src, _ = write_events(tmp_path, 600)
    labels = node_labels(src)
    write_lines(tmp_path / "a.jsonl", labels)
    k = 60
    flipped = [dict(r, y=1 - r["y"]) if i == k else r for i, r in enumerate(labels)]
    write_lines(tmp_path / "b.jsonl", flipped)
    a, b = (scores(run(tmp_path, events, tmp_path / f"{x}.jsonl")) for x in "ab")
    assert len(a) == len(b) == len(labels)
    np.testing.assert_array_equal(a[: k + 1], b[: k + 1])
    assert not np.allclose(a[k + 1 :], b[k + 1 :])


def test_a_resumed_job_continues_the_task_exactly(tmp_path):
    events, src, _ = write_events(tmp_path)
    write_lines(tmp_path / "labels.jsonl", node_labels(src, every=2))
    whole = run(tmp_path, events, tmp_path / "labels.jsonl", ckpt=tmp_path / "whole")
    first = run(tmp_path, events, tmp_path / "labels.jsonl", ckpt=tmp_path / "parts", max_events=500)
    assert 0 < first.labelled.head.seen < whole.labelled.head.seen
    resumed = run(tmp_path, events, tmp_path / "labels.jsonl", ckpt=tmp_path / "parts")
    assert resumed.trainer.position == N_EVENTS
    np.testing.assert_array_equal(scores(resumed), scores(whole))
    for name, value in whole.labelled.head.head.state_dict().items():
        torch.testing.assert_close(resumed.labelled.head.head.state_dict()[name], value, rtol=0, atol=0)
    assert resumed.labelled.figures() == whole.labelled.figures()


def test_a_checkpoint_of_another_task_is_refused(tmp_path):
    events, src, dst = write_events(tmp_path, 300)
    write_lines(tmp_path / "labels.jsonl", node_labels(src))
    run(tmp_path, events, tmp_path / "labels.jsonl", ckpt=tmp_path / "ckpt", max_events=200)
    edges = [{"node": int(src[i]), "dst": int(dst[i]), "t": float(i), "y": 1} for i in range(0, 300, 5)]
    write_lines(tmp_path / "edges.jsonl", edges)
    with pytest.raises(CheckpointError, match="kind node_classification.*kind edge_classification"):
        run(tmp_path, events, tmp_path / "edges.jsonl", ckpt=tmp_path / "ckpt", kind="edge_classification")


def test_edge_labels_read_both_ends_and_regression_reports_errors(tmp_path):
    events, src, dst = write_events(tmp_path, 600)
    rows = [
        {"node": int(src[i]), "dst": int(dst[i]), "t": float(i), "y": float(dst[i] - 50)} for i in range(600)
    ]
    write_lines(tmp_path / "edges.jsonl", rows)
    job = run(tmp_path, events, tmp_path / "edges.jsonl", kind="edge_regression")
    # both ends' 8-d embeddings, both ends' 4 stream features and the 4 reputation ones
    assert job.labelled.head.in_dim == 2 * 8 + 12 and job.labelled.head.seen == 600
    figures = job.labelled.figures()["all"]
    assert set(figures["head"]) == {"mae", "rmse"} and figures["head"]["mae"] > 0


def test_labels_on_the_batch_s_events_read_the_step_s_embeddings_and_every_earlier_event(
    tmp_path, monkeypatch
):
    """An edge label on its own event (a rating's sign at arrival) reads the embeddings the step scored
    the event from: the model embeds for the head only in the batches the step does not score (the
    first: no negatives yet), not once per batch as a second forward pass. And the stream features it
    reads are the offline sweep's (``stream_features``): every event before it counted, its own batch's
    earlier events included (``live_features.Recent``: 49 of each batch's 50 labels have some), none at or
    after its time."""
    events, src, dst = write_events(tmp_path, 600)
    rows = [
        {"node": int(src[i]), "dst": int(dst[i]), "t": float(i), "y": int(src[i] % 2)} for i in range(600)
    ]
    write_lines(tmp_path / "edges.jsonl", rows)
    calls, read = [], []
    embed, observe = TGNLinkModel.embed, OnlineHead.observe

    def counted(self, nodes, t, blank, step):
        calls.append(step)
        return embed(self, nodes, t, blank, step)

    def spied(self, x, y, t, **kwargs):
        read.append(np.asarray(x)[:, self.in_dim - self.features :])
        return observe(self, x, y, t, **kwargs)

    monkeypatch.setattr(TGNLinkModel, "embed", counted)
    monkeypatch.setattr(OnlineHead, "observe", spied)
    job = run(tmp_path, events, tmp_path / "edges.jsonl", kind="edge_classification")
    assert job.labelled.head.seen == 600 and job.trainer.steps == 12
    assert calls == [0]  # the first batch's labels, before any step scored
    t = np.arange(600.0)
    offline = stream_features(
        EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(600)),
        Labels(src, t, np.zeros(600, np.int64), dst),
    )
    both_ends = [offline.names.index(f"{end}_{n}") for end in ("src", "dst") for n in NODE]
    np.testing.assert_allclose(np.concatenate(read)[:, :8], offline.x[:, both_ends], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind,classes", [("node_classification", 2), ("node_classification", 3),
                                          ("edge_regression", 2)])  # fmt: skip
def test_the_head_s_state_round_trips_through_the_container_and_continues_alike(kind, classes):
    config = TaskConfig(kind=kind, classes=classes, labels_file="x", replay=64, replay_batch=16)
    dim = 12 if kind.startswith("edge") else 6
    rng = np.random.default_rng(0)

    def batch(n=20):
        y = rng.integers(0, classes, n) if kind.endswith("classification") else rng.normal(size=n)
        return rng.normal(size=(n, dim)).astype(np.float32), y, np.sort(rng.random(n))

    head = OnlineHead(config, dim, seed=1, features=3)  # its last 3 inputs read as stream features
    for _ in range(5):
        head.observe(*batch(), learn=True)
    state = tensors(tensor_blob(head.state()), "test")  # what a checkpoint writes and reads back
    copy = OnlineHead.from_state(state)
    x, y, t = batch()
    np.testing.assert_array_equal(head.observe(x, y, t, learn=True), copy.observe(x, y, t, learn=True))
    x, y, t = batch()
    np.testing.assert_array_equal(head.predict(x), copy.predict(x))
    assert head.figures() == copy.figures() and head.head.stage == copy.head.stage


def test_task_config_is_strict():
    with pytest.raises(ConfigError, match="labels_file or labels_topic"):
        TaskConfig()
    with pytest.raises(ConfigError, match="unknown key 'clases'"):
        TaskConfig.from_dict({"kind": "node_classification", "clases": 3, "labels_file": "x"})
    with pytest.raises(ConfigError, match="node_regresion"):
        TaskConfig.from_dict({"kind": "node_regresion", "labels_file": "x"})


def test_streamgnn_train_learns_the_task_of_its_yaml_and_reports_it(tmp_path, capsys):
    from streamgnn.cli import main

    events, src, _ = write_events(tmp_path, 600)
    write_lines(tmp_path / "labels.jsonl", node_labels(src) + [{"node": 1, "t": 9.0}])
    (tmp_path / "job.yaml").write_text(
        "train: {batch_size: 100, model: {memory_dim: 8, time_dim: 4, embedding_dim: 8, num_neighbors: 3}}\n"
        f"task: {{kind: node_classification, labels_file: {tmp_path / 'labels.jsonl'}, window: 50}}\n"
    )
    out = tmp_path / "out"
    argv = [
        "train",
        "--config",
        str(tmp_path / "job.yaml"),
        "--file",
        str(events),
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "task node_classification: 200 labels scored before learned: AUC" in text
    assert "1 label dead letters" in text and "labels.jsonl:line 201: missing field 'y'" in text
    figures = json.loads((out / "task.json").read_text())
    assert figures["scored"] == 200 and figures["window"]["labels"]["n"] == 50

    (tmp_path / "bad.yaml").write_text(f"task: {{kind: node_clasification, labels_file: {tmp_path}}}\n")
    assert main(["train", "--config", str(tmp_path / "bad.yaml"), "--file", str(events), "--quiet"]) == 2
    assert "node_clasification" in capsys.readouterr().err


def test_streamgnn_train_learns_the_task_beside_train_sharding_and_resumes_it(tmp_path, capsys):
    """``task:`` beside ``train.sharding`` (one rank here; 2 real ranks: ``test_tasks_sharded.py``) learns
    the task as one process does, saves it in the rank's checkpoints, and a second run resumes it."""
    from streamgnn.cli import main

    events, src, _ = write_events(tmp_path, 300)
    write_lines(tmp_path / "labels.jsonl", node_labels(src) + ["oops"])
    train = "batch_size: 100, model: {memory_dim: 8, time_dim: 4, embedding_dim: 8, num_neighbors: 3}"
    task = f"task: {{kind: node_classification, labels_file: {tmp_path / 'labels.jsonl'}}}\n"
    (tmp_path / "one.yaml").write_text(f"train: {{{train}}}\n" + task)
    (tmp_path / "sharded.yaml").write_text(f"train: {{sharding: {{num_partitions: 2}}, {train}}}\n" + task)
    base = ["train", "--file", str(events), "--quiet"]
    assert main([*base, "--config", str(tmp_path / "one.yaml"), "--out", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    ckpt = tmp_path / "ckpt"
    argv = [*base, "--config", str(tmp_path / "sharded.yaml"), "--checkpoint-dir", str(ckpt)]
    assert main([*argv, "--events", "200", "--out", str(tmp_path / "part")]) == 0
    text = capsys.readouterr().out
    assert "task node_classification: 67 labels scored before learned" in text
    assert "1 label dead letters" in text and "labels.jsonl:line 101: not JSON" in text
    assert main([*argv, "--out", str(tmp_path / "sharded")]) == 0  # resumed from the rank's checkpoint
    text = capsys.readouterr().out
    assert "task node_classification: 100 labels scored before learned" in text and "resumed" in text
    one, sharded = (json.loads((tmp_path / d / "task.json").read_text()) for d in ("one", "sharded"))
    assert sharded["scored"] == one["scored"] == 100 and sharded["dead_letters"] == 1
    assert sharded["all"]["head"]["auc"] == pytest.approx(one["all"]["head"]["auc"], abs=0.05)


def test_the_task_s_figures_are_prometheus_gauges(tmp_path):
    events, src, _ = write_events(tmp_path, 600)
    write_lines(tmp_path / "labels.jsonl", node_labels(src) + ["oops"])
    job = run(tmp_path, events, tmp_path / "labels.jsonl", window=40)
    registry = job.metrics.registry
    assert registry.get_sample_value("streamgnn_task_labels") == 200
    assert registry.get_sample_value("streamgnn_task_dead_letters") == 1
    assert registry.get_sample_value("streamgnn_task_pending") == 0
    window = job.labelled.head.figures(40)
    for model in ("head", "prior"):
        got = registry.get_sample_value("streamgnn_task_window", {"model": model, "metric": "ap"})
        assert got == pytest.approx(window[model]["ap"])


@pytest.mark.parametrize("ids", ["int", "str"])
def test_live_features_batch_by_batch_equal_the_offline_sweep(ids):
    """``LiveFeatures`` updated a batch at a time reads what ``stream_features`` computes event by event
    (self-loops, repeated pairs and ratings included), for a label on every event, read as the job reads
    it: before the first batch whose newest event is at or after it, from the state of the batches before
    plus that batch's events strictly before it (``Recent``; events at its time apart)."""
    rng = np.random.default_rng(4)
    n, bs = 900, 100
    src, dst = rng.integers(0, 30, n), rng.integers(0, 30, n)
    t = np.cumsum(rng.exponential(300.0, n) * (rng.random(n) < 0.7))  # bursts: ties within a batch
    w = rng.integers(-10, 11, n).astype(float)
    names = (lambda a: a.astype(str).astype(object)) if ids == "str" else (lambda a: a)
    events = EventBatch.from_columns(src=names(src), dst=names(dst), t=t, eid=np.arange(n), weight=w)
    labels = Labels(events.src, t, np.zeros(n, np.int64), events.dst)  # each event's edge at its time
    offline = stream_features(events, labels, tau=3600.0)
    keep = [i for i, name in enumerate(offline.names) if name != "pair_count"]

    live, dense = LiveFeatures(3600.0, rated=True), {}
    code = np.vectorize(lambda v: dense.setdefault(v, len(dense)), otypes=[np.int64])
    rows, due = [], 0
    for lo in range(0, n, bs):
        part = slice(lo, lo + bs)
        s_, d_ = code(events.src[part]), code(events.dst[part])
        now = slice(due, due := int(np.searchsorted(t, t[part][-1], side="right")))
        ends = code(labels.node[now]), code(labels.dst[now])
        rows.append(live.rows(*ends, t[now], Recent(s_, d_, t[part], w[part])))
        external = {v: key for key, v in dense.items()}
        live.observe(s_, d_, t[part], w[part], lambda a, b, e=external: np.array([e[j] for j in range(a, b)]))
    np.testing.assert_allclose(np.concatenate(rows), offline.x[:, keep], rtol=1e-5, atol=1e-5)
    assert live.index(names(np.array([src[0], 999]))).tolist()[1] == -1
    back = LiveFeatures.from_state(tensors(tensor_blob(live.state()), "test"))
    np.testing.assert_array_equal(back.rows(np.arange(5), np.arange(5), np.full(5, t[-1])),
                                  live.rows(np.arange(5), np.arange(5), np.full(5, t[-1])))  # fmt: skip
