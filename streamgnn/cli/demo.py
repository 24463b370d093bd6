"""``streamgnn demo``: the end-to-end job on an embedded default."""

from __future__ import annotations

import argparse

from ._args import output_dir, positive_int


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    from ..demo import run_demo

    return run_demo(events=args.events, out=args.out, dataset=args.dataset, quiet=args.quiet)


def register(sub) -> None:
    d = sub.add_parser(
        "demo",
        help="the end-to-end job on an embedded default",
        description="Start a local broker, replay a bundled dataset into a topic, train TGN online from it "
        "with running AP/MRR, publish embeddings to a compacted topic, write a plot and a JSON summary.",
        epilog="examples:\n  streamgnn demo --events 3000          # a short run (only 3,000 events are "
        "produced)\n  streamgnn demo --dataset collegemsg --out out/college",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("--events", type=positive_int, default=None, help="replay and train on this many events")
    d.add_argument(
        "--out",
        type=output_dir,
        default="out/demo",
        help="report folder: metrics.png, summary.json (out/demo)",
    )
    d.add_argument("--dataset", default="jodie_wikipedia", help="a bundled dataset (jodie_wikipedia)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=_run)
