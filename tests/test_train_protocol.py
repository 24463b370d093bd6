"""The trainer's model seam: a model that is not TGN plugs into the unchanged loop (``LinkModel``)."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

import streamgnn.train.negatives
import streamgnn.train.serving
import streamgnn.train.tgn_model
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.train import LinkModel, OnlineTrainer, StepInput, TrainConfig

torch.set_num_threads(1)


class Popularity:
    """Scores a destination by how often it was a destination before: a real (if weak) link predictor."""

    trainable = False
    out_dim = None

    def __init__(self) -> None:
        self.degree = np.zeros(0)
        self.store = None
        self.store_sizes: list[int] = []  # edges the store held at each prepare

    def attach(self, store) -> None:
        self.store = store

    def prepare(self, batch: StepInput, candidates, train_neg):
        self.store_sizes.append(self.store.num_edges)
        return batch, candidates

    def _deg(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        ok = (ids >= 0) & (ids < len(self.degree))
        return np.where(ok, self.degree[np.where(ok, ids, 0)], 0.0)

    def score(self, prepared):
        batch, cand = prepared
        s = batch.rows
        ap = np.column_stack([self._deg(batch.dst[s]), self._deg(cand.neg[s, 0])])
        ranked = np.column_stack([self._deg(batch.dst[s]), self._deg(cand.neg[s])]) if cand.rank else None
        return ap, ranked

    def train(self, prepared, keep, joint) -> float:
        raise AssertionError("the loop trains only trainable models")

    def observe(self, src, dst, t, feat) -> None:
        if len(dst):
            self.degree = np.pad(self.degree, (0, max(0, int(dst.max()) + 1 - len(self.degree))))
            np.add.at(self.degree, dst, 1.0)

    def embed(self, nodes, t, blank, step):
        raise AssertionError("a model without out_dim is never asked to serve")

    def embedded(self, prepared) -> None:
        return None  # (no embeddings)

    def reset_state(self) -> None:
        self.degree = np.zeros(0)

    def nbytes(self) -> dict[str, int]:
        return {"degree": self.degree.nbytes}

    def state(self):
        return self.degree.copy()

    def load_state(self, state) -> None:
        self.degree = state.copy()

    def state_dict(self) -> dict:
        return {"degree": torch.from_numpy(self.degree.copy())}

    def load_state_dict(self, state: dict) -> None:
        self.degree = state["degree"].numpy().copy()


def popular_stream(n: int = 600, seed: int = 0) -> EventBatch:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 21) ** 2
    dst = rng.choice(20, n, p=p / p.sum()) + 100
    return EventBatch.from_columns(
        src=rng.integers(0, 50, n), dst=dst, t=np.arange(n, dtype=float), eid=np.arange(n)
    )


def test_a_non_tgn_model_runs_in_the_unchanged_loop(tmp_path):
    events = popular_stream()
    model = Popularity()
    assert isinstance(model, LinkModel)
    cfg = TrainConfig(
        batch_size=50, eval_negatives=5, window_events=100, checkpoint_dir=str(tmp_path), checkpoint_every=3
    )
    trainer = OnlineTrainer(cfg, link_model=model)
    assert trainer.table is None and trainer.model is None  # nothing to serve, no torch module
    result = trainer.fit(events.take(slice(0, 400)).split(50), progress=False)
    # prepared before the store held the batch: 0, 50, 100, ... edges
    assert model.store_sizes == list(range(50, 400, 50))  # (the first batch has no negatives yet)
    assert result.metrics.ap > 0.8 and result.metrics.mrr > 0.5  # popularity predicts this stream
    # the checkpoint carries the model's own state; resuming continues with it
    resumed = OnlineTrainer.resume(tmp_path, link_model=Popularity())
    np.testing.assert_array_equal(resumed.link_model.degree, model.degree)
    assert resumed.steps == trainer.steps == 8


@pytest.mark.parametrize(
    "module",
    [
        streamgnn.train.negatives,
        streamgnn.train.serving,
        streamgnn.train.tgn_model,
        streamgnn.train.tgn_local,
    ],
)
def test_module_examples_run(module):
    assert doctest.testmod(module).failed == 0


def test_id_range_training_negatives_cover_the_id_range_unseen_ids_included():
    from streamgnn.store import TemporalGraphStore
    from streamgnn.train.negatives import TRAIN, StreamNegatives

    store = TemporalGraphStore()
    store.ingest(EventBatch.from_columns(src=[1, 2, 3], dst=[10, 20, 30], t=[0.0, 1.0, 2.0], eid=[0, 1, 2]))
    seen, spread = StreamNegatives(seed=0), StreamNegatives(seed=0, pool="id_range")
    seen.rebuild(store)
    spread.rebuild(store)
    src = store.node_index(np.array([1] * 2000))
    dst = store.node_index(np.array([10] * 2000))
    drawn = spread.draw(src, dst, num=1, strategy="random", step=3, purpose=TRAIN)[:, 0]
    known = drawn[drawn >= 0]
    assert set(store.external_ids(known).tolist()) == {10, 20, 30}  # the ids in [10, 30] the store knows
    assert 0.8 < np.mean(drawn < 0) < 0.95  # 18 of the 21 ids are unknown: blank nodes
    np.testing.assert_array_equal(
        drawn, spread.draw(src, dst, num=1, strategy="random", step=3, purpose=TRAIN)[:, 0]
    )
    assert (seen.draw(src, dst, num=1, strategy="random", step=3, purpose=TRAIN) >= 0).all()
    named = TemporalGraphStore()
    named.ingest(EventBatch.from_columns(src=["a"], dst=["b"], t=[0.0], eid=[0]))
    with pytest.raises(ConfigError, match="integer node ids"):
        StreamNegatives(seed=0, pool="id_range").rebuild(named)
    with pytest.raises(ConfigError, match="train_negatives='random'"):
        TrainConfig(train_negative_pool="id_range", train_negatives="historical")
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="train_negative_fraction"):
            TrainConfig(train_negatives="historical", train_negative_fraction=bad)


def test_seen_blank_negatives_are_blank_at_the_batchs_rate_of_positives_to_unseen_destinations():
    from streamgnn.store import TemporalGraphStore
    from streamgnn.train.negatives import EVAL, TRAIN, StreamNegatives

    store = TemporalGraphStore()
    store.ingest(EventBatch.from_columns(src=[1, 2, 3], dst=[10, 20, 30], t=[0.0, 1.0, 2.0], eid=[0, 1, 2]))
    negatives = StreamNegatives(seed=0, pool="seen_blank")
    negatives.rebuild(store)
    src = store.node_index(np.array([1] * 2000))
    known = store.node_index(np.array([10] * 2000))

    def draw(dst, purpose=TRAIN):
        return negatives.draw(src, dst, num=1, strategy="random", step=3, purpose=purpose)

    assert set(store.external_ids(draw(known)[:, 0]).tolist()) == {20, 30}  # no new destination: seen only
    quarter = known.copy()
    quarter[::4] = -1  # a quarter of the positives go to nodes the store does not know
    drawn = draw(quarter)[:, 0]
    assert 0.2 < np.mean(drawn < 0) < 0.3
    assert set(store.external_ids(drawn[drawn >= 0]).tolist()) == {20, 30}
    np.testing.assert_array_equal(drawn, draw(quarter)[:, 0])  # keyed by the step: the same draw again
    assert (draw(quarter, EVAL) >= 0).all()  # evaluation negatives stay real nodes


def test_a_config_saved_before_the_time_and_pool_options_resumes_as_it_was():
    saved = TrainConfig().to_dict()
    for key in ("neighbor_time", "time_init"):
        del saved["model"][key]
    saved["model"]["merge"] = "mlp"  # a switch these configs named, since removed
    del saved["baselines"], saved["edgebank_window_ratio"], saved["train_negative_pool"]
    del saved["train_negative_fraction"]
    old = TrainConfig.from_checkpoint(saved)
    assert (old.model.neighbor_time, old.model.time_init) == ("query", "geometric")
    assert old.train_negative_pool == "seen"
    assert old.train_negative_fraction == 1.0  # every negative from train_negatives' strategy, as then
    assert (TrainConfig().model.neighbor_time, TrainConfig().model.time_init) == ("last_update", "uniform")
    assert TrainConfig().train_negative_pool == "seen_blank"
    assert TrainConfig.from_checkpoint(TrainConfig().to_dict()) == TrainConfig()  # a new one round-trips


def test_id_range_negatives_the_store_does_not_know_count_as_blank_nodes_in_the_loss():
    """PyG's loader trains against ids with no history yet; with ``train_negative_pool="id_range"`` such a
    draw (-1: unknown to the store) is a blank-node negative, where -1 from the seen pool means none."""
    from streamgnn.nn import TGNConfig
    from streamgnn.store import TemporalGraphStore

    store = TemporalGraphStore()
    store.ingest(EventBatch.from_columns(src=[0, 1], dst=[1, 2], t=[0.0, 1.0], eid=[0, 1]))
    t = np.array([2.0, 2.0])
    view = StepInput(np.array([0, 1]), np.array([1, 2]), t, t, store.num_nodes, np.zeros(2), 0, 0)
    losses = {}
    for pool in ("seen", "id_range", "seen_blank"):
        torch.manual_seed(0)
        model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=2)
        lm = streamgnn.train.tgn_model.TGNLinkModel(TrainConfig(model=model, train_negative_pool=pool))
        lm.attach(store)
        losses[pool] = lm.train(lm.prepare(view, None, np.array([-1, -1])), np.ones(2, bool), ())
    # The same model and positives: only the blank negatives' mean BCE (about log 2 untrained) differs.
    assert losses["id_range"] - losses["seen"] > 0.3
    assert losses["seen_blank"] == losses["id_range"]


def test_every_model_reports_the_bytes_of_its_stream_state_by_part():
    from streamgnn.nn import DyGFormerConfig, TGNConfig

    events = popular_stream(300)
    tgn = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, walk_dim=8)
    trainer = OnlineTrainer(TrainConfig(model=tgn, batch_size=100, eval_negatives=3))
    for batch in events.split(100):
        trainer.step(batch)
    lm = trainer.link_model
    memory = sum(b.nbytes for b in lm.model.memory.buffers())  # rows, last updates, pending messages
    assert lm.nbytes() == {"memory": memory, "walks": lm.pairs.walks.nbytes()} and memory > 0
    assert lm.pairs.walks.nbytes() > 0  # the walk rows of the stream's vertices
    (bank,) = (b for n, b in trainer.baselines.items() if n == "edgebank")
    assert list(bank.nbytes()) == ["pairs"] and bank.nbytes()["pairs"] >= 16 * len(np.unique(events.src))
    dyg = OnlineTrainer(TrainConfig(model=DyGFormerConfig(sequence_length=4, patch_size=2, channel_dim=4,
                                                          time_dim=4, embedding_dim=4)))  # fmt: skip
    assert dyg.link_model.nbytes() == {}  # its state is the store


def test_step_embeddings_find_each_node_s_row_at_or_before_its_time():
    """``StepEmbeddings.find``: a row of the same node, the latest embedded at or before the asked time,
    else its earliest (every row is read from the state before the batch); -1 for a node it has none of
    (the blank row's -1 is a node like any other)."""
    from streamgnn.train.step import StepEmbeddings

    nodes = np.array([5, 3, 5, -1, 3, 9])
    t = np.array([2.0, 1.0, 4.0, 1.0, 1.0, 7.0])
    rows = StepEmbeddings(nodes, t, np.arange(6, dtype=np.float32)[:, None], blank=10)
    asked = np.array([5, 5, 5, 5, 3, -1, 7, 9, 9])
    at = np.array([1.0, 2.0, 3.0, 9.0, 1.0, 0.0, 1.0, 1.0, 8.0])
    got = rows.find(asked, at)
    assert got[:4].tolist() == [0, 0, 0, 2] and got[4] in (1, 4) and got[5:].tolist() == [3, -1, 5, 5]
    assert (nodes[got[got >= 0]] == asked[got >= 0]).all()
    assert StepEmbeddings.none(10).find(asked, at).tolist() == [-1] * len(asked)
