"""The DyGFormer-style model under the sharded trainer, W = 2 real gloo ranks each reading its own partitions.
Exact mode computes what one ``OnlineTrainer`` computes on the same global batches (each vertex's sequence
read from its owner): the same sequences, scores, losses and served rows, the same model (within float
tolerance, dropout 0); a run checkpointed half way and resumed ends bit for bit where the uninterrupted one
does. Communication-free mode exchanges no sequence: an owned vertex's is whole, another's holds only its
edges with this rank's vertices. This file is also the worker script."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from shard_ranks import join, replay

BATCHES, BATCH, PARTITIONS = 12, 60, 8


def make_events():
    """Power-law destinations; in batches 4 and 5 every source is rank 0's at W = 2, so rank 1 scores and
    trains nothing there, and still enters every exchange."""
    from streamgnn.events import EventBatch

    rng = np.random.default_rng(3)
    n = BATCHES * BATCH
    popularity = 1.0 / np.arange(1, 26) ** 1.5
    src = rng.integers(0, 60, n)
    rank0 = np.flatnonzero(rank_of(np.arange(60)) == 0)
    src[4 * BATCH : 6 * BATCH] = rng.choice(rank0, 2 * BATCH)
    return EventBatch.from_columns(
        src=src,
        dst=rng.choice(25, n, p=popularity / popularity.sum()) + 60,
        t=np.cumsum(rng.exponential(1.0, n)),
        eid=np.arange(n),
        features=rng.normal(size=(n, 4)).astype(np.float32),
    )


def rank_of(ids: np.ndarray) -> np.ndarray:
    """The rank owning each vertex at W = 2."""
    from streamgnn.shard import Ownership

    own = Ownership(PARTITIONS, 2)
    return own.rank_of(own.partition_of(ids))


def make_config():
    from streamgnn.nn import DyGFormerConfig
    from streamgnn.train import TrainConfig

    model = DyGFormerConfig(
        sequence_length=6, patch_size=2, channel_dim=8, time_dim=8, embedding_dim=8, edge_feature_dim=4,
        dropout=0.0,
    )  # fmt: skip
    return TrainConfig(model=model, batch_size=BATCH, lr=1e-3, eval_negatives=8, seed=11, serve_every=4)


def sequences(model, n: int, t: float) -> tuple[np.ndarray, ...]:
    """Every vertex's sequence at ``t`` as the model reads it (from any rank: a collective when exact)."""
    sub = model.neighbors.sample(np.arange(n), np.full(n, t), key=0)
    hop = sub.hops[0]
    return hop.ptr, hop.nbr, hop.t, hop.edge_features


def served(table, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The served rows of ``ids`` (external) that the table holds, with their times."""
    ids = ids[table.known(ids)]
    return ids, *table.read(ids)


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.shard import PartitionedReplay, ShardConfig, ShardedTrainer
    from streamgnn.shard.serving import owned_vertices
    from streamgnn.train import OnlineTrainer

    torch.set_num_threads(1)
    events, config = make_events(), make_config()
    middle = events.t[len(events.t) // 2]
    if world == 0:  # the reference: one plain OnlineTrainer over the stream in time order
        trainer = OnlineTrainer(config)
        steps = [trainer.step(b) for b in events.split(BATCH)]
        seqs = sequences(trainer.link_model, trainer.store.num_nodes, middle)
        rows = served(trainer.table, np.unique(np.r_[events.src, events.dst]))
        torch.save({"steps": steps, "model": trainer.link_model.state_dict(), "sequences": seqs,
                    "served": rows}, out)  # fmt: skip
        return
    dist = join(rank, world, port)
    exact = dataclasses.replace(config, sharding=ShardConfig(num_partitions=PARTITIONS))
    trainer = ShardedTrainer(exact, dist=dist)
    steps, _ = replay(trainer, events, BATCH)
    n = trainer.index.num_nodes
    seqs = sequences(trainer.link_model, n, middle)
    sent = dict(trainer.exchange.sent)
    mine = served(trainer.table, trainer.index.external(owned_vertices(trainer.index)))
    # checkpointed after half the stream, resumed by new trainers (the same ranks), run to the end
    ckpt = Path(out).parent / "ckpt"
    cut = dataclasses.replace(exact, checkpoint_dir=str(ckpt), checkpoint_every=5)
    first = ShardedTrainer(cut, dist=dist)
    first.fit(
        PartitionedReplay(events, first.ownership, chunk=37), max_events=len(events) // 2, progress=False
    )
    resumed = ShardedTrainer.resume(None, config=cut, dist=dist)
    offsets = resumed.start_offsets
    resumed_steps = resumed.steps
    resumed.fit(PartitionedReplay(events, resumed.ownership, chunk=37, start_offsets=offsets), progress=False)
    # communication-free
    free = dataclasses.replace(config, sharding=ShardConfig(num_partitions=PARTITIONS, mode="comm_free"))
    local = ShardedTrainer(free, dist=dist)
    result = local.fit(PartitionedReplay(events, local.ownership, chunk=37), progress=False)
    free = (sequences(local.link_model, n, middle), dict(local.exchange.calls), result.metrics.ap)
    resumed_run = (resumed_steps, resumed.steps, resumed.link_model.state_dict())
    torch.save({"steps": steps, "model": trainer.link_model.state_dict(), "sequences": seqs, "sent": sent,
                "served": mine, "owned": local.index.owned(np.arange(n)), "nbytes": trainer.nbytes(),
                "resumed": resumed_run, "free": free}, out)  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory, spawn_ranks) -> tuple[dict, list[dict]]:
    """The reference process's results and each of the two ranks' (one run of each serves every test)."""
    tmp = tmp_path_factory.mktemp("dygshard")
    (reference,) = spawn_ranks(__file__, 0, tmp, processes=1)
    return reference, spawn_ranks(__file__, 2, tmp)


def test_sharded_dygformer_computes_what_one_process_computes(runs):
    reference, ranks = runs
    one = reference["steps"]
    losses = np.array([s.loss for s in one])
    assert np.isnan(losses[0]) and losses[-1] < losses[1]  # it learns: agreement is not a frozen model's
    for r in ranks:
        for a, b in zip(one, r["steps"], strict=True):
            assert np.array_equal(a.eid, b.eid)
            np.testing.assert_allclose(b.loss, a.loss, rtol=1e-5, atol=1e-7)
            for x, y in ((a.pos, b.pos), (a.neg, b.neg), (a.rr, b.rr)):
                np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5)
        # the model, tensor by tensor (Adam divides each entry's step by its own gradient's size, so an entry
        # whose gradient is nearly 0 moves by rounding noise: compare whole tensors, not entries)
        for name, value in reference["model"]["model"].items():
            keep = torch.ones(len(value), dtype=torch.bool)
            if name.endswith("self_attn.in_proj_bias"):  # (query, key, value) biases
                # the key bias's true gradient is 0 (a softmax ignores a shift shared by all keys): all
                # either run gets is rounding noise. Not comparable.
                keep[len(value) // 3 : 2 * len(value) // 3] = False
            a, b = value[keep], r["model"]["model"][name][keep]
            assert (b - a).norm() <= 1e-3 * a.norm() + 1e-6, name
        # every vertex's sequence, asked of any rank, is the one store's (read from its owner)
        for x, y in zip(reference["sequences"], r["sequences"], strict=True):
            np.testing.assert_array_equal(y, x)
        assert r["sent"]["sample_neighbors"] > 0 and r["nbytes"]["memory"] == r["nbytes"]["halo"] == 0
    assert len(reference["sequences"][1]) > 100  # the sequences compared hold real neighbors
    # the served rows (each vertex's sequence alone), every 4 batches: gathered from their owners, one
    # process's rows of the same vertices at the same times
    ids, rows, at = reference["served"]
    got = [r["served"] for r in ranks]
    mine = np.concatenate([g[0] for g in got])
    assert sorted(mine.tolist()) == ids.tolist() and len(ids) > 50
    order = np.searchsorted(ids, mine)
    np.testing.assert_allclose(np.concatenate([g[1] for g in got]), rows[order], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.concatenate([g[2] for g in got]), at[order])
    scorers = [set(rank_of(b.src).tolist()) for b in make_events().split(BATCH)]
    assert {0} in scorers and {0, 1} in scorers  # batches rank 1 has no row of, and batches it has


def test_a_resumed_sharded_dygformer_run_ends_where_an_uninterrupted_one_does(runs):
    _, ranks = runs
    for r in ranks:
        start, end, state = r["resumed"]
        assert 0 < start < BATCHES == end  # resumed part way, then ran to the end
        for name, value in r["model"]["model"].items():
            assert torch.equal(state["model"][name], value), name
        adam, adam_resumed = r["model"]["optimizer"]["state"], state["optimizer"]["state"]
        for key, value in adam.items():
            for part in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(adam_resumed[key][part], value[part])


def test_communication_free_reads_sequences_from_the_shard_alone(runs):
    reference, ranks = runs
    ptr, nbr, t, feat = reference["sequences"]
    partial = 0
    for r in ranks:
        (l_ptr, l_nbr, l_t, l_feat), calls, ap = r["free"]
        assert "sample_queries" not in calls and "sample_neighbors" not in calls and np.isfinite(ap)
        owned = r["owned"]
        for v in range(len(ptr) - 1):
            a, b = slice(ptr[v], ptr[v + 1]), slice(l_ptr[v], l_ptr[v + 1])
            if owned[v]:  # whole: the owner holds every edge of its vertex
                np.testing.assert_array_equal(l_nbr[b], nbr[a])
                np.testing.assert_array_equal(l_t[b], t[a])
                np.testing.assert_array_equal(l_feat[b], feat[a])
            else:  # only its edges with this rank's vertices
                assert owned[l_nbr[b]].all()
                partial += ptr[v + 1] - ptr[v] > l_ptr[v + 1] - l_ptr[v]
    assert partial > 10  # some sequences are really partial: the comparison has teeth


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])


def test_streamgnn_train_runs_a_sharded_dygformer_config(tmp_path, capsys):
    """``streamgnn train`` with ``model.variant=dygformer`` and ``train.sharding``: the sharded job, its
    per-rank checkpoints, resumed where it stopped."""
    import json

    from streamgnn.cli import main

    config = tmp_path / "sharded.yaml"
    config.write_text(
        "train:\n  batch_size: 100\n  eval_negatives: 5\n  checkpoint_every: 2\n"
        "  sharding: {num_partitions: 4}\n"
        "  follow: {mode: every_event}\n"  # every event scored (streamgnn train's default samples them)
        "  model: {variant: dygformer, sequence_length: 8, patch_size: 2, channel_dim: 8, time_dim: 8,\n"
        "          embedding_dim: 8}\n"
    )
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = ["train", "--config", str(config), "--dataset", "jodie_wikipedia", "--checkpoint-dir", str(ckpt),
            "--out", str(out), "--quiet", "--log-every", "0"]  # fmt: skip
    assert main([*argv, "--events", "300"]) == 0
    assert (ckpt / "rank-00000" / "LATEST").exists()  # the sharded layout: one folder per rank
    assert main([*argv, "--events", "500"]) == 0
    printed = capsys.readouterr().out
    assert "resumed from" in printed and "300 events already learned" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == 200 and summary["learned"] == 500 and summary["batches"] == 5
    assert 0.0 <= summary["metrics"]["ap"] <= 1.0 and summary["metrics"]["events"] == 400
    manifest = json.loads((Path(summary["checkpoint"]) / "manifest.json").read_text())
    assert '"variant": "dygformer"' in json.dumps(manifest)  # the model the config named
