"""The experiments of the agents CLI and benchmark: robustness sweeps, flocking, decentralized training.

Every function takes ``agents`` (``LocalAgents`` or ``MPIAgents``): the same code runs in one process or as
one agent group per MPI rank. Training of the centralized models happens once, on rank 0 (``agents.share``);
evaluation runs the agents' rounds; results are added up at rank 0 (None on other ranks).

Variants (source localization and flocking alike), named ``training+aggregation``:

- ``plain``: ordinary training, plain aggregation (lost messages count as zero);
- ``plain+normalized``: the same weights, aggregation normalized by what was received;
- ``res``: trained with random edge sampling (each link kept with probability ``keep`` per shift);
- ``res+hold-last``: those weights reusing a missing neighbor's last message (up to 2 steps, decay 0.8);
- ``res+normalized``: trained with random edge sampling *and* normalized aggregation (the robust variant);
- ``res+normalized+hold-last``: that, plus stale messages.

Hold-last needs consecutive steps: a source-localization signal is observed for ``rounds`` steps and scored
on the last; flocking runs are time series anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..filters.exchange import LocalExchange
from ..filters.failures import make_failures, mix_seed
from ..filters.graph_filter import GraphNN, GraphNNConfig
from ..filters.robust import Aggregation
from ..progress import progress_bar
from .dsgd import DecentralizedConfig, DecentralizedTrainer
from .fit import FitConfig, fit
from .flocking import Flocking, FlockingConfig, imitation_batches, velocity_variance
from .source_loc import SourceLocalization, correct_counts

HOLD = dict(max_age=2, decay=0.8)
TRAININGS = {
    "plain": (False, Aggregation()),
    "res": (True, Aggregation()),
    "res+norm": (True, Aggregation(True)),
}
VARIANTS = {
    "plain": ("plain", Aggregation()),
    "plain+normalized": ("plain", Aggregation(normalize=True)),
    "res": ("res", Aggregation()),
    "res+hold-last": ("res", Aggregation(**HOLD)),
    "res+normalized": ("res+norm", Aggregation(normalize=True)),
    "res+normalized+hold-last": ("res+norm", Aggregation(normalize=True, **HOLD)),
}
ROBUST = "res+normalized"


@dataclass(frozen=True)
class SweepConfig:
    """Failure rates and models to evaluate, and training of the variants."""

    probs: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
    kinds: tuple[str, ...] = ("bernoulli",)
    keep: float = 0.7
    taps: int = 5
    hidden: int = 32
    fit: FitConfig = field(default_factory=FitConfig)
    variants: tuple[str, ...] = tuple(VARIANTS)
    seed: int = 0

    def __post_init__(self) -> None:
        replace(self.fit, keep=self.keep)  # the keep probability training will use: FitConfig's check, now


def train_variants(
    features: int, outputs: int, batches: Callable, loss, sweep: SweepConfig, quiet: bool = False
) -> dict[str, GraphNN]:
    """One model per training the chosen variants need (same seed, so the same initial weights)."""
    models = {}
    for name in sorted({VARIANTS[v][0] for v in sweep.variants}):
        res, agg = TRAININGS[name]
        torch.manual_seed(mix_seed(sweep.seed, 11))
        model = GraphNN(GraphNNConfig((features, sweep.hidden, outputs), sweep.taps, agg))
        cfg = replace(sweep.fit, keep=sweep.keep if res else 1.0)
        fit(model, batches, loss, cfg, desc=None if quiet else f"train {name}")
        models[name] = model
    return models


def _points(sweep: SweepConfig):
    return [(kind, p, v) for kind in sweep.kinds for v in sweep.variants for p in sweep.probs]


# -- source localization ----------------------------------------------------------------------------------


def source_loc_batches(task: SourceLocalization):
    def batches(rng: np.random.Generator, size: int):
        idx = rng.integers(0, len(task.y_train), size)
        return task.features(task.x_train[idx]), task.shift, task.y_train[idx]

    return batches


def node_cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Every node's logits ``[B, N, C]`` against the signal's label ``[B]``."""
    return torch.nn.functional.cross_entropy(
        out.reshape(-1, out.shape[-1]), y.repeat_interleave(out.shape[1])
    )


def train_source_loc(task: SourceLocalization, sweep: SweepConfig, quiet=False) -> dict[str, GraphNN]:
    return train_variants(
        task.num_features, task.num_classes, source_loc_batches(task), node_cross_entropy, sweep, quiet
    )


def sweep_source_loc(agents, models, task, sweep: SweepConfig, rounds: int = 3, quiet=False) -> dict | None:
    """Accuracy of every variant at every failure rate and model: ``{kind: {variant: [acc per p]}}``."""
    out: dict = {}
    for kind, p, v in progress_bar(
        iterable=_points(sweep), desc="sweep", disable=quiet or not agents.is_root, leave=False
    ):
        base, agg = VARIANTS[v]
        ex = agents.exchange(
            make_failures(kind, p, mix_seed(sweep.seed, 5)), per_lane=True, memory=agg.max_age > 0
        )
        counts = correct_counts(models[base].with_aggregation(agg), task, ex, rounds if agg.max_age else 1)
        total = agents.total(np.array(counts))
        if total is not None:
            out.setdefault(kind, {}).setdefault(v, []).append(float(total[0] / total[1]))
    return out if agents.is_root else None


def retained(curves: dict, probs: tuple[float, ...], at: float = 0.3) -> dict[str, float]:
    """``accuracy(at) / accuracy(0)`` per variant (the failure-free point must be in ``probs``)."""
    i0, i1 = probs.index(0.0), probs.index(at)
    return {v: acc[i1] / acc[i0] for v, acc in curves.items()}


def verify_source_loc(agents, models, task, sweep: SweepConfig, batch: int = 16) -> list[tuple[str, bool]]:
    """Run each (failure model, rate, variant) on ``batch`` test signals as agents (3 steps, memory kept)
    and, at rank 0, in one process under the same seeded failures; ``(setting, outputs equal)`` at rank 0."""

    def run(model: GraphNN, ex) -> torch.Tensor:
        feats = task.features(task.x_test[:batch], ex.rows if ex.rows.size else None)
        with torch.no_grad():
            for _ in range(3):
                ex.begin_step(task.shift)
                out = model(feats, ex)
        return out

    checks = []
    for kind, p, v in _points(sweep):
        base, agg = VARIANTS[v]
        model = models[base].with_aggregation(agg)
        seed = mix_seed(sweep.seed, 5)
        spread = agents.all_rows(run(model, agents.exchange(make_failures(kind, p, seed), True, True)))
        if agents.is_root:
            one = run(model, LocalExchange(make_failures(kind, p, seed), per_lane=True, memory=True))
            checks.append((f"{kind} p={p:g} {v}", torch.equal(spread, one)))
    return checks


# -- flocking ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlockingSetup:
    env: FlockingConfig = field(default_factory=FlockingConfig)
    train_episodes: int = 20
    test_episodes: int = 10


def train_flocking(
    setup: FlockingSetup, sweep: SweepConfig, quiet=False
) -> tuple[dict[str, GraphNN], np.ndarray]:
    env = Flocking(setup.env)
    batches, scale = imitation_batches(env, setup.train_episodes, mix_seed(sweep.seed, 21))
    models = train_variants(6, 2, batches, torch.nn.functional.mse_loss, sweep, quiet)
    return models, scale


def flocking_run(
    agents, model: GraphNN, setup: FlockingSetup, scale, failures, memory: bool, seed: int
) -> float:
    """Mean velocity variance of a closed-loop run of ``model`` as the agents' controller (every rank
    simulates the physics; each agent computes its own acceleration from messages)."""
    env = Flocking(setup.env)
    pos, vel = env.initial(setup.test_episodes, mix_seed(seed, 31))
    ex = agents.exchange(failures, per_lane=True, memory=memory)
    rows = torch.from_numpy(agents.nodes)

    def controller(p, v, t):
        feats, shift = env.observe(p, v)
        ex.begin_step(shift)
        with torch.no_grad():
            local = model(torch.from_numpy(feats / scale).float()[:, rows], ex)
        return agents.all_rows(local).double().numpy()

    _, vel_t, _ = env.rollout(pos, vel, controller)
    return float(velocity_variance(vel_t).mean())


def flocking_baselines(setup: FlockingSetup, seed: int) -> dict[str, float]:
    """Velocity variance of the centralized controller and of no control, on the same starts."""
    env = Flocking(setup.env)
    pos, vel = env.initial(setup.test_episodes, mix_seed(seed, 31))
    _, v_exp, _ = env.rollout(pos, vel, lambda p, v, t: env.expert(p, v))
    _, v_none, _ = env.rollout(pos, vel, lambda p, v, t: np.zeros_like(p))
    return {
        "centralized": float(velocity_variance(v_exp).mean()),
        "no_control": float(velocity_variance(v_none).mean()),
    }


def sweep_flocking(
    agents, models, scale, setup: FlockingSetup, sweep: SweepConfig, quiet=False
) -> dict | None:
    out: dict = {}
    for kind, p, v in progress_bar(
        iterable=_points(sweep), desc="flocking", disable=quiet or not agents.is_root, leave=False
    ):
        base, agg = VARIANTS[v]
        failures = make_failures(kind, p, mix_seed(sweep.seed, 5))
        var = flocking_run(
            agents, models[base].with_aggregation(agg), setup, scale, failures, agg.max_age > 0, sweep.seed
        )
        out.setdefault(kind, {}).setdefault(v, []).append(var)
    return out if agents.is_root else None


# -- decentralized training -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecentralizedSetup:
    train: DecentralizedConfig = field(default_factory=DecentralizedConfig)
    compressions: tuple[str, ...] = ("none", "quant:8")
    failure_p: float = 0.1
    taps: int = 5
    hidden: int = 32

    def __post_init__(self) -> None:
        """Refuse what would fail only after the centralized training (a codec is built per run)."""
        from ..errors import ConfigError
        from .compress import make_codec

        if not self.compressions:
            raise ConfigError("compressions: name at least one, e.g. none,quant:8")
        for spec in self.compressions:
            make_codec(spec)
        if not 0.0 <= self.failure_p < 1.0:
            raise ConfigError(f"failure_p must be in [0, 1), got {self.failure_p}")


def run_decentralized(
    agents, task: SourceLocalization, setup: DecentralizedSetup, quiet=False
) -> dict | None:
    """Centralized training (rank 0) against decentralized training with each compression: test accuracy
    (each agent with its own parameters, no failures), mixing and feature-message bytes, loss curves."""
    cfg = setup.train

    def new_model() -> GraphNN:
        torch.manual_seed(mix_seed(cfg.seed, 11))
        agg = Aggregation(normalize=True)
        return GraphNN(GraphNNConfig((task.num_features, setup.hidden, task.num_classes), setup.taps, agg))

    def central():
        model = new_model()
        losses = fit(
            model,
            source_loc_batches(task),
            node_cross_entropy,
            FitConfig(steps=cfg.steps, batch=cfg.batch, lr=cfg.lr, seed=cfg.seed),
            desc=None if quiet else "train centralized",
        )
        c, t = correct_counts(model, task, LocalExchange())
        return {"accuracy": c / t, "loss": losses}

    result = {"centralized": agents.share(central), "decentralized": {}}
    for spec in setup.compressions:
        run_cfg = replace(cfg, compression=spec)
        ex = agents.exchange(make_failures("bernoulli", setup.failure_p, mix_seed(cfg.seed, 41)), exact=False)
        trainer = DecentralizedTrainer(new_model(), task, ex, run_cfg)
        trainer.train(desc=None if quiet or not agents.is_root else f"decentralized {spec}")
        counts = trainer.correct_counts(agents.exchange())
        sums = agents.total(np.array([*counts, trainer.mixing_bytes, trainer.feature_bytes]))
        loss = agents.total(np.array(trainer.losses) * len(agents.nodes))
        if sums is not None:
            result["decentralized"][spec] = {
                "accuracy": float(sums[0] / sums[1]),
                "mixing_bytes": int(sums[2]),
                "feature_bytes": int(sums[3]),
                "loss": (loss / task.config.nodes).tolist(),
            }
    return result if agents.is_root else None


# -- pictures ---------------------------------------------------------------------------------------------


def plot_curves(curves: dict, probs, ylabel: str, path, title: str, baselines: dict | None = None) -> None:
    """One panel per failure model, one line per variant (and dashed reference levels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(curves)
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 3.8), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        for v, ys in curves[kind].items():
            ax.plot(probs, ys, marker="o", label=v, linewidth=2.2 if v == ROBUST else 1.2)
        for name, level in (baselines or {}).items():
            ax.axhline(level, linestyle="--", color="gray", linewidth=0.8)
            ax.annotate(name, (probs[-1], level), fontsize=7, ha="right", va="bottom", color="gray")
        ax.set_xlabel(f"link failure probability ({kind})")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_decentralized(result: dict, path) -> None:
    """Training loss of centralized and decentralized runs, and bytes each run sent to mix parameters."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    runs = {"centralized": result["centralized"], **result["decentralized"]}
    for name, run in runs.items():
        loss = np.asarray(run["loss"])
        k = max(1, len(loss) // 50)
        ax1.plot(np.convolve(loss, np.ones(k) / k, mode="valid"), label=f"{name} (acc {run['accuracy']:.3f})")
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss per agent")
    ax1.legend(fontsize=8)
    names = list(result["decentralized"])
    ax2.bar(names, [result["decentralized"][n]["mixing_bytes"] / 1e6 for n in names])
    ax2.set_ylabel("parameter-mixing MB sent (all agents)")
    fig.suptitle("decentralized training on source localization")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
