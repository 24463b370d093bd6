"""``run_online``: the end-to-end online job (train on a stream, serve embeddings, report), and its plot."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..events import EventBatch
from ..serve import EmbeddingSink
from ..store import TemporalGraphStore
from .config import TrainConfig
from .edgebank import BASELINE_LABELS
from .metrics import WindowMetrics
from .trainer import OnlineResult, OnlineTrainer


def run_online(
    source: Iterable[EventBatch],
    store: TemporalGraphStore,
    config: TrainConfig,
    *,
    sink: EmbeddingSink | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    max_events: int | None = None,
    total: int | None = None,
) -> OnlineResult:
    """Train test-then-train on ``source`` into ``store``; with ``out_dir``, write ``metrics.png`` (running
    metrics over stream time) and ``summary.json``. Resumes from ``config.checkpoint_dir`` if it holds a
    checkpoint (``store`` is then replaced by the checkpoint's).

    ``max_events``: where the job ends, counted from the stream's start: the events a resumed checkpoint
    holds count, so the same call ends at the same point whether or not an earlier run was interrupted.

    With ``config.sharding`` set, each rank trains on its own partitions instead (``streamgnn.shard.run``):
    ``source`` is then a stream every rank replays, or a factory of this rank's ``LocalSource``."""
    if config.sharding is not None:  # each rank owns partitions: the sharded job (streamgnn.shard)
        from ..shard.run import run_sharded

        if store is not None and store.num_nodes:
            raise ConfigError("a sharded run builds each rank's shard from the stream: pass an empty store")
        return run_sharded(
            source, config, out_dir=out_dir, progress=progress, max_events=max_events, total=total
        )
    ckpt_dir = Path(config.checkpoint_dir) if config.checkpoint_dir else None
    resumed = ckpt_dir is not None and (ckpt_dir / "LATEST").exists()
    if resumed:
        trainer = OnlineTrainer.resume(ckpt_dir, config=config, sink=sink)
        if progress and trainer.dist.is_main:
            print(f"resumed from {ckpt_dir}: {trainer.position:,} events already learned", flush=True)
    else:
        trainer = OnlineTrainer(config, store, sink=sink)
    more = None if max_events is None else max(0, max_events - trainer.position)
    result = trainer.fit(source, max_events=more, progress=progress, total=total)
    if resumed and not result.events and progress and trainer.dist.is_main:
        print(
            f"nothing left to do: the stream has no events after the {trainer.position:,} that {ckpt_dir} "
            "holds (delete it to train from scratch)", flush=True,
        )  # fmt: skip
    if out_dir is None or not trainer.dist.is_main:
        return result
    return write_report(result, out_dir)


def write_report(result: OnlineResult, out_dir: str | Path) -> OnlineResult:
    """``metrics.png`` and ``summary.json`` in ``out_dir`` (created); ``result`` with their paths, which the
    summary names too."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = plot_windows(result.windows, out / "metrics.png", result.baseline_windows)
    result = dataclasses.replace(result, plot_path=plot, summary_path=out / "summary.json")
    write_summary(result, result.summary_path)
    return result


def plot_windows(
    windows: list[WindowMetrics],
    path: str | Path,
    baselines: dict[str, list[WindowMetrics]] | None = None,
    model: str = "TGN",
) -> Path:
    """AP (with AUC) and MRR per window against stream time, each baseline's beside the model's on the same
    negatives (so a reader sees at a glance whether the model beats a lookup table), and the training loss;
    a PNG (Agg; touches no global backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(9, 8), tight_layout=True)
    FigureCanvasAgg(fig)
    ap_ax, mrr_ax, loss_ax = fig.subplots(3, 1, sharex=True)
    x = np.array([w.t_end for w in windows], np.float64)
    ap_ax.plot(x, [w.auc for w in windows], color="tab:gray", linewidth=1, label=f"{model} AUC")
    for ax, name in ((ap_ax, "ap"), (mrr_ax, "mrr")):
        values = [getattr(w, name) for w in windows]
        ax.plot(x, values, color="tab:blue", marker=".", label=f"{model} {name.upper()}")
        for i, (base, base_windows) in enumerate((baselines or {}).items()):
            values = [getattr(w, name) for w in base_windows]
            ax.plot([w.t_end for w in base_windows], values, linestyle=("--", ":")[i % 2], color=f"C{i + 1}",
                    label=f"{BASELINE_LABELS.get(base, base)} {name.upper()}")  # fmt: skip
        ax.set_ylabel(f"{name.upper()} (per window)")
        ax.set_ylim(0.0, 1.0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    loss_ax.plot(x, [w.loss for w in windows], color="tab:red", marker=".")
    loss_ax.set_ylabel("training loss")
    loss_ax.set_xlabel("stream time (the events' t; seconds in every bundled dataset)")
    loss_ax.grid(alpha=0.3)
    events = windows[-1].end_events if windows else 0
    beside = " vs baselines on the same negatives" if baselines else ""
    ap_ax.set_title(f"online test-then-train link prediction ({events:,} scored events): {model}{beside}")
    mrr_ax.set_title("MRR: rank of the true destination among fixed negatives", fontsize="medium")
    loss_ax.set_title(f"{model} training loss", fontsize="medium")
    if len(windows) < 2:  # one window is one dot: say why rather than draw an empty-looking chart
        ap_ax.text(
            0.5, 0.5, f"{len(windows)} metrics window(s): run more events or lower TrainConfig.window_events",
            transform=ap_ax.transAxes, ha="center", va="center",
        )  # fmt: skip
    fig.savefig(path, dpi=110)
    return path


def scores_text(result: OnlineResult, model: str = "TGN") -> str:
    """The model's online AP/AUC/MRR and each baseline's AP/MRR on the same positives and negatives."""
    m = result.metrics
    parts = [f"{model} online AP {m.ap:.4f}  AUC {m.auc:.4f}  MRR {m.mrr:.4f}"]
    parts += [
        f"{BASELINE_LABELS.get(n, n)} AP {b.ap:.4f}  MRR {b.mrr:.4f}" for n, b in result.baselines.items()
    ]
    return "; ".join(parts)


def latency_text(result: OnlineResult) -> str:
    """Arrival-to-queryable latency, or why there is none (no event was processed)."""
    if not math.isfinite(result.latency_p50_ms):
        return "no events processed, so no latency"
    return f"arrival->queryable p50 {result.latency_p50_ms:.0f} ms, p99 {result.latency_p99_ms:.0f} ms"


def write_summary(result: OnlineResult, path: str | Path) -> Path:
    """``result`` as JSON; NaN (an undefined metric) is written as null."""
    path = Path(path)
    path.write_text(json.dumps(_plain(result.as_dict()), indent=1))
    return path


def _plain(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
