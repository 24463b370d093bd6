"""Graph filters over exchanges, link-failure models and robust aggregation (single process)."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
import torch

from streamgnn.errors import CheckpointError, ConfigError
from streamgnn.filters.exchange import LocalExchange
from streamgnn.filters.failures import AdversarialDegree, Bernoulli, GilbertElliott, NoFailures, make_failures
from streamgnn.filters.graph_filter import GraphFilter, GraphNN, GraphNNConfig, local_linear
from streamgnn.filters.robust import Aggregation
from streamgnn.filters.shift import ShiftOperator

MODULES = ["shift", "failures", "exchange", "robust", "graph_filter"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(f"streamgnn.filters.{name}"))
    assert result.attempted > 0 and result.failed == 0


def random_graph(n: int = 12, p: float = 0.35, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.triu(rng.random((n, n)) < p, 1)
    return (a | a.T).astype(float)


def dense_mask(shift: ShiftOperator, keep: torch.Tensor) -> torch.Tensor:
    """``keep [L, N, D]`` slots -> ``[L, N, N]`` link matrix."""
    out = torch.zeros(keep.shape[0], shift.num_nodes, shift.num_nodes, dtype=torch.bool)
    lane, i, d = np.nonzero(np.broadcast_to(shift.neighbors >= 0, keep.shape))
    out[lane, i, np.broadcast_to(shift.neighbors, keep.shape)[lane, i, d]] = keep[lane, i, d]
    return out


def test_shift_operator_round_trips_a_weighted_matrix_with_its_diagonal():
    m = np.array([[0.5, 2.0, 0.0], [1.0, 0.0, -3.0], [0.0, 0.0, 1.5]])
    shift = ShiftOperator.from_dense(m)
    assert shift.neighbors[0].tolist() == [[1], [0], [-1]] or shift.max_degree == 2
    np.testing.assert_allclose(shift.to_dense()[0].numpy(), m)
    node, slot = shift.reverse  # node 0 is heard by node 1, node 2 by node 1
    assert node[0, 0].tolist()[:1] == [1] and node[0, 2].tolist()[:1] == [1]
    assert shift.neighbors[0, node[0, 2, 0], slot[0, 2, 0]] == 2


def test_shift_operator_refuses_bad_input():
    with pytest.raises(ConfigError, match="NaN"):
        ShiftOperator.from_dense(np.array([[0, np.nan], [1, 0]]))
    with pytest.raises(ConfigError, match=r"\[N, N\]"):
        ShiftOperator.from_dense(np.ones((2, 3)))
    with pytest.raises(ConfigError, match="normalize"):
        ShiftOperator.from_adjacency(np.ones((2, 2)), normalize="sym")


@pytest.mark.parametrize(
    "model", [Bernoulli(0.3, 4), GilbertElliott.from_rate(0.3, 4.0, 4), AdversarialDegree(0.3, 4)], ids=str
)
def test_failure_models_are_seeded_symmetric_and_hit_their_rate(model):
    shift = ShiftOperator.from_adjacency(random_graph(30, 0.3))
    valid = shift.valid.expand(8, -1, -1)
    rates = []
    first = [model.keep(shift, r, lanes=8) for r in range(60)]
    model.reset()
    again = [model.keep(shift, r, lanes=8) for r in range(60)]
    for keep, same in zip(first, again, strict=True):
        assert torch.equal(keep, same)  # reproducible from the seed
        m = dense_mask(shift, keep)
        assert torch.equal(m, m.transpose(1, 2))  # a link fails in both directions
        assert not (keep & ~valid).any()
        rates.append(1 - keep[valid].float().mean().item())
    assert abs(np.mean(rates) - 0.3) < 0.05


def test_bursty_losses_come_in_runs_and_independent_ones_do_not():
    shift = ShiftOperator.from_adjacency(random_graph(20, 0.4))

    def mean_run(model) -> float:
        lost = np.stack([~model.keep(shift, r)[0][shift.valid[0]].numpy() for r in range(300)])
        runs = [len(r) for col in lost.T for r in "".join("1" if v else "0" for v in col).split("0") if r]
        return float(np.mean(runs))

    assert mean_run(GilbertElliott.from_rate(0.3, burst=5.0, seed=1)) > 3.5
    assert mean_run(Bernoulli(0.3, seed=1)) < 1.6


def test_bursty_model_refuses_to_go_back_in_rounds():
    shift = ShiftOperator.from_adjacency(random_graph())
    model = GilbertElliott.from_rate(0.2)
    model.keep(shift, 5)
    with pytest.raises(ConfigError, match="reset"):
        model.keep(shift, 3)


def test_adversary_cuts_the_links_with_the_highest_degree_sums():
    a = random_graph(25, 0.3, seed=3)
    shift = ShiftOperator.from_adjacency(a)
    keep = dense_mask(shift, AdversarialDegree(0.2).keep(shift, 0))[0].numpy()
    deg = a.sum(1)
    i, j = np.nonzero(np.triu(a, 1))
    score = deg[i] + deg[j]
    cut = ~keep[i, j]
    assert cut.sum() == np.ceil(0.2 * len(i))
    assert score[cut].min() >= score[~cut].max()


def test_failure_configs_are_checked():
    with pytest.raises(ConfigError):
        Bernoulli(1.5)
    with pytest.raises(ConfigError):
        GilbertElliott(0.0, 0.0)
    with pytest.raises(ConfigError):
        make_failures("solar-flare", 0.2)
    assert isinstance(make_failures("bursty", 0.0), NoFailures)


def polynomial_filter(dense: torch.Tensor, x: torch.Tensor, layer: GraphFilter) -> torch.Tensor:
    z, out = x, 0
    for k in range(layer.taps):
        out = out + z @ layer.weight[k]
        z = torch.einsum("ij,bjf->bif", dense, z)
    return out + layer.bias


def test_graph_filter_is_the_polynomial_filter_sum_k_s_k_x_h_k():
    shift = ShiftOperator.from_adjacency(random_graph(), "max_eig")
    layer = GraphFilter(3, 4, taps=4)
    x = torch.randn(5, 12, 3)
    ex = LocalExchange()
    ex.begin_step(shift)
    out = layer(x, ex, Aggregation())
    torch.testing.assert_close(out, polynomial_filter(shift.to_dense()[0], x, layer), atol=1e-5, rtol=1e-5)
    assert ex.round == 3  # one communication round per shift


def test_every_shift_of_a_random_edge_sampled_filter_sees_its_own_realization():
    """Under Bernoulli failures the k-th shift uses the k-th round's mask: the filter equals the product of
    the masked operators round by round, and differs from reusing one mask for every shift."""
    shift = ShiftOperator.from_adjacency(random_graph(), "max_eig")
    failures = Bernoulli(0.4, seed=2)
    layer = GraphFilter(2, 2, taps=4)
    x = torch.randn(1, 12, 2)
    ex = LocalExchange(failures)
    ex.begin_step(shift)
    got = layer(x, ex, Aggregation())
    dense = shift.to_dense()[0]
    masks = [dense * dense_mask(shift, failures.keep(shift, r))[0] for r in range(3)]
    z, want = x, x @ layer.weight[0]
    for k in range(1, 4):
        z = torch.einsum("ij,bjf->bif", masks[k - 1], z)
        want = want + z @ layer.weight[k]
    torch.testing.assert_close(got, want + layer.bias, atol=1e-5, rtol=1e-5)
    z, same = x, x @ layer.weight[0]
    for k in range(1, 4):
        z = torch.einsum("ij,bjf->bif", masks[0], z)
        same = same + z @ layer.weight[k]
    assert not torch.allclose(got, same + layer.bias, atol=1e-4)


def test_exact_local_maps_agree_with_matrix_products():
    z, w = torch.randn(4, 7, 5), torch.randn(5, 3)
    torch.testing.assert_close(local_linear(z, w), z @ w, atol=1e-5, rtol=1e-5)
    wn = torch.randn(7, 5, 3)  # one weight per row (per agent)
    torch.testing.assert_close(local_linear(z, wn), local_linear(z, wn, exact=False), atol=1e-5, rtol=1e-5)
    # exact rows do not depend on which other rows are computed alongside
    assert torch.equal(local_linear(z, w)[:, 2:4], local_linear(z[:, 2:4], w))


def received(values, fresh, weights):
    from streamgnn.filters.exchange import Received

    values = tuple(torch.tensor(v).view(1, 1, 1) for v in values)
    fresh = torch.tensor([[fresh]])
    w = torch.tensor([[weights]])
    return Received(values, fresh, w, torch.zeros(1, 1), torch.ones_like(fresh))


def test_normalized_aggregation_rescales_by_the_weight_that_arrived():
    got = received([1.0, 2.0, 4.0], [True, False, True], [0.25, 0.25, 0.5])
    own = torch.zeros(1, 1, 1)
    assert Aggregation()(own, got).item() == pytest.approx(0.25 + 2.0)
    assert Aggregation(normalize=True)(own, got).item() == pytest.approx((0.25 + 2.0) / 0.75)
    nothing = received([1.0, 2.0], [False, False], [0.5, 0.5])
    assert Aggregation(normalize=True)(own, nothing).item() == 0.0


def test_hold_last_reuses_a_missing_neighbors_last_message_with_decay_then_drops_it():
    """Node 0 hears node 1 (weight 1): its message arrives at step 0 only; hold-last(2, 0.5) reuses it at
    steps 1 and 2 (weights 0.5, 0.25) and then stops."""
    shift = ShiftOperator.from_dense(np.array([[0.0, 1.0], [1.0, 0.0]]))

    class OnlyFirstRound(Bernoulli):
        def keep(self, shift, round, lanes=None):
            return super().keep(shift, round, lanes) | (round == 0)

    ex = LocalExchange(OnlyFirstRound(1.0), memory=True)
    agg = Aggregation(max_age=2, decay=0.5)
    seen = []
    for step in range(4):
        ex.begin_step(shift)
        x = torch.tensor([[[0.0], [10.0 + step]]])
        seen.append(agg(x, ex.receive(x))[0, 0, 0].item())
    assert seen == [10.0, 5.0, 2.5, 0.0]  # the step-0 message, decayed, never the newer values


def test_memory_follows_neighbors_by_id_when_the_graph_changes():
    """Node 0 hears 1 and 2, then only 2 and 3: the message remembered from 2 moves to its new slot."""
    a1 = np.zeros((4, 4))
    a1[0, [1, 2]] = 1
    a2 = np.zeros((4, 4))
    a2[0, [2, 3]] = 1
    ex = LocalExchange(memory=True)
    x = torch.arange(4.0).view(1, 4, 1) + 1
    ex.begin_step(ShiftOperator.from_dense(a1))
    ex.receive(x)
    ex.failures = AdversarialDegree(1.0)  # the next round delivers nothing
    ex.begin_step(ShiftOperator.from_dense(a2))
    got = ex.receive(x * 100)
    assert not got.fresh[0, 0].any()
    assert got.memory[0, 0, :, 0].tolist() == [3.0, 0.0]  # neighbor 2's old value, neighbor 3 unknown
    assert got.age[0, 0, 0].item() == 1 and got.age[0, 0, 1].item() > 1000


def test_graph_nn_saves_loads_and_swaps_aggregations(tmp_path):
    model = GraphNN(GraphNNConfig((2, 4, 3), taps=2, aggregation=Aggregation(normalize=True)))
    model.save(tmp_path / "m.pt")
    back = GraphNN.load(tmp_path / "m.pt")
    assert back.config == model.config
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), back.parameters(), strict=True))
    plain = model.with_aggregation(Aggregation())
    assert plain.aggregation == Aggregation() and model.aggregation.normalize
    assert plain.layers[0].weight is model.layers[0].weight
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="bad.pt"):
        GraphNN.load(tmp_path / "bad.pt")
    with pytest.raises(ConfigError, match="unknown key .depth. for GraphNNConfig"):
        GraphNNConfig.from_dict({"features": [1, 2], "depth": 3})
    with pytest.raises(ConfigError, match="input features"):
        ex = LocalExchange()
        ex.begin_step(ShiftOperator.from_adjacency(random_graph()))
        model(torch.randn(1, 12, 5), ex)
