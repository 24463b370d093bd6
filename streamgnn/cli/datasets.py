"""``streamgnn datasets``: list the bundled datasets."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from .. import datasets

    for name in datasets.names():
        info = datasets.info(name)
        print(f"{name:18s} {info.rows:>9,d} events  {info.nodes:>7,d} nodes  {info.source}")
    return 0


def register(sub) -> None:
    ds = sub.add_parser(
        "datasets",
        help="list the bundled datasets",
        description="List the datasets bundled with streamgnn (rows, nodes, source).",
        epilog="example:\n  streamgnn datasets\n  streamgnn train --dataset collegemsg --events 20000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ds.set_defaults(func=_run)
