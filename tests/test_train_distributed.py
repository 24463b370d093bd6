"""Two data-parallel ranks (gloo, real processes) follow the same trajectory as one rank with the same global
batch: per-batch losses and scores, the gradients and the final parameters, within float tolerances (rank
sums change the reduction order). AP and reciprocal ranks are step functions of the scores, so a last-bit
difference can move them by a whole rank: they are not compared. This file is also the worker script."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from streamgnn.connectors.broker import free_port

BATCHES, BATCH = 20, 60


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.events import EventBatch
    from streamgnn.nn import TGNConfig
    from streamgnn.train import OnlineTrainer, TrainConfig, init_distributed

    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(
            RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
        )
    dist = init_distributed()
    assert (dist.rank, dist.world_size) == (rank, world)
    rng = np.random.default_rng(3)
    n = BATCHES * BATCH
    popularity = 1.0 / np.arange(1, 26) ** 1.5
    events = EventBatch.from_columns(
        src=rng.integers(0, 60, n),
        dst=rng.choice(25, n, p=popularity / popularity.sum()) + 60,
        t=np.cumsum(rng.exponential(1.0, n)),
        eid=np.arange(n),
        features=rng.normal(size=(n, 4)).astype(np.float32),
    )
    model = TGNConfig(
        memory_dim=16, time_dim=8, embedding_dim=16, edge_feature_dim=4, num_neighbors=5, dropout=0.0
    )
    # Adam normalises every step, so the float noise of rank-summed gradients grows with lr over the run: at
    # 3e-3 it reached the score tolerance below within 20 steps; 1e-3 still learns and stays ~100x inside.
    trainer = OnlineTrainer(TrainConfig(model=model, batch_size=BATCH, lr=1e-3, eval_negatives=8, seed=11))
    grads = []  # the averaged gradient each optimizer step applies (Adam would hide a mis-scaled one)
    apply = trainer.optimizer.step

    def record_and_step(*args, **kw):
        params = list(trainer.model.parameters())
        grads.append(
            torch.cat([p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in params])
        )
        return apply(*args, **kw)

    trainer.optimizer.step = record_and_step
    steps = []
    for batch in events.split(BATCH):
        res = trainer.step(batch)
        steps.append([res.loss, res.pos, res.neg])
    torch.save({"steps": steps, "grads": grads, "model": trainer.model.state_dict()}, out)


def launch(world: int, tmp: Path, tries: int = 3) -> list[dict]:
    """Run ``world`` ranks to the end (one failing stops the rest); a new master port when another program
    took the last one first."""
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    port = free_port() if world > 1 else 0
    logs = [tmp / f"w{world}r{r}.err" for r in range(world)]
    procs = []
    for r, log in enumerate(logs):
        with log.open("w") as err:
            cmd = [sys.executable, __file__, str(r), str(world), str(port), str(tmp / f"w{world}r{r}.pt")]
            procs.append(subprocess.Popen(cmd, stderr=err, env=env))
    deadline = time.monotonic() + 300
    while any(p.poll() is None for p in procs) and not any(p.returncode for p in procs):
        assert time.monotonic() < deadline, "the ranks did not finish within 300 s"
        time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    failed = [log.read_text() for p, log in zip(procs, logs, strict=True) if p.returncode != 0]
    if failed and tries > 1 and any("ddress already in use" in err for err in failed):
        return launch(world, tmp, tries - 1)
    assert not failed, failed[0][-3000:]
    return [torch.load(tmp / f"w{world}r{r}.pt", weights_only=False) for r in range(world)]


def test_two_ranks_match_one_rank_with_the_same_global_batch(tmp_path: Path):
    (single,) = launch(1, tmp_path)
    rank0, rank1 = launch(2, tmp_path)
    for name, value in rank0["model"].items():  # identical averaged gradients: replicas stay bit-identical
        assert torch.equal(value, rank1["model"][name]), name
    trained = [s for s in single["steps"] if not np.isnan(s[0])]
    assert len(trained) == BATCHES - 1  # the first batch has no negatives yet: it only warms the graph
    losses = np.array([s[0] for s in single["steps"]])
    assert losses[-1] < losses[1]  # it learns, so agreement is not the trivial one of a frozen model
    for one, two in zip(single["steps"], rank0["steps"], strict=True):
        np.testing.assert_allclose(two[0], one[0], rtol=1e-5, atol=1e-7)  # loss
        for a, b in zip(one[1:], two[1:], strict=True):  # every positive's and negative's score
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert len(single["grads"]) == len(rank0["grads"]) == BATCHES - 1
    for one, two in zip(single["grads"], rank0["grads"], strict=True):
        torch.testing.assert_close(two, one, rtol=1e-3, atol=1e-6)
    for name, value in single["model"].items():
        other = rank0["model"][name]
        if value.is_floating_point():
            torch.testing.assert_close(other, value, rtol=1e-4, atol=5e-5, msg=name)
        else:
            assert torch.equal(other, value), name


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
