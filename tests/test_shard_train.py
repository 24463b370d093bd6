"""Sharded training, exact mode: W = 2 and 4 real gloo ranks, each reading only its own partitions, compute
what one ``OnlineTrainer`` computes on the same global batches, with the default model (pair features on):
the same global batches, samples, pair features (to the bit), losses, scores, memory rows and (within float
tolerance) model. This file is also the worker script."""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest
import torch
from shard_ranks import join, replay, tgn_state

from streamgnn.train.config import ShardConfig

BATCHES, BATCH, PARTITIONS = 16, 60, 8


def make_events():
    from streamgnn.events import EventBatch

    rng = np.random.default_rng(3)
    n = BATCHES * BATCH
    popularity = 1.0 / np.arange(1, 26) ** 1.5
    return EventBatch.from_columns(
        src=rng.integers(0, 60, n),
        dst=rng.choice(25, n, p=popularity / popularity.sum()) + 60,
        t=np.cumsum(rng.exponential(1.0, n)),
        eid=np.arange(n),
        features=rng.normal(size=(n, 4)).astype(np.float32),
    )


def make_config():
    from streamgnn.nn import TGNConfig
    from streamgnn.train import TrainConfig

    model = TGNConfig(
        memory_dim=16,
        time_dim=8,
        embedding_dim=16,
        edge_feature_dim=4,
        num_neighbors=5,
        num_layers=2,
        dropout=0.0,  # the default model otherwise: pair features (endpoint recency, walks) included
        pair_neighbors=6,
        walk_dim=16,
    )
    negatives = os.environ.get("SHARD_TEST_NEGATIVES", "random")  # historical: sources' history is sharded
    return TrainConfig(model=model, batch_size=BATCH, lr=1e-3, eval_negatives=8, seed=11, serve_every=0,
                       eval_strategy=negatives, train_negatives=negatives)  # fmt: skip


def memory_rows(trainer) -> dict[str, np.ndarray]:
    """Committed memory and last-update time of every vertex, by global id."""
    if hasattr(trainer, "states"):
        o = tgn_state(trainer).owned
        return {"gid": o.gid[: o.size].copy(), "memory": o.memory[: o.size].copy(),
                "last": o.last_update[: o.size].copy()}  # fmt: skip
    mem = trainer.link_model.model.memory
    n = trainer.store.num_nodes
    return {"gid": np.arange(n), "memory": mem.memory[:n].numpy().copy(), "last": mem.last_update[:n].numpy()}


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.shard import ShardedTrainer
    from streamgnn.train import OnlineTrainer

    torch.set_num_threads(1)
    events, config = make_events(), make_config()
    if world == 0:  # the reference: one plain OnlineTrainer over the stream in time order
        trainer = OnlineTrainer(config)
        steps = [trainer.step(b) for b in events.split(BATCH)]
        roots = np.arange(trainer.store.num_nodes)
        sub = trainer.link_model.embeddings.sampler.sample(roots, np.full(len(roots), events.t[-1] / 2))
        hop = sub.hops[0]
        model = trainer.link_model.model
        pairs = trainer.link_model.pairs.read(*pair_queries(roots, events))
        torch.save({"steps": steps, "model": model.state_dict(), "memory": memory_rows(trainer),
                    "sample": (hop.ptr, hop.nbr, hop.t), "pairs": pairs,
                    "baselines": baseline_summaries(trainer)}, out)  # fmt: skip
        return
    dist = join(rank, world, port)
    cache = int(os.environ.get("SHARD_TEST_CACHE", "20000"))  # a tiny cache evicts rows within each fetch
    config = dataclasses.replace(config, sharding=ShardConfig(num_partitions=PARTITIONS, cache_rows=cache))
    trainer = ShardedTrainer(config, dist=dist)
    steps, batches = replay(trainer, events, BATCH)
    roots = np.arange(trainer.index.num_nodes)
    embedder = tgn_state(trainer).embedder
    (sub,) = embedder.sampler.sample_sets([(roots, np.full(len(roots), events.t[-1] / 2))], key=0)
    hop = sub.hops[0]
    src, dst, t = pair_queries(roots, events)
    mine = trainer.index.owned(src) | (src < 0)  # a pair is read by its source's owner (unknown: by any)
    pairs = (np.flatnonzero(mine), trainer.link_model.pairs.read(src[mine], dst[mine], t[mine]))
    sizes = stream_bytes(ShardedTrainer(bytes_config(), dist=trainer.dist))
    torch.save({"steps": steps, "model": trainer.model.state_dict(), "memory": memory_rows(trainer),
                "batches": batches, "sample": (hop.ptr, hop.nbr, hop.t), "sizes": sizes, "pairs": pairs,
                "cache_hits": embedder.cache.hits, "baselines": baseline_summaries(trainer)},
               out)  # fmt: skip


def baseline_summaries(trainer) -> dict[str, tuple[float, float, int]]:
    """AP, MRR and scored events of each baseline over the whole run."""
    out = {}
    for name, running in trainer.baseline_metrics.items():
        running.close()
        m = running.summary()
        out[name] = (m.ap, m.mrr, m.events)
    return out


def pair_queries(nodes: np.ndarray, events) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair queries over every vertex: each against 12 random others, at the stream's middle and after its
    end; unknown vertices (-1) on both sides included."""
    rng = np.random.default_rng(4)
    src = np.repeat(np.r_[nodes, -1], 12)
    dst = np.where(rng.random(len(src)) < 0.1, -1, rng.choice(nodes, len(src)))
    t = np.where(rng.random(len(src)) < 0.5, events.t[-1] + 1.0, events.t[len(events.t) // 2])
    return src, dst, t


def sparse_stream():
    """A larger, sparser stream for byte accounting: 30,000 events over 6,000 vertices, power-law degrees."""
    from streamgnn.events import EventBatch

    rng = np.random.default_rng(8)
    n = 30_000
    weights = 1.0 / np.arange(1, 6001) ** 0.8
    ends = rng.choice(6000, (2, n), p=weights / weights.sum())
    return EventBatch.from_columns(
        src=ends[0], dst=ends[1], t=np.arange(n, dtype=np.float64), eid=np.arange(n)
    )


def bytes_config():
    config = make_config()
    model = dataclasses.replace(config.model, edge_feature_dim=0)
    return dataclasses.replace(config, model=model, sharding=ShardConfig(num_partitions=PARTITIONS))


def stream_bytes(trainer) -> dict:
    """Feed ``sparse_stream`` through ``trainer`` (store and memory only, no training): its byte accounts."""
    from streamgnn.shard import GlobalBatcher, PartitionedReplay

    events, own = sparse_stream(), trainer.ownership
    batcher = GlobalBatcher(PartitionedReplay(events, own), own, trainer.exchange, 3000)
    while (batch := batcher.next_batch()) is not None:
        trainer.step(batch, train=False, score=False)
    return {"parts": trainer.nbytes(), "store": trainer.store.nbytes(), "edges": trainer.store.num_edges,
            "nodes": trainer.store.num_nodes, "rows": tgn_state(trainer).owned.size}  # fmt: skip


@pytest.mark.parametrize(("world", "negatives", "cache"), [(2, "random", 16), (4, "historical", 20_000)])
def test_w_ranks_compute_what_one_process_computes(
    world, negatives, cache, tmp_path, spawn_ranks, monkeypatch
):
    """Random negatives: every rank works out every rank's queries. Historical ones: a source's history
    lives with its owner, so queries travel to the owners (the other path). A 16-row cache of remote rows
    evicts within every fetch; a large one keeps them all."""
    monkeypatch.setenv("SHARD_TEST_NEGATIVES", negatives)
    monkeypatch.setenv("SHARD_TEST_CACHE", str(cache))
    (reference,) = spawn_ranks(__file__, 0, tmp_path, processes=1)
    ranks = spawn_ranks(__file__, world, tmp_path)
    events = make_events()
    for r in ranks:  # the same global batches, in the same order, on every rank
        assert [b.tolist() for b in r["batches"]] == [b.eid.tolist() for b in events.split(BATCH)]
    assert_same_as_one_process(reference, ranks)
    assert_same_baselines(reference, ranks)
    assert_same_pair_features(reference["pairs"], [r["pairs"] for r in ranks])
    assert all(r["cache_hits"] > 0 for r in ranks)  # unchanged remote rows came from the cache, exactly
    check_bytes(ranks, world)


def assert_same_as_one_process(reference: dict, ranks: list[dict]) -> None:
    """Steps (losses, scores), model, memory rows (gathered from their owners) and samples of the ranks are
    the reference process's, within float tolerance."""
    one = reference["steps"]
    losses = np.array([s.loss for s in one])
    assert np.isnan(losses[0]) and losses[-1] < losses[1]  # it learns: agreement is not a frozen model's
    for r in ranks:
        for a, b in zip(one, r["steps"], strict=True):
            assert np.array_equal(a.eid, b.eid)
            np.testing.assert_allclose(b.loss, a.loss, rtol=1e-5, atol=1e-7)
            for x, y in ((a.pos, b.pos), (a.neg, b.neg), (a.rr, b.rr)):
                np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5)
        for name, value in reference["model"].items():
            other = r["model"][name]
            if (
                name.startswith("memory.")
                and name[7:] in ("memory", "last_update")
                or name.startswith("memory.msg")
            ):
                continue  # state: sharded, compared below
            torch.testing.assert_close(other, value, rtol=1e-4, atol=5e-5, msg=name)
    # memory rows, gathered from their owners: every vertex exactly once, as the one process holds it
    gid = np.concatenate([r["memory"]["gid"] for r in ranks])
    assert sorted(gid.tolist()) == reference["memory"]["gid"].tolist()
    order = np.argsort(gid)
    memory = np.concatenate([r["memory"]["memory"] for r in ranks])[order]
    last = np.concatenate([r["memory"]["last"] for r in ranks])[order]
    np.testing.assert_allclose(memory, reference["memory"]["memory"], rtol=1e-4, atol=5e-5)
    np.testing.assert_array_equal(last, reference["memory"]["last"])
    assert np.abs(reference["memory"]["memory"]).max() > 0.1  # memory moved: the comparison has teeth
    # the same samples: every vertex's recent neighbors, asked of any rank, are the one store's
    for r in ranks:
        for a, b in zip(reference["sample"], r["sample"], strict=True):
            np.testing.assert_array_equal(b, a)


def assert_same_baselines(reference: dict, ranks: list[dict]) -> None:
    """The baselines (EdgeBank, time-window EdgeBank), each rank scoring the events whose source it owns on
    the negatives it drew, score every event as one process does: the same 0/1 scores, so the same AP/MRR."""
    names = set(reference["baselines"])
    assert names == {"edgebank", "edgebank_tw"}
    for r in ranks:
        assert set(r["baselines"]) == names
        for a, b in zip(reference["steps"], r["steps"], strict=True):
            assert set(b.baselines) == set(a.baselines)  # (none for a batch nothing scores)
            for name in a.baselines:
                for x, y in zip(a.baselines[name], b.baselines[name], strict=True):
                    np.testing.assert_array_equal(y, x)
        for name in names:
            assert r["baselines"][name] == reference["baselines"][name]
    # teeth: positives seen and unseen, and the time window (the span of every rank's events) changes some
    pos = {n: np.concatenate([s.baselines[n][0] for s in reference["steps"] if s.baselines]) for n in names}
    assert set(pos["edgebank"].tolist()) == {0.0, 1.0}
    assert (pos["edgebank_tw"] != pos["edgebank"]).any()


def assert_same_pair_features(reference: tuple, ranks: list[tuple]) -> None:
    """The pair features the ranks read from their shards (v's half from v's owner) are one store's, to the
    bit, for every query (each read by its source's owner, unknown sources by every rank): the walk products
    too, though each rank holds only its vertices' walk rows."""
    history, cooc, walks = reference
    seen = np.zeros(len(history), int)
    for rows, (h, c, w) in ranks:
        np.testing.assert_array_equal(h, history[rows])
        np.testing.assert_array_equal(c, cooc[rows])
        np.testing.assert_array_equal(w, walks[rows])
        seen[rows] += 1
    assert (walks[..., 1, walks.shape[-1] // 2 + 1] > 0.5).sum() > 50  # common neighbors: the test has teeth
    known = np.isfinite(history[:, 2])  # the queries with a u->v history: the comparison has teeth
    assert known.sum() > 20 and (cooc[..., 1] > 0).sum() > 50 and np.isfinite(history[:, -1]).sum() > 50
    assert (seen >= 1).all()


def check_bytes(ranks: list[dict], world: int) -> None:
    """Each rank holds its share plus the halo, by the parts' own accounting, against one rank's bytes."""
    from streamgnn.shard import Ownership, ShardedTrainer

    whole = stream_bytes(
        ShardedTrainer(bytes_config())
    )  # one process holding everything, in the same accounting
    events = sparse_stream()
    own = Ownership(PARTITIONS, world)
    src, dst = own.rank_of(own.partition_of(events.src)), own.rank_of(own.partition_of(events.dst))
    vertices = np.unique(np.r_[events.src, events.dst])
    pairs = np.unique(np.c_[events.src, events.dst], axis=0)
    pair_rank = own.rank_of(own.partition_of(pairs[:, 0]))
    banks = [part for part in whole["parts"] if part.startswith("baseline.")]
    assert len(banks) == len(bytes_config().baselines) > 0 and all(whole["parts"][b] > 0 for b in banks)
    for r, got in enumerate(r["sizes"] for r in ranks):
        held = (src == r) | (dst == r)  # an edge between two owners is kept by both (the cut: the halo)
        owned = int((own.rank_of(own.partition_of(vertices)) == r).sum())
        assert got["edges"] == int(held.sum()) < len(events)
        touched = len(np.unique(np.r_[events.src[held], events.dst[held]]))
        # the shard is in the index's dense global ids: blocks up to the largest one, and no second id map
        assert got["rows"] == owned < touched <= got["nodes"] <= whole["nodes"]
        assert got["store"]["id_map"] == 0
        share, row_share = held.mean(), owned / len(vertices)
        for part in ("adjacency_pool", "edge_times"):  # per held edge, allocation slack included
            assert abs(got["store"][part] / whole["store"][part] - share) < 0.1, (part, share)
        assert abs(got["parts"]["memory"] / whole["parts"]["memory"] - row_share) < 0.1  # owned rows only
        assert got["parts"]["index"] == whole["parts"]["index"]  # the one replicated part
        for bank in banks:  # the pairs of the sources it owns, each once
            assert abs(got["parts"][bank] / whole["parts"][bank] - (pair_rank == r).mean()) < 0.1, bank
        assert got["parts"]["total"] < whole["parts"]["total"]


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
