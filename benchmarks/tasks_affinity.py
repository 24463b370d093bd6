"""Travian alliances as node affinity (TGB's node property prediction), the ``travian_alliance`` stream of
``streamgnn bench tasks``.

The stream: the players' attacks, messages and trades of December 2009 merged in time order (exact
duplicates and self-loops dropped; the relation as a 3-d one-hot edge feature). The label: for each player
and day, how the player's attacks, messages and trades of the NEXT day are shared among the alliances of
those they are aimed at (``tasks.affinity``), as TGB's ``tgbn-*`` labels are a node's next-period
interactions per class; alliances carry ids across days (``datasets.load_alliances``); events aimed at a
player in no alliance that day count in no label. It is predicted at the day's start (05:00 UTC, the files'
midnight US Eastern) and scored by NDCG@10, TGB's way (``tasks.affinity_eval``).

A player's own alliance is not the label: a player changes alliance on about 1% of days, so persistence
scores that label near 1. Ours also reads, per alliance, whether it was the player's own the day before
(known by then), and how what was aimed at the player (attacks, messages, trades received) was shared among
the senders' alliances the day before and on average (TGB's two forecasts over those), beside what the
player's revealed labels say.

``--quick`` (and ``--events N``) thin the stream evenly (every k-th event, all 30 days), where the other
streams take a prefix: the first hours of the month hold no day's label to score.
"""

from __future__ import annotations

import datetime as dt
import time

import numpy as np

from streamgnn.datasets import load, load_alliances
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.tasks import HeadConfig, Labels
from streamgnn.tasks.affinity import NodeAffinity, affinity_labels, moving_average, persistence
from streamgnn.tasks.affinity_eval import evaluate_affinity
from streamgnn.train import TrainConfig

KEY = "travian_alliance"
DAY = 86400.0
START = dt.datetime(2009, 12, 1, 5, tzinfo=dt.timezone.utc).timestamp()  # the first file's midnight, ET
RELATIONS = ("attacks", "messages", "trades")
COMPARED = ("persistence", "moving_average", "no_embeddings")  # TGB's baselines, then an ablation of ours


def prepare(events: int | None) -> tuple[EventBatch, Labels, np.ndarray, int]:
    """The merged stream (times from the month's start; every k-th event where ``events`` caps it), its
    labels, each label's extra class features ``[n, C, 3]`` (the module docstring: its own alliance the
    day before; the received events' last day and moving average per alliance), and the number of
    alliances."""
    parts = [load(f"travian_{r}", dedup=True, drop_self_loops=True) for r in RELATIONS]
    relation = np.concatenate([np.full(len(p), i) for i, p in enumerate(parts)])
    order = np.argsort(np.concatenate([p.t for p in parts]), kind="stable")
    if events is not None and events < len(order):
        order = order[:: -(-len(order) // events)]
    src, dst, t = (np.concatenate([getattr(p, c) for p in parts])[order] for c in ("src", "dst", "t"))
    feats = np.eye(len(RELATIONS), dtype=np.float32)[relation[order]]
    ev = EventBatch.from_columns(src=src, dst=dst, t=t - START, eid=np.arange(len(t)), features=feats)
    days, members = load_alliances()
    classes = int(max(a.max() for _, a in members)) + 1
    bounds = DAY * np.arange(len(days) + 1)
    labels = affinity_labels(ev, bounds, members, classes)
    own = np.zeros((len(labels), classes), np.float32)
    day = (labels.t // DAY).astype(np.int64)
    for p in range(1, len(days)):
        rows = np.flatnonzero(day == p)
        players, alliance = members[p - 1]
        where = dict(zip(players.tolist(), alliance.tolist(), strict=True))
        for i in rows.tolist():
            if labels.node[i] in where:
                own[i, where[labels.node[i]]] = 1.0
    # what was aimed at the player, per the aggressor's (sender's, trader's) alliance: a reply's cue
    back = EventBatch.from_columns(src=ev.dst, dst=ev.src, t=ev.t, eid=ev.eid)
    received = affinity_labels(back, bounds, members, classes)
    extra = [own, persistence(received, DAY, at=labels), moving_average(received, DAY, at=labels)]
    return ev, labels, np.stack(extra, axis=2).astype(np.float32), classes


def run(events: int | None, seed: int, epochs: int, batch_size: int) -> dict:
    """One seed of ours and the baselines: test NDCG@10 of each, validation figures, sizes, seconds."""
    ev, labels, own, classes = prepare(events)
    config = TrainConfig(batch_size=batch_size, seed=seed, model=TGNConfig(edge_feature_dim=len(RELATIONS)))
    started = time.perf_counter()
    result = evaluate_affinity(
        NodeAffinity(classes), ev, labels, config, horizon=DAY, extra=own, epochs=epochs,
        head=HeadConfig(seed=seed),
    )  # fmt: skip
    return {
        "stream": KEY, "seed": seed, "events": len(ev), "labels": len(labels), "classes": classes,
        "seconds": time.perf_counter() - started, "ndcg10": result.ndcg["ours"],
        **{f"ndcg10_{b}": result.ndcg[b] for b in COMPARED},
        "val_ndcg10": result.ours.val["ndcg10"], "val_ndcg10_stages": result.ours.stages,
        "head_epochs": result.ours.epochs, "link_loss": result.link_loss, **result.sizes,
    }  # fmt: skip


def summarize(runs: list[dict], mean) -> dict:
    """``ndcg10_travian_alliance`` and ``ndcg10_travian_alliance_<baseline>`` (means over seeds), the
    margin over persistence and over the best baseline, and the stages' validation figures."""
    out = {f"ndcg10_{KEY}": mean([r["ndcg10"] for r in runs])}
    for b in COMPARED:
        out[f"ndcg10_{KEY}_{b}"] = mean([r[f"ndcg10_{b}"] for r in runs])
    out[f"margin_{KEY}_persistence"] = out[f"ndcg10_{KEY}"] - out[f"ndcg10_{KEY}_persistence"]
    best = max(out[f"ndcg10_{KEY}_{b}"] for b in ("persistence", "moving_average"))
    out[f"margin_{KEY}"] = out[f"ndcg10_{KEY}"] - best
    stages = runs[0]["val_ndcg10_stages"]
    out[f"stages_{KEY}"] = {
        s: mean([r["val_ndcg10_stages"].get(s, float("nan")) for r in runs]) for s in stages
    }
    out[f"events_{KEY}"], out[f"labels_{KEY}"] = runs[0]["events"], runs[0]["labels"]
    return out


HEADLINE = {
    f"ndcg10_{KEY}": "test NDCG@10, ours, Travian alliances (next day's interactions)",
    f"ndcg10_{KEY}_persistence": "test NDCG@10, persistence (TGB's), Travian alliances",
    f"ndcg10_{KEY}_moving_average": "test NDCG@10, moving average (TGB's, window 7), Travian alliances",
    f"ndcg10_{KEY}_no_embeddings": "test NDCG@10, ours without the embeddings (an ablation), Travian",
    f"margin_{KEY}": "ours minus the better of persistence and moving average, Travian",
}
