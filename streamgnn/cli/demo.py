"""``streamgnn demo``: the end-to-end job on an embedded default."""

from __future__ import annotations

import argparse

from ._args import output_dir, port_or_any, positive_int
from ._flags import add_config_option
from .train import add_follow_option

HELP = "the end-to-end job on an embedded default"

EXAMPLE = """examples:
  streamgnn demo --events 3000          # a short run (only 3,000 events are produced)
  streamgnn demo --events 3000 --serve  # then serve the embeddings on localhost:8000 until Ctrl-C
  streamgnn demo --dataset collegemsg --out out/college
  streamgnn demo --events 3000 --config demo.yaml   # train: {batch_size: 100, model: {memory_dim: 64}}
"""


def train_config(args: argparse.Namespace):
    """The trainer's ``TrainConfig``: the demo's own settings for this many events, under the file's, the
    environment's and the flags'."""

    from .. import datasets
    from ..demo import demo_config
    from ._config import config_from_args

    rows = datasets.info(args.dataset).rows
    events = min(args.events or rows, rows)
    keys = ("checkpoint_dir", "checkpoint_every", "publish_every", "window_events")

    def resolved(own):
        defaults = {f"train.{k}": getattr(own, k) for k in keys}
        return config_from_args(args, defaults={**defaults, "train.follow.mode": own.follow.mode}).train

    own = demo_config(events, args.out / "checkpoints")
    config = resolved(own)
    if config.follow.mode != own.follow.mode:  # --follow or the file chose the other mode: its own windows
        config = resolved(demo_config(events, args.out / "checkpoints", config.follow.mode))
    return config


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    import torch

    from ..demo import run_demo

    torch.set_num_threads(args.threads)  # the broker and the Kafka client's threads share the cores

    config = train_config(args)
    return run_demo(
        events=args.events,
        out=args.out,
        dataset=args.dataset,
        quiet=args.quiet,
        config=config,
        serve_port=args.port if args.serve else None,
    )


def register(sub) -> None:
    d = sub.add_parser(
        "demo",
        help=HELP,
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
    add_follow_option(d)
    d.set_defaults(config_defaults={"train.follow.mode": "budget"})  # what its help says (demo_config)
    d.add_argument("--threads", type=positive_int, default=1, help="torch threads of the trainer (1)")
    d.add_argument(
        "--serve",
        action="store_true",
        help="after the stream, keep the broker up and serve the embeddings over HTTP until Ctrl-C",
    )
    d.add_argument(
        "--port",
        type=port_or_any,
        default=8000,
        help="the service's port with --serve (8000; 0: any free one)",
    )
    d.set_defaults(func=_run)
