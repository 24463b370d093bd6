"""TGB's protocol with TGB's code: the trainer's candidate logits it ranks with, a quick end-to-end run on the
bundled JODIE Wikipedia (negatives generated locally by TGB's generator), and TGB's files read from
``$STREAMGNN_TGB_ROOT``. Skipped, saying why, where py-tgb is not installed."""

from __future__ import annotations

import json
import os

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


def test_the_leaderboards_view_sees_the_batchs_earlier_edges_never_the_edge_or_a_later_one():
    """DyGLib_TGB's view ("event"): from a store holding the batch, each edge and its candidates score as
    from a store holding exactly the edges before its time; the stricter view ("batch") does not."""
    rng = np.random.default_rng(0)
    n = 600
    events = EventBatch.from_columns(
        src=rng.integers(0, 30, n), dst=rng.integers(30, 60, n), t=np.arange(n) // 2 * 1.0, eid=np.arange(n)
    )  # (two edges a time: a tie is not "before")
    batch = events.take(slice(500, 600))
    negs = [rng.choice(np.arange(30, 60), 5, replace=False) for _ in range(len(batch))]
    config = TrainConfig(batch_size=100, model=TGNConfig(pair_features=True), seed=0)

    def logits(rows: slice, view: str, shift: float = 0.0) -> np.ndarray:
        trainer = OnlineTrainer(config)  # the same weights, blank memory: only the store differs
        store = trainer.new_store()
        store.ingest(events.take(rows))
        trainer.reset_stream(store)
        at = EventBatch.from_columns(src=batch.src, dst=batch.dst, t=batch.t + shift, eid=batch.eid)
        return tgb_bench.candidate_logits(trainer, at, negs, view)

    held = logits(slice(0, n), "event")
    leaked = logits(slice(0, n), "event", shift=0.5)  # what the edge's own time, held, would give
    stricter = logits(slice(0, n), "batch")
    for i in (1, 40, 99):
        before = logits(slice(0, int(np.searchsorted(events.t, batch.t[i]))), "event")
        np.testing.assert_allclose(before[i], held[i], rtol=1e-5, atol=1e-6)
        assert not np.allclose(leaked[i], held[i], rtol=1e-3)  # the edge itself would count
    np.testing.assert_allclose(stricter, logits(slice(0, 500), "batch"), rtol=1e-5, atol=1e-6)
    assert not np.allclose(stricter[40:], held[40:], rtol=1e-3)  # the batch's earlier edges count
    with pytest.raises(ConfigError, match="view"):
        tgb_bench.candidate_logits(OnlineTrainer(config), batch, negs, "edge")


tgb = pytest.importorskip("tgb", reason="py-tgb is not installed (pip install 'streamgnn[bench]')")


def test_quick_tgb_run_ranks_every_test_edge_against_every_other_page(capsys, monkeypatch):
    monkeypatch.delenv(tgb_bench.ROOT_ENV, raising=False)
    assert quality.main(["--quick", "--json", "--events", "1500", "--protocol", "tgb"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 < result["mrr_tgb_wiki"] <= 1 and 0 < result["mrr_tgb_batch_wiki"] <= 1
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


def _write_tgb_wiki(root, events: EventBatch) -> None:
    """TGB's tgbl-wiki files as TGB ships them, for ``events``: the JODIE-format edge list (items counted
    from 0; TGB shifts them past the users) and the test negatives made by TGB's generator on TGB's split."""
    import torch
    from tgb.linkproppred.dataset import LinkPropPredDataset
    from tgb.linkproppred.negative_generator import NegativeEdgeGenerator
    from tgb.utils.info import PROJ_DIR
    from torch_geometric.data import TemporalData

    folder = root / "tgbl_wiki"
    folder.mkdir()
    lines = ["user_id,item_id,timestamp,state_label,f0"]
    lines += [
        f"{s},{d - events.dst.min()},{int(t)},0,0.0"
        for s, d, t in zip(events.src, events.dst, events.t, strict=True)
    ]
    (folder / "tgbl-wiki_edgelist_v2.csv").write_text("\n".join(lines) + "\n")
    data = LinkPropPredDataset("tgbl-wiki", root=os.path.relpath(root, PROJ_DIR), download=False)
    full, test = data.full_data, data.test_mask

    def part(mask: np.ndarray) -> TemporalData:
        cols = {"src": "sources", "dst": "destinations", "t": "timestamps"}
        return TemporalData(**{k: torch.from_numpy(full[c][mask]) for k, c in cols.items()})

    dst = full["destinations"]
    generator = NegativeEdgeGenerator(
        "tgbl-wiki",
        int(dst.min()),
        int(dst.max()),
        num_neg_e=20,
        strategy="hist_rnd",
        historical_data=part(~test),
    )
    generator.generate_negative_samples(part(test), "test", str(folder))
    (folder / "tgbl-wiki_test_ns.pkl").rename(folder / "tgbl-wiki_test_ns_v2.pkl")


def test_tgb_files_under_the_root_are_read_with_tgbs_split_and_negatives(tmp_path, capsys, monkeypatch):
    _write_tgb_wiki(tmp_path, quality.prepare("jodie_wikipedia", 1500))
    monkeypatch.setenv(tgb_bench.ROOT_ENV, str(tmp_path))
    assert quality.main(["--quick", "--json", "--protocol", "tgb", "--tgb-datasets", "tgbl-wiki"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["source_tgb_wiki"] == f"TGB's files under {tmp_path}"
    run = result["runs"][0]
    assert run["events"] == 1500  # the files' own events (--quick's prefix applies to bundled streams)
    assert run["negatives_min"] == run["negatives_max"] == 20  # TGB's 20 per edge, not every page
    assert 0 < result["mrr_tgb_wiki"] <= 1


def test_groups_split_the_test_edges_and_their_mrr(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(tgb_bench.ROOT_ENV, raising=False)
    argv = ["--quick", "--json", "--events", "1500", "--protocol", "tgb", "--tgb-groups", str(tmp_path)]
    assert quality.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    run = result["runs"][0]
    groups, saved = run["groups"], np.load(run["ranks_file"])
    assert groups["all"]["edges"] == run["test_events"] == len(saved["ours"]) == len(saved["rows"])
    assert groups["repeat"]["edges"] + groups["new"]["edges"] == run["test_events"]
    # the per-edge ranks are the ones TGB's Evaluator averaged into the stricter view's MRR
    assert (
        groups["all"]["ours"]
        == pytest.approx(result["mrr_tgb_batch_wiki"])
        == pytest.approx(saved["ours"].mean())
    )
    assert 0 < groups["all"]["edgebank"] < groups["repeat"]["edgebank"] <= 1
