"""Numba kernels of time-decayed pair features (``decay_pairs``): plain functions over the store's arrays.

Like ``pair_kernels``, a query ``(u, v, t)`` reads only entries strictly before ``t`` and not deleted at
``t`` (a node's block is time-sorted, so that is a prefix found by binary search): a feature depends only
on what the store held before ``t``, never on later events or on how the stream was cut into batches.

Columns, per time constant ``tau`` (``TAU_COLS`` each, in this order): the decayed count of u -> v and of
v -> u events over the pair's whole history (scanning the smaller block, O(min(deg u, deg v))),
``exp(-since / tau)`` of u's and of v's latest event with anyone, the decayed common neighbors
``sum_w a_u(w) a_v(w)`` over the nodes w both endpoints met among their latest ``k`` events
(``a_u(w)``: the decayed count of u's events with w there), and the shares ``a_u(v) / sum_w a_u(w)``,
``a_v(u) / sum_w a_v(w)`` (what part of each endpoint's recent activity went to the other). Then
``FREE_COLS`` that need no time constant, so no assumption about the stream's time unit: the pair's
latest event (either direction) measured in each endpoint's own mean gap between its latest ``k`` events,
as ``exp(-gap_ratio)`` (0: never), and ``1 / (1 + j)`` for the newest position ``j`` of the other endpoint
in each endpoint's latest ``k`` events (0: not among them).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .pair_kernels import _latest_events, pair_scan

TAU_COLS, FREE_COLS = 7, 4


@njit(cache=True, inline="always")
def _pair_counts(start, deg, pool, edge_t, edge_del, u, v, t, taus, acc, counts, out):
    """Decayed u -> v and v -> u counts per time constant into ``out[c * TAU_COLS + 0/1]`` (``pair_scan``,
    into the buffers ``acc``/``counts``); the time of the pair's latest event either way (-inf: none)."""
    last = max(pair_scan(start, deg, pool, edge_t, edge_del, u, v, t, taus, True, acc, counts))
    for c in range(len(taus)):
        out[c * TAU_COLS] = acc[0, c]
        out[c * TAU_COLS + 1] = acc[1, c]
    return last


@njit(cache=True)
def _weights(tim, n, t, taus, w):
    """``w[c, j] = exp(-(t - tim[j]) / taus[c])`` for an endpoint's latest ``n`` events."""
    for c in range(len(taus)):
        for j in range(n):
            w[c, j] = np.exp(-(t - tim[j]) / taus[c])


@njit(cache=True)
def _common(nbr_u, w_u, nu, nbr_v, w_v, nv, u, v, out, base):
    """``out[base + c * TAU_COLS]`` += ``sum_w a_u(w) a_v(w)`` over w (not u or v) met by both among their
    latest events: the sum over position pairs with the same neighbor of the product of their weights."""
    for i in range(nu):
        x = nbr_u[i]
        if x in (u, v):
            continue
        for q in range(nv):
            if nbr_v[q] == x:
                for c in range(w_u.shape[0]):
                    out[base + c * TAU_COLS] += w_u[c, i] * w_v[c, q]


@njit(cache=True)
def _shares(nbr, w, n, other, out, base):
    """``out[base + c * TAU_COLS]`` = the decayed share of an endpoint's latest events with ``other``."""
    for c in range(w.shape[0]):
        total, mine = 0.0, 0.0
        for j in range(n):
            total += w[c, j]
            if nbr[j] == other:
                mine += w[c, j]
        if total > 0.0:
            out[base + c * TAU_COLS] = mine / total


@njit(cache=True)
def _free(nbr, tim, n, other, since, t):
    """The scale-free pair: ``exp(-since / mean gap)`` over the endpoint's latest events, and
    ``1 / (1 + newest position of other)`` among them (0 where never / absent)."""
    ratio, pos = 0.0, 0.0
    if n > 0 and since < np.inf:
        gap = (t - tim[n - 1]) / n  # > 0: every entry is before t
        ratio = np.exp(-since / gap)
    for j in range(n):
        if nbr[j] == other:
            pos = 1.0 / (1.0 + j)
            break
    return ratio, pos


@njit(cache=True)
def _fill(nbr, tim, lens, w, u, v, last, t, n_tau, row):
    """``row``'s columns but the pair counts, from both endpoints' latest events (``nbr``/``tim`` ``[2, k]``,
    weights ``w``; neighbor ids in the id space of ``u`` and ``v``) and the pair's latest time ``last``."""
    for side in range(2):
        if lens[side] > 0:
            for c in range(n_tau):
                row[c * TAU_COLS + 2 + side] = w[side, c, 0]
    _common(nbr[0], w[0], lens[0], nbr[1], w[1], lens[1], u, v, row, 4)
    _shares(nbr[0], w[0], lens[0], v, row, 5)
    _shares(nbr[1], w[1], lens[1], u, row, 6)
    for side in range(2):
        ratio, pos = _free(nbr[side], tim[side], lens[side], v if side == 0 else u, t - last, t)
        row[n_tau * TAU_COLS + 2 * side] = ratio
        row[n_tau * TAU_COLS + 2 * side + 1] = pos


@njit(cache=True, inline="always")
def _buffers(n_tau, k):
    """One query's scratch: both endpoints' latest neighbors, times, weights and counts, and the pair's
    decayed counts and event counts (``pair_scan``)."""
    nbr = np.empty((2, k), np.int64)
    tim = np.empty((2, k), np.float64)
    w = np.empty((2, n_tau, k), np.float64)
    return nbr, tim, w, np.zeros(2, np.int64), np.empty((2, n_tau)), np.empty(2)


@njit(cache=True)
def decay_features(start, deg, pool, edge_t, edge_del, num_nodes, src, dst, ts, taus, k, out):
    """``out[i]`` = the module's columns for pair ``(src[i], dst[i])`` before ``ts[i]``; an unknown id
    (outside ``0..num_nodes-1``) has no events (the other endpoint's own columns still read its events).
    A row of candidates (the same source at the same time as the query before) reads the source once."""
    n_tau = len(taus)
    nbr, tim, w, lens, acc, counts = _buffers(n_tau, k)
    for i in range(len(src)):
        u, v, t = src[i], dst[i], ts[i]
        for c in range(out.shape[1]):
            out[i, c] = 0.0
        for side in range(2):
            x = u if side == 0 else v
            if side == 0 and i > 0 and u == src[i - 1] and t == ts[i - 1]:
                continue  # the same source at the same time: its latest events are read
            lens[side] = 0
            if x >= 0 and x < num_nodes:
                lens[side] = _latest_events(start, deg, pool, edge_t, edge_del, x, t, k, nbr[side], tim[side])
                _weights(tim[side], lens[side], t, taus, w[side])
        last = -np.inf
        if lens[0] > 0 and lens[1] > 0:
            last = _pair_counts(start, deg, pool, edge_t, edge_del, u, v, t, taus, acc, counts, out[i])
        _fill(nbr, tim, lens, w, u, v, last, t, n_tau, out[i])


@njit(cache=True)
def latest_events(start, deg, pool, edge_t, edge_del, num_nodes, nodes, ts, k, nbr, tim, lens):
    """``nbr[i, :lens[i]]``, ``tim[i, :lens[i]]`` = the latest ``k`` visible events of ``nodes[i]`` before
    ``ts[i]`` (neighbor and time, newest first; an unknown node has none): one endpoint's half, for a
    reader that holds the other endpoint's half elsewhere (a sharded run)."""
    for i in range(len(nodes)):
        x = nodes[i]
        lens[i] = 0
        if x >= 0 and x < num_nodes:
            lens[i] = _latest_events(start, deg, pool, edge_t, edge_del, x, ts[i], k, nbr[i], tim[i])


@njit(cache=True)
def decay_features_of(start, deg, pool, edge_t, edge_del, src, dst, ts, taus, ids, nbr, tim, lens, out):
    """``decay_features`` from both endpoints' latest events given (``latest_events``' arrays stacked per
    side: ``nbr``/``tim`` ``[2, n, k]``, ``lens`` ``[2, n]``, their neighbor ids in the id space of ``ids``
    ``[2, n]``, the endpoints' ids there); the pair counts are read here, over ``src``/``dst`` (this
    store's ids, -1: unknown), where every u-v event is held (a sharded run: u's owner)."""
    n_tau, k = len(taus), nbr.shape[2]
    pn, pt, w, pl, acc, counts = _buffers(n_tau, k)
    for i in range(len(src)):
        t = ts[i]
        for c in range(out.shape[1]):
            out[i, c] = 0.0
        for side in range(2):
            pl[side] = lens[side, i]
            pn[side, :] = nbr[side, i]
            pt[side, :] = tim[side, i]
            _weights(pt[side], pl[side], t, taus, w[side])
        last = -np.inf
        if pl[0] > 0 and pl[1] > 0 and src[i] >= 0 and dst[i] >= 0:
            last = _pair_counts(
                start, deg, pool, edge_t, edge_del, src[i], dst[i], t, taus, acc, counts, out[i]
            )
        _fill(pn, pt, pl, w, ids[0, i], ids[1, i], last, t, n_tau, out[i])
