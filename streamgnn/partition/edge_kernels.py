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
def _has(rep, v, p):
    return (rep[v, p >> 6] >> np.uint64(p & 63)) & np.uint64(1)


@njit(cache=True)
def _add_replica(rep, vcount, labels, v, p):
    if not _has(rep, v, p):
        rep[v, p >> 6] |= np.uint64(1) << np.uint64(p & 63)
        vcount[p] += 1
    if labels[v] < 0:
        labels[v] = p


@njit(cache=True)
def hdrf_choice(rep, loads, du, dv, u, v, lam, eps):
    k = len(loads)
    lo = loads[0]
    hi = loads[0]
    for p in range(1, k):
        lo = min(lo, loads[p])
        hi = max(hi, loads[p])
    theta_u = du / (du + dv)
    theta_v = 1.0 - theta_u
    best = -1
    best_s = 0.0
    for p in range(k):
        s = lam * (hi - loads[p]) / (eps + hi - lo)
        if _has(rep, u, p):
            s += 2.0 - theta_u
        if _has(rep, v, p):
            s += 2.0 - theta_v
        if best < 0 or s > best_s or (s == best_s and loads[p] < loads[best]):
            best, best_s = p, s
    return best


@njit(cache=True)
def observe(kind, src, dst, first_edge, labels, deg, rep, vhash, loads, vcount, edge_part, method, lam, eps,
            dest):  # fmt: skip
    """Place each added edge (internal edge ids from ``first_edge`` on, in order); ``dest[i]`` (if given)
    receives where event i goes: its edge's partition, or its source's master for updates and deletes."""
    e = first_edge
    for i in range(len(kind)):
        u = src[i]
        if kind[i] == ADD:
            v = dst[i]
            deg[u] += 1
            if v != u:
                deg[v] += 1
            if method == HDRF:
                p = hdrf_choice(rep, loads, float(deg[u]), float(deg[v]), u, v, lam, eps)
            else:
                p = vhash[u] if deg[u] <= deg[v] else vhash[v]
            edge_part[e] = p
            e += 1
            loads[p] += 1
            _add_replica(rep, vcount, labels, u, p)
            _add_replica(rep, vcount, labels, v, p)
            if len(dest):
                dest[i] = p
        elif len(dest):
            dest[i] = labels[u] if u >= 0 else PENDING
    return e
