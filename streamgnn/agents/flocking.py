"""Flocking: agents learn a decentralized controller by imitating the centralized flocking controller.

``agents`` point masses start on a jittered grid with random velocities (a common drift plus a spread per
agent) and steer by accelerations. The centralized controller (Tanner, Jadbabaie and Pappas, as in the alelab
flocking experiments) knows every agent's state: ``u_i = -sum_j (v_i - v_j) + 2 sum_{|r_ij| < repel} r_ij
(1/|r_ij|^4 + 1/|r_ij|^2)``, each component clipped to ``accel_max``: all velocities align while nobody
collides. A decentralized agent senses only the agents within ``comm_radius`` (its relative positions and
velocities give 6 features: the sums of ``v_i - v_j``, ``r_ij/|r_ij|^4`` and ``r_ij/|r_ij|^2`` over them) and
talks only to them; a graph network over that time-varying communication graph (``D^-1 A``: each agent
averages what its neighbors send) learns to output the centralized controller's acceleration. The score is the
velocity variance ``mean_i |v_i - mean(v)|^2`` over the run, lower is better.

The environment (positions, who is in range) is physics: simulated identically by every process, not part of
the agents' computation.

>>> env = Flocking(FlockingConfig(agents=9, steps=5))
>>> pos, vel = env.initial(episodes=2, seed=0)
>>> pos.shape, env.expert(pos, vel).shape, env.observe(pos, vel)[0].shape
((2, 9, 2), (2, 9, 2), (2, 9, 6))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..configs import Config
from ..errors import ConfigError
from ..filters.shift import ShiftOperator


@dataclass(frozen=True)
class FlockingConfig(Config):
    agents: int = 50
    comm_radius: float = 2.0
    repel_dist: float = 1.0
    dt: float = 0.01
    steps: int = 200
    accel_max: float = 10.0
    init_velocity: float = 3.0
    min_dist: float = 0.1

    def __post_init__(self) -> None:
        if self.agents < 2 or self.steps < 1 or self.dt <= 0:
            raise ConfigError(f"flocking needs >= 2 agents, >= 1 step and dt > 0, got {self}")
        if not 0 < self.min_dist < self.repel_dist <= self.comm_radius:
            raise ConfigError("flocking needs 0 < min_dist < repel_dist <= comm_radius")


def _differences(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``u [B, N, 2]`` -> ``u_i - u_j [B, N, N, 2]`` and squared distances ``[B, N, N]``."""
    diff = u[:, :, None, :] - u[:, None, :, :]
    return diff, (diff**2).sum(-1)


class Flocking:
    """The flock's physics, the centralized controller, the agents' observations and communication graph."""

    def __init__(self, config: FlockingConfig | None = None):
        self.config = config or FlockingConfig()

    def initial(self, episodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, velocities)``, each ``[episodes, agents, 2]``: a grid whose spacing keeps every agent
        within ``comm_radius`` of a neighbor and ``min_dist`` away from all, jittered, and velocities
        uniform in ``+-init_velocity`` around a common drift."""
        c, rng = self.config, np.random.default_rng(seed)
        side = int(np.ceil(np.sqrt(c.agents)))
        spacing = (c.comm_radius + c.min_dist) / (2 * np.sqrt(2))
        jitter = (c.comm_radius - c.min_dist) / (4 * np.sqrt(2))
        grid = (
            np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2)[: c.agents] * spacing
        )
        pos = grid[None] + rng.uniform(-jitter, jitter, (episodes, c.agents, 2))
        drift = rng.uniform(-c.init_velocity, c.init_velocity, (episodes, 1, 2))
        vel = drift + rng.uniform(-c.init_velocity, c.init_velocity, (episodes, c.agents, 2))
        return pos, vel

    def adjacency(self, pos: np.ndarray) -> np.ndarray:
        """``[B, N, N]`` 1 where two agents are within ``comm_radius`` (no self loops)."""
        _, d2 = _differences(pos)
        a = (d2 <= self.config.comm_radius**2).astype(np.float64)
        a[:, np.arange(a.shape[1]), np.arange(a.shape[1])] = 0.0
        return a

    def _repel(self, pos: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        diff, d2 = _differences(pos)
        inv = np.where(mask & (d2 > 0), 1.0 / np.where(d2 > 0, d2, 1.0), 0.0)[..., None]
        return (diff * inv**2).sum(2), (diff * inv).sum(2)

    def expert(self, pos: np.ndarray, vel: np.ndarray) -> np.ndarray:
        """The centralized controller's accelerations ``[B, N, 2]`` (uses every agent's state)."""
        c = self.config
        dv, _ = _differences(vel)
        _, d2 = _differences(pos)
        fourth, second = self._repel(pos, d2 < c.repel_dist**2)
        return np.clip(-dv.sum(2) + 2 * (fourth + second), -c.accel_max, c.accel_max)

    def sense(self, pos: np.ndarray, vel: np.ndarray, adjacency: np.ndarray | None = None) -> np.ndarray:
        """What each agent senses of the agents in range: ``[B, N, 6]``."""
        a = self.adjacency(pos) if adjacency is None else adjacency
        dv, _ = _differences(vel)
        fourth, second = self._repel(pos, a > 0)
        return np.concatenate([(dv * a[..., None]).sum(2), fourth, second], axis=-1)

    def observe(self, pos: np.ndarray, vel: np.ndarray) -> tuple[np.ndarray, ShiftOperator]:
        """Sensed features and the communication graph's shift operator (``D^-1 A``)."""
        a = self.adjacency(pos)
        return self.sense(pos, vel, a), ShiftOperator.from_adjacency(a, "degree")

    def step(self, pos: np.ndarray, vel: np.ndarray, accel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = self.config
        accel = np.clip(accel, -c.accel_max, c.accel_max)
        return pos + vel * c.dt + accel * c.dt**2 / 2, vel + accel * c.dt

    def rollout(
        self,
        pos: np.ndarray,
        vel: np.ndarray,
        controller: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run ``steps`` steps under ``controller(pos, vel, t) -> accel``; returns positions, velocities and
        accelerations ``[steps, B, N, 2]`` (state before each step, and the acceleration applied)."""
        out_pos, out_vel, out_acc = [], [], []
        for t in range(self.config.steps):
            acc = controller(pos, vel, t)
            out_pos.append(pos)
            out_vel.append(vel)
            out_acc.append(acc)
            pos, vel = self.step(pos, vel, acc)
        return np.stack(out_pos), np.stack(out_vel), np.stack(out_acc)


def velocity_variance(vel: np.ndarray) -> np.ndarray:
    """``mean_i |v_i - mean(v)|^2`` for velocities ``[..., N, 2]``."""
    return ((vel - vel.mean(-2, keepdims=True)) ** 2).sum(-1).mean(-1)


def feature_scale(feats: np.ndarray) -> np.ndarray:
    """Per-feature standard deviation of sensed features (fixed from expert data and stored with the model),
    so that every feature reaches the network at unit scale."""
    return feats.reshape(-1, feats.shape[-1]).std(axis=0) + 1e-6


def imitation_batches(
    env: Flocking, episodes: int, seed: int
) -> tuple[Callable[[np.random.Generator, int], tuple[Tensor, ShiftOperator, Tensor]], np.ndarray]:
    """Expert trajectories from ``episodes`` starts; returns ``batches(rng, size)`` of random (episode, step)
    samples (features, their per-sample graphs as lanes, expert accelerations) and the feature scale."""
    pos, vel = env.initial(episodes, seed)
    states_p, states_v, actions = env.rollout(pos, vel, lambda p, v, t: env.expert(p, v))
    steps, eps, n, _ = states_p.shape
    states_p, states_v = states_p.reshape(-1, n, 2), states_v.reshape(-1, n, 2)
    actions = actions.reshape(-1, n, 2)
    scale = feature_scale(env.sense(states_p, states_v))

    def batches(rng: np.random.Generator, size: int):
        idx = rng.integers(0, len(actions), size)
        f, shift = env.observe(states_p[idx], states_v[idx])
        x = torch.from_numpy(f / scale).float()
        return x, shift, torch.from_numpy(actions[idx]).float()

    return batches, scale
