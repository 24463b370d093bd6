"""Numba kernels of the store: plain functions over flat arrays.

Adjacency layout (per node, one time-ordered list of incident edges, both directions):
``start[v]``, ``deg[v]``, ``cap[v]`` index a row block of ``pool`` (int32, shape [capacity, 2]);
a row is ``(neighbor, code)`` with ``code = e`` for an out-edge and ``~e`` (= -e-1) for an in-edge
of internal edge ``e``. Entry times live once per edge in ``edge_t[e]``. Blocks grow by moving to
the pool's end (x1.25, at least 4 rows); the old block becomes garbage that ``compact`` reclaims. The
same block machinery keeps each node's feature versions (code = update index, times in ``upd_t``).

The add path of ``apply_events`` is written out inline on purpose: calling a helper per insert with the
block arrays as arguments measured ~130 ns per call here, against ~10 ns inline.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MIN_BLOCK = 4
# counters: pool used, pool garbage, edges, node updates, deletion-log length, update-pool used, garbage
USED, GARBAGE, EDGES, UPDATES, DELETIONS, UUSED, UGARBAGE = 0, 1, 2, 3, 4, 5, 6
NUM_COUNTERS = 7


@njit(cache=True, inline="always")
def decode(code):
    return code if code >= 0 else -code - 1


@njit(cache=True)
def grown(cap):
    return cap + max(MIN_BLOCK, cap >> 2)


@njit(cache=True)
def rows_needed(deg, cap, u, v):
    """Pool rows that inserting one entry at ``u`` and one at ``v`` may allocate (relocations)."""
    if u == v:
        return grown(cap[u]) + grown(grown(cap[u])) if deg[u] + 2 > cap[u] else 0
    need = grown(cap[u]) if deg[u] == cap[u] else 0
    return need + (grown(cap[v]) if deg[v] == cap[v] else 0)


@njit(cache=True)
def relocate(start, deg, cap, pool, counters, v):
    """Move v's full block to the pool's end with room to grow; the old rows become garbage."""
    new_cap = grown(cap[v])
    used = counters[USED]
    old, new = pool[start[v] : start[v] + deg[v]], pool[used : used + deg[v]]
    for j in range(deg[v]):  # see ``compact`` on copy loops
        new[j, 0] = old[j, 0]
        new[j, 1] = old[j, 1]
    counters[GARBAGE] += cap[v]
    start[v] = used
    cap[v] = new_cap
    counters[USED] = used + new_cap


@njit(cache=True)
def block_insert(start, deg, cap, pool, counters, v, nbr, code, t, key_t):
    """Insert (nbr, code) into v's block after every entry with time <= t (stable)."""
    if deg[v] == cap[v]:
        relocate(start, deg, cap, pool, counters, v)
    s = start[v]
    pos = deg[v]
    while pos > 0 and key_t[decode(pool[s + pos - 1, 1])] > t:
        pool[s + pos, 0] = pool[s + pos - 1, 0]
        pool[s + pos, 1] = pool[s + pos - 1, 1]
        pos -= 1
    pool[s + pos, 0] = nbr
    pool[s + pos, 1] = code
    deg[v] += 1


@njit(cache=True)
def screen(kind, t, weight, watermark, allowed_lateness, late):
    """(True, late rows, deletes, the watermark after the batch) with each row's lateness in ``late`` when
    every row is valid and none too late; else (False, 0, 0, ``watermark``), and the general path sorts
    the rows out. ``weight`` may be empty (unweighted). The counts spare the caller passes over the batch."""
    wm = watermark
    n_late = 0
    n_delete = 0
    for i in range(len(kind)):
        ti = t[i]
        if kind[i] < 0 or kind[i] > 2 or not (ti >= 0.0 and ti < np.inf) or ti < wm - allowed_lateness:
            return False, 0, 0, watermark
        if len(weight) and not np.isfinite(weight[i]):
            return False, 0, 0, watermark
        late[i] = ti < wm
        n_late += late[i]
        n_delete += kind[i] == 1
        wm = max(wm, ti)
    return True, n_late, n_delete, wm


@njit(cache=True)
def apply_events(
    kind,
    src,
    dst,
    t,
    late,
    first,
    start,
    deg,
    cap,
    pool,
    edge_t,
    edge_del,
    del_src,
    del_dst,
    del_t,
    ustart,
    udeg,
    ucap,
    upool,
    upd_t,
    upd_node,
    counters,
    status,
    edge_of,
    upd_of,
):
    """Apply events ``first..n`` in arrival order; stop early (return index) when a pool is full.

    ``status[i]``: 0 applied, 1 delete matched no live edge. ``edge_of[i]``/``upd_of[i]`` receive the
    internal edge / update index an event created, else -1 (for the caller to fill weights and features).
    ``edge_del`` is empty until a batch holds a delete; then it holds each edge's deletion time (inf = live).
    The deletion log (``del_*``) holds the deletes that ended an edge: a late add they cover is stored
    deleted. Only an applied delete is logged, so a late add's fate never depends on dead letters.
    """
    n = len(kind)
    pool_cap = pool.shape[0]
    upool_cap = upool.shape[0]
    has_del = len(edge_del) > 0
    for i in range(first, n):
        k = kind[i]
        if k == 0:
            if counters[USED] + rows_needed(deg, cap, src[i], dst[i]) > pool_cap:
                return i
            e = counters[EDGES]
            edge_t[e] = t[i]
            for side in range(2):
                v, other, code = (src[i], dst[i], e) if side == 0 else (dst[i], src[i], -e - 1)
                if deg[v] == cap[v]:
                    relocate(start, deg, cap, pool, counters, v)
                s = start[v]
                pos = deg[v]
                while pos > 0 and edge_t[decode(pool[s + pos - 1, 1])] > t[i]:
                    pool[s + pos, 0] = pool[s + pos - 1, 0]
                    pool[s + pos, 1] = pool[s + pos - 1, 1]
                    pos -= 1
                pool[s + pos, 0] = other
                pool[s + pos, 1] = code
                deg[v] += 1
            counters[EDGES] = e + 1
            edge_of[i] = e
            upd_of[i] = -1
            if has_del:
                d_first = np.inf
                if late[i]:
                    for j in range(counters[DELETIONS]):
                        if (
                            del_src[j] == src[i]
                            and del_dst[j] == dst[i]
                            and del_t[j] > t[i]
                            and del_t[j] < d_first
                        ):
                            d_first = del_t[j]
                edge_del[e] = d_first
            status[i] = 0
        elif k == 1:
            u = src[i]
            s = start[u]
            hit = 0
            for j in range(deg[u]):
                c = pool[s + j, 1]
                if c >= 0 and pool[s + j, 0] == dst[i] and edge_t[c] <= t[i] and edge_del[c] > t[i]:
                    edge_del[c] = t[i]
                    hit += 1
            if hit > 0:  # a delete that ended nothing is a dead letter: it changes nothing, not even the log
                d = counters[DELETIONS]
                del_src[d] = src[i]
                del_dst[d] = dst[i]
                del_t[d] = t[i]
                counters[DELETIONS] = d + 1
            status[i] = 0 if hit > 0 else 1
            edge_of[i] = -1
            upd_of[i] = -1
        else:
            if counters[UUSED] + (grown(ucap[src[i]]) if udeg[src[i]] == ucap[src[i]] else 0) > upool_cap:
                return i
            u = counters[UPDATES]
            upd_t[u] = t[i]
            upd_node[u] = src[i]
            sub = counters[UUSED : UGARBAGE + 1]
            block_insert(ustart, udeg, ucap, upool, sub, src[i], 0, u, t[i], upd_t)
            counters[UPDATES] = u + 1
            edge_of[i] = -1
            upd_of[i] = u
            status[i] = 0
    return n


@njit(cache=True)
def compact(start, deg, cap, rows, n_nodes, new_rows):
    """Copy every block into ``new_rows`` back to back (keeping capacities); return rows used.

    Compaction is a large share of insert cost, so the copy is tuned: ``rows``/``new_rows`` are the pools
    as one int64 word per row, and the loop indexes views with ``range`` indices, which Numba knows are
    non-negative and so vectorizes; a slice assignment, or indexing with ``pos + j``, ran 3x slower.
    """
    pos = 0
    for v in range(n_nodes):
        old, new = rows[start[v] : start[v] + deg[v]], new_rows[pos : pos + deg[v]]
        for j in range(deg[v]):
            new[j] = old[j]
        start[v] = pos
        pos += cap[v]
    return pos


@njit(cache=True)
def gather_csr(start, deg, pool, n_nodes, indptr, out):
    """Blocks as an exact CSR (``indptr`` [n+1], ``out`` [nnz, 2]) in node order."""
    pos = 0
    for v in range(n_nodes):
        indptr[v] = pos
        s = start[v]
        for j in range(deg[v]):
            out[pos, 0] = pool[s + j, 0]
            out[pos, 1] = pool[s + j, 1]
            pos += 1
    indptr[n_nodes] = pos


@njit(cache=True)
def edge_endpoints(start, deg, pool, n_nodes, src, dst):
    """Recover each edge's (src, dst) from its out-entry, so edges need not store endpoints twice."""
    for v in range(n_nodes):
        s = start[v]
        for j in range(deg[v]):
            c = pool[s + j, 1]
            if c >= 0:
                src[c] = v
                dst[c] = pool[s + j, 0]


@njit(cache=True)
def latest_version(ustart, udeg, upool, upd_t, nodes, t, out):
    """Index of the node-feature version in force at ``t[i]`` for ``nodes[i]`` (-1: none yet)."""
    for i in range(len(nodes)):
        v = nodes[i]
        out[i] = -1
        if v < 0 or v >= len(udeg):
            continue
        s = ustart[v]
        lo = 0
        hi = udeg[v]
        while lo < hi:
            mid = (lo + hi) >> 1
            if upd_t[upool[s + mid, 1]] <= t[i]:
                lo = mid + 1
            else:
                hi = mid
        if lo > 0:
            out[i] = upool[s + lo - 1, 1]
