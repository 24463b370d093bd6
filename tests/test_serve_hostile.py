"""What the service's checkpoint folder can hold, as ``/score`` meets it: nothing yet, or a newest checkpoint
that cannot be read. The answer is cosine with the reason in ``"why"`` (never a 500, never a silent
cosine), the unusable checkpoint is logged once and not read again, and the next good one is used; and
any pair a client sends through the pair-feature scorer over the trainer's store. Over real HTTP against a
real topic, and at the scorer for the damage cases."""

from __future__ import annotations

import json
import logging
import math
import os
from urllib.parse import urlencode

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_serve_edge import ServiceErrors, answer, caught_up, publish, request, strict_json

from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.serve import EmbeddingService, ServeConfig
from streamgnn.serve.scoring import LinkScorer
from streamgnn.train import OnlineTrainer, TrainConfig

torch.set_num_threads(1)


def test_a_service_without_a_usable_checkpoint_says_why_it_scores_by_cosine(
    kafka_bootstrap, make_topic, tmp_path
):
    topic = make_topic(1, compacted=True)
    vectors = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    publish(kafka_bootstrap, topic, np.arange(4), vectors)
    (tmp_path / "ckpt").mkdir()
    config = ServeConfig(port=0, log_every_s=0, checkpoint_dir=str(tmp_path / "ckpt"))
    with EmbeddingService(config, kafka_bootstrap, topic) as service:
        caught_up(service, 4)
        status, got = answer(service.url, "/score?src=0&dst=1")
    assert status == 200 and got["scorer"] == "cosine" and "no usable checkpoint" in got["why"]
    cosine = vectors[0] @ vectors[1] / (np.linalg.norm(vectors[0]) * np.linalg.norm(vectors[1]))
    assert math.isclose(got["scores"][0]["score"], float(cosine), rel_tol=1e-5)


def test_a_damaged_newest_checkpoint_is_named_logged_once_and_passed_over_for_the_next(tmp_path, caplog):
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_features=False)
    config = TrainConfig(
        model=model, batch_size=50, eval_negatives=2, checkpoint_dir=str(tmp_path), checkpoint_every=1
    )
    rng = np.random.default_rng(0)
    events = EventBatch.from_columns(
        src=rng.integers(0, 9, 150), dst=rng.integers(10, 19, 150), t=np.arange(150.0), eid=np.arange(150)
    )
    trainer = OnlineTrainer(config)
    trainer.fit(events.take(np.arange(100)).split(50), progress=False)
    state = tmp_path / "ckpt-000002" / "state.npy"
    damaged = bytearray(state.read_bytes())
    damaged[-10] ^= 0xFF  # the weights no longer match the manifest's digest
    state.write_bytes(bytes(damaged))
    scorer = LinkScorer(tmp_path)
    z = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="streamgnn.serve.scoring"):
        answers = [scorer.score(z[:1], z[1:], [1], [11])[1] for _ in range(3)]
    assert all(a["scorer"] == "cosine" and "cannot use checkpoint ckpt-000002" in a["why"] for a in answers)
    assert len(caplog.records) == 1 and "ckpt-000002" in caplog.records[0].getMessage()
    trainer.fit(events.take(np.arange(100, 150)).split(50), progress=False)  # the next checkpoint is good
    _, info = scorer.score(z[:1], z[1:], [1], [11])
    assert info == {"scorer": "link_predictor", "checkpoint": "ckpt-000003"}


@pytest.fixture(scope="module")
def scoring_service(kafka_bootstrap, tmp_path_factory):
    """The demo's shape: a service in the trainer's process, scoring by a pair-feature checkpoint over the
    trainer's store, reading the embeddings the trainer published (nodes 0..29)."""
    from streamgnn.connectors.kafka import create_topic
    from streamgnn.connectors.sink import KafkaSink

    ckpt = tmp_path_factory.mktemp("ckpt")
    topic = f"hostile-score-{os.getpid()}"
    create_topic(kafka_bootstrap, topic, 1, compacted=True)
    rng = np.random.default_rng(1)
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, 300), dst=rng.integers(20, 30, 300), t=np.arange(300.0), eid=np.arange(300)
    )
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_walks=False)
    config = TrainConfig(
        model=model, batch_size=100, eval_negatives=2, checkpoint_dir=str(ckpt), checkpoint_every=1
    )
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        trainer = OnlineTrainer(config, sink=sink)
        trainer.fit(events.split(100), progress=False)
    served = ServeConfig(port=0, log_every_s=0, checkpoint_dir=str(ckpt))
    with EmbeddingService(served, kafka_bootstrap, topic, store=trainer.store) as service:
        caught_up(service, 30)
        yield service


known = st.integers(0, 29)  # ids with an embedding: half of the draws, so that many answers score
hostile = st.one_of(
    st.integers(-3, 33),
    st.integers(),
    st.text(max_size=6),
    st.floats(),
    st.booleans(),
    st.none(),
    st.just(2**63),
)
node = known | hostile
pair = st.lists(node, min_size=2, max_size=2) | st.lists(node, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(pair, max_size=3), post=st.booleans())
def test_no_pair_makes_the_pair_feature_scorer_fail(scoring_service, pairs, post):
    """Whatever pairs a client sends, ``/score`` through the pair-feature scorer answers 2xx (every score
    a probability, from the predictor over the store) or a 4xx naming the problem; never a 500 or a log."""
    if post:
        body = json.dumps({"pairs": pairs}).encode()
        target = "/score"
    else:
        first = (pairs[0] + [None, None])[:2] if pairs else [None, None]
        body, target = None, "/score?" + urlencode({"src": str(first[0]), "dst": str(first[1])})
    with ServiceErrors() as logged:
        status, headers, raw = request(scoring_service.url, target, body, method="POST" if post else "GET")
    assert status < 500 and headers["content-type"].startswith("application/json"), (status, raw[:300])
    got = strict_json(raw)
    event(f"{'POST' if post else 'GET'} {status}")
    if status == 200:
        assert (got["scorer"], got["pair_features"]) == ("link_predictor", "store"), got
        assert all(0.0 <= row["score"] <= 1.0 for row in got["scores"]), got
    else:
        assert status >= 400 and isinstance(got["error"], str) and got["error"], got
    assert not logged.records, [r.getMessage() for r in logged.records]
