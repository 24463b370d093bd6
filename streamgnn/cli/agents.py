"""``streamgnn agents ...``: link-failure-robust GNN agents, in one process or under ``mpiexec -n N``.

Under ``mpiexec`` every rank hosts a block of agents (``N`` ranks, any number of agents each); rank 0 trains
the centralized models, hands them out, and writes the report; the agents' rounds only ever talk to
neighbors' ranks. Without ``mpiexec`` all agents run in this process.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ._args import output_dir, positive_float, positive_int
from ._flags import add_config_option, override

HELP = "link-failure-robust GNN agents (works under mpiexec -n N)"

# --die-round's names besides a round (streamgnn.jobs.agents: STARTUP, SETUP, GATHER; not imported here, so
# that parsing loads no job)
DIE_AT = ("startup", "setup", "gather")


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
    return text if text in DIE_AT else _index(text)


def _names(choices) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v for v in text.split(",") if v)
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}; got {text!r}")
        return values

    return parse


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


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    """The flags as the job's ``Faults`` and ``Report``, the config's own checks before any work; a
    fault-tolerant rank runs the same command again as its supervised child."""
    from ..agents.runtime import supervise, supervised
    from ..jobs import agents as job
    from ._config import config_from_args

    faults = job.Faults(args.deadline, args.patience, args.fault_tolerant, args.die_rank, args.die_round)
    faults.check()
    cfg = config_from_args(args).agents  # the config's own checks (codecs, rates), before any work
    if args.fault_tolerant and not supervised():
        return supervise([sys.executable, "-m", "streamgnn.cli", *sys.argv[1:]])
    report = job.Report(Path(args.out), args.quiet)
    if args.task == "source-loc":
        verify = args.verify_probs if args.verify else None
        return job.source_loc(cfg, faults, report, args.rounds, verify)
    return (
        job.flocking(cfg, faults, report)
        if args.task == "flocking"
        else job.decentralized(cfg, faults, report)
    )


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
        help=HELP,
        description=__doc__,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tasks = a.add_subparsers(dest="task", required=True, metavar="TASK")
    _source_loc_parser(tasks)
    _flocking_parser(tasks)
    _train_parser(tasks)


def _source_loc_parser(tasks) -> None:
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
    sl.set_defaults(func=_run)


def _flocking_parser(tasks) -> None:
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
    fl.set_defaults(func=_run, config_defaults={"agents.sweep.fit.steps": 600, "agents.sweep.taps": 3})


def _train_parser(tasks) -> None:
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
    tr.set_defaults(func=_run)
