"""Online TGN training on a real dataset replayed from a file source, with checkpoints and a report.

    python examples/train_file.py                                   # JODIE Wikipedia, shipped with streamgnn
    python examples/train_file.py --csv edges.csv --columns src,dst,t --events 50000
    torchrun --nproc_per_node 2 examples/train_file.py --events 20000   # data-parallel (gloo or NCCL)

Run it again with the same ``--checkpoint-dir`` after an interruption and it resumes where the last
checkpoint left off, skipping the events it had already learned from; ``--events`` is where the run ends,
so the same command ends at the same point whether or not it was interrupted.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import torch

from streamgnn.connectors.files import CsvSource, DatasetSource
from streamgnn.datasets import info
from streamgnn.jobs import run_online
from streamgnn.nn import TGNConfig
from streamgnn.store import TemporalGraphStore
from streamgnn.train import TrainConfig
from streamgnn.train.report import latency_text, scores_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="jodie_wikipedia", help="a shipped dataset (streamgnn datasets)")
    ap.add_argument("--csv", default=None, help="read this delimited file instead of a dataset")
    ap.add_argument("--columns", default="src,dst,t", help="CSV columns in file order ('-' skips one)")
    ap.add_argument("--header", action="store_true", help="the CSV's first row names its columns")
    ap.add_argument("--delimiter", default=",", help="CSV delimiter; 'space' splits on runs of whitespace")
    ap.add_argument(
        "--events",
        type=int,
        default=None,
        help="stop once this many events of the stream are learned, those of a resumed checkpoint included",
    )
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--out", default="out/train_file", help="folder for metrics.png and summary.json")
    ap.add_argument(
        "--checkpoint-dir", default=None, help="default: out/train_file/<dataset or file name>/checkpoints"
    )
    ap.add_argument("--checkpoint-every", type=int, default=100, help="batches between checkpoints")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # one folder per source: resuming one dataset's checkpoint on another would mix their graphs
    name = Path(args.csv).stem if args.csv else args.dataset
    checkpoint_dir = args.checkpoint_dir or f"out/train_file/{name}/checkpoints"

    if args.csv:
        columns = [None if c == "-" else c for c in args.columns.split(",")]
        delimiter = None if args.delimiter == "space" else args.delimiter
        source = CsvSource(
            args.csv, columns=columns, delimiter=delimiter, header=args.header, batch_size=args.batch_size
        )
        total = None
    else:
        source, total = DatasetSource(args.dataset, batch_size=args.batch_size), info(args.dataset).rows
    config = TrainConfig(
        model=TGNConfig(memory_dim=100, time_dim=100, embedding_dim=100, num_neighbors=10),
        batch_size=args.batch_size,
        lr=args.lr,
        device=args.device,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
    )
    result = run_online(
        source, TemporalGraphStore(), config, out_dir=args.out, max_events=args.events, total=total
    )
    if int(os.environ.get("RANK", "0")) or not result.events:
        return  # every rank holds the same metrics, rank 0 reports them; nothing ran: run_online said why
    print(
        f"{result.events:,} events in {result.seconds:.1f}s ({result.events_per_s:,.0f} events/s); "
        f"{scores_text(result)}; {latency_text(result)}"
    )
    if result.summary_path:
        print(f"report: {result.summary_path}, {result.plot_path}")


if __name__ == "__main__":
    main()
