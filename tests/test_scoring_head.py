"""Each model family's checkpoint scored as ``serve.scoring`` documents: the family hands the service a head
(``train.models.scoring_head``) that scores two served embeddings as the trained model does, or the
reason it cannot, and the service answers by cosine with that reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from streamgnn.events import EventBatch
from streamgnn.nn import DyGFormerConfig, TGNConfig
from streamgnn.sampling.pairs import PairFeatures
from streamgnn.serve.scoring import LinkScorer
from streamgnn.train import OnlineTrainer, TrainConfig
from streamgnn.train.checkpoint import load_tensors
from streamgnn.train.models import scoring_head

torch.set_num_threads(1)


def trained(model, tmp_path) -> OnlineTrainer:
    rng = np.random.default_rng(1)
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, 300), dst=rng.integers(20, 30, 300), t=np.arange(300.0), eid=np.arange(300)
    )
    config = TrainConfig(
        model=model,
        batch_size=100,
        lr=1e-2,
        eval_negatives=2,
        checkpoint_dir=str(tmp_path),
        checkpoint_every=1,
    )
    trainer = OnlineTrainer(config)
    trainer.fit(events.split(100), progress=False)
    return trainer


def small(variant: str, pairs: bool) -> TGNConfig:
    layers = {"jodie": 0}.get(variant)
    return TGNConfig(
        memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0, variant=variant,
        num_layers=layers, pair_features=pairs, pair_walks=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("variant", "pairs"), [("tgn", False), ("jodie", False), ("tgat", False), ("tgn", True)]
)
def test_a_tgn_checkpoint_scores_served_embeddings_as_the_trained_model(tmp_path, variant, pairs):
    trainer = trained(small(variant, pairs), tmp_path)
    tgn, store = trainer.model, trainer.store
    z = np.random.default_rng(0).standard_normal((2, tgn.out_dim)).astype(np.float32)
    src, dst = np.array([0, 3]), np.array([25, 21])
    t = float(np.nextafter(store.watermark, math.inf))
    tgn.eval()
    with torch.no_grad():
        pair = None
        if pairs:
            raw = PairFeatures.of(store, trainer.config.model).read(
                store.node_index(src), store.node_index(dst), t
            )
            pair = tgn.pair_encoder(*(torch.from_numpy(x) for x in raw))
        want = torch.sigmoid(
            tgn.predictor(torch.from_numpy(z), torch.from_numpy(z[::-1].copy()), pair)
        ).numpy()
    got, info = LinkScorer(tmp_path, store).score(z, z[::-1].copy(), src, dst)
    assert info["scorer"] == "link_predictor" and info.get("pair_features") == ("store" if pairs else None)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert np.abs(want - 0.5).max() > 1e-4  # the predictor is not constant: scoring by it is checked


def test_the_head_is_the_checkpoints_not_the_live_models(tmp_path):
    """The head's weights are the checkpoint's: changing the live model after it was written changes
    nothing the head scores."""
    trainer = trained(small("tgn", False), tmp_path)
    _, _, state = load_tensors(tmp_path)
    head = scoring_head(trainer.config, state)
    z = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    before = head.logits(z[:2], z[2:])
    with torch.no_grad():
        for p in trainer.model.predictor.parameters():
            p.add_(1.0)
    np.testing.assert_array_equal(head.logits(z[:2], z[2:]), before)
    assert not head.reads_pairs and head.dim == 8


def test_a_checkpoint_without_the_heads_weights_is_refused_and_scored_by_cosine(tmp_path):
    trainer = trained(small("tgn", False), tmp_path)
    _, _, state = load_tensors(tmp_path)
    state["model"] = {k: v for k, v in state["model"].items() if not k.startswith("predictor.")}
    with pytest.raises(RuntimeError, match="Missing key"):
        scoring_head(trainer.config, state)


def test_a_dygformer_checkpoint_has_no_head_and_is_scored_by_cosine_with_its_familys_reason(tmp_path):
    model = DyGFormerConfig(sequence_length=6, patch_size=2, channel_dim=8, time_dim=8, embedding_dim=8)
    trainer = trained(model, tmp_path)
    _, _, state = load_tensors(tmp_path)
    reason = scoring_head(trainer.config, state)
    assert isinstance(reason, str) and "neighbor sequences" in reason
    z = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    got, info = LinkScorer(tmp_path).score(z, z[::-1].copy(), [0, 3], [25, 21])
    assert info["scorer"] == "cosine" and reason in info["why"] and info["checkpoint"] in info["why"]
    cosine = z[0] @ z[1] / (np.linalg.norm(z[0]) * np.linalg.norm(z[1]))
    np.testing.assert_allclose(got, [cosine, cosine], rtol=1e-5)


def test_embeddings_of_another_width_are_scored_by_cosine_and_the_widths_named(tmp_path):
    trained(small("tgn", False), tmp_path)
    z = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    got, info = LinkScorer(tmp_path).score(z, z[::-1].copy(), [0, 3], [25, 21])
    assert info["scorer"] == "cosine" and "8-d" in info["why"] and "5-d" in info["why"]
    assert got.shape == (2,)


def test_module_example_runs():
    import doctest

    import streamgnn.train.head

    assert doctest.testmod(streamgnn.train.head).failed == 0


def test_building_a_head_leaves_the_processs_random_draws_alone(tmp_path):
    """A service in the trainer's process (the demo) loads heads while the trainer draws: it must not move
    the trainer's random numbers."""
    trainer = trained(small("tgn", True), tmp_path)
    _, _, state = load_tensors(tmp_path)
    torch.manual_seed(5)
    want = torch.rand(3)
    torch.manual_seed(5)
    scoring_head(trainer.config, state)
    assert torch.equal(torch.rand(3), want)
