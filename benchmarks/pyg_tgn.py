"""The baseline of the training benchmark: TGN from PyG's ``torch_geometric.nn.models.tgn`` parts.

It follows PyG's ``examples/tgn.py`` (memory, time and embedding dims 100, batch 200, the 10 latest neighbors,
one ``TransformerConv`` layer, Adam at 1e-4, one random negative per training positive), so that the speed we
claim is against the reference implementation people actually run. The split and the evaluation negatives live
here too, and the metrics are our trainer's, so the benchmark scores both sides with the same arrays and code.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.data import TemporalData
from torch_geometric.loader import TemporalDataLoader
from torch_geometric.nn import TransformerConv
from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator, LastNeighborLoader, TGNMemory
from torch_geometric.utils import scatter

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TemporalAttentionLayer, TimeEncoder
from streamgnn.sampling import EvalNegatives
from streamgnn.train.metrics import LinkMetrics, batch_mean_metrics, reciprocal_ranks

DIM = 100  # memory, time and embedding width
BATCH_SIZE = 200
NUM_NEIGHBORS = 10
LR = 1e-4
NUM_EVAL_NEGATIVES = 100


@dataclass(frozen=True)
class PygRecipe:
    """Where PyG's example departs from the TGN paper (or from our trainer), each switchable for ablations.

    Defaults are the example's. ``neighbor_time="query"``: attention sees (batch's first event time - edge
    time), as the paper and our ``TGNConfig.neighbor_time="query"``, instead of (neighbor's last update -
    edge time). ``time_init="geometric"``: the time encoder starts at the paper's frequencies. ``negatives=
    "seen"``: training negatives uniform over the destinations seen so far in the epoch, as our
    ``train_negative_pool="seen"``, not over the training part's destination id range.
    ``idle_gru=False``: nodes without messages keep their memory (ours), where PyG steps the GRU with a zero
    message for every node it reads. ``embedding="ours"``: our ``TemporalAttentionLayer`` (its default, TGN's
    merge MLP) on the same neighbors, ages and messages in place of ``TransformerConv``: every
    embedding-module difference at once.
    """

    neighbor_time: str = "last_update"
    time_init: str = "uniform"
    negatives: str = "id_range"
    idle_gru: bool = True
    embedding: str = "transformer_conv"

    def __post_init__(self) -> None:
        allowed = {
            "neighbor_time": ("last_update", "query"),
            "time_init": ("uniform", "geometric"),
            "negatives": ("id_range", "seen"),
            "idle_gru": (True, False),
            "embedding": ("transformer_conv", "ours"),
        }
        for name, values in allowed.items():
            if getattr(self, name) not in values:
                raise ConfigError(f"PygRecipe.{name} must be one of {values}, got {getattr(self, name)!r}")


class _QuietMemory(TGNMemory):
    """``TGNMemory`` in which only nodes with messages step the GRU and move their ``last_update``."""

    def _get_updated_memory(self, n_id: Tensor) -> tuple[Tensor, Tensor]:
        self._assoc[n_id] = torch.arange(n_id.size(0), device=n_id.device)
        msg_s, t_s, src_s, _ = self._compute_msg(n_id, self.msg_s_store, self.msg_s_module)
        msg_d, t_d, src_d, _ = self._compute_msg(n_id, self.msg_d_store, self.msg_d_module)
        idx, msg, t = torch.cat([src_s, src_d]), torch.cat([msg_s, msg_d]), torch.cat([t_s, t_d])
        aggr = self.aggr_module(msg, self._assoc[idx], t, n_id.size(0))
        has = torch.zeros(n_id.size(0), dtype=torch.bool, device=n_id.device)
        has[self._assoc[idx]] = True
        old = self.memory[n_id]
        memory = torch.where(has.unsqueeze(1), self.gru(aggr, old), old)
        last = scatter(t, idx, 0, self.last_update.size(0), reduce="max")[n_id]
        return memory, torch.where(has, last, self.last_update[n_id])


@dataclass(frozen=True)
class TrainResult:
    """What one training run reports: train throughput per epoch, test scores after the last (or the best)
    epoch, ``epochs`` trained, and the scores against each of ``with_negatives``' sets."""

    train_events_per_s: list[float]
    ap: float
    mrr: float
    epochs: int = 0
    best_epoch: int = 0
    test_with: dict[str, LinkMetrics] = field(default_factory=dict)


def split_points(n: int) -> tuple[int, int]:
    """Chronological 70/15/15: ends of the train and validation parts of an ``n``-event stream."""
    return int(0.70 * n), int(0.85 * n)


def eval_negatives(
    events: EventBatch, lo: int, num: int = NUM_EVAL_NEGATIVES, seed: int = 0, strategy: str = "random"
) -> np.ndarray:
    """``[len(events) - lo, num]`` fixed negatives for the events from ``lo`` on: ``EvalNegatives``.

    "random": distinct destinations drawn uniformly from every destination of the stream (the item set).
    "historical" (TGB's protocol): the first half are destinations the source met before ``lo`` (where it
    met enough), the rest random, so column 0 is a pair that did happen, only not now. None is a positive
    of the same source at the same time. Both sides of the benchmark rank against these very arrays, so
    their MRRs are comparable; column 0 doubles as the AP negative.

    Where fewer than ``num`` candidates exist (a stream, or a prefix, with few destinations), a row holds
    every one of them and ``-1`` pads the rest, as TGB does: each event is ranked against all it can be
    (``negative_counts``), not against repeats. An event with no candidate at all is an error.
    """
    part = events.take(slice(lo, len(events)))
    history = (events.src[:lo], events.dst[:lo]) if strategy == "historical" else None
    neg = EvalNegatives.generate(
        part.src, part.dst, part.t, part.eid, dst_pool=events.dst, history=history, num=num,
        strategy=strategy, frac=0.5, seed=seed,
    ).neg  # fmt: skip
    if len(neg) and (neg[:, 0] < 0).any():
        row = lo + int(np.flatnonzero(neg[:, 0] < 0)[0])
        raise ConfigError(
            f"event {row} (src {events.src[row]}, t {events.t[row]}) has no negative: every destination of "
            "the stream is a positive of its source at that time"
        )
    return neg


def negative_counts(negatives: np.ndarray) -> np.ndarray:
    """How many real negatives each row of ``eval_negatives``' array holds (the rest is ``-1`` padding)."""
    return (negatives >= 0).sum(1)


def batch_ranges(lo: int, hi: int, batch_size: int = BATCH_SIZE) -> list[tuple[int, int]]:
    return [(a, min(a + batch_size, hi)) for a in range(lo, hi, batch_size)]


def score_test(batch_scores, pos_range: tuple[int, int], negatives: np.ndarray) -> LinkMetrics:
    """Test metrics from ``batch_scores(lo, hi, neg) -> (pos [b], neg [b, k])`` over successive batches,
    by our trainer's code (``batch_mean_metrics``): AP per batch against column 0, MRR against all ``k``
    real negatives of each row (``-1`` padding is scored as a copy of column 0 and left out)."""
    parts = []
    start = pos_range[0]
    for lo, hi in batch_ranges(*pos_range):
        rows = negatives[lo - start : hi - start]
        valid = rows >= 0  # padding (fewer candidates than columns) is ranked against by no one
        pos, neg = batch_scores(lo, hi, np.where(valid, rows, rows[:, :1]))
        parts.append((pos, neg[:, 0], reciprocal_ranks(pos, neg, valid)))
    return batch_mean_metrics(parts)


class GraphAttentionEmbedding(nn.Module):
    """One ``TransformerConv`` over the latest neighbors, edges carrying ``[time_enc(Δt), msg]`` (PyG's)."""

    def __init__(self, in_channels: int, out_channels: int, msg_dim: int, time_enc: nn.Module) -> None:
        super().__init__()
        self.time_enc = time_enc
        edge_dim = msg_dim + time_enc.out_channels
        self.conv = TransformerConv(in_channels, out_channels // 2, heads=2, dropout=0.1, edge_dim=edge_dim)

    def forward(
        self, x: Tensor, last_update: Tensor, edge_index: Tensor, t: Tensor, msg: Tensor, t_query=None
    ) -> Tensor:
        rel_t = _ages(last_update, edge_index, t, t_query).to(x.dtype)
        edge_attr = torch.cat([self.time_enc(rel_t), msg], dim=-1)
        return self.conv(x, edge_index, edge_attr)


class OurAttentionEmbedding(nn.Module):
    """Our ``TemporalAttentionLayer`` on ``GraphAttentionEmbedding``'s inputs (for ``PygRecipe.embedding``).

    It reads PyG's shared time encoder through a ``TimeEncoder`` holding the same ``lin`` (both are
    ``cos(lin(t))``), so memory and attention still share one encoder as in PyG's example.
    """

    def __init__(self, in_channels: int, out_channels: int, msg_dim: int, time_enc: nn.Module) -> None:
        super().__init__()
        enc = TimeEncoder(time_enc.out_channels, "uniform")
        enc.lin = time_enc.lin
        self.layer = TemporalAttentionLayer(in_channels, msg_dim, enc, out_channels, num_heads=2, dropout=0.1)

    def forward(
        self, x: Tensor, last_update: Tensor, edge_index: Tensor, t: Tensor, msg: Tensor, t_query=None
    ) -> Tensor:
        rel_t = _ages(last_update, edge_index, t, t_query)
        return self.layer(x, x, edge_index[0], edge_index[1], rel_t.to(x.dtype), msg)


def _ages(last_update: Tensor, edge_index: Tensor, t: Tensor, t_query) -> Tensor:
    """The age attention sees per edge: the neighbor's last update (or ``t_query``) minus the edge time."""
    return last_update[edge_index[0]] - t if t_query is None else t_query - t


class LinkPredictor(nn.Module):
    """``relu(W_s z_src + W_d z_dst) -> logit`` (PyG's recipe)."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.lin_src = nn.Linear(in_channels, in_channels)
        self.lin_dst = nn.Linear(in_channels, in_channels)
        self.lin_final = nn.Linear(in_channels, 1)

    def forward(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        return self.lin_final((self.lin_src(z_src) + self.lin_dst(z_dst)).relu()).squeeze(-1)


class PygTGN:
    """PyG's TGN on one stream: memory, neighbor loader and model state, trained test-then-train per batch.

    The stream has no edge features, and PyG's message store drops zero-width messages (its ``_compute_msg``
    keeps only non-empty ``raw_msg`` parts), so every event carries one constant-zero message column. A zero
    input adds nothing through the GRU's and ``TransformerConv``'s linear maps, so this equals a model with
    no edge features, which is what our side runs.
    """

    def __init__(
        self,
        events: EventBatch,
        seed: int = 0,
        lr: float = LR,
        device: str = "cpu",
        recipe: PygRecipe | None = None,
    ) -> None:
        torch.manual_seed(seed)
        self.recipe = recipe = recipe or PygRecipe()
        self.device = torch.device(device)
        self.num_nodes = int(max(events.src.max(), events.dst.max())) + 1
        self.data = TemporalData(
            src=torch.from_numpy(events.src.astype(np.int64)),
            dst=torch.from_numpy(events.dst.astype(np.int64)),
            t=torch.from_numpy(events.t.astype(np.int64)),
            msg=torch.zeros(len(events), 1),
        ).to(self.device)
        msg_dim = self.data.msg.size(-1)
        self.memory = (TGNMemory if recipe.idle_gru else _QuietMemory)(
            self.num_nodes, msg_dim, DIM, DIM,
            message_module=IdentityMessage(msg_dim, DIM, DIM), aggregator_module=LastAggregator(),
        )  # fmt: skip
        if recipe.time_init == "geometric":  # after the default init, so every other draw is unchanged
            with torch.no_grad():
                self.memory.time_enc.lin.weight.copy_((1.0 / 10 ** torch.linspace(0, 9, DIM)).unsqueeze(1))
                self.memory.time_enc.lin.bias.zero_()
        embedding = (
            GraphAttentionEmbedding if recipe.embedding == "transformer_conv" else OurAttentionEmbedding
        )
        self.gnn = embedding(DIM, DIM, msg_dim, self.memory.time_enc)
        self.link_pred = LinkPredictor(DIM)
        for module in (self.memory, self.gnn, self.link_pred):
            module.to(self.device)
        self.neighbor_loader = LastNeighborLoader(self.num_nodes, size=NUM_NEIGHBORS, device=self.device)
        params = set(self.memory.parameters()) | set(self.gnn.parameters()) | set(self.link_pred.parameters())
        self.optimizer = torch.optim.Adam(params, lr=lr)
        self.criterion = nn.BCEWithLogitsLoss()
        self.assoc = torch.empty(self.num_nodes, dtype=torch.long, device=self.device)

    def _embed(self, n_id: Tensor, t: Tensor) -> Tensor:
        """Embeddings of ``n_id`` for a batch with event times ``t``."""
        n_id, edge_index, e_id = self.neighbor_loader(n_id)
        self.assoc[n_id] = torch.arange(n_id.size(0), device=self.device)
        z, last_update = self.memory(n_id)
        t_query = t.min() if self.recipe.neighbor_time == "query" else None
        return self.gnn(z, last_update, edge_index, self.data.t[e_id], self.data.msg[e_id], t_query)

    def _observe(self, batch: TemporalData) -> None:
        self.memory.update_state(batch.src, batch.dst, batch.t, batch.msg)
        self.neighbor_loader.insert(batch.src, batch.dst)

    def train_epoch(self, end: int) -> float:
        """One pass over events ``[0, end)`` from fresh memory; returns its wall seconds."""
        for module in (self.memory, self.gnn, self.link_pred):
            module.train()
        self.memory.reset_state()
        self.neighbor_loader.reset_state()
        seen = torch.zeros(self.num_nodes, dtype=torch.bool, device=self.device)
        t0 = time.perf_counter()
        for batch in TemporalDataLoader(self.data[:end], batch_size=BATCH_SIZE, neg_sampling_ratio=1.0):
            if self.recipe.negatives == "seen" and seen.any():  # (the first batch keeps the loader's draw)
                pool = seen.nonzero().squeeze(1)
                batch.neg_dst = pool[torch.randint(len(pool), batch.dst.shape, device=self.device)]
                batch.n_id = torch.cat([batch.src, batch.dst, batch.neg_dst]).unique()
            seen[batch.dst] = True
            self.optimizer.zero_grad()
            z = self._embed(batch.n_id, batch.t)
            src = z[self.assoc[batch.src]]
            pos_out = self.link_pred(src, z[self.assoc[batch.dst]])
            neg_out = self.link_pred(src, z[self.assoc[batch.neg_dst]])
            loss = self.criterion(pos_out, torch.ones_like(pos_out))
            loss = loss + self.criterion(neg_out, torch.zeros_like(neg_out))
            self._observe(batch)
            loss.backward()
            self.optimizer.step()
            self.memory.detach()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    @torch.no_grad()
    def replay(self, lo: int, hi: int) -> None:
        """Feed events ``[lo, hi)`` to memory and neighbors without scoring (the validation part)."""
        self._eval_mode()
        for a, b in batch_ranges(lo, hi):
            self._observe(self.data[a:b])

    @torch.no_grad()
    def batch_scores(self, lo: int, hi: int, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scores of events ``[lo, hi)`` and of ``neg [b, k]`` as their destinations, then observe."""
        self._eval_mode()
        batch = self.data[lo:hi]
        neg_t = torch.from_numpy(neg.astype(np.int64)).to(self.device)
        z = self._embed(torch.cat([batch.src, batch.dst, neg_t.reshape(-1)]).unique(), batch.t)
        src = z[self.assoc[batch.src]]
        pos = self.link_pred(src, z[self.assoc[batch.dst]])
        k = neg.shape[1]
        negs = self.link_pred(src.repeat_interleave(k, 0), z[self.assoc[neg_t.reshape(-1)]]).view(-1, k)
        self._observe(batch)
        return pos.cpu().numpy(), negs.cpu().numpy()

    def _eval_mode(self) -> None:
        for module in (self.memory, self.gnn, self.link_pred):
            module.eval()


def train_pyg_tgn(
    events: EventBatch,
    epochs: int = 1,
    *,
    patience: int | None = None,
    negatives: np.ndarray | None = None,
    with_negatives: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    lr: float = LR,
    device: str = "cpu",
    recipe: PygRecipe | None = None,
) -> TrainResult:
    """Train PyG's TGN for ``epochs`` on the first 70% of ``events``, then score the last 15%.

    Each epoch restarts memory and streams the training part; after the last one the validation part is
    replayed into memory and the test part is scored test-then-observe. ``negatives`` (default:
    ``eval_negatives``) has one row per test event; each of ``with_negatives`` scores the test part again
    from the memory before it. ``patience``: as ``fit_offline``'s, each epoch scores validation AP against
    one random negative per event, and training stops ``patience`` epochs past the best; the best epoch's
    weights then rebuild memory by a replay of the training part (PyG's memory keeps its pending messages
    outside ``state_dict``, so it is replayed rather than restored).
    """
    train_end, val_end = split_points(len(events))
    if negatives is None:
        negatives = eval_negatives(events, val_end, seed=seed)
    model = PygTGN(events, seed=seed, lr=lr, device=device, recipe=recipe)
    modules = ("memory", "gnn", "link_pred")
    rates, best = [], (-np.inf, 0, None)
    val_neg = None if patience is None else eval_negatives(events.take(slice(0, val_end)), train_end, 1, seed)
    for epoch in range(1, epochs + 1):
        rates.append(train_end / model.train_epoch(train_end))
        if patience is None:
            continue
        ap = score_test(model.batch_scores, (train_end, val_end), val_neg).ap
        if ap > best[0]:
            best = (ap, epoch, copy.deepcopy({m: getattr(model, m).state_dict() for m in modules}))
        elif epoch - best[1] >= patience:
            break
    if patience is None:
        model.replay(train_end, val_end)
        best_epoch = epochs
    else:
        _, best_epoch, weights = best
        for name in modules:
            getattr(model, name).load_state_dict(weights[name])
        model.memory.reset_state()
        model.neighbor_loader.reset_state()
        model.replay(0, val_end)
    state = copy.deepcopy((model.memory.state_dict(), model.memory.msg_s_store, model.memory.msg_d_store))
    loader = copy.deepcopy(model.neighbor_loader)
    test = score_test(model.batch_scores, (val_end, len(events)), negatives)
    scored_with = {}
    for name, neg in (with_negatives or {}).items():
        model.memory.load_state_dict(state[0])
        model.memory.msg_s_store, model.memory.msg_d_store = copy.deepcopy(state[1:])
        model.neighbor_loader = copy.deepcopy(loader)
        scored_with[name] = score_test(model.batch_scores, (val_end, len(events)), neg)
    return TrainResult(rates, test.ap, test.mrr, len(rates), best_epoch, scored_with)
