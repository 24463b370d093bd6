"""Numba kernels of the one-pass vertex partitioners, LDG and Fennel: plain functions over flat arrays.

A vertex is placed once, when first seen or after its first ``B`` edges (``buffer_edges``), in the
partition that holds most of its neighbors placed so far, discounted by load:

- LDG (Stanton & Kliot, KDD 2012): ``argmax_p |N(v) & P_p| * (1 - |P_p| / C)``, ``C = (1 + slack) n / k``;
- Fennel (Tsourakakis et al., WSDM 2014): ``argmax_p |N(v) & P_p| - alpha ((|P_p| + 1)^g - |P_p|^g)`` over
  partitions with ``|P_p| + 1 <= (1 + slack) n / k`` (nu = 1 + slack), ``alpha = k^(g-1) m / n^g``.

``n`` and ``m`` are the vertices and edges seen so far (or ``n_hint`` while larger): a stream does not
know its totals. Ties go to the smaller partition, then the lower index, so a placement depends only on
the events before it, never on batch boundaries. With ``gamma = 1.5`` powers are ``x * sqrt(x)``
(sqrt is exact in IEEE 754), so every process computes the same placements bit for bit.

Waiting vertices live in a queue in order of first sight: ``qv[j]`` the vertex (-1 once placed),
``qdl[j]`` its deadline in stream time, ``qn[j]`` edges buffered, ``qnb[j, :qn[j]]`` their other ends.
``slot[v]`` is v's queue entry (-1: none). Integer scalars live in ``st``, the watermark in ``fs``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

ADD, DELETE, UPDATE = 0, 1, 2
LDG, FENNEL = 0, 1
PENDING = -1
# st: vertices seen, edges seen, queue head, queue tail, waiting vertices, placements logged this call
N_SEEN, M_SEEN, HEAD, TAIL, LIVE, LOGGED = 0, 1, 2, 3, 4, 5
NUM_ST = 6
WM = 0  # fs[WM]: the newest event time seen


@njit(cache=True)
def _pow(x, gamma):
    if gamma == 1.5:
        return x * math.sqrt(x)
    return x**gamma


@njit(cache=True)
def fennel_alpha(k, n, m, gamma, alpha):
    """``alpha`` if given (> 0), else the estimate ``k^(gamma-1) m / n^gamma`` from the stream so far."""
    return alpha if alpha > 0 else m * _pow(float(k), gamma - 1.0) / _pow(float(n), gamma)


@njit(cache=True)
def score(count, size, method, cap, gamma, a):
    """How much a vertex with ``count`` neighbors in a partition of ``size`` others wants to join it
    (-inf: Fennel's capacity is reached)."""
    x = float(size)
    if method == LDG:
        return count * (1.0 - x / cap)
    if x + 1.0 > cap:
        return -np.inf
    return count - a * (_pow(x + 1.0, gamma) - _pow(x, gamma))


@njit(cache=True)
def choose(counts, sizes, method, n, m, slack, gamma, alpha):
    """The partition for a vertex with ``counts[p]`` neighbors placed in p (see the module doc)."""
    k = len(sizes)
    cap = (1.0 + slack) * n / k
    a = fennel_alpha(k, n, m, gamma, alpha)
    best = -1
    best_s = -np.inf
    for p in range(k):
        s = score(counts[p], sizes[p], method, cap, gamma, a)
        if s == -np.inf:
            continue
        if best < 0 or s > best_s or (s == best_s and sizes[p] < sizes[best]):
            best, best_s = p, s
    if best < 0:  # every partition is at capacity (a short stream, small n): the smallest one
        best = 0
        for p in range(1, k):
            if sizes[p] < sizes[best]:
                best = p
    return best


@njit(cache=True)
def _place(x, j, y, labels, slot, sizes, qv, qn, qnb, st, counts, method, n_hint, slack, gamma, alpha,
           log_v, log_at, at):  # fmt: skip
    """Place ``x`` from its buffered neighbors (queue entry ``j``) or, with ``j < 0``, from ``y``."""
    if j >= 0:
        for b in range(qn[j]):
            lab = labels[qnb[j, b]]
            if lab >= 0:
                counts[lab] += 1
    elif y >= 0 and labels[y] >= 0:
        counts[labels[y]] += 1
    n = max(st[N_SEEN], n_hint)
    p = choose(counts, sizes, method, n, st[M_SEEN], slack, gamma, alpha)
    counts[:] = 0
    labels[x] = p
    sizes[p] += 1
    if j >= 0:
        qv[j] = -1
        slot[x] = -1
        st[LIVE] -= 1
    if len(log_v):
        c = st[LOGGED]
        log_v[c] = x
        log_at[c] = at
        st[LOGGED] = c + 1


@njit(cache=True)
def observe(kind, src, dst, t, first, labels, slot, sizes, qv, qdl, qn, qnb, ring, st, fs, counts,
            method, n_hint, slack, gamma, alpha, buffer_time, max_pending, check_at,
            dest, log_v, log_at):  # fmt: skip
    """Process events ``first..n`` in order; return the index it stopped at: before an event when the queue
    needs room, after the edge that brings the edges seen to ``check_at`` (> 0), for a rebalancing check.

    ``dest[i]`` (if given) receives the partition of event i's source after it (-1: still waiting);
    ``log_v``/``log_at`` (if given) the vertices placed and when: ``2 i`` while event i is processed,
    ``2 i + 1`` after it (a deadline or the waiting limit).
    """
    nb = qnb.shape[1]
    for i in range(first, len(kind)):
        if st[TAIL] + 2 > len(qv):
            return i
        k = kind[i]
        fs[WM] = max(fs[WM], t[i])
        if k != DELETE:
            u = src[i]
            v = dst[i] if k == ADD and dst[i] != src[i] else -1
            if k == ADD:
                st[M_SEEN] += 1
                if len(ring):
                    r = (st[M_SEEN] - 1) % len(ring)
                    ring[r, 0] = u
                    ring[r, 1] = dst[i]
            for side in range(2):
                x, y = (u, v) if side == 0 else (v, u)
                if x < 0 or labels[x] >= 0:
                    continue
                j = slot[x]
                if j < 0:  # first sight
                    st[N_SEEN] += 1
                    if nb == 1 and y >= 0:
                        _place(x, -1, y, labels, slot, sizes, qv, qn, qnb, st, counts, method, n_hint,
                               slack, gamma, alpha, log_v, log_at, 2 * i)  # fmt: skip
                        continue
                    j = st[TAIL]
                    st[TAIL] = j + 1
                    st[LIVE] += 1
                    qv[j] = x
                    qdl[j] = fs[WM] + buffer_time
                    qn[j] = 0
                    slot[x] = j
                if y >= 0:
                    qnb[j, qn[j]] = y
                    qn[j] += 1
                    if qn[j] >= nb:
                        _place(x, j, -1, labels, slot, sizes, qv, qn, qnb, st, counts, method, n_hint,
                               slack, gamma, alpha, log_v, log_at, 2 * i)  # fmt: skip
        if len(dest):
            dest[i] = labels[src[i]] if src[i] >= 0 else PENDING
        h = st[HEAD]
        while h < st[TAIL]:
            x = qv[h]
            if x >= 0:
                if qdl[h] > fs[WM] and st[LIVE] <= max_pending:
                    break
                _place(x, h, -1, labels, slot, sizes, qv, qn, qnb, st, counts, method, n_hint,
                       slack, gamma, alpha, log_v, log_at, 2 * i + 1)  # fmt: skip
            h += 1
        st[HEAD] = h
        if k == ADD and st[M_SEEN] == check_at:
            return i + 1
    return len(kind)


@njit(cache=True)
def flush(labels, slot, sizes, qv, qn, qnb, st, counts, method, n_hint, slack, gamma, alpha):
    """Place every waiting vertex, oldest first; returns how many."""
    placed = 0
    empty = np.empty(0, np.int64)
    for h in range(st[HEAD], st[TAIL]):
        x = qv[h]
        if x >= 0:
            _place(x, h, -1, labels, slot, sizes, qv, qn, qnb, st, counts, method, n_hint, slack, gamma,
                   alpha, empty, empty, 0)  # fmt: skip
            placed += 1
    st[HEAD] = st[TAIL]
    return placed


@njit(cache=True)
def compact(slot, qv, qdl, qn, qnb, st):
    """Move the live queue entries to the front, in order (their slots follow)."""
    w = 0
    for h in range(st[HEAD], st[TAIL]):
        x = qv[h]
        if x >= 0:
            qv[w] = x
            qdl[w] = qdl[h]
            qn[w] = qn[h]
            qnb[w, :] = qnb[h, :]
            slot[x] = w
            w += 1
    st[HEAD] = 0
    st[TAIL] = w
