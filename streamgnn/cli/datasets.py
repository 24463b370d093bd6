"""``streamgnn datasets``: list the bundled datasets: the event streams (``load``, ``--dataset``) and PyTorch
Geometric Temporal's signals (``load_signal``)."""

from __future__ import annotations

import argparse

HELP = "list the bundled datasets"


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from .. import datasets
    from ..datasets import pgt
    from ..datasets._formats import DATA_ENV

    for name in datasets.names():
        info = datasets.info(name)
        where = info.source if info.shipped else f"in ${DATA_ENV} (not shipped): {info.files[0]}"
        print(f"{name:18s} {info.rows:>9,d} events  {info.nodes:>7,d} nodes  {where}")
    print("\nsignals (streamgnn.datasets.load_signal: what PyTorch Geometric Temporal's loaders return)")
    for name, (signal, loader) in pgt.SIGNALS.items():
        print(f"{name:18s} {signal:28s} as PGT's {loader}")
    return 0


def register(sub) -> None:
    ds = sub.add_parser(
        "datasets",
        help=HELP,
        description="List the datasets bundled with streamgnn: event streams (rows, nodes, source), which "
        "--dataset and streamgnn.datasets.load take, and signals, which datasets.load_signal takes. Streams "
        "too big to ship are read from the folder $STREAMGNN_DATA names.",
        epilog="example:\n  streamgnn datasets\n  streamgnn train --dataset collegemsg --events 20000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ds.set_defaults(func=_run)
