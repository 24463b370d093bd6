"""The partition router feeds the sharded trainer: raw topic -> ``PartitionRouter`` (Fennel) -> events topic
-> 2 real gloo ranks, each reading only its own topic partitions with ``ShardConfig(placement="stream")``.
The ranks own exactly the vertices the router put in their partitions (cut edges kept by both owners) and,
in exact mode, compute what one process reading every event computes. This file is also the worker script."""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_shard_train as one  # noqa: E402  (the stream, the model and the reference process)
from shard_ranks import join, tgn_state  # noqa: E402

PARTITIONS = 4


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.shard import GlobalBatcher, KafkaPartitions, ShardConfig, ShardedTrainer

    sharding = ShardConfig(num_partitions=PARTITIONS, placement="stream")
    trainer = ShardedTrainer(
        dataclasses.replace(one.make_config(), sharding=sharding), dist=join(rank, world, port)
    )
    topic, bootstrap = os.environ["ROUTED_TOPIC"], os.environ["ROUTED_BOOTSTRAP"]
    with KafkaPartitions(topic, trainer.ownership, bootstrap_servers=bootstrap, idle_timeout_s=5.0) as local:
        batcher = GlobalBatcher(local, trainer.ownership, trainer.exchange, one.BATCH)
        steps, batches = [], []
        while (batch := batcher.next_batch()) is not None:
            batches.append(batch.eid)
            steps.append(trainer.step(batch))
        read = {int(key.rsplit(":", 1)[1]) for key in local.positions()}
    index = trainer.index
    roots = np.arange(index.num_nodes)
    embedder = tgn_state(trainer).embedder
    (sub,) = embedder.sampler.sample_sets([(roots, np.full(len(roots), one.make_events().t[-1] / 2))], key=0)
    hop = sub.hops[0]
    torch.save({"steps": steps, "model": trainer.model.state_dict(), "memory": one.memory_rows(trainer),
                "batches": batches, "sample": (hop.ptr, hop.nbr, hop.t), "read": read,
                "owned": index.external(roots[index.owned(roots)]), "edges": trainer.store.num_edges,
                "cache_hits": embedder.cache.hits}, out)  # fmt: skip


def test_router_placement_is_the_sharded_ownership(kafka_bootstrap, make_topic, tmp_path, spawn_ranks,
                                                   monkeypatch):  # fmt: skip
    from streamgnn.connectors.kafka import EventProducer
    from streamgnn.jobs.router import PartitionRouter, RouterConfig
    from streamgnn.partition import hash_partition

    events = one.make_events()
    raw, routed = make_topic(1), f"routed-{uuid.uuid4().hex[:10]}"
    with EventProducer(kafka_bootstrap, raw, fmt="binary", batch_size=100) as producer:
        producer.send(events)
        producer.flush()
    router = PartitionRouter(kafka_bootstrap, raw, routed, PARTITIONS, RouterConfig("fennel", batch_size=50))
    report = router.run(max_events=len(events), flush=True)
    assert report.published == len(events) and report.held == 0
    ids, labels = router.state.ids, router.state.labels
    part = {v: int(labels[ids.lookup(np.array([v]))[0]]) for v in np.unique(np.r_[events.src, events.dst])}
    src = np.array([part[v] for v in events.src.tolist()]) % 2
    dst = np.array([part[v] for v in events.dst.tolist()]) % 2
    vertices = np.array(sorted(part))
    hashed = hash_partition(vertices, PARTITIONS) % 2
    assert (hashed != np.array([part[v] for v in vertices]) % 2).mean() > 0.2  # not hash's owners
    assert 0 < (src != dst).mean() < 0.9  # cut edges exist, fewer than hash would cut (about half)

    (reference,) = spawn_ranks(one.__file__, 0, tmp_path, processes=1)  # one OnlineTrainer, every event
    monkeypatch.setenv("ROUTED_TOPIC", routed)
    monkeypatch.setenv("ROUTED_BOOTSTRAP", kafka_bootstrap)
    ranks = spawn_ranks(__file__, 2, tmp_path)
    for r, got in enumerate(ranks):
        assert got["read"] == {r, r + 2}  # its own topic partitions only
        assert sorted(got["owned"].tolist()) == [v for v in vertices.tolist() if part[v] % 2 == r]
        assert got["edges"] == int(((src == r) | (dst == r)).sum())  # a cut edge is kept by both owners
        assert [b.tolist() for b in got["batches"]] == [b.eid.tolist() for b in events.split(one.BATCH)]
    one.assert_same_as_one_process(reference, ranks)


def test_placement_travels_and_is_checked():
    """The router's batches carry each endpoint's partition through the binary codec and Kafka's row joins;
    the index takes a vertex's partition from its first event and refuses a stream that lacks or
    contradicts it, before changing anything."""
    from streamgnn.codec import decode_binary, encode_binary, encode_json_lines
    from streamgnn.connectors.kafka.merge import join_rows
    from streamgnn.errors import PlacementError
    from streamgnn.events import EventBatch, concat
    from streamgnn.jobs.routing import RoutingState
    from streamgnn.shard import (
        Collectives,
        GlobalBatcher,
        GlobalIndex,
        Ownership,
        PartitionedReplay,
        ShardConfig,
    )

    events = one.make_events()[:200]
    state = RoutingState("fennel", PARTITIONS)
    out, _ = state.route(events)
    for p, b in out.items():
        labels = state.labels[state.ids.lookup(np.r_[b.src, b.dst])].reshape(2, -1).T
        assert np.array_equal(b.placement, labels) and (b.placement[:, 0] == p).all()
        assert np.array_equal(decode_binary(encode_binary(b)).placement, b.placement)
    assert b"placement" not in encode_json_lines(out[0])  # JSON lines do not carry it
    stream = concat(list(out.values())).sorted_by_time()
    joined = join_rows([stream[:3], dataclasses.replace(stream[3:5], placement=None)])
    assert joined.placement[3:].tolist() == [[-1, -1]] * 2

    own = Ownership.of(ShardConfig(num_partitions=PARTITIONS, placement="stream"), world_size=2, rank=1)
    index = GlobalIndex(own)
    index.admit(stream)
    gids = np.arange(index.num_nodes)
    placed = state.labels[state.ids.lookup(index.external(gids))]
    assert np.array_equal(index.partition, placed) and np.array_equal(index.owned(gids), placed % 2 == 1)
    replay = PartitionedReplay(stream, own)
    assert set(own.source_partitions(replay.pull()).tolist()) <= {1, 3}
    other = dataclasses.replace(own, rank=0)  # reading rank 1's partitions: not the router's topic layout
    batcher = GlobalBatcher(PartitionedReplay(stream, own), other, Collectives(0, 1, torch.device("cpu")), 10)
    with pytest.raises(PlacementError, match=r"not one of its partitions \[0, 2\]"):
        batcher.next_batch()

    later = stream[:2]
    moved = dataclasses.replace(later, eid=later.eid + 10_000, placement=(later.placement + 1) % PARTITIONS)
    with pytest.raises(PlacementError, match="never moves a vertex"):
        index.admit(moved)
    with pytest.raises(PlacementError, match="carry no placement"):
        index.admit(dataclasses.replace(later, eid=later.eid + 10_000, placement=None))
    unplaced = EventBatch.from_columns(
        src=[10**6], dst=[10**6 + 1], t=[1e9], eid=[10**6], placement=[[0, -1]]
    )
    with pytest.raises(PlacementError, match="vertex partitioner"):
        index.admit(unplaced)
    fresh = EventBatch.from_columns(src=[10**6, 10**6], dst=[7, 7], t=[1e9] * 2, eid=[1, 2],
                                    placement=[[0, 1], [2, 1]])  # fmt: skip
    with pytest.raises(PlacementError, match="never moves a vertex"):
        GlobalIndex(own).admit(fresh)  # two partitions for one new vertex within a batch
    assert index.num_nodes == len(gids) and not index.seen.contains(np.array([10**6])).any()
    with pytest.raises(ValueError, match="placement"):
        ShardConfig(placement="fennel")
    # a buffered router holds an edge until both ends are placed: the index takes its whole stream
    buffered = RoutingState({"name": "fennel", "buffer_edges": 4, "max_pending": 50}, PARTITIONS)
    out, _ = buffered.route(events)
    routed = concat([*out.values(), *buffered.flush().values()]).sorted_by_time()
    assert len(routed) == len(events) and buffered.counts["placed_edges"] == len(events)
    fresh_index = GlobalIndex(own)
    fresh_index.admit(routed)
    assert np.array_equal(fresh_index.partition, buffered.labels[buffered.ids.lookup(fresh_index.external(
        np.arange(fresh_index.num_nodes)))])  # fmt: skip


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
