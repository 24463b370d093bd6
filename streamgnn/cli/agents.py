"""``streamgnn agents ...``: link-failure-robust GNN agents, in one process or under ``mpiexec -n N``.

Under ``mpiexec`` every rank hosts a block of agents (``N`` ranks, any number of agents each); rank 0 trains
the centralized models, hands them out, and writes the report; the agents' rounds only ever talk to
neighbors' ranks. Without ``mpiexec`` all agents run in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError
from ._args import output_dir, positive_float, positive_int
from ._config import add_config_option, config_from_args, override

# --die-round: before MPI start-up finishes; before the setup is shared; before the results are gathered
STARTUP, SETUP, GATHER = "startup", "setup", "gather"


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None
    if not all(0.0 <= v < 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"failure probabilities must be in [0, 1), got {text!r}")
    return values


def _index(text: str) -> int:
    """A rank or round: an int >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an int >= 0, got {text!r}")
    return value


def _die_round(text: str) -> int | str:
    return text if text in (STARTUP, SETUP, GATHER) else _index(text)


def _names(choices) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v for v in text.split(",") if v)
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}; got {text!r}")
        return values

    return parse


def _out_dir(path: str) -> Path:
    """``--out``, made (parsing checked that it can be written)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _agents(args, num_agents: int):
    from ..agents.runtime import LocalAgents, MPIAgents

    if "PMI_SIZE" in os.environ or "OMPI_COMM_WORLD_SIZE" in os.environ:
        import torch

        torch.set_num_threads(1)  # ranks share the cores: one thread each
        die = _die(args)
        if die == STARTUP:
            os.kill(os.getpid(), signal.SIGKILL)  # fault injection: before MPI start-up
        agents = MPIAgents(
            num_agents,
            deadline_s=args.deadline,
            patience=args.patience,
            die_at_round=die if isinstance(die, int) else None,
            die_at_gather=die == GATHER,
        )
        if die == SETUP:
            os.kill(os.getpid(), signal.SIGKILL)  # fault injection: started, the setup not shared yet
        return agents
    return LocalAgents(num_agents)


def _die(args) -> int | None:
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
    return args.die_round if args.die_rank is not None and rank == args.die_rank else None


def _config(args):
    """The ``agents`` section of ``--config`` with this task's defaults, environment and flags."""
    return config_from_args(args).agents


def _write(out: Path, name: str, summary: dict, quiet: bool) -> None:
    (out / name).write_text(json.dumps(summary, indent=1))
    if not quiet:
        print(f"wrote {out / name}")


def _end(agents, code: int = 0) -> int:
    from ..agents.runtime import finish, supervised

    agents.close()
    if supervised():
        finish(code)
    return code


ACCURACY = "test accuracy: the fraction of agents that name the source's community"


def _print_curves(curves: dict, probs, fmt: str) -> None:
    for kind, table in curves.items():
        print(f"{kind}: " + "  ".join(f"p={p:g}" for p in probs))
        for v, ys in table.items():
            print(f"  {v:<26}" + "  ".join(fmt.format(y) for y in ys))


def _source_loc(args, rest) -> int:
    from ..agents.experiments import (
        ROBUST,
        plot_curves,
        retained,
        sweep_source_loc,
        train_source_loc,
        verify_source_loc,
    )
    from ..agents.source_loc import SourceLocalization

    out = _out_dir(args.out)
    cfg = _config(args)
    task_cfg, sweep = cfg.source_loc, cfg.sweep
    if 0.0 not in sweep.probs:
        raise ConfigError("--probs must include 0 (the failure-free accuracy the others are compared with)")
    task = SourceLocalization(task_cfg)
    agents = _agents(args, task_cfg.nodes)
    start = time.perf_counter()
    models = agents.share(lambda: train_source_loc(task, sweep, quiet=args.quiet))
    curves = sweep_source_loc(agents, models, task, sweep, rounds=args.rounds, quiet=args.quiet)
    checks = verify_source_loc(agents, models, task, _verify_sweep(args, sweep)) if args.verify else []
    failed = agents.gather(agents.failed_ranks)
    if agents.is_root:
        chance = 1.0 / task.num_classes
        summary = {
            "task": task_cfg.to_dict(),
            "ranks": agents.size,
            "probs": list(sweep.probs),
            "metric": ACCURACY,
            "chance": chance,
            "accuracy": curves,
            "retained_at_0_3": {k: retained(c, sweep.probs) for k, c in curves.items()}
            if 0.3 in sweep.probs
            else {},
            "robust_variant": ROBUST,
            "verify": {name: ok for name, ok in checks},
            "failed_ranks_seen": {r: f for r, f in enumerate(failed) if f},
            "unreported_ranks": [r for r, f in enumerate(failed) if f is None],
            "seconds": time.perf_counter() - start,
        }
        if not args.quiet:
            print(f"{ACCURACY} (chance: {chance:.3f}) by link failure probability p")
            _print_curves(curves, sweep.probs, "{:7.3f}")
            for name, ok in checks:
                print(f"verify {name}: {'equal' if ok else 'DIFFERENT'}")
            print(f"failed ranks seen: {summary['failed_ranks_seen']}")
        _write(out, "source_loc.json", summary, args.quiet)
        plot_curves(
            curves,
            sweep.probs,
            "test accuracy (every agent)",
            out / "source_loc.png",
            f"source localization, {task_cfg.nodes} agents, "
            + ("one process" if agents.size == 1 else f"{agents.size} MPI ranks"),
            baselines={f"chance ({task.num_classes} communities)": chance},
        )
        if checks and not all(ok for _, ok in checks):
            return _end(agents, 1)
    return _end(agents)


def _verify_sweep(args, sweep):
    from dataclasses import replace

    return replace(sweep, probs=args.verify_probs)


def _flocking(args, rest) -> int:
    from ..agents.experiments import (
        flocking_baselines,
        plot_curves,
        sweep_flocking,
        train_flocking,
    )

    out = _out_dir(args.out)
    cfg = _config(args)
    setup, sweep = cfg.flocking, cfg.sweep
    agents = _agents(args, setup.env.agents)
    start = time.perf_counter()
    models, scale = agents.share(lambda: train_flocking(setup, sweep, quiet=args.quiet))
    curves = sweep_flocking(agents, models, scale, setup, sweep, quiet=args.quiet)
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
        if not args.quiet:
            _print_curves(curves, sweep.probs, "{:7.3f}")
            print("  " + "  ".join(f"{k}: {v:.3f}" for k, v in base.items()))
        _write(out, "flocking.json", summary, args.quiet)
        plot_curves(
            curves,
            sweep.probs,
            "mean velocity variance (lower is better)",
            out / "flocking.png",
            f"flocking, {setup.env.agents} agents imitating the centralized controller",
            base,
        )
    return _end(agents)


def _train(args, rest) -> int:
    from ..agents.experiments import plot_decentralized, run_decentralized
    from ..agents.source_loc import SourceLocalization

    out = _out_dir(args.out)
    cfg = _config(args)
    task_cfg, setup = cfg.source_loc, cfg.decentralized
    task = SourceLocalization(task_cfg)
    agents = _agents(args, task_cfg.nodes)
    result = run_decentralized(agents, task, setup, quiet=args.quiet)
    if agents.is_root:
        central = result["centralized"]["accuracy"]
        full = result["decentralized"].get("none")
        for run in result["decentralized"].values():
            run["accuracy_vs_central"] = run["accuracy"] / central
            if full:
                run["mixing_bytes_vs_full"] = run["mixing_bytes"] / full["mixing_bytes"]
        if not args.quiet:
            print(f"centralized: accuracy {central:.3f}")
            for spec, run in result["decentralized"].items():
                print(
                    f"decentralized {spec}: accuracy {run['accuracy']:.3f} "
                    f"({run['accuracy_vs_central']:.3f} of "
                    f"centralized), mixing {run['mixing_bytes'] / 1e6:.1f} MB, features "
                    f"{run['feature_bytes'] / 1e6:.1f} MB"
                )
        _write(
            out,
            "decentralized.json",
            {"task": task_cfg.to_dict(), "ranks": agents.size, **result},
            args.quiet,
        )
        plot_decentralized(result, out / "decentralized.png")
    return _end(agents)


def _common(p: argparse.ArgumentParser, out: str, task: str) -> None:
    """The training, failure-sweep and MPI options; ``task`` is ``sweep`` (source-loc, flocking: the
    config's ``agents.sweep``) or ``decentralized`` (train: ``agents.decentralized``)."""
    from ..filters.failures import FAILURE_KINDS

    fit = "agents.sweep.fit." if task == "sweep" else "agents.decentralized.train."
    model = f"agents.{task}."
    seeds = (fit + "seed", "agents.source_loc.seed") + (("agents.sweep.seed",) if task == "sweep" else ())
    g = p.add_argument_group("task and training")
    override(g, "--fit-steps", key=fit + "steps", type=positive_int, help="training steps")
    override(g, "--batch", key=fit + "batch", type=positive_int, help="signals per training step")
    override(g, "--lr", key=fit + "lr", type=positive_float, help="Adam learning rate")
    override(
        g, "--taps", key=model + "taps", type=positive_int, help="filter taps K per layer (K-1 rounds each)"
    )
    override(g, "--hidden", key=model + "hidden", type=positive_int, help="hidden features per agent")
    override(g, "--seed", key=seeds, type=int, help="seed of the task, the training and the failures")
    if task == "sweep":
        override(
            g, "--keep", key="agents.sweep.keep", type=float,
            help="link keep probability of random edge sampling in training",
        )  # fmt: skip
        s = p.add_argument_group("failure sweep")
        override(
            s, "--probs", key="agents.sweep.probs", type=_floats,
            help="link failure probabilities, e.g. --probs 0,0.3,0.5 (must include 0)",
        )  # fmt: skip
        override(
            s, "--kinds", key="agents.sweep.kinds", type=_names(FAILURE_KINDS),
            help="failure models: bernoulli, bursty (Gilbert-Elliott, bursts of 4 rounds), "
            "adversarial (cut the highest-degree links), e.g. --kinds bernoulli,bursty",
        )  # fmt: skip
        from ..agents.experiments import VARIANTS

        override(
            s, "--variants", key="agents.sweep.variants", type=_names(tuple(VARIANTS)),
            help=f"which of {', '.join(VARIANTS)}",
        )  # fmt: skip
    m = p.add_argument_group("MPI and faults (under mpiexec)")
    m.add_argument(
        "--deadline",
        type=positive_float,
        default=None,
        help="seconds a round waits for a neighbor rank's messages; missed ones are lost, a rank "
        "silent for --patience rounds is failed (default: wait forever, outcomes never depend on "
        "timing)",
    )
    m.add_argument("--patience", type=positive_int, default=3)
    m.add_argument(
        "--fault-tolerant",
        action="store_true",
        help="run this rank's agents as a supervised child so that a killed agent process does not "
        "take the job down; use with mpiexec -disable-auto-cleanup and --deadline",
    )
    m.add_argument(
        "--die-rank", type=_index, default=None, help="fault injection: this rank's process kills itself"
    )
    m.add_argument(
        "--die-round", type=_die_round, default=5,
        help="... at this forward round (default 5); 'startup': before MPI start-up finishes; 'setup': "
        "before the setup (rank 0's trained models) is shared; 'gather': before the results are gathered",
    )  # fmt: skip
    p.add_argument(
        "--out",
        type=output_dir,
        default=out,
        help=f"report folder: JSON summary and PNG plot (default {out})",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars or tables")
    add_config_option(p, f"agents (source_loc, {task}{', flocking' if task == 'sweep' else ''})")


def _source_loc_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("source localization graph and signals (agents.source_loc)")
    key = "agents.source_loc."
    override(g, "--nodes", key=key + "nodes", type=positive_int, help="agents (SBM nodes)")
    override(
        g, "--communities", key=key + "communities", type=positive_int,
        help="SBM communities = classes",
    )  # fmt: skip
    override(g, "--p-in", key=key + "p_in", type=float, help="edge probability within a community")
    override(g, "--p-out", key=key + "p_out", type=float, help="edge probability across communities")
    override(
        g, "--max-time", key=key + "max_time", type=positive_int,
        help="diffusion steps drawn from [0, max-time)",
    )  # fmt: skip
    override(g, "--train", key=key + "train", type=positive_int, help="training signals")
    override(g, "--test", key=key + "test", type=positive_int, help="test signals")


def _check(args: argparse.Namespace) -> None:
    """What argparse cannot see alone, checked before any work starts."""
    size = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    if args.die_rank is not None and args.die_rank >= size:
        raise ConfigError(f"--die-rank {args.die_rank}: this job has ranks 0 to {size - 1}")
    if args.fault_tolerant and args.deadline is None:
        raise ConfigError(
            "--fault-tolerant needs --deadline: without one the others would wait for a killed agent forever"
        )


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..agents.runtime import supervise, supervised

    _check(args)
    _config(args)  # the config's own checks (codecs, rates), before any work
    if args.fault_tolerant and not supervised():
        return supervise([sys.executable, "-m", "streamgnn.cli", *sys.argv[1:]])
    return args.agents_func(args, rest)


EXAMPLE = """example:
  streamgnn agents source-loc --probs 0,0.3 --kinds bernoulli,bursty --out out/agents
  mpiexec -n 4 streamgnn agents source-loc --verify --out out/agents-mpi
  mpiexec -n 4 streamgnn agents train --compression none,quant:8,topk:0.1
  streamgnn agents flocking --config agents.yaml   # agents.flocking, agents.sweep: the config dataclasses
  streamgnn agents TASK --help   # each task's options
"""


def register(sub) -> None:
    a = sub.add_parser(
        "agents",
        help="link-failure-robust GNN agents (works under mpiexec -n N)",
        description=__doc__,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tasks = a.add_subparsers(dest="task", required=True, metavar="TASK")
    sl = tasks.add_parser(
        "source-loc",
        help="source localization: accuracy against link failures for each variant",
        description="Train the variants on rank 0, run the agents under each failure rate and model, write "
        "source_loc.json and source_loc.png. Example: mpiexec -n 4 streamgnn agents source-loc --kinds "
        "bernoulli,bursty --out out/agents",
    )
    _source_loc_args(sl)
    _common(sl, "out/agents", "sweep")
    sl.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        help="steps each test signal is observed for (hold-last reuses earlier ones; default 3)",
    )
    sl.add_argument(
        "--verify",
        action="store_true",
        help="also check that the agents' outputs equal a one-process run under the same seeded "
        "failures (exits 1 if not)",
    )
    sl.add_argument(
        "--verify-probs", type=_floats, default=(0.0, 0.3), help="failure rates to verify (0,0.3)"
    )
    sl.set_defaults(func=_run, agents_func=_source_loc)
    fl = tasks.add_parser(
        "flocking",
        help="flocking: velocity variance against link failures for each variant",
        description="Imitate the centralized flocking controller, then fly the agents under each failure "
        "rate and model; writes flocking.json and flocking.png. Example: mpiexec -n 4 streamgnn agents "
        "flocking",
    )
    key = "agents.flocking."
    override(fl, "--agents", key=key + "env.agents", type=positive_int, help="flock size")
    override(fl, "--sim-steps", key=key + "env.steps", type=positive_int, help="time steps of 10 ms per run")
    override(
        fl,
        "--train-episodes",
        key=key + "train_episodes",
        type=positive_int,
        help="expert runs to imitate",
    )
    override(
        fl, "--test-episodes", key=key + "test_episodes", type=positive_int,
        help="evaluation runs per point",
    )  # fmt: skip
    _common(fl, "out/agents", "sweep")
    fl.set_defaults(
        func=_run,
        agents_func=_flocking,
        config_defaults={"agents.sweep.fit.steps": 600, "agents.sweep.taps": 3},
    )
    tr = tasks.add_parser(
        "train",
        help="decentralized training (gossip SGD over lossy links, optional compression) vs centralized",
        description="Every agent trains its own copy on source localization from messages only and mixes "
        "parameters with its neighbors; writes decentralized.json and decentralized.png. Example: "
        "mpiexec -n 4 streamgnn agents train --compression none,quant:4,topk:0.1",
    )
    _source_loc_args(tr)
    _common(tr, "out/agents", "decentralized")
    key = "agents.decentralized."
    override(
        tr, "--compression", key=key + "compressions", type=lambda t: tuple(t.split(",")),
        help="mixing message codecs to compare: none, quant:BITS (2, 4, 8), topk:FRACTION",
    )  # fmt: skip
    override(
        tr, "--failure-p", key=key + "failure_p", type=float,
        help="link failure probability while training",
    )  # fmt: skip
    override(
        tr,
        "--mix-rate",
        key=key + "train.mix_rate",
        type=float,
        help="gossip step size in (0, 1]",
    )
    tr.set_defaults(func=_run, agents_func=_train)
