"""What the service's checkpoint folder can hold, as ``/score`` meets it: nothing yet, or a newest checkpoint
that cannot be read. The answer is cosine with the reason in ``"why"`` (never a 500, never a silent
cosine), the unusable checkpoint is logged once and not read again, and the next good one is used. Over
real HTTP against a real topic, and at the scorer for the damage cases."""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
from test_serve_edge import answer, caught_up, publish

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
