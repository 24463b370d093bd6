"""The partition merge on its own, without a broker: what holds rows back, what frees them, batch limits."""

from __future__ import annotations

import numpy as np

from streamgnn.connectors.kafka.merge import Chunk, PartitionMerge
from streamgnn.events import EventBatch


def chunk(key: str, times: list[float], first_offset: int = 0) -> Chunk:
    n = len(times)
    batch = EventBatch.from_columns(
        src=np.arange(n), dst=np.arange(n) + 1, t=times, eid=np.arange(n) + 1000 * first_offset
    )
    return Chunk(key, batch, np.arange(first_offset, first_offset + n), first_offset + n)


def released(merge: PartitionMerge, now: float, limit: int | None = None) -> list[tuple[str, list[float]]]:
    return [(key, rows.t.tolist()) for key, rows, _ in merge.release(now, limit) or ()]


def test_a_partition_not_read_to_its_end_holds_the_others_back_however_long_it_is_silent():
    merge = PartitionMerge(idle_partition_s=1.0)
    merge.own(["a:0", "a:1"], now=0.0)
    merge.add(chunk("a:0", [1.0, 2.0, 9.0]), 0, now=0.0)
    merge.add(chunk("a:1", [3.0]), 0, now=0.0)
    assert released(merge, now=0.0) == [("a:0", [1.0, 2.0])]  # 9.0 may still be preceded by a:1
    assert released(merge, now=3600.0) == []  # an hour of silence frees nothing: a:1 is not at its end
    merge.caught_up = {"a:1"}
    assert released(merge, now=0.5) == []  # at its end, but new data may still come within 1 s
    assert released(merge, now=1.0) == [("a:1", [3.0])]  # a:1 is done; a:0 still holds its own 9.0
    merge.caught_up = {"a:0", "a:1"}
    assert released(merge, now=1.0) == [("a:0", [9.0])]


def test_idle_wait_counts_from_the_quiet_partitions_last_data():
    merge = PartitionMerge(idle_partition_s=2.0)
    merge.own(["a:0", "a:1"], now=0.0)
    merge.add(chunk("a:0", [1.0]), 0, now=0.0)
    merge.add(chunk("a:1", [0.5, 5.0]), 0, now=10.0)
    merge.caught_up = {"a:0", "a:1"}
    assert released(merge, now=10.0) == [("a:0", [1.0]), ("a:1", [0.5])]  # a:1 holds at 5.0
    merge.add(chunk("a:0", [2.0], first_offset=1), 1, now=10.5)  # a:0 speaks again
    assert released(merge, now=12.4) == []  # a:0 may still send something before 5.0 until 12.5
    assert released(merge, now=12.5) == [("a:0", [2.0]), ("a:1", [5.0])]
    assert merge.at_end() and merge.positions == {"a:0": 2, "a:1": 2}


def test_batches_follow_time_partition_offset_order_whatever_the_limit():
    merge = PartitionMerge(max_batch_events=1000)
    merge.own(["a:0", "a:1"], now=0.0)
    merge.add(chunk("a:0", [1.0, 3.0, 3.0, 6.0]), 0, now=0.0)
    merge.add(chunk("a:1", [2.0, 3.0, 5.0, 7.0]), 0, now=0.0)
    merge.caught_up = {"a:0", "a:1"}
    out = []
    while batch := merge.release(now=0.0, limit=3):
        out.append(
            sorted((t, key, int(o)) for key, rows, offs in batch for t, o in zip(rows.t, offs, strict=True))
        )
    flat = [row for rows in out for row in rows]
    assert [len(rows) for rows in out] == [3, 3, 2]
    assert flat == sorted(flat)  # (time, partition, offset): every batch after the one before
    assert merge.positions == {"a:0": 4, "a:1": 4} and merge.at_end()


def test_a_message_cut_by_a_batch_boundary_resumes_at_itself_and_is_not_repeated():
    merge = PartitionMerge()
    merge.own(["a:0"], now=0.0)
    rows = EventBatch.from_columns(src=[1, 2, 3], dst=[2, 3, 4], t=[1.0, 2.0, 3.0], eid=[0, 1, 2])
    merge.add(Chunk("a:0", rows, np.array([7, 7, 7]), 8), 7, now=0.0)  # one message of three events
    merge.caught_up = {"a:0"}
    assert released(merge, now=0.0, limit=2) == [("a:0", [1.0, 2.0])]
    assert merge.positions == {"a:0": 7}  # a restart reads message 7 again; the store skips eids 0, 1
    assert merge.disown(["a:0"]) == {"a:0": 7}  # a rebalance drops the rest and reads message 7 again
    merge.own(["a:0"], now=0.0)
    merge.add(Chunk("a:0", rows, np.array([7, 7, 7]), 8), 7, now=0.0)
    merge.caught_up = {"a:0"}
    assert released(merge, now=0.0) == [("a:0", [3.0])]
    assert merge.positions == {"a:0": 8}


def test_disowned_partitions_drop_their_rows_and_stop_holding_the_frontier():
    merge = PartitionMerge()
    merge.own(["a:0", "a:1"], now=0.0)
    merge.add(chunk("a:0", [4.0]), 0, now=0.0)
    merge.add(chunk("a:1", [1.0, 2.0], first_offset=5), 5, now=0.0)
    assert released(merge, now=0.0) == [("a:1", [1.0])]  # 2.0 waits: a:1 may send another 2.0
    merge.add(chunk("a:1", [8.0], first_offset=7), 7, now=0.0)
    assert merge.disown(["a:1"]) == {"a:1": 6}
    assert merge.buffered == 1 and merge.owned == {"a:0"}  # a:1's 2.0 and 8.0 are the next owner's
    assert released(merge, now=0.0) == []  # a:0 itself is not at its end yet
    merge.caught_up = {"a:0"}
    assert released(merge, now=0.0) == [("a:0", [4.0])]
