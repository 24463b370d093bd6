"""Numba kernels of the one-pass edge partitioners (vertex-cut), HDRF and DBH: plain functions over arrays.

Each edge goes to one partition; a vertex has a replica in every partition holding one of its edges
(``rep[v]``: a bitmap of ``words`` uint64 per vertex). Degrees are the partial degrees seen so far,
counting the current edge, as both papers' streaming versions use:

- HDRF (Petroni et al., CIKM 2015): ``argmax_p C_rep(u, v, p) + C_bal(p)`` with
  ``C_rep = g(u, p) + g(v, p)``, ``g(x, p) = 1 + (1 - theta(x))`` if ``p`` holds a replica of x else 0,
  ``theta(u) = d(u) / (d(u) + d(v))``, and ``C_bal(p) = lambda (max - |p|) / (epsilon + max - min)``
  over edge loads. Ties go to the less loaded partition, then the lower index.
- DBH (Xie et al., NIPS 2014): the partition ``h(x)`` of the end with the lower degree (``h``: the
  stable vertex hash of ``hashing``; a tie goes to the source).

``labels[v]`` is v's first replica (its master), ``PENDING`` until v has an edge.
"""

from __future__ import annotations

import numpy as np
from numba import njit

ADD, DELETE, UPDATE = 0, 1, 2
HDRF, DBH = 0, 1
PENDING = -1


@njit(cache=True)
def _add_replica(rep, vcount, labels, v, p):
    w = p >> 6
    bit = np.uint64(1) << np.uint64(p & 63)
    word = rep[v, w]
    if (word & bit) == 0:
        rep[v, w] = word | bit
        vcount[p] += 1
    if labels[v] < 0:
        labels[v] = p
        return True
    return False


@njit(cache=True)
def hdrf_choice(rep, loads, lo, hi, du, dv, u, v, lam, eps):
    """HDRF's partition for edge (u, v) given partial degrees, edge loads and their min ``lo``/max ``hi``."""
    theta_u = du / (du + dv)
    g_u = 2.0 - theta_u
    g_v = 1.0 + theta_u
    scale = lam / (eps + hi - lo)
    best = -1
    best_s = 0.0
    for w in range(rep.shape[1]):
        ru = rep[u, w]
        rv = rep[v, w]
        for p in range(w * 64, min(len(loads), w * 64 + 64)):
            bit = np.uint64(1) << np.uint64(p & 63)
            s = (hi - loads[p]) * scale
            if ru & bit:
                s += g_u
            if rv & bit:
                s += g_v
            if best < 0 or s > best_s or (s == best_s and loads[p] < loads[best]):
                best, best_s = p, s
    return best


@njit(cache=True)
def observe(kind, src, dst, first_edge, labels, deg, rep, vhash, loads, vcount, edge_part, method, lam, eps,
            dest, log_v, log_at, both):  # fmt: skip
    """Place each added edge (internal edge ids from ``first_edge`` on, in order); returns the next edge id
    and how many vertices got their first replica. ``dest[i]`` (if given) receives where event i goes: its
    edge's partition, or its source's master for updates and deletes (-1: none yet); ``log_v``/``log_at``
    (if given) the vertices that got their first replica, at ``2 i`` for event i; ``both[i]`` (if given) a
    delete's partitions holding replicas of both its ends, as they are then (bitmaps like ``rep``)."""
    e = first_edge
    logged = 0
    k = len(loads)
    lo = loads.min()
    hi = loads.max()
    at_lo = 0  # partitions whose load is ``lo``
    for p in range(k):
        at_lo += loads[p] == lo
    for i in range(len(kind)):
        u = src[i]
        if kind[i] == ADD:
            v = dst[i]
            deg[u] += 1
            if v != u:
                deg[v] += 1
            if method == HDRF:
                p = hdrf_choice(rep, loads, lo, hi, float(deg[u]), float(deg[v]), u, v, lam, eps)
            else:
                p = np.int64(vhash[u] if deg[u] <= deg[v] else vhash[v])
            edge_part[e] = p
            e += 1
            if loads[p] == lo:
                at_lo -= 1
            loads[p] += 1
            hi = max(hi, loads[p])
            if at_lo == 0:
                lo += 1
                for q in range(k):
                    at_lo += loads[q] == lo
            for x in (u, v):
                if _add_replica(rep, vcount, labels, x, p) and len(log_v):
                    log_v[logged] = x
                    log_at[logged] = 2 * i
                    logged += 1
            if len(dest):
                dest[i] = p
        elif len(dest):
            dest[i] = labels[u] if u >= 0 else PENDING
            if kind[i] == DELETE and len(both) and u >= 0 and dst[i] >= 0:
                for w in range(rep.shape[1]):
                    both[i, w] = rep[u, w] & rep[dst[i], w]
    return e, logged
