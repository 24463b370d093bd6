"""Numba kernels of temporal walk features (TPNet's random feature propagation, Lu et al. 2024).

Each node ``x`` has a fixed random vector ``P[x]`` (hop 0, entries N(0, 1/d)) and, per decay channel ``c``
and hop ``k = 1..K``, a vector ``H[x, c, k-1]``: the sum over temporal walks of ``k`` events ending at ``x``
of the start node's ``P``, each walk weighted by ``exp(-rate_c * (events since its first event))``. So
``<H[u, c, i-1], H[v, c, j-1]>`` approximates (Johnson-Lindenstrauss) the decayed number of walk pairs
meeting at a common start, and ``<P[u], H[v, c, k-1]>`` the decayed number of ``k``-event walks from ``u``
to ``v``: counts no fixed neighborhood can hold, at O(K d) per event and O(K^2 d) per query (a query
reads the Gram matrix of both endpoints' hops, so each node's own products too). A query may also name
neighbors of its endpoints (TPNet's relative encoding): each one's products with both endpoints and with
itself come from the same state, O(K^2 d) per neighbor.

A walk's events have strictly increasing times: the events of one time stamp (a *group*) all read the
state from before the group, so the batch they came in changes nothing; within a group they are applied in
``(source, destination)`` order (``walks.by_time``), so the sums' rounding does not depend on their arrival
order either, and a sharded run that learns a group from several ranks applies it to the bit alike. By default
time is counted in events (the clock is the number of events before a group), which makes the decay
independent of the stream's time unit and rate; with ``timed`` it is the stream's time, as TPNet counts it
(a group's clock is its time stamp, a query's its own time). ``R[c, k]`` is channel ``c``'s decay rate of
hop ``k + 1`` (``walks.rate_table``): per event, every hop of a channel decays alike (a walk weighs
``exp(-rate * events since its first event)``); by time, hop ``k + 1`` decays ``k + 1`` times as fast, which
weighs a walk by ``exp(-rate * sum over its events of (now - event time))``, TPNet's score. A node's vectors
are kept as of its last group (``lam[x]``, the clock then, a float) and decayed when read, so the stored
values depend only on the events applied, not on when they were asked for. (A node no event reached has
zero rows at clock 0: a decay never grows them, even for a query before time 0.)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .rng import mix

_TWO_PI = 2.0 * np.pi


@njit(cache=True)
def random_vectors(seed, ids, out):
    """``out[i]``: node ``ids[i]``'s Gaussian N(0, 1/d) entries, a function of ``(seed, ids[i])`` only
    (Box-Muller over counter-based uniforms), so any two processes agree on a node's vector."""
    d = out.shape[1]
    scale = 1.0 / np.sqrt(d)
    for r in range(len(ids)):
        x = ids[r]
        for i in range(d):
            z1 = mix(np.uint64(seed), np.uint64(x * d + i))
            z2 = mix(np.uint64(seed) ^ np.uint64(0x5851F42D4C957F2D), np.uint64(x * d + i))
            u1 = ((z1 >> np.uint64(11)) + np.uint64(1)) * (1.0 / 9007199254740993.0)  # (0, 1]
            u2 = (z2 >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # [0, 1)
            out[r, i] = np.sqrt(-2.0 * np.log(u1)) * np.cos(_TWO_PI * u2) * scale


@njit(cache=True)
def new_edges(start, deg, seen_deg, pool, nodes, first, src, dst):
    """Endpoints of edges ``first..first+len(src)-1`` from their out-entries (edges keep no endpoints).

    Only ``nodes``, those with more rows than ``seen_deg`` (their count when edge ``first`` was next), hold
    such entries: a node's rows only grow, and its new ones are those of edges ``>= first``. Blocks are in
    time order, so new rows sit at the end but for late edges: each block is read from its end until all
    of its new rows are found, which costs the new rows, not the whole stream."""
    n = len(src)
    for v in nodes:
        s = start[v]
        left = deg[v] - seen_deg[v]
        j = deg[v] - 1
        while left > 0 and j >= 0:
            c = pool[s + j, 1]
            if (c if c >= 0 else -c - 1) >= first:
                left -= 1
                if c >= 0 and c < first + n:
                    src[c - first] = v
                    dst[c - first] = pool[s + j, 0]
            j -= 1


@njit(cache=True)
def apply_groups(H, lam, P, R, rows_s, rows_d, ev_s, ev_d, ev_t, lo, hi, clock, timed):
    """Apply events ``lo..hi-1`` (sorted by time) group by group; ``clock``: events before ``lo``.

    ``ev_s``/``ev_d`` are node ids (they index ``P``); ``rows_s``/``rows_d`` their rows in ``H`` and
    ``lam`` (the node ids themselves, or slots of a scratch copy). ``timed``: a group's clock is its time
    stamp, not the events before it. Returns the events counted after ``hi``."""
    C, K, d = H.shape[1], H.shape[2], H.shape[3]
    g = lo
    while g < hi:
        e = g
        while e < hi and ev_t[e] == ev_t[g]:
            e += 1
        now = ev_t[g] if timed else float(clock)
        for i in range(g, e):  # bring both endpoints to the group's clock
            for side in range(2):
                r = rows_s[i] if side == 0 else rows_d[i]
                if lam[r] != now:
                    for c in range(C):
                        for k in range(K):
                            if R[c, k] != 0.0:
                                f = np.exp(-R[c, k] * max(now - lam[r], 0.0))
                                for j in range(d):
                                    H[r, c, k, j] *= f
                    lam[r] = now
        for k in range(K - 1, 0, -1):  # top down: hop k reads hop k-1 as it was before the group
            for i in range(g, e):
                a, b = rows_s[i], rows_d[i]
                for c in range(C):  # one row at a time (hops k and k-1 never overlap): vectorized adds
                    for j in range(d):
                        H[a, c, k, j] += H[b, c, k - 1, j]
                    for j in range(d):
                        H[b, c, k, j] += H[a, c, k - 1, j]
        for i in range(g, e):  # hop 1 (k = 0): the other end's random vector
            a, b = rows_s[i], rows_d[i]
            for c in range(C):
                for j in range(d):
                    H[a, c, 0, j] += P[ev_d[i], j]
                for j in range(d):
                    H[b, c, 0, j] += P[ev_s[i], j]
        clock += e - g
        g = e
    return clock


@njit(cache=True, fastmath={"reassoc"})  # sums in vector lanes: one fixed order, 4-8x faster than serial
def _gram(Hu, lu, ru, Hv, lv, rv, P, R, u, v, now, X, out, i, prev):
    """``out[i, c]``: the Gram matrix, in channel ``c``, of u's hops 0..K then v's hops 0..K, each decayed
    to ``now`` (u's vectors are row ``ru`` of ``Hu``/``lu``, v's row ``rv`` of ``Hv``/``lv``; hop 0 is
    ``P``). ``X``: scratch ``[C, 2 (K + 1), d]``; ``prev`` >= 0: query ``prev`` was the last one, with the
    same ``u`` and ``now`` (a row of candidates), so u's rows of ``X`` and u's own products stand."""
    C, K, d = Hu.shape[1], Hu.shape[2], Hu.shape[3]
    m = 2 * (K + 1)
    for c in range(C):
        X[c, K + 1] = P[v]
        for k in range(K):  # row by row: contiguous copies the compiler vectorizes
            fv = np.exp(-R[c, k] * max(now - lv[rv], 0.0))
            for j in range(d):
                X[c, K + 2 + k, j] = Hv[rv, c, k, j] * fv
        if prev < 0:
            X[c, 0] = P[u]
            for k in range(K):
                fu = np.exp(-R[c, k] * max(now - lu[ru], 0.0))
                for j in range(d):
                    X[c, 1 + k, j] = Hu[ru, c, k, j] * fu
        for a in range(m):
            for b in range(a, m):
                if prev >= 0 and b <= K:
                    s = out[prev, c, a, b]
                else:
                    s = 0.0
                    for j in range(d):
                        s += X[c, a, j] * X[c, b, j]
                out[i, c, a, b] = s
                out[i, c, b, a] = s


@njit(cache=True)
def _load(H, lam, sH, slam, slot, P, R, x, now, Y):
    """``Y[c]``: node ``x``'s hops 0..K in channel ``c``, decayed to ``now`` (from its scratch row where
    pending events gave it one)."""
    K = Y.shape[1] - 1
    r = slot[x]
    for c in range(Y.shape[0]):
        Y[c, 0] = P[x]
        if r >= 0:
            for k in range(K):
                f = np.exp(-R[c, k] * max(now - slam[r], 0.0))
                for j in range(Y.shape[2]):
                    Y[c, 1 + k, j] = sH[r, c, k, j] * f
        else:
            for k in range(K):
                f = np.exp(-R[c, k] * max(now - lam[x], 0.0))
                for j in range(Y.shape[2]):
                    Y[c, 1 + k, j] = H[x, c, k, j] * f


@njit(cache=True, inline="always")
def _dot(a, b):
    s = 0.0
    for j in range(len(a)):
        s += a[j] * b[j]
    return s


@njit(cache=True, fastmath={"reassoc"})
def _relative(X, Y, nbr, rel, i, prev, H, lam, sH, slam, slot, P, R, now):
    """``rel[i, s, j]``: neighbor ``w = nbr[i, s, j]`` of endpoint ``s`` (0: u, 1: v; -1: none, zeros)
    against both endpoints, whose decayed hops ``X`` holds (``_gram``: u's rows, then v's): per channel
    ``<w's hop a, own endpoint's hop b>``, then the same against the other endpoint, then ``<w's hop a,
    itself>`` (``relative_width`` columns). After a query ``prev`` with the same ``u`` and ``now``, a
    neighbor of u in the same position has the same products with u and itself: those are copied."""
    C, m = X.shape[0], Y.shape[1]
    block = C * m * m
    for s in range(2):
        own = 0 if s == 0 else m
        for j in range(nbr.shape[2]):
            w = nbr[i, s, j]
            row = rel[i, s, j]
            if w < 0 or w >= len(P):
                row[:] = 0.0
                continue
            _load(H, lam, sH, slam, slot, P, R, w, now, Y)
            same = s == 0 and prev >= 0 and nbr[prev, 0, j] == w
            for c in range(C):
                for a in range(m):
                    for b in range(m):
                        col = c * m * m + a * m + b
                        if same:
                            row[col] = rel[prev, 0, j, col]
                        else:
                            row[col] = _dot(Y[c, a], X[c, own + b])
                        row[block + col] = _dot(Y[c, a], X[c, m - own + b])
                    col = 2 * block + c * m + a
                    row[col] = rel[prev, 0, j, col] if same else _dot(Y[c, a], Y[c, a])


@njit(cache=True)
def answer(H, lam, P, R, timed, slot, ev_s, ev_d, ev_t, clock, src, dst, t, prefix, order, out, nbr, rel):
    """Queries in ``order`` (non-decreasing ``prefix``): query ``i`` sees the state plus the first
    ``prefix[i]`` pending events ``ev_*`` (the events before its time that the state does not hold). They
    go to a scratch copy of the rows they touch (``slot[x]``: x's scratch row, -1: none; all -1 again on
    return), so the state itself never holds an event that a later arrival could have to precede.
    ``clock``: the events the state holds; a query's own clock is that plus its pending events, or with
    ``timed`` its time ``t[i]``. Unknown nodes (-1, or beyond ``P``) read zeros. ``nbr``
    ``[n, 2, k]``: neighbors of each query's endpoints whose products with both go to ``rel`` (``_relative``;
    ``k = 0``: none), from the same state."""
    n_ev = len(ev_s)
    C, K, d = H.shape[1], H.shape[2], H.shape[3]
    sH = np.zeros((2 * n_ev + 1, C, K, d))
    slam = np.zeros(2 * n_ev + 1)
    rows_s = np.empty(n_ev, np.int64)
    rows_d = np.empty(n_ev, np.int64)
    X = np.empty((C, 2 * (K + 1), d))
    Y = np.empty((C, K + 1, d))
    last_u, last_now, last_i = -1, -1.0, -1
    used = 0
    done = 0
    for q in range(len(order)):
        i = order[q]
        p = prefix[i]
        if done < p:
            for j in range(done, p):
                for side in range(2):
                    x = ev_s[j] if side == 0 else ev_d[j]
                    if slot[x] < 0:
                        slot[x] = used
                        sH[used] = H[x]
                        slam[used] = lam[x]
                        used += 1
                rows_s[j], rows_d[j] = slot[ev_s[j]], slot[ev_d[j]]
            clock = apply_groups(sH, slam, P, R, rows_s, rows_d, ev_s, ev_d, ev_t, done, p, clock, timed)
            done = p
        u, v = src[i], dst[i]
        if u < 0 or v < 0 or u >= len(P) or v >= len(P):
            out[i] = 0.0
            rel[i] = 0.0
            continue
        now = t[i] if timed else float(clock)  # the same ``now``: the same events before it
        prev = last_i if u == last_u and now == last_now else -1
        if slot[u] < 0:
            if slot[v] < 0:
                _gram(H, lam, u, H, lam, v, P, R, u, v, now, X, out, i, prev)
            else:
                _gram(H, lam, u, sH, slam, slot[v], P, R, u, v, now, X, out, i, prev)
        elif slot[v] < 0:
            _gram(sH, slam, slot[u], H, lam, v, P, R, u, v, now, X, out, i, prev)
        else:
            _gram(sH, slam, slot[u], sH, slam, slot[v], P, R, u, v, now, X, out, i, prev)
        if nbr.shape[2]:
            _relative(X, Y, nbr, rel, i, prev, H, lam, sH, slam, slot, P, R, now)
        last_u, last_now, last_i = u, now, i
    for j in range(n_ev):
        slot[ev_s[j]] = -1
        slot[ev_d[j]] = -1
