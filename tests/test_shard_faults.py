"""A sharded run under ``torchrun --max-restarts 1``: one rank SIGKILLed in the middle of a step, every rank
restarted and resumed from one consistent cut of per-rank checkpoints; the final state equals an
uninterrupted run's (nothing lost, nothing doubled). This file is also the torchrun worker script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from shard_ranks import tgn_state

EVENTS, BATCH, EVERY, KILL_AT_PULL = 720, 40, 4, 9


def worker(out: Path, kill: bool) -> None:
    from streamgnn.events import EventBatch
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import PartitionedReplay, ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig

    torch.set_num_threads(1)
    rng = np.random.default_rng(5)
    events = EventBatch.from_columns(
        src=rng.integers(0, 50, EVENTS), dst=rng.integers(50, 80, EVENTS),
        t=np.cumsum(rng.exponential(1.0, EVENTS)), eid=np.arange(EVENTS),
    )  # fmt: skip
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=4, dropout=0.0)  # pairs read
    config = TrainConfig(model=model, batch_size=BATCH, lr=1e-3, eval_negatives=4, serve_every=0,
                         checkpoint_dir=str(out / "ckpt"), checkpoint_every=EVERY,
                         sharding=ShardConfig(num_partitions=4))  # fmt: skip
    trainer = ShardedTrainer.resume(None, config=config)
    offsets = trainer.start_offsets
    source = PartitionedReplay(events, trainer.ownership, chunk=15, start_offsets=offsets)
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if kill and first_attempt and trainer.dist.rank == 1:
        pull, pulls = source.pull, [0]

        def pull_then_die():
            pulls[0] += 1
            if pulls[0] == KILL_AT_PULL:  # in the middle of agreeing on a global batch, past a checkpoint
                os.kill(os.getpid(), signal.SIGKILL)
            return pull()

        source.pull = pull_then_die
    (out / f"resumed-{trainer.dist.rank}-{trainer.steps}").touch()
    result = trainer.fit(source, progress=False)
    o = tgn_state(trainer).owned
    torch.save(
        {"model": trainer.model.state_dict(), "steps": trainer.steps, "position": trainer.position,
         "learned": trainer.learned, "store": trainer.store.content_hash(), "gid": o.gid[: o.size].copy(),
         "memory": o.memory[: o.size].copy(), "last": o.last_update[: o.size].copy(),
         "pending": (o.msg_slot.copy(), o.msg_t.copy()), "ap": result.metrics.ap,
         "baselines": {name: (m.ap, m.mrr, m.events) for name, m in result.baselines.items()}},
        out / f"rank-{trainer.dist.rank}.pt",
    )  # fmt: skip


def torchrun(out: Path, kill: bool) -> list[dict]:
    out.mkdir()
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "--max-restarts",
        "1",
        "--monitor-interval",
        "0.2",
        __file__,
        str(out),
        str(int(kill)),
    ]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    (out / "torchrun.log").write_text(run.stderr)
    assert run.returncode == 0, run.stderr[-4000:]
    return [torch.load(out / f"rank-{r}.pt", weights_only=False) for r in range(2)]


def test_a_killed_rank_resumes_with_every_rank_from_one_cut(tmp_path: Path):
    clean = torchrun(tmp_path / "clean", kill=False)
    killed = torchrun(tmp_path / "killed", kill=True)
    starts = sorted(tuple(map(int, p.name.split("-")[1:])) for p in (tmp_path / "killed").glob("resumed-*"))
    # both ranks started twice: fresh, then (after the kill) both from the same checkpointed step
    (r0, s0), (r0b, s0b), (r1, s1), (r1b, s1b) = starts
    assert (r0, r0b, r1, r1b) == (0, 0, 1, 1) and s0 == s1 == 0 and s0b == s1b > 0, starts
    assert s0b < EVENTS // BATCH  # the kill came before the end: the restart had work left to redo
    for a, b in zip(clean, killed, strict=True):
        assert (a["steps"], a["position"], a["learned"]) == (b["steps"], b["position"], b["learned"])
        assert (
            a["position"] == EVENTS and a["steps"] == EVENTS // BATCH
        )  # every event once: none lost, none twice
        assert a["store"] == b["store"]  # the shards hold exactly the same events
        np.testing.assert_array_equal(a["gid"], b["gid"])
        np.testing.assert_allclose(b["memory"], a["memory"], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(b["last"], a["last"])
        for x, y in zip(a["pending"], b["pending"], strict=True):
            np.testing.assert_array_equal(x, y)
        for name, value in a["model"].items():
            torch.testing.assert_close(b["model"][name], value, rtol=1e-5, atol=1e-6, msg=name)
        np.testing.assert_allclose(b["ap"], a["ap"], atol=1e-6)
        # the baselines' metrics and memory (the window's span included) resume too: the same scores
        assert set(a["baselines"]) == {"edgebank", "edgebank_tw"} and b["baselines"] == a["baselines"]


if __name__ == "__main__":
    worker(Path(sys.argv[1]), bool(int(sys.argv[2])))
