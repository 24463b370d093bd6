"""TGB's link-prediction protocol with TGB's own code (``py-tgb``: ``pip install 'streamgnn[bench]'``).

The Temporal Graph Benchmark's leaderboards (test MRR) rank each test edge against the negatives TGB's
``NegativeEdgeGenerator`` made once for the dataset, and score with TGB's ``Evaluator``; the model's memory
follows the test edges as they come, without gradient steps. Here:

- ``tgbl-wiki`` with no TGB files on disk: JODIE Wikipedia (bundled; tgbl-wiki-v2 is this stream), TGB's
  split (the 70% and 85% time quantiles, no withheld nodes), and test negatives generated here, in a
  temporary folder, by TGB's ``NegativeEdgeGenerator`` with tgbl-wiki's strategy ("hist_rnd") asked for as
  many negatives as the stream has destinations: it then returns every other destination of each test edge
  (the leaderboard's tgbl-wiki-v2 ranks against all of them, so the protocols agree).
- Any ``tgbl-*`` dataset whose TGB files (``<name with _>/<name>_edgelist_v2.csv``, its ``_test_ns`` pickle)
  are under ``$STREAMGNN_TGB_ROOT``: TGB's ``LinkPropPredDataset`` reads them (never downloading), with
  TGB's split and TGB's own negatives, all of the dataset (``--quick``'s prefix would not be TGB's split).

Our model is trained by ``fit_offline`` (validation by our fixed negatives), in DyGLib_TGB's view below
(``sees_batch``, as its trainer reads its neighbors; 3 epochs, seed 0: ``mrr_tgb`` 0.801 -> 0.812); only
the test is TGB's. The published figures (``LEADERBOARD``) are the leaderboard's test MRRs.

What a test edge sees of its own batch (of ``batch_size``, 200) is not fixed by TGB's rules, and the
leaderboard's rows differ. DyGLib_TGB (yule-BUAA/DyGLib_TGB, ``evaluate_models_utils.py``,
``train_link_prediction.py``: DyGFormer's row is its authors' run of it; TPNet's public code, lxd99/TPNet, is
DyGLib's with DyGLib's evaluation, its TGB script not published) embeds each event at its own time through a
neighbor sampler built over the whole stream (``full_neighbor_sampler``: every interaction strictly before
that time), so an edge sees the earlier edges of its batch of 200; its memory-based models update memory
once per batch, after it is scored. TGB's own TGN
example inserts a batch into its neighbor loader and memory only after scoring it: the batch sees nothing of
itself. ``mrr_tgb`` is DyGLib_TGB's view, the leaders' (view "event": each batch scored from the store that
already holds it, ``score_pairs(query_time="event")``, which samples and computes pair features strictly
before each edge's time; memory still moved by the batch after it is scored); ``mrr_tgb_batch`` the stricter
one, as TGB's TGN example (view "batch": each edge embedded at its batch's first time, so nothing of its
batch is seen), which is how this protocol scored before (benchmarks/RESULTS.md, "TGB's protocol in
DyGLib_TGB's view (#36)").
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.train import ChronologicalSplit, OnlineTrainer, TrainConfig, fit_offline
from streamgnn.train.metrics import LinkMetrics

from .tgb_groups import Diagnosis

ROOT_ENV = "STREAMGNN_TGB_ROOT"
BUNDLED = {"tgbl-wiki": "jodie_wikipedia"}  # TGB datasets we can build from a bundled stream
LEADERBOARD = {  # TGB's leaderboard, test MRR
    "tgbl-wiki": {"tpnet": 0.827, "dygformer": 0.798, "tgn": 0.396, "edgebank": 0.495, "edgebank_tw": 0.571},
    "tgbl-coin": {"tpnet": 0.832},
    "tgbl-comment": {"tpnet": 0.825},
    "tgbl-flight": {"tpnet": 0.884},
    "tgbl-review": {"graphmixer": 0.521},
}


def require_tgb() -> None:
    """A clear error where ``py-tgb`` is missing (it is an optional dependency)."""
    try:
        import tgb  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "--protocol tgb needs TGB's package: pip install 'streamgnn[bench]' (or py-tgb)"
        ) from exc


def short(name: str) -> str:
    """``tgbl-wiki`` -> ``wiki``: the key suffix (``mrr_tgb_wiki``)."""
    return name.removeprefix("tgbl-").replace("-", "_")


@dataclass
class TgbData:
    """A TGB dataset as our trainer reads it: the events (eids = rows), TGB's split, and TGB's sampler
    with its test negatives loaded; ``source`` says where each came from."""

    name: str
    events: EventBatch
    split: ChronologicalSplit
    sampler: Any  # tgb.linkproppred.negative_sampler.NegativeEdgeSampler
    source: str

    def negatives(self, batch: EventBatch) -> list[np.ndarray]:
        """TGB's negative destinations of each edge of ``batch`` (a part of the test split)."""
        with _quiet():
            return self.sampler.query_batch(batch.src, batch.dst, batch.t, split_mode="test")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """TGB prints progress to stdout; ``--json`` owns stdout."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def tgb_split(events: EventBatch, train: np.ndarray, val: np.ndarray, test: np.ndarray) -> ChronologicalSplit:
    """A ``ChronologicalSplit`` of TGB's masks: no withheld nodes; "new" edges touch a node unseen in
    training."""
    seen = np.unique(np.concatenate([events.src[train], events.dst[train]]))
    new = ~np.isin(events.src, seen) | ~np.isin(events.dst, seen)
    w = np.flatnonzero
    return ChronologicalSplit(w(train), w(np.zeros_like(train)), w(val), w(test), w(val & new), w(test & new))


def bundled(name: str, events: EventBatch, workdir: str) -> TgbData:
    """``name``'s TGB protocol on ``events`` (a bundled stream): TGB's split, and test negatives made by
    TGB's generator in ``workdir`` (module docstring)."""
    import torch
    from tgb.linkproppred.negative_generator import NegativeEdgeGenerator
    from tgb.linkproppred.negative_sampler import NegativeEdgeSampler
    from torch_geometric.data import TemporalData

    val_time, test_time = np.quantile(events.t, [0.70, 0.85])
    train, test = events.t <= val_time, events.t > test_time
    split = tgb_split(events, train, ~train & ~test, test)

    def part(mask: np.ndarray) -> TemporalData:
        cols = {
            k: torch.from_numpy(np.ascontiguousarray(getattr(events, k)[mask])) for k in ("src", "dst", "t")
        }
        return TemporalData(**cols)

    generator = NegativeEdgeGenerator(
        dataset_name=name, first_dst_id=int(events.dst.min()), last_dst_id=int(events.dst.max()),
        num_neg_e=int(events.dst.max() - events.dst.min() + 1), strategy="hist_rnd",
        historical_data=part(~test),
    )  # fmt: skip
    with _quiet():
        generator.generate_negative_samples(part(test), "test", workdir)
        sampler = NegativeEdgeSampler(dataset_name=name, strategy="hist_rnd")
        sampler.load_eval_set(os.path.join(workdir, f"{name}_test_ns.pkl"), split_mode="test")
    return TgbData(name, events, split, sampler, "bundled stream, negatives by TGB's NegativeEdgeGenerator")


def from_files(name: str, root: str) -> TgbData:
    """``name`` from TGB's own files under ``root`` (TGB's split and negatives); never downloads."""
    from tgb.linkproppred.dataset import LinkPropPredDataset
    from tgb.utils.info import PROJ_DIR

    with _quiet():  # TGB joins its package folder and root as strings: hand it a relative path
        data = LinkPropPredDataset(name=name, root=os.path.relpath(root, PROJ_DIR), download=False)
        data.load_test_ns()
    full = data.full_data
    src, dst = np.asarray(full["sources"], np.int64), np.asarray(full["destinations"], np.int64)
    t = np.asarray(full["timestamps"], np.float64)
    order = np.argsort(t, kind="stable")
    if (order != np.arange(len(t))).any():
        raise ConfigError(f"{name}: TGB's files under {root} are not in time order")
    events = EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(len(t)))
    split = tgb_split(
        events, np.asarray(data.train_mask), np.asarray(data.val_mask), np.asarray(data.test_mask)
    )
    return TgbData(name, events, split, data.negative_sampler, f"TGB's files under {root}")


def open_dataset(name: str, workdir: str, events_of: Callable[[str], EventBatch]) -> TgbData:
    """TGB's files where ``$STREAMGNN_TGB_ROOT`` has them, else the bundled stream (``events_of(stream)``)."""
    root = os.environ.get(ROOT_ENV)
    folder = os.path.join(root, name.replace("-", "_")) if root else None
    if folder and os.path.isdir(folder):
        return from_files(name, root)
    if name in BUNDLED:
        return bundled(name, events_of(BUNDLED[name]), workdir)
    where = f"{folder} does not exist" if folder else f"${ROOT_ENV} is not set"
    raise ConfigError(f"TGB dataset {name} is not bundled and {where}: put TGB's files there")


VIEWS = ("event", "batch")  # what a test edge sees of its own batch (module docstring)


def candidate_logits(
    trainer: OnlineTrainer, batch: EventBatch, negs: list[np.ndarray], view: str
) -> np.ndarray:
    """``[len(batch), 1 + q]``: each edge's logit, then each of its negatives' (NaN past its own), from a
    store that already holds ``batch``. ``view``: "event", each edge at its own time (DyGLib_TGB's: the
    batch's earlier edges seen, never the edge itself or a later one); "batch", every edge at the batch's
    first time (the stricter view: nothing of the batch)."""
    if view not in VIEWS:
        raise ConfigError(f"a TGB view must be one of {VIEWS}, got {view!r}")
    cands = np.full((len(negs), max(map(len, negs), default=0)), -1, np.int64)
    for i, n in enumerate(negs):
        cands[i, : len(n)] = n
    return trainer.score_pairs(batch.src, batch.dst, batch.t, candidates=cands, query_time=view)


def tgb_test(
    data: TgbData, batch_size: int, view: str, diagnosis: Diagnosis | None = None
) -> Callable[[OnlineTrainer, np.ndarray], LinkMetrics]:
    """A ``fit_offline(test_by=...)`` protocol (the store holds the test part): each test batch ranked
    against TGB's negatives in ``view`` (``candidate_logits``) and scored by TGB's ``Evaluator`` (MRR, a mean
    over edges), then observed by the model (memory moves on, no gradient step). ``diagnosis`` is handed each
    batch's edges with their reciprocal ranks."""
    from tgb.linkproppred.evaluate import Evaluator

    evaluator = Evaluator(name=data.name)

    def protocol(trainer: OnlineTrainer, rows: np.ndarray) -> LinkMetrics:
        mrr = []
        for lo in range(0, len(rows), batch_size):
            batch = data.events.take(rows[lo : lo + batch_size])
            negs = data.negatives(batch)
            logits = candidate_logits(trainer, batch, negs, view)
            ranks = []
            for i, n in enumerate(negs):
                given = {
                    "y_pred_pos": logits[i, :1],
                    "y_pred_neg": logits[i, 1 : 1 + len(n)],
                    "eval_metric": ["mrr"],
                }
                ranks.append(float(evaluator.eval(given)["mrr"]))
            mrr += ranks
            if diagnosis is not None:
                diagnosis.batch(batch, negs, ranks)
            trainer.step(batch, train=False, score=False, ingest=False)
        return LinkMetrics(float("nan"), float("nan"), float(np.mean(mrr)) if mrr else float("nan"), len(mrr))

    return protocol


def run(
    data: TgbData, config: TrainConfig, epochs: int, patience: int | None, groups: str | None = None,
    sees_batch: bool = True,
) -> dict:  # fmt: skip
    """One seed of our model under TGB's protocol on ``data``: ``mrr_tgb`` (DyGLib_TGB's view) and
    ``mrr_tgb_batch`` (the stricter one; module docstring), and the run's facts. ``groups``: a folder;
    where given, the test edges' groups and heuristics (``tgb_groups``) go into the result (``groups``) and
    each edge's reciprocal ranks into ``<folder>/<dataset>_seed<seed>.npz``: ``mrr_tgb_batch``'s, the view
    the heuristics see too (each batch from the earlier ones). ``sees_batch``: train in DyGLib_TGB's view
    too (``fit_offline``'s, as DyGLib_TGB's trainer reads its neighbors; the default)."""
    test = data.events.take(data.split.test)
    first, counts = [], []  # each edge's first TGB negative (for the cheap pass), how many it has
    for lo in range(0, len(test), config.batch_size):
        batch = test.take(slice(lo, lo + config.batch_size))
        for negs, dst in zip(data.negatives(batch), batch.dst, strict=True):
            first.append(negs[0] if len(negs) else dst)
            counts.append(len(negs))
    first = np.asarray(first, np.int64)
    diagnosis = (
        Diagnosis(data.events, np.setdiff1d(np.arange(len(data.events)), data.split.test)) if groups else None
    )
    result = fit_offline(
        data.events, config, epochs=epochs, patience=patience, split=data.split,
        test_negatives=first[:, None],  # the pass fit_offline always makes: one negative, cheap
        test_by={"tgb": tgb_test(data, config.batch_size, "event"),
                 "tgb_batch": tgb_test(data, config.batch_size, "batch", diagnosis)}, score_val=False,
        sees_batch=sees_batch,
    )  # fmt: skip
    extra = {}
    if diagnosis is not None:
        os.makedirs(groups, exist_ok=True)
        path = os.path.join(groups, f"{data.name}_seed{config.seed}.npz")
        np.savez_compressed(path, rows=data.split.test, **diagnosis.arrays())
        extra = {"groups": diagnosis.table(), "ranks_file": path}
    return {
        **extra,
        "dataset": data.name, "seed": config.seed, "events": len(data.events), "test_events": len(test),
        "mrr_tgb": result.test_with["tgb"].mrr, "mrr_tgb_batch": result.test_with["tgb_batch"].mrr,
        "epochs": result.epochs, "best_epoch": result.best_epoch, "sees_batch": sees_batch,
        "source": data.source, "val_ap_per_epoch": result.val_ap_per_epoch,
        "negatives_min": min(counts, default=0), "negatives_max": max(counts, default=0),
    }  # fmt: skip


def summarize(runs: list[dict]) -> dict:
    """Per dataset: ``mrr_tgb_<short>`` (mean over seeds, DyGLib_TGB's view, as the leaderboard's top
    rows), ``mrr_tgb_batch_<short>`` (the stricter view), the leaderboard's rows beside them
    (``leaderboard_<short>_<model>``) and ``gap_to_leader_tgb_<short>`` (the best published minus ours)."""
    out: dict = {}
    for name in dict.fromkeys(r["dataset"] for r in runs):
        mine = [r for r in runs if r["dataset"] == name]
        key = short(name)
        out[f"mrr_tgb_{key}"] = ours = float(np.mean([r["mrr_tgb"] for r in mine]))
        out[f"mrr_tgb_batch_{key}"] = float(np.mean([r["mrr_tgb_batch"] for r in mine]))
        out[f"events_tgb_{key}"] = mine[0]["events"]
        out[f"source_tgb_{key}"] = mine[0]["source"]
        out[f"negatives_tgb_{key}"] = mine[0]["negatives_min"]  # the fewest any test edge was ranked against
        board = LEADERBOARD.get(name, {})
        out.update({f"leaderboard_{key}_{model}": mrr for model, mrr in board.items()})
        out[f"gap_to_leader_tgb_{key}"] = max(board.values()) - ours if board else None
    out["runs"] = runs
    return out


def workdir() -> tempfile.TemporaryDirectory:
    """Where generated negatives live for one run (removed after)."""
    return tempfile.TemporaryDirectory(prefix="streamgnn-tgb-")
