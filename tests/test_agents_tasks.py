"""Agent tasks and decentralized training in one process: source localization, flocking, compression,
gossip mixing, the experiments' variants and the CLI's argument handling."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
import torch

from streamgnn.agents.compress import Codec, Quantize, TopK, make_codec
from streamgnn.agents.dsgd import DecentralizedConfig, DecentralizedTrainer, Mixer
from streamgnn.agents.experiments import ROBUST, VARIANTS
from streamgnn.agents.flocking import Flocking, FlockingConfig, imitation_batches, velocity_variance
from streamgnn.agents.source_loc import SourceLocalization, SourceLocConfig
from streamgnn.cli import main
from streamgnn.errors import ConfigError
from streamgnn.filters.exchange import LocalExchange
from streamgnn.filters.failures import Bernoulli, NoFailures
from streamgnn.filters.graph_filter import GraphNN, GraphNNConfig
from streamgnn.filters.robust import Aggregation
from streamgnn.filters.shift import ShiftOperator


@pytest.mark.parametrize("name", ["fit", "source_loc", "flocking", "compress"])
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(f"streamgnn.agents.{name}"))
    assert result.attempted > 0 and result.failed == 0


def test_source_localization_signals_start_at_a_node_of_the_labelled_community():
    task = SourceLocalization(SourceLocConfig(nodes=30, communities=3, max_time=1, train=50, test=20))
    # max_time 1: the signal is the source's indicator, so its peak names the source node
    peaks = task.x_train.argmax(1).numpy()
    assert (task.community[peaks] == task.y_train.numpy()).all()
    assert np.allclose(task.x_train.max(1).values.numpy(), 1.0)
    feats = task.features(task.x_test, np.array([4, 25]))
    assert feats.shape == (20, 2, 4)
    tag = feats[..., 1:].sum(0) != 0  # each agent's reading is tagged with its own community only
    assert tag[0].tolist() in ([True, False, False], [False, False, False]) and not tag[1, :2].any()
    with pytest.raises(ConfigError, match="unknown key .edges. for SourceLocConfig"):
        SourceLocConfig.from_dict({"nodes": 10, "edges": 3})


def test_flocking_expert_aligns_velocities_and_observations_match_the_communication_graph():
    env = Flocking(FlockingConfig(agents=16, steps=60))
    pos, vel = env.initial(episodes=3, seed=1)
    _, v_exp, _ = env.rollout(pos, vel, lambda p, v, t: env.expert(p, v))
    _, v_none, _ = env.rollout(pos, vel, lambda p, v, t: np.zeros_like(p))
    assert velocity_variance(v_exp[-1]).mean() < 0.1 * velocity_variance(v_none[-1]).mean()
    feats, shift = env.observe(pos, vel)
    a = env.adjacency(pos)
    assert shift.lanes == 3 and feats.shape == (3, 16, 6)
    np.testing.assert_allclose(shift.to_dense().numpy(), a / a.sum(2, keepdims=True), atol=1e-6)
    # sensed feature 0: sum over neighbors in range of v_i - v_j
    want = (a[..., None] * (vel[:, :, None] - vel[:, None])).sum(2)
    np.testing.assert_allclose(feats[..., :2], want, atol=1e-9)
    batches, scale = imitation_batches(Flocking(FlockingConfig(agents=9, steps=5)), episodes=2, seed=0)
    x, s, y = batches(np.random.default_rng(0), 4)
    assert x.shape == (4, 9, 6) and s.lanes == 4 and y.shape == (4, 9, 2) and scale.shape == (6,)


@pytest.mark.parametrize(
    "codec",
    [Codec(), TopK(0.25), Quantize(2), Quantize(4), Quantize(8)],
    ids=lambda c: type(c).__name__ if type(c) is Codec else str(c),
)
def test_codecs_have_fixed_sizes_and_bounded_error(codec):
    rows = torch.randn(5, 37)
    data = codec.encode(rows)
    assert data.shape == (5, codec.nbytes(37)) and data.dtype == np.uint8
    back = codec.decode(data, 37)
    if isinstance(codec, TopK):  # the largest entries exactly, zeros elsewhere
        k = codec.k(37)
        assert ((back != 0).sum(1) == k).all()
        assert torch.equal(back.abs().topk(k).values.sort().values, rows.abs().topk(k).values.sort().values)
    elif isinstance(codec, Quantize):
        step = rows.abs().amax(1, keepdim=True) / (2 ** (codec.bits - 1) - 1)
        assert ((back - rows).abs() <= step / 2 + 1e-6).all()
    else:
        assert torch.equal(back, rows)
    assert Quantize(4).nbytes(100) == 4 + 50 and TopK(0.1).nbytes(100) == 80
    # a round in which every link of a rank failed sends nothing: zero rows (this raised and hung the MPI job)
    empty = codec.encode(rows[:0])
    assert empty.shape == (0, codec.nbytes(37)) and codec.decode(empty, 37).shape == (0, 37)
    with pytest.raises(ConfigError):
        make_codec("zip:9")


def ring(n: int) -> ShiftOperator:
    a = np.zeros((n, n))
    a[np.arange(n), (np.arange(n) + 1) % n] = 1
    return ShiftOperator.from_adjacency(a + a.T, "none")


@pytest.mark.parametrize("spec", ["none", "quant:8", "topk:0.5"])
def test_gossip_reaches_the_average_even_with_lossy_links_and_compression(spec):
    ex = LocalExchange(Bernoulli(0.3, seed=1))
    ex.begin_step(ring(8))
    theta = torch.randn(8, 5)
    mixer = Mixer(ex, torch.zeros(5), spec, rate=1.0 if spec == "none" else 0.5)
    for r in range(300):
        theta = mixer.mix(theta, ex.failures.keep(ex.shift, r)[0].numpy(), r)
    target = theta.mean(0)
    assert (theta - target).abs().max() < 1e-3  # consensus
    assert mixer.bytes_sent > 0


def test_gossip_preserves_the_average_without_compression():
    ex = LocalExchange(Bernoulli(0.3, seed=2))
    ex.begin_step(ring(6))
    theta = torch.randn(6, 3, dtype=torch.float32)
    mean = theta.mean(0)
    mixer = Mixer(ex, torch.zeros(3), "none", 1.0)
    for r in range(5):
        theta = mixer.mix(theta, ex.failures.keep(ex.shift, r)[0].numpy(), r)
    torch.testing.assert_close(theta.mean(0), mean, atol=1e-5, rtol=1e-5)


def test_decentralized_training_learns_and_compression_cuts_mixing_bytes():
    cfg = SourceLocConfig(nodes=16, communities=4, p_out=0.1, max_time=4, train=300, test=60, seed=1)
    task = SourceLocalization(cfg)

    def run(spec: str):
        torch.manual_seed(0)
        model = GraphNN(GraphNNConfig((5, 8, 4), taps=3, aggregation=Aggregation(normalize=True)))
        ex = LocalExchange(Bernoulli(0.1, seed=3), exact=False)
        trainer = DecentralizedTrainer(
            model, task, ex, DecentralizedConfig(steps=50, lr=3e-2, compression=spec)
        )
        losses = trainer.train()
        correct, total = trainer.correct_counts(LocalExchange())
        return np.mean(losses[:5]), np.mean(losses[-5:]), correct / total, trainer.mixing_bytes

    first, last, acc, full_bytes = run("none")
    assert last < 0.8 * first and acc > 0.45  # 4 classes: chance is 0.25
    _, last_q, acc_q, q_bytes = run("quant:4")
    assert q_bytes < 0.2 * full_bytes and last_q < 0.8 * first and acc_q > 0.45


def test_every_variant_names_a_training_and_the_robust_one_is_trained_with_sampling_and_normalization():
    from streamgnn.agents.experiments import TRAININGS

    assert set(VARIANTS) >= {"plain", "res", ROBUST}
    res, agg = TRAININGS[VARIANTS[ROBUST][0]]
    assert res and agg.normalize and VARIANTS[ROBUST][1].normalize


def test_cli_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["agents", "source-loc", "--probs", "0,2"])
    assert "failure probabilities must be in [0, 1)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["agents", "source-loc", "--kinds", "solar"])
    assert "choose from bernoulli, bursty, adversarial" in capsys.readouterr().err
    assert main(["agents", "source-loc", "--probs", "0.3", "--out", str(tmp_path)]) == 2
    assert "--probs must include 0" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as exc:  # checked while the arguments are parsed
        main(["agents", "flocking", "--out", str(tmp_path / "file" / "sub")])
    assert exc.value.code == 2 and "is a file; name a folder" in capsys.readouterr().err


def test_no_failures_model_keeps_every_link():
    shift = ring(5)
    assert torch.equal(NoFailures().keep(shift, 3), shift.valid)
