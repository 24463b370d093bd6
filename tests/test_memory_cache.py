"""The memory's update cache (``nn.memory.UpdateCache``): a commit takes the rows a read without autograd
computed, and every result equals, bit for bit, what recomputing each row would give."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streamgnn.datasets import load
from streamgnn.nn import NodeMemory, TimeEncoder
from streamgnn.nn.memory import UpdateCache
from streamgnn.shard.memory import lend_state
from streamgnn.train import OnlineTrainer, TrainConfig


def uncached(monkeypatch) -> None:
    """Every read and commit recomputes its rows: the cache is emptied before each use."""
    ready = UpdateCache.ready

    def empty_first(self, memory):
        self.clear()
        return ready(self, memory)

    monkeypatch.setattr(UpdateCache, "ready", empty_first)


def counting(monkeypatch) -> list[int]:
    """Rows computed without autograd per read or commit (each goes into the cache), recorded."""
    rows: list[int] = []
    put = UpdateCache.put

    def counted(self, nodes, values):
        rows.append(len(nodes))
        return put(self, nodes, values)

    monkeypatch.setattr(UpdateCache, "put", counted)
    return rows


def random_batches(seed: int, batches: int, size: int, nodes: int):
    g = torch.Generator().manual_seed(seed)
    for b in range(batches):
        src = torch.randint(0, nodes, (size,), generator=g)
        dst = (src + 1 + torch.randint(0, nodes - 1, (size,), generator=g)) % nodes
        yield src, dst, torch.rand(size, generator=g, dtype=torch.float64) + b


def test_a_commit_takes_the_rows_a_read_computed(monkeypatch):
    torch.manual_seed(0)
    mem = NodeMemory(16, 0, TimeEncoder(8))
    rows = counting(monkeypatch)
    with torch.no_grad():
        mem.store_messages(torch.arange(40), torch.arange(40, 80), torch.ones(40, dtype=torch.float64))
        read, _ = mem.get(torch.arange(80))  # a serving refresh: 80 rows with pending messages
        assert rows == [80]
        mem.store_messages(
            torch.arange(40), torch.arange(80, 120), torch.full((40,), 2.0, dtype=torch.float64)
        )
    assert rows == [80]  # the commit of nodes 0..39 stepped no GRU: it took the read's rows
    assert torch.equal(mem.memory[:40], read[:40])


def test_rows_whose_inputs_changed_are_recomputed(monkeypatch):
    torch.manual_seed(0)
    mem = NodeMemory(16, 0, TimeEncoder(8))
    rows = counting(monkeypatch)
    with torch.no_grad():
        mem.store_messages(torch.arange(40), torch.arange(40, 80), torch.ones(40, dtype=torch.float64))
        mem.get(torch.arange(80))
        # nodes 0..19 are committed: the pending messages of their partners 40..59 now read other rows
        mem.store_messages(
            torch.arange(20), torch.arange(80, 100), torch.full((20,), 2.0, dtype=torch.float64)
        )
        rows.clear()
        mem.get(torch.arange(40, 80))
    assert rows == [20]  # 40..59 recomputed, 60..79 taken
    with torch.no_grad():
        mem.gru.weight_hh.add_(0.01)  # as an optimizer step does: in place
        rows.clear()
        mem.get(torch.arange(60, 80))
    assert rows == [20]


@pytest.mark.parametrize("aggregator", ["last", "mean"])
def test_cached_memory_equals_recomputed_bit_for_bit(monkeypatch, aggregator):
    def run() -> list[torch.Tensor]:
        torch.manual_seed(0)
        mem = NodeMemory(16, 0, TimeEncoder(8), message="mlp", aggregator=aggregator)
        out = []
        with torch.no_grad():
            for src, dst, t in random_batches(1, 30, 50, 300):
                mem.store_messages(src, dst, t)
                out.append(mem.get(torch.unique(torch.cat([src, dst, src + 7]) % 300))[0])
                out.append(mem.memory.clone())
        return out

    cached = run()
    uncached(monkeypatch)
    recomputed = run()
    assert all(torch.equal(a, b) for a, b in zip(cached, recomputed, strict=True))


def test_after_a_parameter_change_no_row_of_the_old_cache_is_read(monkeypatch):
    """A parameter change empties the cache but keeps its row storage (not zeroed: rows are read only where
    held), so the old rows stay there: every read after a change equals a recomputation, bit for bit."""

    def run() -> list[torch.Tensor]:
        torch.manual_seed(0)
        mem = NodeMemory(16, 0, TimeEncoder(8))
        out = []
        with torch.no_grad():
            for k, (src, dst, t) in enumerate(random_batches(2, 20, 40, 200)):
                mem.store_messages(src, dst, t)
                out.append(mem.get(torch.arange(200))[0])
                if k % 3 == 0:
                    mem.gru.weight_hh.mul_(1.01)  # in place, as an optimizer step
        return out

    cached = run()
    uncached(monkeypatch)
    recomputed = run()
    assert all(torch.equal(a, b) for a, b in zip(cached, recomputed, strict=True))


def test_a_lent_or_loaded_state_is_not_read_from_the_cache():
    torch.manual_seed(0)
    mem = NodeMemory(8, 0, TimeEncoder(4))
    with torch.no_grad():
        mem.store_messages(torch.arange(20), torch.arange(20, 40), torch.ones(20, dtype=torch.float64))
        mem.get(torch.arange(40))
        other = {k: v.clone() for k, v in mem.state_dict().items() if not k.startswith(("gru", "time"))}
        other["memory"] = torch.randn_like(other["memory"])  # the same messages, other committed rows
        with lend_state(mem, other):
            lent, _ = mem.get(torch.arange(40))
        fresh = NodeMemory(8, 0, TimeEncoder(4))
        fresh.load_state_dict(mem.state_dict())
        fresh.memory.copy_(other["memory"])
        assert torch.equal(lent, fresh.get(torch.arange(40))[0])
        mem.load_state_dict(fresh.state_dict())
        assert torch.equal(mem.get(torch.arange(40))[0], lent)


@pytest.mark.parametrize("batch", [200, 1000])
def test_trainer_outputs_equal_recomputation_on_a_real_stream(monkeypatch, batch):
    """State-only steps (the budget's), with learned and scored steps among them: the served rows, memory and
    scores of the cached run are those of a run that recomputes every row."""
    data = load("jodie_wikipedia")[:6000]

    def run():
        trainer = OnlineTrainer(TrainConfig(seed=3))
        scores = []
        for k, lo in enumerate(range(0, len(data), batch)):
            result = trainer.step(data[lo : lo + batch], train=k % 4 == 1, score=k % 3 == 2)
            scores.append(result.pos)
        served = trainer.table.embeddings(trainer.store.external_ids(np.arange(trainer.store.num_nodes)))
        return served, trainer.model.memory.state_dict(), np.concatenate(scores)

    served, state, scores = run()
    uncached(monkeypatch)
    served_again, state_again, scores_again = run()
    assert np.array_equal(served, served_again) and np.array_equal(scores, scores_again)
    assert all(torch.equal(state[k], state_again[k]) for k in state)
