"""Every collective a rank enters is counted in one place (``train.distributed.collective``): W = 2 real gloo
ranks train a sharded TGN with its baselines, serving and checkpoints, and the count ``entered()`` reports
equals the calls ``torch.distributed`` itself received, operation by operation, the loss and score
reductions included. And no module of the package calls a ``torch.distributed`` collective but through that
door (``collective`` itself looks the operation up by name). This file is also the worker script."""

from __future__ import annotations

import ast
import doctest
import os
import sys
from collections import Counter
from pathlib import Path

import torch

import streamgnn

# torch.distributed's collectives and point-to-point calls: what a rank can wait in
OPS = (
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_to_all",
    "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "irecv", "isend", "monitored_barrier", "recv", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "scatter", "scatter_object_list", "send",
)  # fmt: skip


def received() -> Counter[str]:
    """Wrap each of torch.distributed's entry points to count the calls it receives (the real call runs)."""
    import torch.distributed as tdist

    seen: Counter[str] = Counter()
    for op in OPS:
        real = getattr(tdist, op, None)
        if real is None:
            continue

        def spy(*args, _real=real, _op=op, **kwargs):
            seen[_op] += 1
            return _real(*args, **kwargs)

        setattr(tdist, op, spy)
    return seen


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.datasets import load
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import PartitionedReplay, ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig, init_distributed
    from streamgnn.train.distributed import entered

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    seen = received()
    before = entered()
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    config = TrainConfig(
        model=model, batch_size=60, eval_negatives=3, serve_every=2, checkpoint_every=3,
        checkpoint_dir=os.path.join(os.path.dirname(out), "ckpt"), sharding=ShardConfig(num_partitions=4),
    )  # fmt: skip
    trainer = ShardedTrainer(config, dist=init_distributed())
    result = trainer.fit(PartitionedReplay(load("jodie_wikipedia")[:480], trainer.ownership), progress=False)
    counted = entered() - before
    torch.save({"counted": counted, "received": seen, "steps": trainer.steps, "ap": result.metrics.ap}, out)


def test_the_count_is_every_call_a_rank_makes(tmp_path, spawn_ranks):
    for r in spawn_ranks(__file__, 2, tmp_path):
        assert r["steps"] >= 8 and r["ap"] > 0  # it trained and scored
        assert r["counted"] == r["received"], (r["counted"], r["received"])
        # the exchanges and DistContext's reductions (loss, gradients, dead letters, served rows) alike
        assert r["counted"]["all_to_all_single"] > 0 and r["counted"]["all_reduce"] >= 2 * r["steps"]
        assert r["counted"]["barrier"] >= 2  # each checkpoint


def test_no_module_calls_a_collective_but_through_the_door():
    root = Path(streamgnn.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in OPS:
                base = ast.unparse(node.value)
                if base in ("dist", "tdist", "torch.distributed") or base.endswith("distributed"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {base}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.distributed"):
                found += [
                    f"{path.relative_to(root)}:{node.lineno} {a.name}" for a in node.names if a.name in OPS
                ]
    assert not found, found


def test_the_doors_example_runs():
    from streamgnn.train import distributed

    assert doctest.testmod(distributed).failed == 0


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
