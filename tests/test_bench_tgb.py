"""TGB's protocol with TGB's code: the trainer's candidate logits it ranks with, a quick end-to-end run on the
bundled JODIE Wikipedia (negatives generated locally by TGB's generator), and TGB's files read from
``$STREAMGNN_TGB_ROOT``. Skipped, saying why, where py-tgb is not installed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamgnn.benchmarks import quality
from streamgnn.benchmarks import tgb as tgb_bench
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.train import OnlineTrainer, TrainConfig


def _stream(n: int = 600) -> EventBatch:
    rng = np.random.default_rng(0)
    return EventBatch.from_columns(
        src=rng.integers(0, 30, n), dst=rng.integers(30, 60, n), t=np.arange(n, dtype=float), eid=np.arange(n)
    )


def test_candidate_logits_are_each_pairs_own_score():
    events = _stream()
    trainer = OnlineTrainer(TrainConfig(batch_size=100, model=TGNConfig(pair_features=True), seed=0))
    for batch in events.take(slice(0, 500)).split(100):
        trainer.step(batch)
    b = events.take(slice(500, 520))
    cands = np.stack([np.arange(30, 60)] * len(b))
    cands[:, -3:] = -1  # rows with fewer candidates: padding
    logits = trainer.score_pairs(b.src, b.dst, b.t, candidates=cands)
    assert logits.shape == (20, 31) and np.isnan(logits[:, -3:]).all()
    np.testing.assert_allclose(logits[:, 0], trainer.score_pairs(b.src, b.dst, b.t), rtol=1e-5, atol=1e-6)
    for j in (0, 7, 26):  # a candidate's logit is the score of the edge to it
        alone = trainer.score_pairs(b.src, cands[:, j], b.t)
        np.testing.assert_allclose(logits[:, 1 + j], alone, rtol=1e-5, atol=1e-6)


tgb = pytest.importorskip("tgb", reason="py-tgb is not installed (pip install 'streamgnn[bench]')")


def test_quick_tgb_run_ranks_every_test_edge_against_every_other_page(capsys, monkeypatch):
    monkeypatch.delenv(tgb_bench.ROOT_ENV, raising=False)
    assert quality.main(["--quick", "--json", "--events", "1500", "--protocol", "tgb"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 < result["mrr_tgb_wiki"] <= 1
    assert "bundled" in result["source_tgb_wiki"]
    events = quality.prepare("jodie_wikipedia", 1500)
    pages = int(events.dst.max() - events.dst.min() + 1)  # the id range TGB's generator draws from
    run = result["runs"][0]
    # every other page: the positive's own (and any same-time positive of its source) left out
    assert pages - 3 <= run["negatives_min"] <= run["negatives_max"] == pages - 1
    assert result["leaderboard_wiki_tpnet"] == 0.827
    assert result["gap_to_leader_tgb_wiki"] == pytest.approx(0.827 - result["mrr_tgb_wiki"])


def test_a_dataset_neither_bundled_nor_on_disk_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(tgb_bench.ROOT_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match="tgbl-coin.*tgbl_coin does not exist"):
        quality.main(["--quick", "--json", "--protocol", "tgb", "--tgb-datasets", "tgbl-coin"])
    monkeypatch.delenv(tgb_bench.ROOT_ENV)
    with pytest.raises(ConfigError, match="STREAMGNN_TGB_ROOT is not set"):
        quality.main(["--quick", "--json", "--protocol", "tgb", "--tgb-datasets", "tgbl-coin"])
