"""The agents jobs behind ``streamgnn agents``: link-failure-robust GNN agents, in one process or under
``mpiexec -n N``, with their fault injection (``Faults``).

Under ``mpiexec`` every rank hosts a block of agents (``N`` ranks, any number of agents each); rank 0 trains
the centralized models, hands them out, and writes the report; the agents' rounds only ever talk to
neighbors' ranks. Without ``mpiexec`` all agents run in this process. Each job takes the ``agents`` config
section (``agents.config.AgentsConfig``), the run's ``Faults`` and a ``Report`` (where and how loudly), and
returns the process's exit status; the CLI only parses flags into these.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError

# Faults.die_round, besides a forward round: before MPI start-up finishes; before the setup is shared;
# before the results are gathered
STARTUP, SETUP, GATHER = "startup", "setup", "gather"
ACCURACY = "test accuracy: the fraction of agents that name the source's community"


def _mpi_rank() -> int:
    return int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))


def _mpi_size() -> int | None:
    size = os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE"))
    return None if size is None else int(size)


@dataclass(frozen=True)
class Faults:
    """How a run under ``mpiexec`` meets failed ranks, and the faults it injects on purpose (tests).

    ``deadline_s``: seconds a round waits for a neighbor rank's messages (None: forever, so outcomes never
    depend on timing); a rank silent for ``patience`` rounds is failed. ``fault_tolerant``: this rank's
    agents run as a supervised child, so a killed agent process does not take the job down (needs a
    deadline). ``die_rank`` kills itself at ``die_round``: a forward round, or ``STARTUP``, ``SETUP``,
    ``GATHER``."""

    deadline_s: float | None = None
    patience: int = 3
    fault_tolerant: bool = False
    die_rank: int | None = None
    die_round: int | str = 5

    def check(self) -> None:
        """What the flags cannot see alone, checked before any work starts."""
        size = _mpi_size() or 1
        if self.die_rank is not None and self.die_rank >= size:
            raise ConfigError(f"--die-rank {self.die_rank}: this job has ranks 0 to {size - 1}")
        if self.fault_tolerant and self.deadline_s is None:
            raise ConfigError(
                "--fault-tolerant needs --deadline: without one the others would wait for a killed agent "
                "forever"
            )

    def here(self) -> int | str | None:
        """This rank's ``die_round``, or None where it is not the one to die."""
        return self.die_round if self.die_rank is not None and _mpi_rank() == self.die_rank else None


@dataclass(frozen=True)
class Report:
    """Where a job writes its JSON summary and PNG plot (``out``, made up front), and whether it prints."""

    out: Path
    quiet: bool = False

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, summary: dict) -> None:
        (self.out / name).write_text(json.dumps(summary, indent=1))
        if not self.quiet:
            print(f"wrote {self.out / name}")


def start_agents(faults: Faults, num_agents: int):
    """The agents of this process: a block of them per rank under ``mpiexec`` (``MPIAgents``, injecting
    ``faults``), else all of them here (``LocalAgents``)."""
    from ..agents.runtime import LocalAgents, MPIAgents

    if _mpi_size() is None:
        return LocalAgents(num_agents)
    import torch

    torch.set_num_threads(1)  # ranks share the cores: one thread each
    die = faults.here()
    if die == STARTUP:
        os.kill(os.getpid(), signal.SIGKILL)  # fault injection: before MPI start-up
    agents = MPIAgents(
        num_agents,
        deadline_s=faults.deadline_s,
        patience=faults.patience,
        die_at_round=die if isinstance(die, int) else None,
        die_at_gather=die == GATHER,
    )
    if die == SETUP:
        os.kill(os.getpid(), signal.SIGKILL)  # fault injection: started, the setup not shared yet
    return agents


def _end(agents, code: int = 0) -> int:
    from ..agents.runtime import finish, supervised

    agents.close()
    if supervised():
        finish(code)
    return code


def _print_curves(curves: dict, probs, fmt: str) -> None:
    for kind, table in curves.items():
        print(f"{kind}: " + "  ".join(f"p={p:g}" for p in probs))
        for v, ys in table.items():
            print(f"  {v:<26}" + "  ".join(fmt.format(y) for y in ys))


def source_loc(cfg, faults: Faults, report: Report, rounds: int = 3, verify_probs=None) -> int:
    """Train the variants on rank 0, run the agents under each failure rate and model, write
    ``source_loc.json`` and ``source_loc.png``. ``verify_probs``: also check that the agents' outputs equal
    a one-process run under the same seeded failures at these rates (status 1 if not)."""
    from ..agents.experiments import sweep_source_loc, train_source_loc, verify_source_loc
    from ..agents.source_loc import SourceLocalization

    task_cfg, sweep = cfg.source_loc, cfg.sweep
    if 0.0 not in sweep.probs:
        raise ConfigError("--probs must include 0 (the failure-free accuracy the others are compared with)")
    task = SourceLocalization(task_cfg)
    agents = start_agents(faults, task_cfg.nodes)
    start = time.perf_counter()
    models = agents.share(lambda: train_source_loc(task, sweep, quiet=report.quiet))
    curves = sweep_source_loc(agents, models, task, sweep, rounds=rounds, quiet=report.quiet)
    checks = []
    if verify_probs is not None:
        checks = verify_source_loc(agents, models, task, replace(sweep, probs=verify_probs))
    failed = agents.gather(agents.failed_ranks)
    if agents.is_root:
        _source_loc_report(
            report, cfg, task, agents.size, curves, checks, failed, time.perf_counter() - start
        )
        if checks and not all(ok for _, ok in checks):
            return _end(agents, 1)
    return _end(agents)


def _source_loc_report(report: Report, cfg, task, ranks: int, curves, checks, failed, seconds: float) -> None:
    from ..agents.experiments import ROBUST, plot_curves, retained

    task_cfg, probs = cfg.source_loc, cfg.sweep.probs
    chance = 1.0 / task.num_classes
    summary = {
        "task": task_cfg.to_dict(),
        "ranks": ranks,
        "probs": list(probs),
        "metric": ACCURACY,
        "chance": chance,
        "accuracy": curves,
        "retained_at_0_3": {k: retained(c, probs) for k, c in curves.items()} if 0.3 in probs else {},
        "robust_variant": ROBUST,
        "verify": {name: ok for name, ok in checks},
        "failed_ranks_seen": {r: f for r, f in enumerate(failed) if f},
        "unreported_ranks": [r for r, f in enumerate(failed) if f is None],
        "seconds": seconds,
    }
    if not report.quiet:
        print(f"{ACCURACY} (chance: {chance:.3f}) by link failure probability p")
        _print_curves(curves, probs, "{:7.3f}")
        for name, ok in checks:
            print(f"verify {name}: {'equal' if ok else 'DIFFERENT'}")
        print(f"failed ranks seen: {summary['failed_ranks_seen']}")
    report.write("source_loc.json", summary)
    plot_curves(
        curves,
        probs,
        "test accuracy (every agent)",
        report.out / "source_loc.png",
        f"source localization, {task_cfg.nodes} agents, "
        + ("one process" if ranks == 1 else f"{ranks} MPI ranks"),
        baselines={f"chance ({task.num_classes} communities)": chance},
    )


def flocking(cfg, faults: Faults, report: Report) -> int:
    """Imitate the centralized flocking controller, then fly the agents under each failure rate and model;
    writes ``flocking.json`` and ``flocking.png``."""
    from ..agents.experiments import flocking_baselines, plot_curves, sweep_flocking, train_flocking

    setup, sweep = cfg.flocking, cfg.sweep
    agents = start_agents(faults, setup.env.agents)
    start = time.perf_counter()
    models, scale = agents.share(lambda: train_flocking(setup, sweep, quiet=report.quiet))
    curves = sweep_flocking(agents, models, scale, setup, sweep, quiet=report.quiet)
    failed = agents.gather(agents.failed_ranks)
    if agents.is_root:
        base = flocking_baselines(setup, sweep.seed)
        summary = {
            "env": setup.env.to_dict(),
            "ranks": agents.size,
            "probs": list(sweep.probs),
            "velocity_variance": curves,
            "baselines": base,
            "failed_ranks_seen": {r: f for r, f in enumerate(failed) if f},
            "seconds": time.perf_counter() - start,
        }
        if not report.quiet:
            _print_curves(curves, sweep.probs, "{:7.3f}")
            print("  " + "  ".join(f"{k}: {v:.3f}" for k, v in base.items()))
        report.write("flocking.json", summary)
        plot_curves(
            curves,
            sweep.probs,
            "mean velocity variance (lower is better)",
            report.out / "flocking.png",
            f"flocking, {setup.env.agents} agents imitating the centralized controller",
            base,
        )
    return _end(agents)


def decentralized(cfg, faults: Faults, report: Report) -> int:
    """Every agent trains its own copy on source localization from messages only and mixes parameters with
    its neighbors, against the centralized model; writes ``decentralized.json`` and ``decentralized.png``."""
    from ..agents.experiments import plot_decentralized, run_decentralized
    from ..agents.source_loc import SourceLocalization

    task_cfg, setup = cfg.source_loc, cfg.decentralized
    task = SourceLocalization(task_cfg)
    agents = start_agents(faults, task_cfg.nodes)
    result = run_decentralized(agents, task, setup, quiet=report.quiet)
    if agents.is_root:
        central = result["centralized"]["accuracy"]
        full = result["decentralized"].get("none")
        for run in result["decentralized"].values():
            run["accuracy_vs_central"] = run["accuracy"] / central
            if full:
                run["mixing_bytes_vs_full"] = run["mixing_bytes"] / full["mixing_bytes"]
        if not report.quiet:
            print(f"centralized: accuracy {central:.3f}")
            for spec, run in result["decentralized"].items():
                print(
                    f"decentralized {spec}: accuracy {run['accuracy']:.3f} "
                    f"({run['accuracy_vs_central']:.3f} of centralized), "
                    f"mixing {run['mixing_bytes'] / 1e6:.1f} MB, features "
                    f"{run['feature_bytes'] / 1e6:.1f} MB"
                )
        report.write("decentralized.json", {"task": task_cfg.to_dict(), "ranks": agents.size, **result})
        plot_decentralized(result, report.out / "decentralized.png")
    return _end(agents)
