"""Walk features over shards, exact mode: W = 2 and 4 real gloo ranks, each keeping only its vertices' walk
rows, answer every pair query with one store's products to the bit, across uneven batch cuts, time stamps
shared within and across batches, a late batch (older than events already applied: every rank rebuilds),
queries before the applied events (a rebuild too) and a resume from a checkpoint. This file is also the
worker script."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import torch
from shard_ranks import join

from streamgnn.train.config import ShardConfig

CUTS = (0, 37, 120, 133, 200, 260, 341, 400)  # global batches; the one at 260 arrives late
RESUME_AT = 4  # the run is checkpointed after this many batches and resumed from there


def make_events():
    from streamgnn.events import EventBatch

    rng = np.random.default_rng(21)
    n = CUTS[-1]
    t = np.sort(rng.integers(0, 120, n)).astype(np.float64)  # integer times: groups of events
    t[260:341] = rng.integers(20, 90, 81)  # a late batch: every time in it was applied already
    return EventBatch.from_columns(src=rng.integers(0, 40, n), dst=rng.integers(0, 40, n) + 25, t=t,
                                   eid=np.arange(n))  # fmt: skip


def make_config(checkpoint_dir: str | None = None):
    from streamgnn.nn import TGNConfig
    from streamgnn.train import TrainConfig

    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_neighbors=4,
                      walk_dim=8, walk_decays=(0.0, 0.05))  # fmt: skip
    return TrainConfig(model=model, batch_size=50, serve_every=0, checkpoint_dir=checkpoint_dir,
                       sharding=ShardConfig(num_partitions=8))  # fmt: skip


def queries(step: int, num_nodes: int, newest: float):
    """Every rank's and the reference's queries after batch ``step``: known and unknown (-1) vertices, at
    times after the newest event, at it, inside the stream, and (every third batch) before its start."""
    rng = np.random.default_rng(step)
    n = 60
    src = np.where(rng.random(n) < 0.1, -1, rng.integers(0, num_nodes, n))
    dst = np.where(rng.random(n) < 0.1, -1, rng.integers(0, num_nodes, n))
    src[:10] = src[0]  # a row of candidates: one source, one time
    t = rng.choice([newest + 1.0, newest, newest / 2, -1.0 if step % 3 == 0 else newest + 5.0], n)
    t[:10] = newest + 1.0
    return src, dst, t


def batches(events):
    return [events[a:b] for a, b in zip(CUTS[:-1], CUTS[1:], strict=True)]


def reference() -> list[np.ndarray]:
    """One store and one ``WalkFeatures``, asked the same queries after each batch."""
    from streamgnn.sampling.pairs import PairFeatures
    from streamgnn.store import TemporalGraphStore

    store = TemporalGraphStore()
    pairs = PairFeatures.of(store, make_config().model)
    out = []
    for step, batch in enumerate(batches(make_events())):
        store.ingest(batch)
        out.append(pairs.walk(*queries(step, store.num_nodes, float(store.edges().t.max()))))
    return out


def sharded(trainer, steps: range, events, part: int = 2) -> list[tuple[np.ndarray, np.ndarray]]:
    """The rows each rank answers (its sources; unknown ones everywhere) and that ``part`` of its pair
    features after each batch of ``steps`` (``PairFeatures.read``'s: 2 the walk products, 3 the decayed
    features of a ``pair_decayed`` model)."""
    out = []
    for step in steps:
        trainer.step(batches(events)[step], train=False, score=False)
        newest = float(events.t[: CUTS[step + 1]].max())
        src, dst, t = queries(step, trainer.index.num_nodes, newest)
        mine = trainer.index.owned(src) | (src < 0)
        raw = trainer.link_model.pairs.read(src[mine], dst[mine], t[mine])
        out.append((np.flatnonzero(mine), raw[part]))
    return out


def assert_ranks_answer_as_one(ranks: list[dict], key: str, want: list[np.ndarray], world: int) -> None:
    """Each rank's rows (under ``key``, from ``sharded``) equal the one store's ``want`` after every batch,
    and every query row is answered by some rank."""
    for step, expected in enumerate(want):
        seen = np.zeros(len(expected), int)
        for r in ranks:
            rows, got = r[key][step]
            np.testing.assert_array_equal(got, expected[rows], err_msg=f"W={world}, batch {step}")
            seen[rows] += 1
        assert (seen >= 1).all()


def worker(rank: int, world: int, port: int, out: str) -> None:
    import os

    from streamgnn.shard import ShardedTrainer

    torch.set_num_threads(1)
    dist = join(rank, world, port)
    events, ckpt = make_events(), os.path.join(os.path.dirname(out), f"ckpt-w{world}")
    trainer = ShardedTrainer(make_config(ckpt), dist=dist)
    first = sharded(trainer, range(RESUME_AT), events)
    trainer.save_checkpoint({})
    rest = sharded(trainer, range(RESUME_AT, len(CUTS) - 1), events)
    trainer.link_model.pairs.read([], [], [])  # no queries: every event but the newest group is applied
    walks = trainer.link_model.pairs.walks
    held = walks.held()  # the vertices whose rows this rank keeps: only its own
    assert trainer.index.owned(held).all()
    resumed = ShardedTrainer.resume(None, config=trainer.config, dist=trainer.dist)
    assert resumed.steps == RESUME_AT
    again = sharded(resumed, range(RESUME_AT, len(CUTS) - 1), events)
    torch.save({"walks": first + rest, "resumed": again, "held": held}, out)


def test_every_rank_answers_as_one_store_to_the_bit(tmp_path, spawn_ranks):
    want = reference()  # one store, here: its features need no rank
    assert sum(int((w[..., 1, w.shape[-1] // 2 + 1] > 0.5).sum()) for w in want) > 100  # common neighbors
    events = make_events()
    vertices = len(np.unique(np.r_[events.src, events.dst]))
    for world in (2, 4):
        ranks = spawn_ranks(__file__, world, tmp_path)
        assert_ranks_answer_as_one(ranks, "walks", want, world)
        for r in ranks:  # resumed from the checkpoint: the rebuilt state answers to the bit as well
            for (rows, got), (rows_again, again) in zip(r["walks"][RESUME_AT:], r["resumed"], strict=True):
                np.testing.assert_array_equal(rows_again, rows)
                np.testing.assert_array_equal(again, got)
        # the state is divided: every vertex's rows live with exactly one rank (its owner)
        gids = np.concatenate([r["held"] for r in ranks])
        assert len(gids) == len(np.unique(gids)) == vertices
        assert max(len(r["held"]) for r in ranks) < 0.8 * vertices


def test_a_lone_rank_answers_as_one_store_in_both_modes():
    """A lone rank owns every vertex and holds every event: exact mode (its ``ShardWalks``) and
    communication-free mode (``WalkFeatures`` over its shard) both answer as one store, to the bit."""
    from streamgnn.shard import ShardedTrainer

    want, events = reference(), make_events()
    for mode in ("exact", "comm_free"):
        config = make_config()
        trainer = ShardedTrainer(replace(config, sharding=replace(config.sharding, mode=mode)))
        for (rows, got), expected in zip(sharded(trainer, range(len(CUTS) - 1), events), want, strict=True):
            assert len(rows) == len(expected)
            np.testing.assert_array_equal(got, expected, err_msg=mode)


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
