"""OnlineTrainer: prequential (test-then-train) TGN training on any stream of EventBatches.

Per global batch, in this order:

1. the edge additions the store will apply as new (valid, first of their event id) are the batch's
   positives; negatives are drawn from destinations seen *before* the batch;
2. neighborhoods are sampled from the store before it holds the batch, strictly before the query time: the
   batch's first event time (``query_time="batch"``: each distinct node embedded once) or each event's time;
3. the batch is ingested (rows the store rejects are dropped from everything below);
4. it is scored with the model as it was (AP/AUC against one negative per positive, MRR against
   ``eval_negatives`` fixed ones), then trained on, then fed to memory (``model.observe``);
5. touched nodes get fresh embeddings in the ``EmbeddingTable``.

So no score of an event depends on that event or on any later one: the memory holds earlier batches only,
neighbors are earlier events, and negatives come from the past. Nodes first seen in the batch read a blank
memory row, exactly as their own rows would before ``observe``.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..errors import ConfigError
from ..events import DeadLetter, EventBatch, EventKind
from ..nn import TGN, EmbeddingInput
from ..nn.gather import gather_rows
from ..sampling import NegativeSampler, SamplerConfig, TemporalSampler
from ..serve import EmbeddingSink, EmbeddingTable, LatencyTracker
from ..store import TemporalGraphStore
from . import checkpoint
from .config import TrainConfig
from .distributed import DistContext, init_distributed, local_device
from .metrics import LinkMetrics, RunningMetrics, WindowMetrics, reciprocal_ranks

_EVAL, _TRAIN, _SERVE = 0, 1, 2  # sampler key offsets: every draw is named by (step, purpose)


@dataclass(frozen=True)
class StepResult:
    """One global batch. Score rows are the scored positives in batch order (empty when not scored)."""

    events: int
    learned: int  # edge additions applied and fed to memory
    eid: np.ndarray
    t: np.ndarray
    pos: np.ndarray  # logit of each positive
    neg: np.ndarray  # logit of its AP/AUC negative (NaN where none could be drawn)
    rr: np.ndarray  # reciprocal rank among its fixed negatives (NaN where none)
    loss: float  # NaN when not trained
    dead_letters: list[DeadLetter] = field(default_factory=list)


@dataclass(frozen=True)
class OnlineResult:
    """What an online run reports; ``windows`` are the running metrics over stream time."""

    events: int
    learned: int
    batches: int
    seconds: float
    events_per_s: float
    metrics: LinkMetrics
    windows: list[WindowMetrics]
    latency_p50_ms: float
    latency_p99_ms: float
    dead_letters: int
    checkpoint: Path | None = None
    plot_path: Path | None = None
    summary_path: Path | None = None

    def as_dict(self) -> dict:
        """Plain JSON-able values (paths as strings)."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()}


def _distinct(nodes: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct ``(node, time)`` pairs (sorted) and the index of each input pair among them."""
    order = np.lexsort((times, nodes))
    nodes, times = nodes[order], times[order]
    first = np.ones(len(order), bool)
    first[1:] = (nodes[1:] != nodes[:-1]) | (times[1:] != times[:-1])
    rows = np.empty(len(order), np.int64)
    rows[order] = np.cumsum(first) - 1
    return nodes[first], times[first], rows


def _or_zeros(feat: torch.Tensor | None, shape: torch.Size, dim: int) -> torch.Tensor | None:
    """``feat``, or zeros ``[*shape, dim]`` where the model wants features and none were sampled."""
    return feat if feat is not None or not dim else torch.zeros(*shape, dim)


class OnlineTrainer:
    """Test-then-train over a stream, with running metrics, serving, checkpoints and data parallelism.

    ``store`` may already hold history (its memory starts blank). On rank 0 an ``EmbeddingTable`` is kept
    when ``config.serve_every`` > 0 (pass ``table`` to share one with readers); ``sink`` receives it every
    ``config.publish_every`` refreshes.
    """

    def __init__(
        self,
        config: TrainConfig,
        store: TemporalGraphStore | None = None,
        *,
        table: EmbeddingTable | None = None,
        sink: EmbeddingSink | None = None,
        dist: DistContext | None = None,
    ) -> None:
        self.config = config
        self.dist = dist or init_distributed()
        self.device = local_device(config.device)
        torch.manual_seed(config.seed)
        mcfg = config.model
        self.model = TGN(mcfg).to(self.device)
        self.dist.broadcast_module(self.model)
        # Fused: one kernel for all parameters instead of a dozen small ops per tensor (3x faster on CPU).
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, fused=True)
        self.store = store if store is not None else TemporalGraphStore()
        self.sampler = TemporalSampler(
            self.store,
            SamplerConfig(
                fanouts=(mcfg.num_neighbors,) * max(mcfg.num_layers, 1),
                strategy=config.sampling,
                seed=config.seed,
                edge_features=mcfg.edge_feature_dim > 0,
                node_features=mcfg.node_feature_dim > 0,
            ),
        )
        serving = config.serve_every > 0 and self.dist.is_main
        if table is not None and table.dim != self.model.out_dim:
            raise ConfigError(
                f"the table holds {table.dim}-d rows but the model embeds {self.model.out_dim}-d"
            )
        self.table = (table or EmbeddingTable(self.model.out_dim)) if serving else None
        self.sink = sink
        self.metrics = RunningMetrics(config.window_events)
        self.latency = LatencyTracker()
        self.steps = 0
        self.position = 0  # events consumed from the source
        self._replayed = 0  # events a replayed source must skip (set by ``resume``)
        self.learned = 0
        self.dead_letter_count = 0
        self.negatives: NegativeSampler | None = None
        self._rebuild_negatives()
        self._touched: list[np.ndarray] = []
        self._waiting: list[tuple[float, int]] = []
        self._refreshes = 0
        self._check_feature_widths()
        if self.table is not None and self.store.num_nodes:
            self.refresh(np.arange(self.store.num_nodes))  # history nodes are servable before any step

    # ------------------------------------------------------------------ per batch
    def step(
        self,
        batch: EventBatch,
        *,
        train: bool = True,
        score: bool = True,
        ingest: bool = True,
        negatives: np.ndarray | None = None,
        negatives_valid: np.ndarray | None = None,
        arrival: float | None = None,
    ) -> StepResult:
        """Process one global batch (every rank passes the same one); see the module docstring.

        ``ingest=False``: the store already holds the batch (offline evaluation on a prebuilt graph), so every
        valid edge addition is a positive and sampling still sees only events strictly before the query times.
        ``negatives``: external ids ``[len(batch), q]`` to score against instead of online draws (column 0 is
        the AP/AUC negative), with ``negatives_valid`` marking real entries.
        """
        started = time.perf_counter()
        arrival = started if arrival is None else arrival
        cfg, store, d = self.config, self.store, self.dist
        rows = self._fresh_rows(batch) if ingest else self._edge_rows(batch)
        m = len(rows)
        t = batch.t[rows].copy()
        feat = self._edge_features(batch, rows)
        pre_src, pre_dst = self._known(batch.src[rows]), self._known(batch.dst[rows])
        blank = store.num_nodes  # a row no node owns yet: zero memory, no pending messages
        scoring = score and m > 0 and (negatives is not None or self.negatives is not None)
        training = train and m > 0 and self.negatives is not None
        lo, hi = d.bounds(m)
        t_query = t if cfg.query_time == "event" else np.full_like(t, t.min(initial=math.inf))
        if scoring:
            if negatives is not None:
                neg_ids = self._known(np.asarray(negatives)[rows].reshape(-1)).reshape(m, -1)
                neg_ok = np.ones(neg_ids.shape, bool) if negatives_valid is None else negatives_valid[rows]
                rank = neg_ids.shape[1] > 0 and cfg.eval_negatives > 0
            else:
                if cfg.eval_strategy == "inductive":
                    raise ConfigError(
                        "eval_strategy='inductive' needs fixed negatives (fit_offline draws them against the "
                        "training split): online, every destination already seen is history"
                    )
                neg_ids = self.negatives.sample(
                    pre_src, pre_dst, num=max(cfg.eval_negatives, 1), strategy=cfg.eval_strategy,
                    groups=t, key=2 * self.steps,
                )  # fmt: skip
                neg_ok, rank = neg_ids >= 0, cfg.eval_negatives > 0
            eval_inp, eval_rows = self._eval_input(pre_src, pre_dst, t, t_query, neg_ids, rank, lo, hi, blank)
        if training:
            train_neg = self.negatives.sample(
                pre_src, pre_dst, num=1, strategy=cfg.train_negatives, key=2 * self.steps + 1
            )[:, 0]
            s = slice(lo, hi)
            roots = np.concatenate([pre_src[s], pre_dst[s], train_neg[s]])
            train_inp, train_rows = self._input(roots, blank, np.tile(t_query[s], 3), _TRAIN)

        letters: list[DeadLetter] = []
        if ingest:
            letters = store.ingest(batch).dead_letters
            self.dead_letter_count += len(letters)
        keep = ~np.isin(rows, [letter.index for letter in letters])

        pos = neg = rr = np.zeros(0)
        if scoring:
            pos, neg, rr = (
                x[keep] for x in self._score(eval_inp, eval_rows, rank, neg_ok[lo:hi], hi - lo, m)
            )
        loss = self._train(train_inp, train_rows, train_neg, keep, lo, hi) if training else math.nan

        kept = rows[keep]
        post_src, post_dst = store.node_index(batch.src[kept]), store.node_index(batch.dst[kept])
        with torch.no_grad():
            self.model.observe(
                torch.from_numpy(post_src).to(self.device),
                torch.from_numpy(post_dst).to(self.device),
                torch.from_numpy(t[keep]).to(self.device),
                None if feat is None else torch.from_numpy(feat[keep]).to(self.device),
            )
        self._observe_negatives(post_src, post_dst)
        self.learned += len(kept)
        self.steps += 1
        self._serve(np.concatenate([post_src, post_dst, self._touched_otherwise(batch)]), arrival, len(batch))
        scored = kept if scoring else kept[:0]
        if scoring or training:
            self.metrics.add(pos, neg, rr, batch.t[scored], loss, time.perf_counter() - started)
        return StepResult(
            len(batch), len(kept), batch.eid[scored], batch.t[scored], pos, neg, rr, loss, letters
        )

    def _touched_otherwise(self, batch: EventBatch) -> np.ndarray:
        """Known nodes of the batch's node updates and edge deletions: their embeddings change too."""
        upd, dele = batch.kind == EventKind.NODE_UPDATE, batch.kind == EventKind.EDGE_DELETE
        if not (upd.any() or dele.any()):
            return np.zeros(0, np.int64)
        nodes = self._known(np.concatenate([batch.src[upd | dele], batch.dst[dele]]))
        return nodes[nodes >= 0]

    def _fresh_rows(self, batch: EventBatch) -> np.ndarray:
        """Rows the store will apply as new edge additions: valid, first of their id, never applied before."""
        _, letters = batch.validate()
        ok = np.ones(len(batch), bool)
        ok[[letter.index for letter in letters]] = False
        idx = np.flatnonzero(ok)
        eids = batch.eid[idx]
        first = np.zeros(len(idx), bool)
        first[np.unique(eids, return_index=True)[1]] = True
        idx = idx[first & ~self.store.seen.contains(eids)]
        return idx[batch.kind[idx] == EventKind.EDGE_ADD]

    @staticmethod
    def _edge_rows(batch: EventBatch) -> np.ndarray:
        """Valid edge additions, duplicates included (the store already holds them)."""
        _, letters = batch.validate()
        ok = batch.kind == EventKind.EDGE_ADD
        ok[[letter.index for letter in letters]] = False
        return np.flatnonzero(ok)

    def _edge_features(self, batch: EventBatch, rows: np.ndarray) -> np.ndarray | None:
        dim = self.config.model.edge_feature_dim
        if not dim:
            return None
        if not len(rows):
            return np.zeros((0, dim), np.float32)
        if batch.feature_dim != dim:
            raise ConfigError(
                f"the model expects {dim} edge features per event, the batch has {batch.feature_dim or 0}"
            )
        return batch.features[rows]

    def _check_feature_widths(self) -> None:
        mcfg, store = self.config.model, self.store
        for label, want, have in (
            ("edge", mcfg.edge_feature_dim, store.edge_feature_dim),
            ("node", mcfg.node_feature_dim, store.node_feature_dim),
        ):
            if have is not None and want != have:
                raise ConfigError(
                    f"the store holds {have} {label} features per row but the model expects {want}: "
                    f"set TGNConfig.{label}_feature_dim={have}"
                )

    def _known(self, ext: np.ndarray) -> np.ndarray:
        """Internal ids, -1 where unknown (an empty store knows nothing, whatever the id type)."""
        if not self.store.num_nodes:
            return np.full(len(ext), -1, np.int64)
        return self.store.node_index(ext, strict=False)

    def _input(
        self, roots: np.ndarray, blank: int, times: np.ndarray, purpose: int
    ) -> tuple[EmbeddingInput, torch.Tensor]:
        """Neighborhoods of the distinct queries among ``roots`` (internal ids, -1: unknown, reads row
        ``blank``) at ``times``, and each root's row among them: a repeated query is embedded once."""
        mcfg = self.config.model
        roots, times, rows = _distinct(roots, np.asarray(times, np.float64))
        mem = torch.from_numpy(np.where(roots < 0, blank, roots))
        rows = torch.from_numpy(rows).to(self.device)
        if mcfg.num_layers == 0:
            return EmbeddingInput(mem, torch.from_numpy(times)).to(self.device), rows
        sub = self.sampler.sample(roots, times, key=3 * self.steps + purpose)
        node_feat = None
        if mcfg.node_feature_dim:
            node_feat = np.zeros((len(roots), mcfg.node_feature_dim), np.float32)
            if sub.root_node_features is not None:
                node_feat[roots >= 0] = sub.root_node_features[roots >= 0]
        inp = EmbeddingInput.from_subgraph(sub, mcfg.num_neighbors, node_feat, mcfg.num_layers)
        if mcfg.edge_feature_dim or mcfg.node_feature_dim:
            # A store without features yet (no node update so far, history without edge features) reads zeros.
            hops = [
                replace(
                    hop,
                    edge_feat=_or_zeros(hop.edge_feat, hop.mask.shape, mcfg.edge_feature_dim),
                    node_feat=_or_zeros(hop.node_feat, hop.mask.shape, mcfg.node_feature_dim),
                )
                for hop in inp.hops
            ]
            inp = replace(inp, hops=hops)
        return replace(inp, nodes=mem).to(self.device), rows

    def _eval_input(self, pre_src, pre_dst, t, t_query, neg_ids, rank, lo, hi, blank):
        """Roots ``[src, dst, AP negative]`` at their query times, then (if ``rank``) every MRR candidate
        ``[dst, negatives]`` at the batch's first time, so that ranking costs one embedding per distinct
        candidate, not one per pair."""
        s = slice(lo, hi)
        roots = [pre_src[s], pre_dst[s], neg_ids[s, 0]]
        times = [t_query[s]] * 3
        if rank:
            roots.append(np.column_stack([pre_dst[s], neg_ids[s]]).reshape(-1))
            times.append(np.full(len(roots[-1]), t.min()))
        return self._input(np.concatenate(roots), blank, np.concatenate(times), _EVAL)

    @torch.no_grad()
    def _score(self, inp, rows, rank, neg_ok, n, m) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pos, neg, rr)`` of all ``m`` rows; this rank embeds its ``n``-row slice (roots as
        ``_eval_input`` lays them out, ``rows`` their embedding rows)."""
        local = np.full((n, 3), math.nan)
        if n:
            self.model.eval()
            z = self.model(inp)
            predict = self.model.predictor
            z_src = z[rows[:n]]
            ap = predict.candidates(z_src, z, rows[n : 3 * n].view(2, n).T).double().cpu().numpy()
            local[:, 0] = ap[:, 0]
            local[:, 1] = np.where(neg_ok[:, 0], ap[:, 1], np.nan)
            if rank:
                scores = predict.candidates(z_src, z, rows[3 * n :].view(n, -1)).double().cpu().numpy()
                local[:, 2] = reciprocal_ranks(scores[:, 0], scores[:, 1:], neg_ok)
        full = self.dist.gather_rows(local, m, self.device)
        return full[:, 0], full[:, 1], full[:, 2]

    def _train(self, inp, rows, train_neg, keep, lo, hi) -> float:
        """One optimizer step; each rank's loss is scaled so that the averaged gradient equals the
        single-process full-batch gradient of ``mean BCE(pos) + mean BCE(neg)``."""
        n = hi - lo
        model, d = self.model, self.dist
        has_neg = keep & (train_neg >= 0)
        n_pos, n_neg = int(keep.sum()), int(has_neg.sum())
        if not n_pos:
            return math.nan
        model.train()
        self.optimizer.zero_grad()
        local = 0.0
        if n:
            z = model(inp)
            logits = model.predictor.candidates(gather_rows(z, rows[:n]), z, rows[n:].view(2, n).T)
            pos, neg = logits.unbind(1)
            w_pos = torch.from_numpy(keep[lo:hi].astype(np.float32)).to(self.device)
            loss = (
                F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), w_pos, reduction="sum") / n_pos
            )
            if n_neg:
                w_neg = torch.from_numpy(has_neg[lo:hi].astype(np.float32)).to(self.device)
                loss = (
                    loss
                    + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), w_neg, reduction="sum")
                    / n_neg
                )
            (loss * d.world_size).backward()
            local = loss.item()
        d.average_gradients(list(model.parameters()))
        self.optimizer.step()
        return d.all_sum([local], self.device)[0]

    def _observe_negatives(self, post_src: np.ndarray, post_dst: np.ndarray) -> None:
        if not len(post_dst):
            return
        if self.negatives is None:
            self.negatives = NegativeSampler(post_dst, seed=self.config.seed)
        else:
            self.negatives.pool = np.union1d(self.negatives.pool, post_dst)
        self.negatives.observe(post_src, post_dst)

    def _rebuild_negatives(self) -> None:
        """History and pool of the negative sampler are exactly the store's edges: rebuild them from it."""
        self.negatives = None
        edges = self.store.edges()
        self._observe_negatives(edges.src, edges.dst)

    # ------------------------------------------------------------------ serving
    def _serve(self, touched: np.ndarray, arrival: float, events: int) -> None:
        if self.table is None:
            self.latency.record(arrival, time.perf_counter(), events)
            return
        self._touched.append(touched)
        self._waiting.append((arrival, events))
        if self.steps % self.config.serve_every == 0:
            self.refresh()

    @torch.no_grad()
    def refresh(self, nodes: np.ndarray | None = None) -> None:
        """Recompute the table rows of ``nodes`` (internal ids; default: those touched since the last
        refresh) as of just after the newest event, pending memory messages applied."""
        if self.table is None:
            return
        if nodes is None:
            nodes = np.unique(np.concatenate(self._touched)) if self._touched else np.zeros(0, np.int64)
        self._touched = []
        if len(nodes) and math.isfinite(self.store.watermark):
            t_q = float(np.nextafter(self.store.watermark, math.inf))
            self.model.eval()
            for lo in range(0, len(nodes), 4096):
                part = nodes[lo : lo + 4096]
                inp, rows = self._input(part, self.store.num_nodes, np.full(len(part), t_q), _SERVE)
                z = self.model(inp)[rows]
                self.table.update(self.store.external_ids(part), z.float().cpu().numpy(), t_q)
        now = time.perf_counter()
        for arrival, events in self._waiting:
            self.latency.record(arrival, now, events)
        self._waiting = []
        self._refreshes += 1
        if self.sink is not None and self._refreshes % self.config.publish_every == 0:
            self.table.publish(self.sink)

    # ------------------------------------------------------------------ the stream
    def fit(
        self,
        source: Iterable[EventBatch],
        *,
        positions: Callable[[], dict[str, int]] | None = None,
        max_events: int | None = None,
        progress: bool = True,
        total: int | None = None,
    ) -> OnlineResult:
        """Consume ``source`` to its end (or ``max_events`` more events), test-then-train, checkpointing
        every ``checkpoint_every`` batches and at the end.

        Each source batch is cut into ``batch_size`` global batches. ``positions`` (default: the source's own
        ``positions`` method, as ``KafkaSource`` has) gives offsets to save with each checkpoint; such a
        source is trusted to start where the restored store's offsets say (build it with
        ``store=trainer.store``), and it is checkpointed only between its batches so offsets and state
        agree. Any other source is replayed from its start: right after ``resume``, the events the
        checkpoint had consumed are skipped.
        """
        cfg = self.config
        positions = positions or getattr(source, "positions", None)
        skip = 0 if positions is not None else self._replayed
        self._replayed = 0
        start, start_events, last_ckpt = time.perf_counter(), self.position, self.steps
        saved: Path | None = None
        if max_events is not None:
            total = min(total or math.inf, self.position + max_events)
        bar = tqdm(
            total=total, initial=self.position, unit="ev", dynamic_ncols=True,
            disable=not (progress and self.dist.is_main),
        )  # fmt: skip
        cut_short = False  # stopped inside a source batch: its offsets would claim unprocessed events
        batches = iter(source)  # (a file source starts its pass's dead-letter list here)
        letters_seen = _source_dead_letters(source)
        try:
            for raw in batches:
                arrival = time.perf_counter()
                cut = min(skip, len(raw))
                skip -= cut
                letters = _source_dead_letters(source)  # counted as they come, so checkpoints hold them,
                if cut < len(raw) or not len(raw):  # but not again for batches a resumed run replays
                    self.dead_letter_count += letters - letters_seen
                letters_seen = letters
                for chunk in raw[cut:].split(cfg.batch_size):
                    if max_events is not None:
                        room = max(0, max_events - (self.position - start_events))
                        cut_short |= len(chunk) > room
                        chunk = chunk[:room]
                    if not len(chunk):
                        cut_short = True
                        break
                    closed = len(self.metrics.windows)
                    self.step(chunk, arrival=arrival)
                    self.position += len(chunk)
                    bar.update(len(chunk))
                    if len(self.metrics.windows) > closed:
                        w = self.metrics.windows[-1]
                        bar.set_postfix(ap=f"{w.ap:.4f}", mrr=f"{w.mrr:.4f}", refresh=False)
                    if positions is None and self._due(last_ckpt):
                        saved, last_ckpt = self.save_checkpoint(), self.steps
                if max_events is not None and self.position - start_events >= max_events:
                    break
                if positions is not None and self._due(last_ckpt):
                    saved, last_ckpt = self.save_checkpoint(positions()), self.steps
        finally:
            bar.close()
            if not skip:
                self.dead_letter_count += _source_dead_letters(source) - letters_seen
        if cfg.checkpoint_every and self.steps > last_ckpt and not (positions is not None and cut_short):
            saved = self.save_checkpoint(None if positions is None else positions())
        if self._touched or self._waiting:
            self.refresh()
        if self.sink is not None and self.table is not None:
            self.table.publish(self.sink)
            if callable(getattr(self.sink, "flush", None)):
                self.sink.flush()
        self.metrics.close()
        seconds = time.perf_counter() - start
        events = self.position - start_events
        return OnlineResult(
            events, self.learned, self.steps, seconds, events / seconds if seconds > 0 else math.nan,
            self.metrics.summary(), list(self.metrics.windows), 1e3 * self.latency.percentile(50),
            1e3 * self.latency.percentile(99), self.dead_letter_count, saved,
        )  # fmt: skip

    def reset_stream(self, store: TemporalGraphStore | None = None) -> None:
        """Start a new pass over a replayed stream: fresh store (default: empty), blank memory and negative
        history; learned parameters and optimizer state stay (e.g. between offline epochs)."""
        self.store = store if store is not None else TemporalGraphStore()
        self.sampler.store = self.store
        self.model.reset_state()
        self._rebuild_negatives()
        self._check_feature_widths()
        self.position = 0
        self._touched, self._waiting = [], []  # node ids of the old store
        if self.table is not None:  # the old pass's rows would be served as current; the next refresh
            self.table.clear()  # (each step's, or resume's once the state is loaded) serves the new ones

    def _due(self, last: int) -> bool:
        every = self.config.checkpoint_every
        return bool(every) and self.steps - last >= every

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, source_offsets: dict[str, int] | None = None) -> Path | None:
        """Write a checkpoint to ``config.checkpoint_dir`` (rank 0 writes; every rank must call)."""
        cfg = self.config
        if not cfg.checkpoint_dir:
            raise ConfigError("save_checkpoint needs config.checkpoint_dir")
        path = None
        if self.dist.is_main:
            path = checkpoint.save(
                Path(cfg.checkpoint_dir), self.steps, self.store, dict(source_offsets or {}),
                self._state(), self._manifest(), cfg.checkpoint_keep,
            )  # fmt: skip
        if self.dist.active:
            torch.distributed.barrier()
        return path

    def _state(self) -> dict:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "metrics": self.metrics.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": _python_rng(),
            "numpy_rng": _numpy_rng(),
        }
        if torch.cuda.is_available():
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        if self.table is not None:  # served rows, as computed when their nodes were last touched
            rows = self.table.state_dict()
            state["table"] = {
                k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in rows.items()
            }
            touched = np.concatenate(self._touched) if self._touched else np.zeros(0, np.int64)
            state["touched"] = torch.from_numpy(touched.astype(np.int64))
        return state

    def _manifest(self) -> dict:
        return {
            "config": self.config.as_dict(),
            "steps": self.steps,
            "position": self.position,
            "learned": self.learned,
            "dead_letters": self.dead_letter_count,
            "refreshes": self._refreshes,
            "store_hash": self.store.content_hash(),
        }

    @classmethod
    def resume(
        cls,
        checkpoint_dir: str | Path,
        *,
        config: TrainConfig | None = None,
        table: EmbeddingTable | None = None,
        sink: EmbeddingSink | None = None,
        dist: DistContext | None = None,
    ) -> OnlineTrainer:
        """A trainer in exactly the state of the newest checkpoint under ``checkpoint_dir``.

        ``config`` defaults to the saved one; pass one to change e.g. the device or checkpoint cadence
        (the model shape must match the saved parameters).
        """
        ckpt = checkpoint.load(Path(checkpoint_dir))
        man = ckpt.manifest
        # Saved config: checkpoints go on where they were loaded from, even if the folder moved.
        cfg = config or replace(TrainConfig.from_dict(man["config"]), checkpoint_dir=str(checkpoint_dir))
        trainer = cls(cfg, table=table, sink=sink, dist=dist)  # empty store: no refresh by an untrained model
        trainer.reset_stream(ckpt.store)
        trainer.model.load_state_dict(ckpt.state["model"])
        trainer.optimizer.load_state_dict(ckpt.state["optimizer"])
        trainer.metrics.load_state_dict(ckpt.state["metrics"])
        torch.set_rng_state(ckpt.state["torch_rng"])
        if "cuda_rng" in ckpt.state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(ckpt.state["cuda_rng"])
        trainer.steps, trainer.position = int(man["steps"]), int(man["position"])
        trainer._replayed = trainer.position
        trainer.learned, trainer.dead_letter_count = int(man["learned"]), int(man["dead_letters"])
        py = ckpt.state["python_rng"]
        random.setstate((py[0], tuple(py[1]), py[2]))
        nps = ckpt.state["numpy_rng"]
        np.random.set_state((nps[0], np.asarray(nps[1], np.uint32), *nps[2:]))
        if trainer.table is not None and "table" in ckpt.state:  # serve what the interrupted run served
            trainer.table.load_state_dict({k: _plain(v) for k, v in ckpt.state["table"].items()})
            trainer._touched = [ckpt.state["touched"].numpy()]
            trainer._refreshes = int(man["refreshes"])
        elif trainer.table is not None:  # the run served nothing (serve_every=0): embed every node now
            trainer.refresh(np.arange(trainer.store.num_nodes))
        return trainer


def _python_rng() -> list:
    py = random.getstate()
    return [py[0], list(py[1]), py[2]]


def _numpy_rng() -> list:
    """numpy's global RNG state as plain values (in the state blob, not the manifest: 624 words)."""
    state = np.random.get_state(legacy=True)
    return [state[0], state[1].tolist(), *state[2:]]


def _plain(value):
    """A tensor from a checkpoint as a numpy array (other values as they are)."""
    return value.numpy() if isinstance(value, torch.Tensor) else value


def _source_dead_letters(source) -> int:
    """Dead letters a source made itself (rows it could not parse or decode): file sources list this
    pass's, the Kafka source counts them in ``stats``. ``OnlineResult.dead_letters`` adds the store's."""
    letters = getattr(source, "dead_letters", None)
    if isinstance(letters, list):
        return len(letters)
    return int(getattr(getattr(source, "stats", None), "dead_letters", 0))
