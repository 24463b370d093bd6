"""TGN as a ``LinkModel``: the ``nn.TGN`` module, Adam, the batch's query layout, scoring, loss and update.

Per batch it embeds each distinct query once: roots ``[src, dst, AP negative]`` at their query times, then
(for MRR) every candidate ``[dst, negatives]`` at the batch's first time, so ranking costs one embedding per
distinct candidate, not one per pair; pair features likewise are read and encoded once per distinct
``(source, candidate, time)`` (a batch's few sources draw many of the same candidates: a quarter to a third
of the pairs are distinct on JODIE Wikipedia). Training embeds ``[src, dst, negative]`` at the query times.
Each rank scores and trains the batch's rows it is given (``StepInput.rows``): a data-parallel rank's
slice, a sharded rank's events. Where the embeddings, the memory and the pair features come from is the
business of its access (``tgn_access``): the store's sampler and the module's memory in one process
(``tgn_local``, the default), the vertices' owners in a sharded run (``shard.tgn_access``), so the same
model runs in both.

>>> import numpy as np
>>> from streamgnn.nn import TGNConfig
>>> from streamgnn.store import TemporalGraphStore
>>> from streamgnn.train import TrainConfig
>>> from streamgnn.train.protocol import StepInput
>>> model = TGNLinkModel(TrainConfig(model=TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8)))
>>> model.attach(TemporalGraphStore())
>>> batch = StepInput(np.array([-1]), np.array([-1]), np.zeros(1), np.zeros(1), 0, np.zeros(1), 0, 0)
>>> prepared = model.prepare(batch, None, np.array([-1]))
>>> math.isfinite(model.train(prepared, np.array([True]), ()))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..nn import TGN
from ..nn.gather import gather_rows
from ..sampling import SamplerConfig
from ..store import TemporalGraphStore
from .config import TrainConfig
from .distributed import DistContext
from .head import ScoringHead
from .negatives import counted
from .protocol import Candidates, JointTerm, Learned, StepInput
from .tgn_access import EVAL, TRAIN, QuerySet, TGNAccess, distinct_rows
from .tgn_local import local_access


def pos_neg_loss(pos, neg, pos_ok: np.ndarray, neg_ok: np.ndarray, n_pos: int, n_neg: int) -> torch.Tensor:
    """This rank's part of ``mean BCE(positives) + mean BCE(negatives)`` over the global batch, from its
    rows' logits; ``pos_ok``/``neg_ok`` mark the rows that count, ``n_pos``/``n_neg`` the global counts."""
    w_pos = torch.from_numpy(np.asarray(pos_ok, np.float32)).to(pos.device)
    loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), w_pos, reduction="sum") / n_pos
    if n_neg:
        w_neg = torch.from_numpy(np.asarray(neg_ok, np.float32)).to(neg.device)
        loss = (
            loss
            + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), w_neg, reduction="sum") / n_neg
        )
    return loss


def eval_roots(src, dst, neg, t_query, t_first: float, rank: bool) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation layout of rows (module docstring): roots ``[src, dst, neg[:, 0]]`` at ``t_query``,
    then, to rank, every candidate ``[dst, neg]`` row by row at the batch's first time ``t_first``."""
    roots, times = [src, dst, neg[:, 0]], [t_query] * 3
    if rank:
        roots.append(np.column_stack([dst, neg]).reshape(-1))
        times.append(np.full(len(roots[-1]), t_first))
    return np.concatenate(roots), np.concatenate(times)


def train_roots(src, dst, neg, t_query) -> tuple[np.ndarray, np.ndarray]:
    """The training layout of rows: roots ``[src, dst, neg]``, all at ``t_query``."""
    return np.concatenate([src, dst, neg]), np.tile(t_query, 3)


@dataclass(frozen=True)
class PairRows:
    """Raw pair features of ``[n, q]`` pairs, stored once per distinct pair: ``raw`` (``PairReader.read``'s
    arrays, one row per distinct pair) and ``index``, each pair's row."""

    raw: tuple[torch.Tensor, ...]
    index: torch.Tensor  # long [n, q]

    def columns(self, cols: slice) -> PairRows:
        """The pairs of columns ``cols`` (the same distinct rows)."""
        return PairRows(self.raw, self.index[:, cols])


@dataclass
class _Prepared:
    """What ``prepare`` read before the batch was ingested: the embedding part's prepared query sets."""

    batch: StepInput
    candidates: Candidates | None
    train_neg: np.ndarray | None
    eval_input: Any  # the embedding part's, for ``Embeddings.forward``; None: not scored
    train_input: Any  # None: not trained
    # raw pair features (history, co-occurrence, walks) of each row's (source, candidate) pairs, or None
    eval_pairs: PairRows | None = None
    rank_pairs: PairRows | None = None
    train_pairs: PairRows | None = None
    scored: tuple[torch.Tensor, torch.Tensor] | None = None  # the evaluation layout's embeddings, once read


class TGNLinkModel(Learned):
    """``nn.TGN`` (any variant) with its optimizer; ``model`` and ``optimizer`` are public. ``access``
    makes its embedding, memory and pair parts (``tgn_access``; default: one process's)."""

    trainable = True

    def __init__(
        self,
        config: TrainConfig,
        *,
        device: torch.device | str = "cpu",
        dist: DistContext | None = None,
        access: Callable[[TGNLinkModel], TGNAccess] = local_access,
    ) -> None:
        self.config = config
        self.device = torch.device(device)
        self.dist = dist or DistContext()
        mcfg = config.model
        self.model = TGN(mcfg).to(self.device)
        self.dist.broadcast_module(self.model)
        # Fused: one kernel for all parameters instead of a dozen small ops per tensor (3x faster on CPU).
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, fused=True)
        self.out_dim = self.model.out_dim
        self.name = mcfg.variant.upper()  # how run summaries call it
        self.sampling = SamplerConfig(  # the neighborhoods every access samples
            fanouts=(mcfg.num_neighbors,) * max(mcfg.num_layers, 1),
            strategy=config.sampling,
            seed=config.seed,
            edge_features=mcfg.edge_feature_dim > 0,
            node_features=mcfg.node_feature_dim > 0,
        )
        parts = access(self)
        self.embeddings, self.memory, self.pairs = parts.embeddings, parts.memory, parts.pairs

    @staticmethod
    def scoring_head(config: TrainConfig, state: dict) -> ScoringHead:
        """What scores two served embeddings as this model does, from a checkpoint's ``state`` (its
        ``model`` is ``TGN.state_dict``): TGN's ``predictor`` and, with pair features, its ``pair_encoder``,
        with the checkpoint's weights. The rest of TGN (memory, attention) is not built up: it made the
        embeddings, which the service already has. Building it leaves the process's RNG as it was (a service
        in the trainer's process must not move the trainer's draws)."""
        with torch.random.fork_rng(devices=[]):
            tgn = TGN(config.model)
        weights = state["model"]
        for name, part in (("predictor", tgn.predictor), ("pair_encoder", tgn.pair_encoder)):
            if part is not None:  # the part's own keys, under the attribute TGN holds it as
                part.load_state_dict(
                    {k[len(name) + 1 :]: v for k, v in weights.items() if k.startswith(name + ".")}
                )
        return ScoringHead(tgn.predictor, tgn.pair_encoder, config.model if tgn.pair_encoder else None)

    # ------------------------------------------------------------------ the stream
    def attach(self, store: TemporalGraphStore) -> None:
        mcfg = self.config.model
        for label, want, have in (
            ("edge", mcfg.edge_feature_dim, store.edge_feature_dim),
            ("node", mcfg.node_feature_dim, store.node_feature_dim),
        ):
            if have is not None and want != have:
                raise ConfigError(
                    f"the store holds {have} {label} features per row but the model expects {want}: "
                    f"set TGNConfig.{label}_feature_dim={have}"
                )
        self.embeddings.attach(store)
        if self.pairs is not None:
            self.pairs.store = store

    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        self.memory.observe(src, dst, t, feat)

    def nbytes(self) -> dict[str, int]:
        """The memory part's bytes by part, and ``walks``: the pair reader's walk state, if it reads pairs."""
        parts = self.memory.nbytes()
        if self.pairs is not None:
            parts["walks"] = self.pairs.nbytes()
        return parts

    def reset_state(self) -> None:
        self.model.reset_state()
        if self.pairs is not None:
            self.pairs.reset()

    def state(self) -> dict[str, torch.Tensor] | None:
        """The memory module's tensors, cloned: the module goes on writing its own (``LinkModel.state``)."""
        memory = self.model.memory
        return None if memory is None else {k: v.clone() for k, v in memory.state_dict().items()}

    def load_state(self, state: dict[str, torch.Tensor] | None) -> None:
        if state is not None:
            self.model.memory.load_state_dict(state)

    # ------------------------------------------------------------------ per batch
    def prepare(
        self, batch: StepInput, candidates: Candidates | None, train_neg: np.ndarray | None
    ) -> _Prepared:
        """Pair features of this rank's rows, then the embedding part's query sets (in this order: a
        sharded run's exchanges come in the same order on every rank)."""
        src, dst, t_query = batch.src, batch.dst, batch.t_query
        rank = candidates is not None and candidates.rank
        sets = []
        if candidates is not None:
            neg, t_first = candidates.neg, batch.t.min()
            sets.append(
                QuerySet(EVAL, False, lambda r: eval_roots(src[r], dst[r], neg[r], t_query[r], t_first, rank))
            )
        if train_neg is not None:
            sets.append(
                QuerySet(TRAIN, True, lambda r: train_roots(src[r], dst[r], train_neg[r], t_query[r]))
            )
        r = batch.rows
        pairs = self.batch_pairs(
            src[r], dst[r], t_query[r], None if candidates is None else candidates.neg[r], rank,
            None if train_neg is None else train_neg[r],
        )  # fmt: skip
        inputs = iter(self.embeddings.prepare(batch, sets))
        eval_input = next(inputs) if candidates is not None else None
        train_input = next(inputs) if train_neg is not None else None
        return _Prepared(batch, candidates, train_neg, eval_input, train_input, **pairs)

    def batch_pairs(
        self, src: np.ndarray, dst: np.ndarray, t_query: np.ndarray, neg: np.ndarray | None, rank: bool,
        train_neg: np.ndarray | None,
    ) -> dict[str, PairRows | None]:  # fmt: skip
        """``_Prepared``'s raw pair features of a batch's rows: ``eval_pairs`` (destination, column-0
        negative of ``neg``), ``rank_pairs`` (destination and every column, when ``rank``), ``train_pairs``
        (destination, ``train_neg``), all in one ``read_pairs`` (a sharded reader: one exchange round).
        Empty when the model reads no pair features or the batch neither scores nor trains."""
        if self.pairs is None or (neg is None and train_neg is None):
            return {}
        cols, out = [], {}
        if neg is not None:  # ranking's candidates start with the AP pair: read once
            cols.append(np.column_stack([dst, neg if rank else neg[:, :1]]))
        if train_neg is not None:
            cols.append(np.column_stack([dst, train_neg]))
        raw = self.read_pairs(src, np.concatenate(cols, 1), t_query)
        if neg is not None:
            width = cols[0].shape[1]
            out["eval_pairs"] = raw.columns(slice(0, 2))
            out["rank_pairs"] = raw.columns(slice(0, width)) if rank else None
        if train_neg is not None:
            out["train_pairs"] = raw.columns(slice(-2, None))
        return out

    @torch.no_grad()
    def score(self, prepared: _Prepared) -> tuple[np.ndarray, np.ndarray | None]:
        """Logits of the evaluation layout (module docstring) from the embeddings of its distinct queries."""
        n = len(prepared.batch.rows)
        if not n:
            return np.zeros((0, 2)), None
        self._mode(training=False)
        z, rows = self._scored(prepared)
        predict = self.model.predictor
        z_src = z[rows[:n]]
        ap_pair, rank_pair = self._encode(prepared.eval_pairs, prepared.rank_pairs)
        ap = predict.candidates(z_src, z, rows[n : 3 * n].view(2, n).T, *ap_pair).double().cpu().numpy()
        ranked = None
        if prepared.candidates.rank:
            index = rows[3 * n :].view(n, -1)
            ranked = predict.candidates(z_src, z, index, *rank_pair).double().cpu().numpy()
        return ap, ranked

    @torch.no_grad()
    def embedded(self, prepared: _Prepared) -> np.ndarray | None:
        """The evaluation layout's sources and destinations (its first ``2n`` roots), from the forward pass
        ``score`` then reuses."""
        if prepared.eval_input is None:
            return None
        self._mode(training=False)
        z, rows = self._scored(prepared)
        return z[rows[: 2 * len(prepared.batch.rows)]].float().cpu().numpy()

    def _scored(self, prepared: _Prepared) -> tuple[torch.Tensor, torch.Tensor]:
        """The embeddings of the evaluation layout's distinct queries and each root's row among them, read
        once per batch (by ``embedded`` before the batch is applied, or by ``score``): the prepared
        neighborhoods and the memory, which takes the batch only in ``observe``, are the same then."""
        if prepared.scored is None:
            prepared.scored = self.embeddings.forward(prepared.eval_input)
        return prepared.scored

    def train(self, prepared: _Prepared, keep: np.ndarray, joint: Sequence[JointTerm]) -> float:
        """One optimizer step; each rank's loss is scaled so that the averaged gradient equals the
        single-process full-batch gradient of ``mean BCE(pos) + mean BCE(neg)``. ``joint``: a task's
        losses, added before the one backward pass (their own parameters stepped after the model's);
        the link loss alone is returned."""
        r = prepared.batch.rows
        has_neg = keep & counted(prepared.train_neg, self.config.train_negative_pool)
        n_pos, n_neg = int(keep.sum()), int(has_neg.sum())
        if not n_pos:
            return math.nan
        self._mode(training=True)
        loss = None
        if len(r):
            z, rows = self.embeddings.forward(prepared.train_input)
            loss = self.loss(z, rows, keep[r], has_neg[r], n_pos, n_neg, prepared.train_pairs)
        self.optimizer.zero_grad()
        for term in joint:
            term.optimizer.zero_grad()
        local = 0.0
        if loss is not None:
            total = sum((term.loss for term in joint), loss)
            (total * self.dist.world_size).backward()
            local = loss.item()
        self.embeddings.finish()
        self.dist.average_gradients(list(self.model.parameters()))
        self.optimizer.step()
        for term in joint:
            term.optimizer.step()
        return self.dist.all_sum([local], self.device)[0]

    def joint_embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> torch.Tensor:
        """``embed``'s rows with autograd (training mode): what a task's ``JointTerm`` is computed from,
        called before the batch is applied (the memory and the store as ``prepare`` read them)."""
        if self.dist.active:
            raise ConfigError("joint training with a task runs in one process (not under torchrun)")
        self._mode(training=True)
        return self.embeddings.embed(nodes, t, blank, step)

    @torch.no_grad()
    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> np.ndarray:
        self._mode(training=False)
        return self.embeddings.embed(nodes, t, blank, step).float().cpu().numpy()

    def loss(
        self, z, rows, pos_ok: np.ndarray, neg_ok: np.ndarray, n_pos: int, n_neg: int, pairs=None
    ) -> torch.Tensor:
        """This rank's part of ``mean BCE(positives) + mean BCE(negatives)`` over the global batch: its ``n``
        rows are ``z[rows[:n]]`` (sources) against ``z[rows[n:2n]]`` (destinations) and ``z[rows[2n:3n]]``
        (negatives); ``pos_ok``/``neg_ok`` mark the rows that count, ``n_pos``/``n_neg`` the global counts.
        ``pairs``: ``read_pairs`` of (destination, negative), if the predictor reads them."""
        n = len(pos_ok)
        index = rows[n : 3 * n].view(2, n).T
        pos, neg = self.model.predictor.candidates(
            gather_rows(z, rows[:n]), z, index, *self._encode(pairs)[0]
        ).unbind(1)
        return pos_neg_loss(pos, neg, pos_ok, neg_ok, n_pos, n_neg)

    def read_pairs(self, src: np.ndarray, cand: np.ndarray, t: np.ndarray) -> PairRows:
        """Raw pair features of each ``(src[i], cand[i, j])`` at ``t[i]`` (-1: unknown, no history), read
        now (before the store holds the batch) by the pair part (a collective when sharded), once per
        distinct pair: a reader's features are a function of the query."""
        n, q = cand.shape
        distinct, index = distinct_rows(np.repeat(src, q), cand.reshape(-1), np.repeat(t, q))
        raw = self.pairs.read(*distinct)
        return PairRows(tuple(torch.from_numpy(x) for x in raw), torch.from_numpy(index.reshape(n, q)))

    def _mode(self, training: bool) -> None:
        """The module in training mode or not; ``Module.train`` walks every submodule, a fifth of a
        millisecond per call, so only when it changes (nothing sets a submodule's mode alone)."""
        if self.model.training != training:
            self.model.train(training)

    def _encode(self, *pairs: PairRows | None) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
        """``(vectors [d, pair_dim], index [n, q])`` of each of ``pairs``, for ``LinkPredictor.candidates``:
        the vectors and each pair's row among them (``(None, None)``: no pairs). Without autograd (scoring)
        every distinct row of a read is encoded once, for all of ``pairs`` that share it (a scored batch's
        sources rank many of the same candidates); with it (training), every pair is, in order: a training
        batch's pairs are nearly all distinct, and finding the few repeats costs more than they would."""
        codes: dict[int, torch.Tensor] = {}
        out = []
        for p in pairs:
            if p is None:
                out.append((None, None))
            elif torch.is_grad_enabled():
                flat = p.index.reshape(-1)
                rows = torch.arange(len(flat), device=flat.device).view(p.index.shape)
                out.append((self.model.pair_encoder(*(x[flat] for x in p.raw)), rows))
            else:
                if id(p.raw) not in codes:
                    codes[id(p.raw)] = self.model.pair_encoder(*p.raw)
                out.append((codes[id(p.raw)], p.index))
        return out
