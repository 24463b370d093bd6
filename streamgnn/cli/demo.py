"""``streamgnn demo``: the end-to-end job on an embedded default."""

from __future__ import annotations

import argparse

from ._args import output_dir, positive_int
from ._config import add_config_option, config_from_args

EXAMPLE = """examples:
  streamgnn demo --events 3000          # a short run (only 3,000 events are produced)
  streamgnn demo --dataset collegemsg --out out/college
  streamgnn demo --events 3000 --config demo.yaml   # train: {batch_size: 100, model: {memory_dim: 64}}
"""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    import dataclasses

    from .. import datasets
    from ..demo import demo_config, run_demo

    events = min(args.events or datasets.info(args.dataset).rows, datasets.info(args.dataset).rows)
    own = demo_config(events)  # the demo's settings, under the file's, the environment's and the flags'
    defaults = {
        f"train.{f.name}": getattr(own, f.name)
        for f in dataclasses.fields(own)
        if f.name in ("checkpoint_every", "publish_every", "window_events")
    }
    config = config_from_args(args, defaults=defaults).train
    return run_demo(events=args.events, out=args.out, dataset=args.dataset, quiet=args.quiet, config=config)


def register(sub) -> None:
    d = sub.add_parser(
        "demo",
        help="the end-to-end job on an embedded default",
        description="Start a local broker, replay a bundled dataset into a topic, train TGN online from it "
        "with running AP/MRR, publish embeddings to a compacted topic, write a plot and a JSON summary.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(d, "train (its checkpoint_dir is always OUT/checkpoints)")
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
