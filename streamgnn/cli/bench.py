"""``streamgnn bench NAME``: run a benchmark from ``benchmarks/`` (its own flags follow the name)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

HELP = "run a benchmark (other flags go to it: --quick, --json, --help)"

BENCHMARKS = (
    "store",
    "sampler",
    "ingest",
    "train",
    "serve",
    "partition",
    "snapshots",
    "agents",
    "distributed",
    "quality",
    "soak",
    "pairs",
    "tasks",
    "tasks_online",
    "follow",
    "follow_costs",
)

EXAMPLE = """examples:
  streamgnn bench store --quick          # a short headline, each figure naming its dataset; --quick figures
                                         # are smoke values (labelled so), not the full run's in RESULTS.md
  streamgnn bench serve --json           # every figure as one JSON object ("smoke": true under --quick)
  streamgnn bench sampler --help         # a benchmark's own options
  streamgnn bench quality --quick        # ours, PyG's TGN and EdgeBank on every stream (a few minutes)
"""


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """A benchmark parses its own flags with a plain ``argparse`` parser; while it runs, that parser's
    mistakes are one line and exit status 2, as every command's (``_Parser.error``), not a usage block."""
    from . import _Parser

    plain = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = _Parser.error  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = plain  # type: ignore[method-assign]


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    if args.name is None:  # `streamgnn bench` or `streamgnn bench --help`: say what there is
        args.parser.print_help()
        return 0 if {"-h", "--help"} & set(rest) else 2
    module = importlib.import_module(f"streamgnn.benchmarks.{args.name}")
    argv0, sys.argv[0] = sys.argv[0], f"streamgnn bench {args.name}"  # its usage line names this command
    try:
        with _one_line_errors():
            return int(module.main(rest) or 0)
    finally:
        sys.argv[0] = argv0


def register(sub) -> None:
    b = sub.add_parser(
        "bench",
        add_help=False,  # --help after a name goes to that benchmark
        help=HELP,
        description="Run one of the benchmarks in benchmarks/ (figures and commands: benchmarks/RESULTS.md).",
        epilog=EXAMPLE,
        usage=f"streamgnn bench {{{','.join(BENCHMARKS)}}} [--quick] [--json] [...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("name", nargs="?", choices=BENCHMARKS, help="the benchmark to run")
    b.set_defaults(func=_run, parser=b)
