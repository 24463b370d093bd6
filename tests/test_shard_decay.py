"""Time-decayed pair features over shards, exact mode: W = 2 and 4 real gloo ranks, each holding only its
vertices' events, answer every pair query with one store's decayed features (``TGNConfig.pair_decayed``),
across uneven batch cuts, shared time stamps, a late batch, unknown vertices and queries before the stream;
a lone rank answers as one store in both modes, and trains and scores with them. The stream and queries
are ``test_shard_walks``'. This file is also the worker script."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import torch
from shard_ranks import join
from test_shard_walks import CUTS, assert_ranks_answer_as_one, batches, make_events, queries, sharded

from streamgnn.train.config import ShardConfig

STEPS, DECAYED = range(len(CUTS) - 1), 3  # every batch; the decayed features' part of the pair features


def make_config():
    from streamgnn.nn import TGNConfig
    from streamgnn.train import TrainConfig

    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_neighbors=4,
                      walk_dim=8, walk_decays=(0.0, 0.05), pair_decays=(5.0, 40.0),
                      pair_decayed=True)  # fmt: skip
    return TrainConfig(model=model, batch_size=50, serve_every=0, sharding=ShardConfig(num_partitions=8))


def reference() -> list[np.ndarray]:
    """One store's decayed features (the last part ``PairFeatures.read`` gives), asked the same queries
    after each batch."""
    from streamgnn.sampling.pairs import PairFeatures
    from streamgnn.store import TemporalGraphStore

    store = TemporalGraphStore()
    pairs = PairFeatures.of(store, make_config().model)
    out = []
    for step, batch in enumerate(batches(make_events())):
        store.ingest(batch)
        out.append(pairs.read(*queries(step, store.num_nodes, float(store.edges().t.max())))[DECAYED])
    return out


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.shard import ShardedTrainer

    torch.set_num_threads(1)
    trainer = ShardedTrainer(make_config(), dist=join(rank, world, port))
    torch.save({"decayed": sharded(trainer, STEPS, make_events(), DECAYED)}, out)


def test_every_rank_answers_as_one_store(tmp_path, spawn_ranks):
    want = reference()  # one store, here: its features need no rank
    taus = 2  # the config's pair_decays: common neighbors (column 4 of each group) and counts must occur
    assert sum(int((w[:, [4 + 7 * c for c in range(taus)]] > 0).sum()) for w in want) > 50
    assert sum(int((w[:, [7 * c for c in range(taus)]] > 0).sum()) for w in want) > 20
    for world in (2, 4):
        ranks = spawn_ranks(__file__, world, tmp_path)
        assert_ranks_answer_as_one(ranks, "decayed", want, world)


def test_a_lone_rank_answers_as_one_store_in_both_modes():
    from streamgnn.shard import ShardedTrainer

    want, events = reference(), make_events()
    for mode in ("exact", "comm_free"):
        config = make_config()
        trainer = ShardedTrainer(replace(config, sharding=replace(config.sharding, mode=mode)))
        for (rows, got), expected in zip(sharded(trainer, STEPS, events, DECAYED), want, strict=True):
            assert len(rows) == len(expected)
            np.testing.assert_array_equal(got, expected, err_msg=mode)


def test_a_sharded_model_trains_and_scores_on_the_decayed_features():
    """The exact reader's parts reach the link model's pair encoder in the order it reads them: the
    sharded trainer trains and scores with them (finite loss and logits)."""
    from streamgnn.shard import ShardedTrainer

    trainer, events = ShardedTrainer(make_config()), make_events()
    assert trainer.link_model.pairs.exchange is not None  # exact mode
    results = [trainer.step(batch, train=True, score=True) for batch in batches(events)[:5]]
    parts = trainer.link_model.pairs.read(
        *queries(4, trainer.index.num_nodes, float(events.t[: CUTS[5]].max()))
    )
    assert len(parts) == DECAYED + 1  # history, co-occurrence, walk products, decayed features
    scored = [r for r in results if len(r.pos)]  # (the first batch has nothing to learn from yet)
    assert sum(len(r.pos) for r in scored) > 100
    for r in scored:
        assert np.isfinite(r.loss) and np.isfinite(r.pos).all() and np.isfinite(r.neg).all()


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
