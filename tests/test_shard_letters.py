"""A sharded run's dead letters read as one process's do: W = 2 real gloo ranks and one ``OnlineTrainer``
over the same stream refuse the same deletes of edges that never were (and of a vertex never seen), with
the same reason (the event's own node ids, not the run's global ids), the same ``where`` and the same
payload. Lateness is judged on the merged global batches: a replay whose rows go back in time loses
rows in one process that the ranks keep (as README's "Scale out" says).
This file is also the worker script."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import torch
from shard_ranks import join, replay

BATCH, PARTITIONS = 40, 4


def make_events():
    """Adds between string-named users and items, then deletes of never-added pairs of known nodes: each
    pair on one rank or across both, and one whose destination the source's rank never saw (two new
    vertices of rank 1 meet last, so rank 0's shard holds fewer ids than the index)."""
    from streamgnn.events import EventBatch, concat
    from streamgnn.partition import hash_partition

    def rank_of(name: str) -> int:
        return int(hash_partition(np.array([name], dtype=object), PARTITIONS)[0]) % 2

    rng = np.random.default_rng(5)
    n = 4 * BATCH
    src, dst = rng.integers(0, 12, n), rng.integers(0, 8, n)
    users, items = [f"user-{u}" for u in src], [f"item-{v}" for v in dst]
    adds = EventBatch.from_columns(src=users, dst=items, t=np.arange(n, dtype=float), eid=np.arange(n))
    seen = set(zip(users, items, strict=True))
    never = [(u, v) for u in sorted(set(users)) for v in sorted(set(items)) if (u, v) not in seen]
    names = never[:: max(len(never) // 8, 1)][:8]
    names += [(v, u) for u, v in names[:2]]  # item -> user: never added in that direction either
    a, b = [name for name in (f"new-{i}" for i in range(100)) if rank_of(name) == 1][:2]
    met = EventBatch.from_columns(src=[a], dst=[b], t=[float(n)], eid=[n])
    names.append((next(u for u in sorted(set(users)) if rank_of(u) == 0), b))
    names.append(("ghost", items[0]))  # a vertex no event added: the index refuses it, not a shard
    deletes = EventBatch.from_columns(
        kind=[1] * len(names), src=[u for u, _ in names], dst=[v for _, v in names],
        t=n + 1 + np.arange(len(names), dtype=float), eid=n + 1 + np.arange(len(names)),
    )  # fmt: skip
    return concat([adds, met, deletes])


def make_config():
    from streamgnn.nn import TGNConfig
    from streamgnn.train import TrainConfig

    model = TGNConfig(
        memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0, pair_walks=False
    )
    return TrainConfig(model=model, batch_size=BATCH, eval_negatives=2, seed=3, serve_every=0)


def letters_of(steps) -> list[tuple]:
    return sorted((d.eid, d.reason, d.where, d.payload) for s in steps for d in s.dead_letters)


def unordered_events():
    """Adds whose times go back by 5 every tenth row, as a file out of time order would hold them."""
    from streamgnn.events import EventBatch

    n = 2 * BATCH
    t = np.arange(n, dtype=float)
    t[9::10] -= 5.0
    rng = np.random.default_rng(6)
    return EventBatch.from_columns(
        src=rng.integers(0, 12, n), dst=rng.integers(20, 28, n), t=t, eid=np.arange(n)
    )


def run(trainer, events, world: int) -> dict:
    """The letters of ``events`` through ``trainer`` (one process: in row order, sharded: merged by time)."""
    if world == 0:
        steps = [trainer.step(b) for b in events.split(BATCH)]
    else:
        steps, _ = replay(trainer, events, BATCH, chunk=17)
    return {"letters": letters_of(steps), "learned": sum(s.learned for s in steps)}


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.shard import ShardedTrainer
    from streamgnn.train import OnlineTrainer
    from streamgnn.train.config import ShardConfig

    torch.set_num_threads(1)
    config = make_config()
    strict = dataclasses.replace(config, allowed_lateness=1.0)
    if world == 0:
        make = OnlineTrainer
    else:
        dist, sharding = join(rank, world, port), ShardConfig(num_partitions=PARTITIONS)

        def make(cfg):
            return ShardedTrainer(dataclasses.replace(cfg, sharding=sharding), dist=dist)

    out_ = {
        "deletes": run(make(config), make_events(), world),
        "late": run(make(strict), unordered_events(), world),
    }
    torch.save(out_, out)


def test_a_sharded_runs_dead_letters_name_the_events_own_ids_as_one_process_does(tmp_path, spawn_ranks):
    (one,) = spawn_ranks(__file__, 0, tmp_path, processes=1)
    ranks = spawn_ranks(__file__, 2, tmp_path)
    reference = one["deletes"]["letters"]
    deletes = make_events().kind == 1
    assert len(reference) == int(deletes.sum())  # every delete refused by one process: no edge was live
    reasons = [reason for _, reason, _, _ in reference]
    assert all("delete matched no live edge" in r and "user-" in r for r in reasons[:-1])
    assert "delete names an unknown node ('ghost'" in reasons[-1]  # the last event, refused on admission
    assert (
        sorted(ranks[0]["deletes"]["letters"] + ranks[1]["deletes"]["letters"]) == reference
    )  # word for word
    # lateness (README, Scale out): one process reading rows out of time order refuses those more than
    # allowed_lateness behind an earlier row; the ranks hand a replay out in time order, so they keep them all
    events = unordered_events()
    late = one["late"]["letters"]
    assert len(late) == len(events) // 10 and all("behind the stream" in reason for _, reason, _, _ in late)
    assert one["late"]["learned"] == len(events) - len(late)
    assert [r["late"]["letters"] for r in ranks] == [[], []]
    assert ranks[0]["late"]["learned"] == ranks[1]["late"]["learned"] == len(events)


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
