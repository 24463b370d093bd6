"""Link-failure-robust GNN agents: robustness of each variant, flocking, decentralized training.

python benchmarks/agents.py [--quick] [--json] [--plot DIR] [--no-flocking]   (also: streamgnn bench agents)

All agents run in this process (``LocalAgents``; the MPI tests check that ``mpiexec -n 4`` gives the same
numbers). Full run: source localization on a 100-node, 10-community SBM (each variant trained 1500 steps),
accuracy at link failure rates 0 to 0.5 under Bernoulli, bursty and adversarial failures; flocking with 50
agents; decentralized training (1500 steps, 10% link failures) with and without compressed mixing against
centralized training of the same network. ``--quick`` runs a 50-node, 5-community graph with short training
(a smoke test of every path, under a minute on a quiet core; its figures are not the full run's).

Headline keys: ``robust_retained_at_0_3`` / ``plain_retained_at_0_3`` (accuracy at 30% Bernoulli link failures
over failure-free accuracy, for the robust variant ``res+normalized`` and the plain GNN),
``decentralized_acc_vs_central`` (uncompressed decentralized accuracy over centralized), and
``compressed_bytes_vs_full`` (mixing bytes of the compressed run over the uncompressed one, both run the same
steps; its accuracy over centralized is ``compressed_acc_vs_central``).
"""

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run under a minute (smaller graph, short training)"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--plot", default=None, help="folder for agents_source_loc.png, agents_flocking.png, ...")
    ap.add_argument("--no-flocking", action="store_true", help="skip the flocking sweep")
    ap.add_argument("--dsgd-steps", type=int, default=None, help="decentralized/centralized training steps")
    args = ap.parse_args(argv)
    if args.plot:
        Path(args.plot).mkdir(parents=True, exist_ok=True)
    set_threads(1)
    cfg = presets(args.quick)
    quiet = args.json
    start = time.perf_counter()
    task = SourceLocalization(cfg["task"])
    agents = LocalAgents(task.config.nodes)
    sweep = cfg["sweep"]
    models = train_source_loc(task, sweep, quiet=quiet)
    curves = sweep_source_loc(agents, models, task, sweep, quiet=quiet)
    kept = retained(curves["bernoulli"], sweep.probs)
    results: dict = {
        "robust_variant": ROBUST,
        "robust_retained_at_0_3": kept[ROBUST],
        "plain_retained_at_0_3": kept["plain"],
        "source_loc_nodes": task.config.nodes,
        "source_loc_probs": list(sweep.probs),
        "source_loc_accuracy": curves,
        "source_loc_retained_at_0_3": kept,
    }
    dsgd = cfg["dsgd"]
    if args.dsgd_steps:
        from dataclasses import replace

        dsgd = replace(dsgd, train=replace(dsgd.train, steps=args.dsgd_steps))
    dec = run_decentralized(agents, task, dsgd, quiet=quiet)
    central = dec["centralized"]["accuracy"]
    full, comp = dec["decentralized"]["none"], dec["decentralized"][COMPRESSED]
    results.update(
        {
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
    )
    if cfg["flocking"] and not args.no_flocking:
        setup, fsweep = cfg["flocking"]
        fmodels, scale = train_flocking(setup, fsweep, quiet=quiet)
        fcurves = sweep_flocking(agents, fmodels, scale, setup, fsweep, quiet=quiet)
        results["flocking_probs"] = list(fsweep.probs)
        results["flocking_velocity_variance"] = fcurves
        results["flocking_baselines"] = flocking_baselines(setup, fsweep.seed)
        if args.plot:
            plot_curves(
                fcurves,
                fsweep.probs,
                "mean velocity variance (lower is better)",
                Path(args.plot) / "agents_flocking.png",
                "flocking, 50 agents",
                results["flocking_baselines"],
            )
    results["seconds"] = time.perf_counter() - start
    results["load_average"] = list(os.getloadavg())
    if args.plot:
        plot_curves(
            curves,
            sweep.probs,
            "test accuracy (every agent)",
            Path(args.plot) / "agents_source_loc.png",
            f"source localization, {task.config.nodes} agents",
        )
        plot_decentralized(dec, Path(args.plot) / "agents_decentralized.png")
    report(results, args.json, "agents: robustness to link failures, decentralized training")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
