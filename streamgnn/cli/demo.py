"""``streamgnn demo``: the end-to-end job on an embedded default."""

from __future__ import annotations

import argparse

from ._args import output_dir, positive_int


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..demo import run_demo

    return run_demo(events=args.events, out=args.out, dataset=args.dataset, quiet=args.quiet)


def register(sub) -> None:
    d = sub.add_parser("demo", help="the end-to-end job on an embedded default")
    d.add_argument("--events", type=positive_int, default=None, help="stop after this many events")
    d.add_argument("--out", type=output_dir, default="out/demo", help="report folder (plot, JSON summary)")
    d.add_argument("--dataset", default="jodie_wikipedia")
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=_run)
