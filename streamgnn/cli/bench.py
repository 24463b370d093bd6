"""``streamgnn bench NAME``: run a benchmark from ``benchmarks/`` (its own flags follow the name)."""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = ("store", "sampler", "ingest", "train", "quality")


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    module = importlib.import_module(f"streamgnn.benchmarks.{args.name}")
    return int(module.main(rest) or 0)


def register(sub) -> None:
    b = sub.add_parser(
        "bench", add_help=False, help="run a benchmark (other flags go to it: --quick, --json, --help)"
    )
    b.add_argument("name", choices=BENCHMARKS)
    b.set_defaults(func=_run)
