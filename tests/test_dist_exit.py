"""A sharded ``TrainJob`` of 2 real gloo ranks that finished its stream exits with status 0, its process
group released before the interpreter's teardown: no gloo thread is left then to take the GIL from a
finalizing interpreter, which aborted finished ranks now and then ("terminate called without an active
exception", see ``streamgnn.train.distributed._release_group``). The exit status alone would catch that
abort only in a run where the race hits; the threads still alive at teardown are seen in every run. This
file is also the worker script."""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_shard_train as one  # noqa: E402  (the stream and the model of the sharded tests)

GLOO_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop")  # a group's worker threads and its transport's loop


def threads_now() -> list[str]:
    """The names of this process's threads (Linux)."""
    tasks = Path("/proc/self/task")
    return sorted((tasks / t / "comm").read_text().strip() for t in os.listdir(tasks))


def worker(rank: int, world: int, port: int, out: str) -> None:
    # registered before the job joins its group, so it runs after the job's own exit handler (last in,
    # first out): what is left when the interpreter starts its teardown
    atexit.register(lambda: Path(f"{out}.exit.json").write_text(json.dumps(threads_now())))
    from streamgnn.jobs import TrainJob
    from streamgnn.shard import ShardConfig

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    config = dataclasses.replace(one.make_config(), serve_every=0, sharding=ShardConfig(num_partitions=4))
    job = TrainJob(config, source=one.make_events(), log_every_s=0)
    result = job.run(progress=False)  # the optimizer imports torch._dynamo after the group exists
    torch.save({"events": result.events, "threads": threads_now()}, out)


def test_a_finished_sharded_job_releases_its_group_and_exits_0(tmp_path, spawn_ranks):
    ranks = spawn_ranks(__file__, 2, tmp_path)  # fails unless every rank exits with status 0
    for r, got in enumerate(ranks):
        assert got["events"] == len(one.make_events())  # the whole stream
        assert set(GLOO_THREADS) <= set(got["threads"])  # the group's threads ran the job
        left = json.loads((tmp_path / f"w2r{r}.pt.exit.json").read_text())
        assert not set(GLOO_THREADS) & set(left), left  # and were joined before the teardown


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
