"""Numba kernels of pair features: plain functions over the store's flat arrays (``TCSRView``).

A query ``(u, v, t)`` reads only entries strictly before ``t`` and not deleted at ``t``, as the sampler
does, so a pair's features never include the event being predicted. A node's block is sorted by time
(ties in arrival order), so everything before ``t`` is a prefix found by binary search, and a feature
depends only on the stored events, not on how they were cut into batches.

Pair history scans the shorter of the two blocks for the other endpoint (u's block holds v as ``u -> v``
out-entries and ``v -> u`` in-entries; v's block the same pairs mirrored): O(min(deg u, deg v)) per query.
Neighbor co-occurrence (DyGFormer, Yu et al. 2023) takes the latest ``k`` visible neighbors of each
endpoint and counts, for every one of them, its occurrences in both sequences: O(k) to gather, O(k^2) to
count. Kernels run on the calling thread: a batch's queries take well under a millisecond each, less
than waking a thread pool costs on a shared host.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..store.kernels import decode

# pair-history columns: counts and time since the latest event of each direction (inf: never), then one
# exponentially decayed count (both directions) per time constant
N_UV, N_VU, SINCE_UV, SINCE_VU = 0, 1, 2, 3
HISTORY_FIXED = 4


@njit(cache=True, inline="always")
def _visible(code, edge_del, t):
    if len(edge_del) == 0:
        return True
    deleted = edge_del[decode(code)]
    return deleted > t or deleted == np.inf


@njit(cache=True)
def _prefix(start, deg, pool, edge_t, v, t):
    """Entries of ``v``'s block with time < ``t``: the block is time-sorted, so a binary search."""
    s = start[v]
    lo, hi = 0, deg[v]
    while lo < hi:
        mid = (lo + hi) >> 1
        if edge_t[decode(pool[s + mid, 1])] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def pair_scan(start, deg, pool, edge_t, edge_del, u, v, t, taus, split, acc, counts):
    """Pair ``(u, v)``'s visible entries before ``t``, scanned once in the smaller endpoint's block (u's
    holds v as ``u -> v`` out-entries and ``v -> u`` in-entries; v's the same pairs mirrored): into
    ``counts[0/1]`` the u -> v and v -> u events, into ``acc[0, c]`` their count decayed by ``taus[c]``
    (with ``split``: ``acc[0/1, c]``, u -> v and v -> u apart), each sum in entry order; returns the latest
    u -> v and v -> u times (-inf: none). ``pair_history`` and the decayed pair features
    (``decay_kernels``) read it; inlined into both, as a call per query costs as much as the scan."""
    for side in range(2):  # loops, not slices: this runs once per query, and most pairs have no entries
        counts[side] = 0.0
        for c in range(len(taus)):
            acc[side, c] = 0.0
    a, b, flip = u, v, False
    if deg[v] < deg[u]:
        a, b, flip = v, u, True
    s = start[a]
    last_uv, last_vu = -np.inf, -np.inf
    for j in range(_prefix(start, deg, pool, edge_t, a, t)):
        if pool[s + j, 0] != b:
            continue
        code = pool[s + j, 1]
        if not _visible(code, edge_del, t):
            continue
        te = edge_t[decode(code)]
        side = 0 if (code >= 0) != flip else 1  # u -> v or v -> u
        counts[side] += 1.0
        if side == 0:
            last_uv = max(last_uv, te)
        else:
            last_vu = max(last_vu, te)
        row = side if split else 0
        for c in range(len(taus)):
            acc[row, c] += np.exp(-(t - te) / taus[c])
    return last_uv, last_vu


@njit(cache=True)
def pair_history(start, deg, pool, edge_t, edge_del, num_nodes, src, dst, ts, taus, out):
    """``out[i]`` = history of pair ``(src[i], dst[i])`` before ``ts[i]`` (columns: module constants).

    Ids outside ``0..num_nodes-1`` (-1: unknown) have no history: zero counts, infinite time since.
    """
    acc = np.empty((2, len(taus)))
    counts = np.empty(2)
    for i in range(len(src)):
        u, v, t = src[i], dst[i], ts[i]
        for c in range(out.shape[1]):
            out[i, c] = 0.0
        out[i, SINCE_UV] = np.inf
        out[i, SINCE_VU] = np.inf
        if u < 0 or v < 0 or u >= num_nodes or v >= num_nodes:
            continue
        last_uv, last_vu = pair_scan(start, deg, pool, edge_t, edge_del, u, v, t, taus, False, acc, counts)
        out[i, N_UV], out[i, N_VU] = counts[0], counts[1]
        for k in range(len(taus)):
            out[i, HISTORY_FIXED + k] = acc[0, k]
        out[i, SINCE_UV] = t - last_uv
        out[i, SINCE_VU] = t - last_vu


@njit(cache=True)
def endpoint_since(start, deg, pool, edge_t, edge_del, num_nodes, src, dst, ts, out):
    """``out[i]`` = time since ``src[i]``'s and since ``dst[i]``'s latest visible event before ``ts[i]``,
    with any partner (inf: none, or an unknown node): O(1) per query but for deleted entries skipped."""
    for i in range(len(src)):
        t = ts[i]
        for side in range(2):
            w = src[i] if side == 0 else dst[i]
            out[i, side] = np.inf
            if w < 0 or w >= num_nodes:
                continue
            s = start[w]
            j = _prefix(start, deg, pool, edge_t, w, t) - 1
            while j >= 0 and not _visible(pool[s + j, 1], edge_del, t):
                j -= 1
            if j >= 0:
                out[i, side] = t - edge_t[decode(pool[s + j, 1])]


@njit(cache=True, inline="always")
def _latest_events(start, deg, pool, edge_t, edge_del, w, t, k, nbr, tim):
    """The latest ``k`` visible entries of ``w`` before ``t`` (newest first): neighbor into ``nbr``, time into
    ``tim`` (an empty ``tim``: neighbors only, no time read); how many. The one reader of a node's latest
    events (co-occurrence, the decayed features)."""
    s = start[w]
    n = 0
    times = len(tim) > 0
    j = _prefix(start, deg, pool, edge_t, w, t) - 1
    while j >= 0 and n < k:
        code = pool[s + j, 1]
        if _visible(code, edge_del, t):
            nbr[n] = pool[s + j, 0]
            if times:
                tim[n] = edge_t[decode(code)]
            n += 1
        j -= 1
    return n


@njit(cache=True)
def cooccurrence(start, deg, pool, edge_t, edge_del, num_nodes, src, dst, ts, k, out):
    """DyGFormer's neighbor co-occurrence of pair ``i``: ``out[i, 0, j]`` = (occurrences of u's ``j``-th
    latest neighbor among u's latest ``k``, among v's latest ``k``); ``out[i, 1, j]`` the same for v's
    neighbors (v's sequence first). Slots past a sequence's end (and unknown nodes) hold (0, 0)."""
    seqs = np.empty((2, k), np.int64)
    no_times = np.empty(0, np.float64)  # co-occurrence reads neighbors only
    lens = np.zeros(2, np.int64)
    for i in range(len(src)):
        for side in range(2):
            w = src[i] if side == 0 else dst[i]
            if side == 0 and i > 0 and w == src[i - 1] and ts[i] == ts[i - 1]:
                continue  # the same source at the same time (a row of candidates): its sequence is read
            lens[side] = 0
            if w >= 0 and w < num_nodes:
                lens[side] = _latest_events(
                    start, deg, pool, edge_t, edge_del, w, ts[i], k, seqs[side], no_times
                )
        _count(seqs[0], lens[0], seqs[1], lens[1], out[i])


@njit(cache=True, inline="always")
def _count(seq_u, len_u, seq_v, len_v, out):
    """One pair's co-occurrence ``out [2, k, 2]`` from u's and v's latest neighbors (newest first)."""
    k = out.shape[1]
    for side in range(2):
        seq, n = (seq_u, len_u) if side == 0 else (seq_v, len_v)
        other, m = (seq_v, len_v) if side == 0 else (seq_u, len_u)
        for j in range(k):
            out[side, j, 0] = 0.0
            out[side, j, 1] = 0.0
        for j in range(n):
            x = seq[j]
            own = 0
            for q in range(n):
                own += seq[q] == x
            cross = 0
            for q in range(m):
                cross += other[q] == x
            out[side, j, 0] = own
            out[side, j, 1] = cross


@njit(cache=True)
def cooccurrence_of(seq_u, len_u, seq_v, len_v, out):
    """``cooccurrence``'s ``out`` from each pair's two neighbor sequences (the neighbor arrays of
    ``decay_kernels.latest_events``: a sharded run reads each endpoint's half where it lives)."""
    for i in range(len(len_u)):
        _count(seq_u[i], len_u[i], seq_v[i], len_v[i], out[i])


@njit(cache=True, inline="always")
def _distinct_latest(start, deg, pool, edge_t, edge_del, w, t, cap, scan, stop, seq):
    """``w``'s distinct partners before ``t``, newest first, into ``seq``: at most ``cap`` of them, read
    from at most ``scan`` of its latest visible entries, ending early at partner ``stop`` (-1: none);
    how many."""
    s = start[w]
    n, seen = 0, 0
    j = _prefix(start, deg, pool, edge_t, w, t) - 1
    while j >= 0 and n < cap and seen < scan:
        code = pool[s + j, 1]
        j -= 1
        if not _visible(code, edge_del, t):
            continue
        seen += 1
        x = pool[s + j + 1, 0]
        new = True
        for q in range(n):
            if seq[q] == x:
                new = False
                break
        if new:
            seq[n] = x
            n += 1
            if x == stop:
                break
    return n


@njit(cache=True)
def recency_ranks(start, deg, pool, edge_t, edge_del, num_nodes, src, dst, ts, met, cap, scan, out):
    """``out[i, 0]``: ``dst[i]``'s recency rank among ``src[i]``'s distinct partners before ``ts[i]`` (1:
    the partner of its latest event; 1 + how many distinct others since its latest event with ``dst[i]``);
    ``out[i, 1]`` the same of ``src[i]`` among ``dst[i]``'s. Inf where the pair never met (``met[i]``
    false), or the partner is not among the latest ``cap`` distinct ones read from at most ``scan`` latest
    events. A row of candidates (same source and time as the row before) reads the source's partners once."""
    seq_u = np.empty(cap, np.int64)
    seq_v = np.empty(cap, np.int64)
    len_u, read_u, read_t = 0, -1, np.nan
    for i in range(len(src)):
        u, v, t = src[i], dst[i], ts[i]
        out[i, 0] = np.inf
        out[i, 1] = np.inf
        if u < 0 or v < 0 or u >= num_nodes or v >= num_nodes:
            continue
        if u != read_u or t != read_t:
            len_u = _distinct_latest(start, deg, pool, edge_t, edge_del, u, t, cap, scan, -1, seq_u)
            read_u, read_t = u, t
        if not met[i]:
            continue
        for q in range(len_u):
            if seq_u[q] == v:
                out[i, 0] = q + 1
                break
        n = _distinct_latest(start, deg, pool, edge_t, edge_del, v, t, cap, scan, u, seq_v)
        if n > 0 and seq_v[n - 1] == u:
            out[i, 1] = n
