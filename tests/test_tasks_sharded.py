"""Labels under the sharded job (issue 35): 2 real gloo ranks learn a labelled task from a label topic on the
real broker, beside the same job in one process. Every label is scored once (by its node's owner, which
publishes its prediction: the predictions topic holds each label once), bad labels are dead letters with
their reasons on every rank as in one process, the head's parameters are the same on both ranks, its AUC is
the one process's within a loose bound and above the prior's, and a job stopped part way and resumed
continues as the uninterrupted one. Edge labels too. This file is also the worker script."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shard_ranks import rank_env  # noqa: E402
from topic_records import read_topic  # noqa: E402

N, HOT, EDGES, BATCH = 3000, 30, 800, 200  # events; sources below HOT: active, labelled 1; edge labels
PERIOD = 100.0  # node affinity's label period (over the first EDGES events)
BAD = {  # a label record that is not one, and the reason its dead letter gives
    "not json": "not JSON",
    json.dumps({"node": 1, "t": 5.0}): "missing field 'y'",
    json.dumps({"node": 1, "t": 5.0, "y": 2}): "not a class",
    json.dumps({"node": 12345, "t": 7.0, "y": 1}): "unknown node 12345",
}


def write_events(path: Path, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """``n`` events, one per time unit: sources 0..59 (those below ``HOT`` three times as active) to
    destinations 100..139."""
    rng = np.random.default_rng(7)
    weight = np.where(np.arange(60) < HOT, 3.0, 1.0)
    src, dst = rng.choice(60, n, p=weight / weight.sum()), rng.integers(100, 140, n)
    path.write_text("".join(f"{s},{d},{t}\n" for t, (s, d) in enumerate(zip(src, dst, strict=True))))
    return src, dst


def node_labels(src: np.ndarray) -> list[str]:
    """Each event's source labelled at the event's time: 1 for the active ones."""
    return [json.dumps({"node": int(s), "t": float(t), "y": int(s < HOT)}) for t, s in enumerate(src)]


def edge_labels(src: np.ndarray, dst: np.ndarray) -> list[str]:
    return [
        json.dumps({"node": int(s), "dst": int(d), "t": float(t), "y": int(s < HOT)})
        for t, (s, d) in enumerate(zip(src[:EDGES], dst[:EDGES], strict=True))
    ]


def affinity_labels_of(src: np.ndarray, dst: np.ndarray) -> list[str]:
    """Node affinity labels of the first ``EDGES`` events: each source's share of its events per class of
    destination (``d % 4``) in each period of ``PERIOD`` after the first."""
    from streamgnn.events import EventBatch
    from streamgnn.tasks.affinity import affinity_labels

    n = EDGES
    ev = EventBatch.from_columns(src=src[:n], dst=dst[:n], t=np.arange(n, dtype=float), eid=np.arange(n))
    ids = np.arange(100, 140)
    bounds = np.arange(0, n + PERIOD, PERIOD)
    labels = affinity_labels(ev, bounds, [(ids, ids % 4)] * (len(bounds) - 1), 4)
    keep = labels.t >= PERIOD
    return [
        json.dumps({"node": int(a), "t": float(t), "y": y.tolist()})
        for a, t, y in zip(labels.node[keep], labels.t[keep], labels.y[keep], strict=True)
    ]


def job(work: Path, ckpt: str, *, sharded: bool, kind: str = "node_classification", **task):
    from streamgnn.connectors.files import CsvSource
    from streamgnn.jobs import TrainJob
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import ShardConfig
    from streamgnn.tasks.config import TaskConfig
    from streamgnn.train import TrainConfig

    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    config = TrainConfig(
        model=model, batch_size=BATCH, eval_negatives=5, serve_every=0, checkpoint_dir=str(work / ckpt),
        checkpoint_every=3, sharding=ShardConfig(num_partitions=4) if sharded else None,
    )  # fmt: skip
    return TrainJob(
        config, source=CsvSource(work / "events.csv", batch_size=5 * BATCH), log_every_s=3600,
        bootstrap=os.environ["JOB_BOOTSTRAP"], task=TaskConfig(kind=kind, window=500, **task),
    )  # fmt: skip


def outcome(trainer_job) -> dict:
    lab = trainer_job.labelled
    return {
        "t": np.concatenate(lab.head.records["t"]), "score": np.concatenate(lab.head.records["score"]),
        "params": {k: v.clone() for k, v in lab.head.head.state_dict().items()},
        "figures": lab.figures(), "scored_here": lab.scored_here, "letters": [d.reason for d in lab.letters],
        "steps": trainer_job.trainer.steps, "in_dim": lab.head.in_dim,
    }  # fmt: skip


def worker(rank: int, world: int, port: int, out: str) -> None:
    import torch

    sharded = world > 0
    if sharded:
        rank_env(rank, world, port)
    torch.set_num_threads(1)
    work = Path(os.environ["JOB_DIR"])
    if os.environ.get("JOB_REPLICAS"):  # replicas under torchrun, no train.sharding: refused
        from streamgnn.errors import ConfigError

        write_events(work / "events.csv", 10)
        try:
            job(work, "replicas", sharded=False, labels_file=str(work / "events.csv"))
        except ConfigError as exc:
            torch.save(str(exc), out)
        return
    labels, predictions = os.environ["JOB_LABELS"], os.environ[f"JOB_PREDICTIONS_{world}"]
    whole = job(work, f"whole{world}", sharded=sharded, labels_topic=labels, predictions_topic=predictions)
    whole.run(progress=False)
    got = {"whole": outcome(whole)}
    if sharded:  # stopped part way, then the same command resumes it
        job(work, "parts", sharded=True, labels_topic=labels).run(max_events=8 * BATCH, progress=False)
        resumed = job(work, "parts", sharded=True, labels_topic=labels)
        resumed.run(progress=False)
        got["resumed"] = outcome(resumed)
    edges = job(work, f"edges{world}", sharded=sharded, kind="edge_classification",
                labels_file=str(work / "edges.jsonl"))  # fmt: skip
    edges.run(max_events=EDGES, progress=False)
    got["edges"] = outcome(edges)
    affinity = job(work, f"affinity{world}", sharded=sharded, kind="node_affinity", classes=4, horizon=PERIOD,
                   labels_file=str(work / "affinity.jsonl"))  # fmt: skip
    affinity.run(max_events=EDGES, progress=False)
    got["affinity"] = outcome(affinity)
    torch.save(got, out)


@pytest.fixture(scope="module")
def runs(kafka_bootstrap, tmp_path_factory, spawn_ranks):
    """What one process and each of 2 ranks learned from the same events and label topic."""
    from streamgnn.connectors.kafka import Producer, create_topic

    work = tmp_path_factory.mktemp("tasks_sharded")
    src, dst = write_events(work / "events.csv")
    (work / "edges.jsonl").write_text("\n".join(edge_labels(src, dst)) + "\n")
    (work / "affinity.jsonl").write_text("\n".join(affinity_labels_of(src, dst)) + "\n")
    name = f"labels-{os.getpid()}-{work.name[-6:]}"
    topics = {"LABELS": name, "PREDICTIONS_0": f"{name}-one", "PREDICTIONS_2": f"{name}-two"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic, 1)
    good = node_labels(src)
    with Producer("kafka-python", kafka_bootstrap, {}) as producer:
        for i, text in enumerate(good):  # the bad ones among the first good ones
            producer.send(name, text.encode())
            if i < len(BAD):
                producer.send(name, list(BAD)[i].encode())
        producer.flush()
    env = {
        "JOB_DIR": str(work),
        "JOB_BOOTSTRAP": kafka_bootstrap,
        **{f"JOB_{k}": v for k, v in topics.items()},
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        (one,) = spawn_ranks(__file__, 0, work, processes=1)
        ranks = spawn_ranks(__file__, 2, work)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value
    predictions = {
        world: [json.loads(r.value) for r in read_topic(kafka_bootstrap, topics[f"PREDICTIONS_{world}"])]
        for world in (0, 2)
    }
    return {"one": one, "ranks": ranks, "labels": len(good), "predictions": predictions, "work": work}


def test_every_label_is_scored_once_over_the_ranks_and_published_once(runs):
    one, ranks = runs["one"]["whole"], [r["whole"] for r in runs["ranks"]]
    n = runs["labels"]
    assert one["figures"]["scored"] == n and one["steps"] == N // BATCH
    for r in ranks:  # every rank holds the job's record: every label, once, in time order
        assert r["figures"]["scored"] == n and r["figures"]["pending"] == 0 and r["steps"] == N // BATCH
        np.testing.assert_array_equal(r["t"], one["t"])
    assert all(r["scored_here"] > 0 for r in ranks)
    assert sum(r["scored_here"] for r in ranks) == n  # each embedded and published by one rank
    keys = {world: sorted((p["node"], p["t"]) for p in runs["predictions"][world]) for world in (0, 2)}
    assert len(keys[2]) == n and keys[2] == keys[0]  # the topic holds each label's prediction once


def test_bad_labels_are_dead_letters_with_their_reasons_as_in_one_process(runs):
    one, ranks = runs["one"]["whole"], [r["whole"] for r in runs["ranks"]]
    assert one["figures"]["dead_letters"] == len(BAD)
    for r in ranks:  # decided alike on every rank from rank 0's read of the topic
        assert r["figures"]["dead_letters"] == len(BAD) and sorted(r["letters"]) == sorted(one["letters"])
        for reason in BAD.values():
            assert sum(reason in letter for letter in r["letters"]) == 1


def test_the_head_is_the_same_on_every_rank_and_scores_as_one_process(runs):
    one, ranks = runs["one"]["whole"], [r["whole"] for r in runs["ranks"]]
    first, second = ranks
    assert first["params"].keys() == second["params"].keys()
    for name, value in first["params"].items():  # replicas that took the same steps on the same rows
        assert bool((value == second["params"][name]).all()), name
    np.testing.assert_array_equal(first["score"], second["score"])
    # exact mode: the model's embeddings are one process's within float tolerance, and so are the scores
    np.testing.assert_allclose(first["score"], one["score"], rtol=0, atol=1e-3)
    a, b = one["figures"]["all"], first["figures"]["all"]
    assert a["head"]["auc"] > a["prior"]["auc"] + 0.1 and b["head"]["auc"] > b["prior"]["auc"] + 0.1
    assert abs(a["head"]["auc"] - b["head"]["auc"]) < 0.05


def test_a_sharded_job_stopped_and_resumed_continues_the_task(runs):
    for r in runs["ranks"]:
        whole, resumed = r["whole"], r["resumed"]
        assert resumed["figures"]["scored"] == whole["figures"]["scored"]
        assert resumed["figures"]["dead_letters"] == len(BAD)
        np.testing.assert_array_equal(resumed["t"], whole["t"])
        np.testing.assert_array_equal(resumed["score"], whole["score"])  # as if never stopped
        for name, value in whole["params"].items():
            assert bool((value == resumed["params"][name]).all()), name


def test_the_service_reads_the_head_from_any_rank_s_checkpoint(runs):
    """``/predict``'s head (``TaskPredictor``) from a sharded job's checkpoint folder: each rank's holds the
    head every rank ended with, and the same stream features; the job's folder reads rank 0's."""
    from streamgnn.serve.predict import TaskPredictor

    want = runs["ranks"][0]["whole"]["params"]
    rows = np.random.default_rng(0).normal(size=(5, runs["ranks"][0]["whole"]["in_dim"])).astype(np.float32)
    answers = []
    for folder in ("rank-00000", "rank-00001", "."):
        loaded = TaskPredictor(runs["work"] / "whole2" / folder).load()
        assert loaded.head is not None, loaded.why
        for name, value in loaded.head.head.state_dict().items():
            assert bool((value == want[name]).all()), name
        answers.append(loaded.head.predict(rows))
    for other in answers[1:]:
        np.testing.assert_array_equal(other, answers[0])


def test_score_reads_the_link_predictor_from_a_sharded_job_s_checkpoint_folder(runs):
    """``/score``'s scorer (``LinkScorer``) over a sharded job's checkpoints: given the job's folder (rank
    0's read) or any rank's, it scores by the trained link predictor (with pair features over a store of
    the same events), the same on every rank, not by cosine."""
    from streamgnn.events import EventBatch
    from streamgnn.serve.scoring import LinkScorer
    from streamgnn.store import TemporalGraphStore

    cols = np.loadtxt(runs["work"] / "events.csv", delimiter=",")
    store = TemporalGraphStore()
    store.ingest(EventBatch.from_columns(
        src=cols[:, 0].astype(np.int64), dst=cols[:, 1].astype(np.int64), t=cols[:, 2],
        eid=np.arange(len(cols)),
    ))  # fmt: skip
    z = np.random.default_rng(1).normal(size=(4, 8)).astype(np.float32)
    src, dst = np.array([0, 1, 40, 59]), np.array([100, 139, 120, 101])
    root = runs["work"] / "whole2"
    answers = []
    for folder in (root, root / "rank-00000", root / "rank-00001"):
        scores, info = LinkScorer(folder, store).score(z, z[::-1].copy(), src, dst)
        assert info["scorer"] == "link_predictor", info
        assert info["pair_features"] == "store" and info["checkpoint"].startswith("ckpt-")
        answers.append(scores)
    for other in answers[1:]:
        np.testing.assert_array_equal(other, answers[0])
    cosine, _ = LinkScorer(None).score(z, z[::-1].copy())
    assert not np.allclose(answers[0], cosine)


def test_edge_labels_are_scored_once_by_the_owner_of_their_source(runs):
    one, ranks = runs["one"]["edges"], [r["edges"] for r in runs["ranks"]]
    assert one["figures"]["scored"] == EDGES
    assert [r["figures"]["scored"] for r in ranks] == [EDGES, EDGES]
    assert sum(r["scored_here"] for r in ranks) == EDGES and all(r["scored_here"] for r in ranks)
    for name, value in ranks[0]["params"].items():
        assert bool((value == ranks[1]["params"][name]).all()), name
    assert ranks[0]["figures"]["all"]["head"]["auc"] > ranks[0]["figures"]["all"]["prior"]["auc"]


def test_node_affinity_is_scored_once_over_the_ranks_and_as_in_one_process(runs):
    """Node affinity under sharding: each label scored by its node's owner, every rank's head and revealed
    shares the same (every rank takes in every label at its period's end), scores as one process's."""
    one, ranks = runs["one"]["affinity"], [r["affinity"] for r in runs["ranks"]]
    n = one["figures"]["scored"]
    assert n > 0 and one["figures"]["awaiting"] > 0 and one["figures"]["dead_letters"] == 0
    for r in ranks:
        assert r["figures"]["scored"] == n and r["figures"]["awaiting"] == one["figures"]["awaiting"]
        np.testing.assert_array_equal(r["t"], one["t"])
    assert sum(r["scored_here"] for r in ranks) == n and all(r["scored_here"] for r in ranks)
    for name, value in ranks[0]["params"].items():
        assert bool((value == ranks[1]["params"][name]).all()), name
    np.testing.assert_array_equal(ranks[0]["score"], ranks[1]["score"])
    np.testing.assert_allclose(ranks[0]["score"], one["score"], rtol=0, atol=1e-3)


def test_replicas_under_torchrun_refuse_a_task_naming_what_to_change(tmp_path, spawn_ranks, monkeypatch):
    """Each replica scores a slice of the batch: their heads would read different embeddings. Refused on
    every rank before anything runs, naming train.sharding."""
    for key, value in (("DIR", tmp_path), ("REPLICAS", 1), ("BOOTSTRAP", "unused:9092")):
        monkeypatch.setenv(f"JOB_{key}", str(value))
    for message in spawn_ranks(__file__, 2, tmp_path):
        assert "not by replicas under torchrun (2 processes): add train.sharding" in message
    assert not (tmp_path / "replicas").exists()


def test_joint_training_under_the_sharded_job_is_refused_naming_the_key(tmp_path, monkeypatch):
    """The sharded job's head learns on the embeddings as they are: a joint weight there is refused
    before anything runs, naming the key and what to set."""
    from streamgnn.errors import ConfigError

    monkeypatch.setenv("JOB_BOOTSTRAP", "unused:9092")
    write_events(tmp_path / "events.csv", 200)
    (tmp_path / "labels.jsonl").write_text("")
    with pytest.raises(ConfigError, match="task.joint_weight under train.sharding"):
        job(tmp_path, "ckpt", sharded=True, labels_file=str(tmp_path / "labels.jsonl"), joint_weight=1.0)


if __name__ == "__main__":
    worker(*map(int, sys.argv[1:4]), sys.argv[4])
