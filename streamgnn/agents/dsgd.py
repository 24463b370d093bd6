"""Decentralized training: every agent trains its own copy of the network and gossips it with neighbors.

Each step all agents take the same minibatch of training signals (each sees only its own reading of them), run
the network forward over the lossy links (one round per shift), and backpropagate: the gradient of a received
message goes back to its sender over the same link, so agent ``i`` gets the gradient of the *whole* loss
``sum_j loss_j`` with respect to its own parameters, from messages only. It takes a local Adam step, then
mixes its parameters with its neighbors' (decentralized SGD, Metropolis weights ``1 / (1 + max(deg_i,
deg_j))``). With gradient tracking (default) the step follows a gossiped estimate of the agents' average
gradient rather than the agent's own (``DecentralizedTrainer._track``). Links fail in every round, forward,
backward and mixing alike (the ``Exchange``'s failure model): a lost parameter message just leaves that
neighbor out of this mix.

Plain mixing sends the parameters and pulls each agent toward the neighbors it heard from. Mixing messages can
be compressed (``compress.TopK``, ``compress.Quantize``) with error feedback, CHOCO-style: the sender keeps,
per link, the copy of its parameters the receiver holds, sends the compressed difference and updates both
copies identically; the update ``theta_i += rate * sum_j w_ij (copy_{j->i} - copy_{i->j})`` keeps the agents'
average where both directions of a link deliver. Loss decisions come from the shared failure mask, so sender
and receiver copies never disagree.

The same code runs every agent in one process (``LocalExchange``) or the agents of one MPI rank
(``MPIExchange``, parameters mixed through its transport)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call

from ..configs import Config
from ..errors import ConfigError
from ..filters.exchange import Exchange
from ..filters.failures import mix_seed
from ..filters.graph_filter import GraphNN
from ..progress import progress_bar
from .compress import Codec, make_codec
from .source_loc import SourceLocalization, correct_counts


@dataclass(frozen=True)
class DecentralizedConfig(Config):
    steps: int = 1500
    batch: int = 32
    lr: float = 3e-3
    mix_rate: float = 1.0
    compression: str = "none"
    tracking: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch < 1 or self.lr <= 0 or not 0 < self.mix_rate <= 1:
            raise ConfigError(
                f"DecentralizedConfig needs positive steps/batch/lr and mix_rate in (0, 1]: {self}"
            )
        make_codec(self.compression)


class Mixer:
    """Per-link parameter gossip for the agents ``rows`` of an exchange (all agents, or one rank's)."""

    def __init__(self, exchange: Exchange, theta0: Tensor, codec_spec: str, rate: float):
        shift = exchange.shift
        if shift.lanes != 1 or not torch.equal(shift.to_dense()[0] != 0, shift.to_dense()[0].T != 0):
            raise ConfigError("parameter mixing needs one undirected communication graph")
        nbr, deg, n = shift.neighbors[0], shift.degree[0], shift.num_nodes
        self.exchange, self.codec, self.rate = exchange, make_codec(codec_spec), rate
        self.rows = exchange.rows
        self.owner = getattr(exchange, "owner", np.zeros(n, np.int64))
        self.rank = int(self.owner[self.rows[0]]) if len(self.rows) else 0
        self.pos = np.full(n, -1, np.int64)
        self.pos[self.rows] = np.arange(len(self.rows))
        # in-slots: (row r, slot d) hears from j; out-links: (receiver i, slot d) hears from a local j.
        self.in_r, self.in_d = np.nonzero(nbr[self.rows] >= 0)
        self.in_i, self.in_j = self.rows[self.in_r], nbr[self.rows[self.in_r], self.in_d]
        self.in_src = self.owner[self.in_j]
        i, d = np.nonzero(nbr >= 0)
        mine = self.pos[nbr[i, d]] >= 0
        self.out_i, self.out_d, self.out_j = i[mine], d[mine], nbr[i, d][mine]
        key = self.out_i * n + self.out_j
        order = np.argsort(key)

        def link(receiver: np.ndarray, sender: np.ndarray) -> np.ndarray:
            k = receiver * n + sender
            return order[np.clip(np.searchsorted(key[order], k), 0, len(order) - 1)]

        self.back = link(self.in_j, self.in_i)  # our link to each neighbor we hear from
        self.fwd = link(self.in_i, self.in_j)  # a local neighbor's link to us (valid where in_src == rank)
        w = 1.0 / (1.0 + np.maximum(deg[self.in_i], deg[self.in_j]))
        self.weight = torch.zeros(len(self.rows), nbr.shape[1])
        self.weight[self.in_r, self.in_d] = torch.from_numpy(w).float()
        self.size = theta0.shape[-1]
        self.lossless = type(self.codec) is Codec
        if not self.lossless:  # per link: what the receiver holds of us, what we hold of the sender
            self.sent_copy = theta0.expand(len(self.out_i), self.size).clone()
            self.heard_copy = theta0.expand(len(self.in_r), self.size).clone()
        self.bytes_sent = 0

    def mix(self, theta: Tensor, keep: np.ndarray, round_: int) -> Tensor:
        """One gossip round over the links ``keep [N, D]`` delivers; returns the mixed ``theta [n, P]``."""
        codec, nbytes = self.codec, self.codec.nbytes(self.size)
        send = np.flatnonzero(keep[self.out_i, self.out_d])
        mine = theta[self.pos[self.out_j[send]]]
        if self.lossless:  # plain gossip: send the parameters themselves
            encoded = codec.encode(mine)
        else:  # send the compressed change of what the receiver holds of us (error feedback)
            encoded = codec.encode(mine - self.sent_copy[send])
            self.sent_copy[send] += codec.decode(encoded, self.size)
        self.bytes_sent += len(send) * nbytes
        row_of = np.full(len(self.out_i), -1, np.int64)
        row_of[send] = np.arange(len(send))
        in_kept = keep[self.in_i, self.in_d]
        got = np.zeros((len(self.in_r), nbytes), np.uint8)
        arrived = in_kept & (self.in_src == self.rank)
        got[arrived] = encoded[row_of[self.fwd[arrived]]]
        transport = getattr(self.exchange, "transport", None)
        if transport is not None:
            dest = self.owner[self.out_i[send]]
            sends = {int(q): encoded[dest == q] for q in np.unique(dest) if q != self.rank}
            remote = in_kept & (self.in_src != self.rank)
            expect = {
                int(q): int((remote & (self.in_src == q)).sum()) * nbytes
                for q in np.unique(self.in_src[remote])
            }
            for q, raw in transport.exchange(round_, "mix", sends, expect).items():
                sel = np.flatnonzero(remote & (self.in_src == q))
                got[sel] = raw.reshape(len(sel), nbytes)
                arrived[sel] = True
        heard = torch.from_numpy(np.flatnonzero(arrived))
        rows = torch.from_numpy(self.in_r[arrived])
        values = codec.decode(got[arrived], self.size)
        w = self.weight[self.in_r[arrived], self.in_d[arrived]].unsqueeze(1)
        if self.lossless:
            pull = w * (values - theta[rows])
        else:
            self.heard_copy[heard] += values
            pull = w * (self.heard_copy[heard] - self.sent_copy[self.back[arrived]])
        return theta.index_add(0, rows, pull, alpha=self.rate)


def flatten(params: dict[str, Tensor]) -> Tensor:
    return torch.cat([p.detach().reshape(p.shape[0], -1) for p in params.values()], dim=1)


def unflatten(theta: Tensor, params: dict[str, Tensor]) -> None:
    at = 0
    with torch.no_grad():
        for p in params.values():
            size = p[0].numel()
            p.copy_(theta[:, at : at + size].reshape(p.shape))
            at += size


class DecentralizedTrainer:
    """Train ``model``'s architecture on source localization, one parameter copy per agent of ``exchange``."""

    def __init__(
        self, model: GraphNN, task: SourceLocalization, exchange: Exchange, config: DecentralizedConfig
    ):
        self.model, self.task, self.exchange, self.config = model, task, exchange, config
        exchange.begin_step(task.shift)
        n = len(exchange.rows)
        self.params = {
            name: p.detach().unsqueeze(0).repeat(n, *([1] * p.dim())).requires_grad_()
            for name, p in model.named_parameters()
        }
        self.opt = torch.optim.Adam(self.params.values(), lr=config.lr)
        theta0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        self.mixer = Mixer(exchange, theta0, config.compression, config.mix_rate)
        self.tracker = Mixer(exchange, torch.zeros_like(theta0), config.compression, config.mix_rate)
        self.direction: Tensor | None = None  # the tracked average gradient (gradient tracking)
        self.last_grad: Tensor | None = None
        self.rng = np.random.default_rng(mix_seed(config.seed, 7))
        self.losses: list[float] = []
        self.feature_bytes = 0

    def forward(self, x: Tensor, exchange: Exchange) -> Tensor:
        return functional_call(self.model, self.params, (x, exchange))

    def step(self) -> float:
        task, ex, cfg = self.task, self.exchange, self.config
        idx = self.rng.integers(0, len(task.y_train), cfg.batch)
        ex.begin_step(task.shift)
        before = ex.message_bytes
        out = self.forward(task.features(task.x_train[idx], ex.rows), ex)
        y = task.y_train[idx].repeat_interleave(out.shape[1])
        loss = (
            torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y, reduction="sum") / cfg.batch
        )
        self.opt.zero_grad()
        loss.backward()
        self.feature_bytes += 2 * (ex.message_bytes - before)  # each message's gradient goes back
        if cfg.tracking:
            self._track(ex)
        self.opt.step()
        keep = ex.failures.keep(task.shift, ex.round)[0].numpy()
        unflatten(self.mixer.mix(flatten(self.params), keep, ex.round), self.params)
        ex.round += 1
        n = max(out.shape[1], 1)
        self.losses.append(float(loss.detach()) / n)
        return self.losses[-1]

    def _track(self, ex: Exchange) -> None:
        """Gradient tracking: ``d_i <- mix(d)_i + g_i - g_i(previous step)`` follows the agents' *average*
        gradient, so each agent's Adam sees what centralized Adam sees (plain gossip SGD would average the
        agents' separately normalized steps)."""
        grad = torch.cat([p.grad.reshape(p.shape[0], -1) for p in self.params.values()], dim=1)
        if self.direction is None:
            self.direction = grad.clone()
        else:
            keep = ex.failures.keep(self.task.shift, ex.round)[0].numpy()
            self.direction = self.tracker.mix(self.direction, keep, ex.round) + grad - self.last_grad
            ex.round += 1
        self.last_grad = grad
        at = 0
        for p in self.params.values():
            size = p[0].numel()
            p.grad.copy_(self.direction[:, at : at + size].reshape(p.shape))
            at += size

    @property
    def mixing_bytes(self) -> int:
        return self.mixer.bytes_sent + self.tracker.bytes_sent

    def train(self, desc: str | None = None) -> list[float]:
        bar = progress_bar(iterable=range(self.config.steps), desc=desc, disable=desc is None, leave=False)
        for _ in bar:
            self.step()
            if len(self.losses) % 50 == 0:
                bar.set_postfix(loss=f"{np.mean(self.losses[-50:]):.4f}")
        return self.losses

    def correct_counts(self, exchange: Exchange) -> tuple[int, int]:
        """Test predictions of this rank's agents, each with its own parameters (lossless ``exchange``)."""
        return correct_counts(self.forward, self.task, exchange)
