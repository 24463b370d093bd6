"""Link-failure-robust GNN agents: robustness of each variant, flocking, decentralized training.

python benchmarks/agents.py [--quick] [--json] [--plot DIR] [--only PARTS]   (also: streamgnn bench agents)

All agents run in this process (``LocalAgents``; the MPI tests check that ``mpiexec -n 4`` gives the same
numbers). Full run: source localization on a 100-node, 10-community SBM (each variant trained 1500 steps),
accuracy at link failure rates 0 to 0.5 under Bernoulli, bursty and adversarial failures; flocking with 50
agents (failure rates 0, 0.1, 0.3, 0.5); decentralized training (1000 steps, 10% link failures) with and
without compressed mixing against centralized training of the same network. ``--quick`` runs a 50-node,
5-community graph with short training (a smoke test of every path, under a minute on a quiet core; its figures
are not the full run's).

Headline keys: ``robust_retained_at_0_3`` / ``plain_retained_at_0_3`` (accuracy at 30% Bernoulli link failures
over failure-free accuracy, for the robust variant ``res+normalized`` and the plain GNN),
``decentralized_acc_vs_central`` (uncompressed decentralized accuracy over centralized), and
``compressed_bytes_vs_full`` (mixing bytes of the compressed run over the uncompressed one, both run the same
steps; its accuracy over centralized is ``compressed_acc_vs_central``)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

from streamgnn.agents.dsgd import DecentralizedConfig
from streamgnn.agents.experiments import (
    ROBUST,
    DecentralizedSetup,
    FlockingSetup,
    SweepConfig,
    flocking_baselines,
    plot_curves,
    plot_decentralized,
    retained,
    run_decentralized,
    sweep_flocking,
    sweep_source_loc,
    train_flocking,
    train_source_loc,
)
from streamgnn.agents.fit import FitConfig
from streamgnn.agents.flocking import FlockingConfig
from streamgnn.agents.runtime import LocalAgents
from streamgnn.agents.source_loc import SourceLocalization, SourceLocConfig
from streamgnn.cli._args import output_dir

COMPRESSED = "quant:8"


def presets(quick: bool) -> dict:
    if quick:
        task = SourceLocConfig(nodes=50, communities=5, train=1000, test=100)
        return {
            "task": task,
            "sweep": SweepConfig(
                probs=(0.0, 0.3), variants=("plain", ROBUST), fit=FitConfig(steps=150, batch=32)
            ),
            "flocking": None,
            "dsgd": DecentralizedSetup(DecentralizedConfig(steps=60), ("none", COMPRESSED)),
        }
    return {
        "task": SourceLocConfig(),
        "sweep": SweepConfig(kinds=("bernoulli", "bursty", "adversarial")),
        "flocking": (
            FlockingSetup(FlockingConfig(), test_episodes=5),
            SweepConfig(taps=3, fit=FitConfig(steps=600)),
        ),
        "dsgd": DecentralizedSetup(DecentralizedConfig(steps=1500), ("none", COMPRESSED)),
    }


def source_loc_part(cfg: dict, plot: Path | None, quiet: bool) -> dict:
    task = SourceLocalization(cfg["task"])
    sweep = cfg["sweep"]
    models = train_source_loc(task, sweep, quiet=quiet)
    curves = sweep_source_loc(LocalAgents(task.config.nodes), models, task, sweep, quiet=quiet)
    kept = retained(curves["bernoulli"], sweep.probs)
    if plot:
        plot_curves(
            curves,
            sweep.probs,
            "test accuracy (every agent)",
            plot / "agents_source_loc.png",
            f"source localization, {task.config.nodes} agents",
        )
    return {
        "robust_variant": ROBUST,
        "robust_retained_at_0_3": kept[ROBUST],
        "plain_retained_at_0_3": kept["plain"],
        "source_loc_nodes": task.config.nodes,
        "source_loc_probs": list(sweep.probs),
        "source_loc_accuracy": curves,
        "source_loc_retained_at_0_3": kept,
    }


def dsgd_part(cfg: dict, plot: Path | None, quiet: bool) -> dict:
    task = SourceLocalization(cfg["task"])
    dsgd = cfg["dsgd"]
    dec = run_decentralized(LocalAgents(task.config.nodes), task, dsgd, quiet=quiet)
    central = dec["centralized"]["accuracy"]
    full, comp = dec["decentralized"]["none"], dec["decentralized"][COMPRESSED]
    if plot:
        plot_decentralized(dec, plot / "agents_decentralized.png")
    return {
        "centralized_accuracy": central,
        "decentralized_accuracy": {k: v["accuracy"] for k, v in dec["decentralized"].items()},
        "decentralized_acc_vs_central": full["accuracy"] / central,
        "compressed": COMPRESSED,
        "compressed_acc_vs_central": comp["accuracy"] / central,
        "compressed_bytes_vs_full": comp["mixing_bytes"] / full["mixing_bytes"],
        "mixing_bytes": {k: v["mixing_bytes"] for k, v in dec["decentralized"].items()},
        "feature_bytes": {k: v["feature_bytes"] for k, v in dec["decentralized"].items()},
        "dsgd_steps": dsgd.train.steps,
        "dsgd_failure_p": dsgd.failure_p,
    }


def flocking_part(cfg: dict, plot: Path | None, quiet: bool) -> dict:
    setup, sweep = cfg["flocking"]
    models, scale = train_flocking(setup, sweep, quiet=quiet)
    curves = sweep_flocking(LocalAgents(setup.env.agents), models, scale, setup, sweep, quiet=quiet)
    base = flocking_baselines(setup, sweep.seed)
    if plot:
        plot_curves(
            curves,
            sweep.probs,
            "mean velocity variance (lower is better)",
            plot / "agents_flocking.png",
            f"flocking, {setup.env.agents} agents",
            base,
        )
    return {
        "flocking_probs": list(sweep.probs),
        "flocking_velocity_variance": curves,
        "flocking_baselines": base,
    }


PARTS = {"source-loc": source_loc_part, "dsgd": dsgd_part, "flocking": flocking_part}


HEADLINE = {
    "robust_retained_at_0_3": "robust GNN accuracy kept at 30% link failures, source localization on an SBM",
    "plain_retained_at_0_3": "plain GNN accuracy kept at 30% link failures, source localization on an SBM",
    "decentralized_acc_vs_central": "decentralized vs centralized accuracy, source localization on an SBM",
    "compressed_acc_vs_central": "compressed decentralized vs centralized accuracy, same task",
    "compressed_bytes_vs_full": "compressed mixing bytes vs uncompressed, same task",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run under a minute (smaller graph, short training)"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--plot",
        type=output_dir,
        default=None,
        help="folder for agents_source_loc.png, agents_flocking.png, ...",
    )
    ap.add_argument(
        "--only",
        default=",".join(PARTS),
        help=f"comma-separated parts to run, of {', '.join(PARTS)} (default all; quick has no flocking)",
    )
    args = ap.parse_args(argv)
    parts = [p for p in args.only.split(",") if p]
    if not set(parts) <= set(PARTS):
        ap.error(f"--only takes parts of {', '.join(PARTS)}, got {args.only!r}")
    plot = Path(args.plot) if args.plot else None
    if plot:
        plot.mkdir(parents=True, exist_ok=True)
    set_threads(1)
    cfg = presets(args.quick)
    start = time.perf_counter()
    results: dict = {}
    for name in parts:
        if name != "flocking" or cfg["flocking"]:
            results.update(PARTS[name](cfg, plot, quiet=args.json))
    results["seconds"] = time.perf_counter() - start
    results["load_average"] = list(os.getloadavg())
    report(
        results,
        args.json,
        "agents: robustness to link failures, decentralized training",
        HEADLINE,
        args.quick,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
