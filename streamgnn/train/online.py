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
    windows: list[WindowMetrics], path: str | Path, baselines: dict[str, list[WindowMetrics]] | None = None
) -> Path:
    """AP/AUC/MRR and loss per window against stream time, as a PNG (Agg; touches no global backend);
    each baseline's AP and MRR dashed beside them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(9, 6), tight_layout=True)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = np.array([w.t_end for w in windows], np.float64)
    for name in ("ap", "auc", "mrr"):
        top.plot(x, [getattr(w, name) for w in windows], marker=".", label=name.upper())
    for base, base_windows in (baselines or {}).items():
        bx = [w.t_end for w in base_windows]
        for name, color in (("ap", "tab:blue"), ("mrr", "tab:green")):
            values = [getattr(w, name) for w in base_windows]
            top.plot(
                bx, values, linestyle="--" if base == "edgebank" else ":", color=color, label=f"{base} {name}"
            )
    top.set_ylabel("score (per window)")
    top.set_ylim(0.0, 1.0)
    top.grid(alpha=0.3)
    top.legend(loc="lower right")
    bottom.plot(x, [w.loss for w in windows], color="tab:red", marker=".")
    bottom.set_ylabel("training loss")
    bottom.set_xlabel("stream time (the events' t; seconds in every bundled dataset)")
    bottom.grid(alpha=0.3)
    events = windows[-1].end_events if windows else 0
    top.set_title(f"online test-then-train link prediction ({events:,} scored events)")
    if len(windows) < 2:  # one window is one dot: say why rather than draw an empty-looking chart
        top.text(
            0.5, 0.5, f"{len(windows)} metrics window(s): run more events or lower TrainConfig.window_events",
            transform=top.transAxes, ha="center", va="center",
        )  # fmt: skip
    fig.savefig(path, dpi=110)
    return path


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
