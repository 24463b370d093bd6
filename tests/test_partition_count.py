"""A partition count costs nothing for the partitions that hold no data, and a count that cannot be meant is
refused where it is read, saying why: the bound (``MAX_PARTITIONS``) in every setting of one, a replay's
set-up and positions built from its rows, a sharded run's checkpoint the same size at 4 and 2**20
partitions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import ConfigError, EventValidationError
from streamgnn.events import EventBatch
from streamgnn.partition import MAX_PARTITIONS, make_partitioner
from streamgnn.shard import Ownership
from streamgnn.shard.source import PartitionedReplay
from streamgnn.store import StoreConfig
from streamgnn.train.config import ShardConfig


@pytest.mark.parametrize("count", [MAX_PARTITIONS + 1, 100_000_000, 2**63])
def test_a_count_beyond_the_bound_is_refused_in_every_setting(count):
    said = f"num_partitions is {count:,}, more than {MAX_PARTITIONS:,}"
    with pytest.raises(EventValidationError, match=said):
        StoreConfig(num_partitions=count)
    with pytest.raises(ConfigError, match=said):
        ShardConfig(num_partitions=count)
    with pytest.raises(ConfigError, match=said):
        make_partitioner("hash", count)
    assert StoreConfig(num_partitions=MAX_PARTITIONS).num_partitions == MAX_PARTITIONS


def test_the_cli_refuses_it_in_one_line_before_any_work(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  sharding:\n    num_partitions: 100000000\n")
    cmd = [sys.executable, "-m", "streamgnn.cli", "train", "--dataset", "jodie_wikipedia", "--events", "400"]
    proc = subprocess.run([*cmd, "--config", str(config), "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert (
        proc.stderr.count("\n") == 1 and "num_partitions is 100,000,000, more than 1,048,576" in proc.stderr
    )


def _reference(part, t, world, rank, offsets):
    """The replay's rows and positions by their definition, partition by partition."""
    rows, done = [], dict(offsets)
    for p in sorted({int(x) for x in part if x % world == rank}):
        mine = [i for i in range(len(part)) if part[i] == p]
        rows += [(t[i], p, k, i) for k, i in enumerate(mine) if k >= offsets.get(p, 0)]
        done[p] = max(len(mine), offsets.get(p, 0))
    rows.sort()
    return [i for *_, i in rows], {f"replay:{p}": n for p, n in done.items() if n and p % world == rank}


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n=st.integers(0, 40),
    count=st.sampled_from([1, 2, 3, 7, 1000, MAX_PARTITIONS]),
    world=st.integers(1, 3),
    chunk=st.integers(1, 9),
)
def test_a_replay_hands_out_its_partitions_rows_whatever_the_count(data, n, count, world, chunk):
    world = min(world, count)
    rank = data.draw(st.integers(0, world - 1))
    t = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), np.float64)
    events = EventBatch.from_columns(src=np.arange(n) * 7919, dst=np.arange(n), t=t, eid=range(n))
    ownership = Ownership(count, world, rank)
    part = ownership.source_partitions(events)
    held = sorted({int(p) for p in part})
    named = data.draw(st.lists(st.sampled_from(held))) if held else []  # a checkpoint names partitions read
    offsets = {p: data.draw(st.integers(0, 3)) for p in named}
    replay = PartitionedReplay(
        events, ownership, chunk=chunk, start_offsets={f"replay:{p}": k for p, k in offsets.items()}
    )
    got = []
    while (batch := replay.pull()) is not None:
        got += batch.eid.tolist()
    want_rows, want_positions = _reference(part.tolist(), t.tolist(), world, rank, offsets)
    assert got == want_rows
    assert replay.positions() == want_positions
    assert len(replay.positions()) <= len(held)  # never an entry for a partition that holds nothing


def _checkpoint_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_a_sharded_runs_checkpoint_does_not_grow_with_empty_partitions(tmp_path):
    """400 events at 4 and at 2**20 partitions: the checkpoints differ by what the partitions read from
    take, not by the partition count, and the run at 2**20 resumes from its own."""
    sizes = {}
    for count in (4, MAX_PARTITIONS):
        config = tmp_path / f"c{count}.yaml"
        config.write_text(
            f"train:\n  sharding:\n    num_partitions: {count}\n"
            "  model:\n    memory_dim: 8\n    time_dim: 8\n    embedding_dim: 8\n"
        )
        ckpt = tmp_path / f"ck{count}"
        cmd = [sys.executable, "-m", "streamgnn.cli", "train", "--dataset", "jodie_wikipedia", "--quiet"]
        cmd += ["--config", str(config), "--checkpoint-dir", str(ckpt)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        first = subprocess.run([*cmd, "--events", "400"], capture_output=True, text=True, env=env)
        assert first.returncode == 0, first.stderr
        sizes[count] = _checkpoint_bytes(ckpt)
    # what grows is per partition read from (the replay reads ahead a chunk of rows): far under a byte per
    # partition, where a count for every partition alone was 8 bytes each (8 MB) and its offsets ~20 MB
    assert sizes[MAX_PARTITIONS] - sizes[4] < MAX_PARTITIONS, sizes
    again = subprocess.run([*cmd, "--events", "600"], capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr
    assert "resumed from" in again.stdout + again.stderr, again.stdout
