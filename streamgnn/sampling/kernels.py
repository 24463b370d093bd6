"""Numba kernels of the temporal neighbor sampler: plain functions over the store's flat arrays.

A root's candidates at query time ``t`` are one contiguous, time-ordered run ``[lo, hi)`` of its block,
found by binary search: ``hi`` is the first entry at or after ``t`` (only edges strictly before ``t``
are visible), ``lo`` the first at or after ``t - window``. Direction and deletion are per-entry filters;
without them (direction "both", no deletion in the store yet) the whole run is valid and no scan is
needed. A hop is two passes over the roots, count then fill, so every output is allocated at its exact
size and each root writes only its own slice.

Sampling is memory-latency bound (a root's block and its edges' times sit anywhere in the pool), so
each pass runs stage by stage over a chunk of roots, and a stage whose loads would miss is preceded by
one that only prefetches them (``_prefetch``): prefetches retire at once, so every root's miss is in
flight together, where plain loads (a touch loop, or handling one root at a time) keep only a reorder
buffer's worth. On a 1M-event power-law stream right after an insert this halves a recent-10 hop of
600 roots; merging the gather and edge-time stages into one loop instead doubled it. Helpers take
their arrays bundled in tuples: ``graph`` (start, deg, pool, edge_t, edge_del), ``runs`` (base, lo, hi,
n_valid, ptr: per-root scratch), ``out`` (root_index, nbr, eid, t, dt) and ``feats`` (edge_feat, ustart,
udeg, upool, upd_t, node_feat).

The hot loops index with unsigned integers (``U``), which numba does not wrap around as it does negative
ones, and read a pool row as one int64 (``_rows``) rather than two int32 at a strided 2-D index: the
gather loop took twice as long before, and these two took the kernel of a recent-10 hop of 600 roots on
Wikipedia, right after an insert, from 24 to 16 us.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..store.kernels import decode
from .rng import mix, randint

BOTH, OUT, IN = 0, 1, 2
U = np.uint64


@intrinsic
def _prefetch(typingctx, arr, i):
    """Start loading the cache line of ``arr[i]`` (of row ``i`` of a 2-D array) without waiting for it.

    A plain load that misses holds up retirement until it completes, so a loop of them keeps only a reorder
    buffer's worth of misses in flight; prefetches retire at once and every root's miss overlaps. An index
    out of range is harmless: a prefetch never faults.
    """

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        i32 = ir.IntType(32)
        inds = [context.cast(builder, args[1], sig.args[1], types.int64)]
        inds += [ir.Constant(ir.IntType(64), 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer2(
            context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
            strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout, inds=inds,
            wraparound=False, boundscheck=False,
        )  # fmt: skip
        i8p = ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        rw, locality, cache = (ir.Constant(i32, x) for x in (0, 3, 1))  # read, keep in all levels, data
        builder.call(fn, [builder.bitcast(ptr, i8p), rw, locality, cache])
        return context.get_dummy_value()

    return types.void(arr, i), codegen


@njit(cache=True, inline="always")
def _valid(code, edge_del, t, direction):
    if direction == OUT and code < 0:
        return False
    if direction == IN and code >= 0:
        return False
    if len(edge_del) == 0:
        return True
    deleted = edge_del[decode(code)]
    return deleted > t or deleted == np.inf  # never deleted: visible at t = inf ("now") too


@njit(cache=True, inline="always")
def _rows(pool):
    """The pool with each row read as one int64 (little-endian): the neighbor is its low half, the code the
    high one."""
    return pool.reshape(-1).view(np.int64)


@njit(cache=True, inline="always")
def _edge(x):
    """The edge id of a row read by ``_rows``."""
    return U(decode(x >> 32))


@njit(cache=True, inline="always")
def _time(rows, edge_t, row):
    return edge_t[_edge(rows[U(row)])]


@njit(cache=True)
def _lockstep(rows, edge_t, base, lo, hi, ts, back, a, b):
    """For roots ``a..b``: the first position in ``[lo[i], hi[i])`` of the block at ``base[i]`` whose edge
    time is >= ``ts[i] - back``, left in both ``lo[i]`` and ``hi[i]``.

    All roots' binary searches advance one level per sweep, and a sweep runs in stages (prefetch every
    probed row, then every probed edge's time, then compare), so each root's pair of dependent misses
    overlaps with every other root's; roots whose search has ended leave the sweeps.
    """
    m = b - a
    act = np.empty(m, np.int64)  # the roots still searching, compacted after each sweep
    na = 0
    for i in range(a, b):
        if lo[i] < hi[i]:
            act[na] = i
            na += 1
    while na:
        for q in range(na):
            i = act[q]
            _prefetch(rows, base[i] + ((lo[i] + hi[i]) >> 1))
        for q in range(na):
            i = act[q]
            _prefetch(edge_t, _edge(rows[U(base[i] + ((lo[i] + hi[i]) >> 1))]))
        still = 0
        for q in range(na):
            i = act[q]
            mid = (lo[i] + hi[i]) >> 1
            if _time(rows, edge_t, base[i] + mid) < ts[i] - back:
                lo[i] = mid + 1
            else:
                hi[i] = mid
            if lo[i] < hi[i]:
                act[still] = i
                still += 1
        na = still


@njit(cache=True)
def _count(graph, num_nodes, newest, roots, ts, k, direction, window, uniform, a, b, runs):
    """Roots ``a..b``: their runs ``[lo, hi)`` (block at ``base``) and neighbor counts into ``ptr[i + 1]``.

    For "recent" ``n_valid`` stops at ``k`` (the scan from the newest end need go no further). ``newest``
    bounds every stored time from above (the store's watermark): a query after it needs neither a search
    nor its newest entry's time, so streaming queries ("now") skip a dependent pair of misses per root.
    """
    start, deg, pool, edge_t, edge_del = graph
    rows = _rows(pool)
    base, lo, hi, n_valid, ptr = runs
    for i in range(U(a), U(b)):
        v = roots[i]
        known = v >= 0 and v < num_nodes
        base[i] = start[U(v)] if known else 0
        hi[i] = deg[U(v)] if known else 0
    # start loading every root's newest entry (and its k-th newest), then its time
    for i in range(U(a), U(b)):
        if hi[i] > 0:
            _prefetch(rows, base[i] + hi[i] - 1)
            _prefetch(rows, base[i] + max(hi[i] - k, 0))
    for i in range(U(a), U(b)):
        if hi[i] > 0 and not ts[i] > newest:
            _prefetch(edge_t, _edge(rows[U(base[i] + hi[i] - 1)]))
    search = False
    for i in range(U(a), U(b)):  # a query after the newest entry (streaming: "now") needs no search
        if ts[i] > newest:
            lo[i] = hi[i]
            continue
        last = _time(rows, edge_t, base[i] + hi[i] - 1) if hi[i] > 0 else -np.inf
        lo[i] = hi[i] if last < ts[i] else 0
        search |= lo[i] < hi[i]
    if search:
        _lockstep(rows, edge_t, base, lo, hi, ts, 0.0, a, b)
    if window != np.inf:
        for i in range(a, b):
            n_valid[i] = hi[i]
            lo[i] = 0
        _lockstep(rows, edge_t, base, lo, n_valid, ts, window, a, b)
    else:
        for i in range(a, b):
            lo[i] = 0
    fast = direction == BOTH and len(edge_del) == 0
    for i in range(U(a), U(b)):
        if fast:
            n_valid[i] = hi[i] - lo[i]
        else:
            c = 0
            j = hi[i] - 1
            while j >= lo[i] and (uniform or k < 0 or c < k):
                if _valid(pool[base[i] + j, 1], edge_del, ts[i], direction):
                    c += 1
                j -= 1
            n_valid[i] = c
        ptr[i + 1] = n_valid[i] if k < 0 else min(k, n_valid[i])


@njit(cache=True)
def _draw_rows(pool, edge_del, t, runs, i, cnt, direction, state, rows):
    """Pool rows of ``cnt`` of root ``i``'s ``n_valid`` candidates, uniformly, into its slice of ``rows``.

    Floyd's algorithm picks distinct ranks, kept sorted as they come so the rows keep block (time) order.
    """
    s, lo, n_valid, p0 = runs[0][i], runs[1][i], runs[3][i], runs[4][i]
    for m, j in enumerate(range(n_valid - cnt, n_valid)):
        state, r = randint(state, j + 1)
        q = m  # insert r into the sorted rows[p0:p0 + m]; a rank already there means take j instead
        while q > 0 and rows[p0 + q - 1] > r:
            q -= 1
        if q > 0 and rows[p0 + q - 1] == r:
            r = j  # j exceeds every rank drawn so far: it goes last
            q = m
        for x in range(m, q, -1):
            rows[p0 + x] = rows[p0 + x - 1]
        rows[p0 + q] = r
    if direction == BOTH and len(edge_del) == 0:
        for q in range(cnt):
            rows[p0 + q] += s + lo
        return
    rank = 0
    q = 0
    j = lo
    while q < cnt:
        if _valid(pool[s + j, 1], edge_del, t, direction):
            if rank == rows[p0 + q]:
                rows[p0 + q] = s + j
                q += 1
            rank += 1
        j += 1


@njit(cache=True)
def _newest_rows(pool, edge_del, t, s, hi, cnt, direction, p0, rows):
    """Pool rows of one root's ``cnt`` newest valid entries into ``rows[p0:p0 + cnt]``, oldest first."""
    q = cnt
    j = hi - 1
    while q > 0:
        if _valid(pool[s + j, 1], edge_del, t, direction):
            q -= 1
            rows[p0 + q] = s + j
        j -= 1


@njit(cache=True, inline="always")
def _version(ustart, udeg, upool, upd_t, v, t):
    """Index of ``v``'s feature version in force at ``t`` (update time <= t), -1 if none."""
    s = ustart[v]
    lo = 0
    hi = udeg[v]
    while lo < hi:
        mid = (lo + hi) >> 1
        if upd_t[upool[s + mid, 1]] <= t:
            lo = mid + 1
        else:
            hi = mid
    return upool[s + lo - 1, 1] if lo > 0 else -1


@njit(cache=True, inline="always")
def _put(x, i, p, root_index, nbr, eid, edge_t):
    """Output ``p`` (of root ``i``) from pool row ``x``; starts loading the edge's time."""
    root_index[p] = i
    nbr[p] = np.int32(x)
    e = _edge(x)
    eid[p] = e
    _prefetch(edge_t, e)


@njit(cache=True)
def _fill(graph, ts, direction, uniform, key, a, b, runs, out):
    """Roots ``a..b``: pick each one's pool rows, then gather stage by stage.

    The newest ``cnt`` entries of a run are contiguous rows, read in place (``_count`` has already
    prefetched both ends); draws and filtered scans put their rows in ``eid`` first, as scratch.
    """
    _, _, pool, edge_t, edge_del = graph
    base, _, hi, n_valid, ptr = runs
    root_index, nbr, eid, et, dt = out
    fast = direction == BOTH and len(edge_del) == 0
    if uniform or not fast:  # (recent, fast: the count pass has started loading the rows already)
        for i in range(a, b):  # the rows of draws and of filtered scans, into eid (as scratch)
            p0 = ptr[i]
            cnt = ptr[i + 1] - p0
            if cnt == 0:
                continue
            if uniform and cnt < n_valid[i]:
                _draw_rows(pool, edge_del, ts[i], runs, i, cnt, direction, mix(key, i), eid)
            elif not fast:
                _newest_rows(pool, edge_del, ts[i], base[i], hi[i], cnt, direction, p0, eid)
        for i in range(a, b):  # start loading each root's rows: the blocks' cache lines arrive in parallel
            p0 = ptr[i]
            cnt = ptr[i + 1] - p0
            if cnt == 0:
                continue
            if fast and not (uniform and cnt < n_valid[i]):  # the newest cnt entries, no scratch
                _prefetch(pool, base[i] + hi[i] - cnt)
            else:
                for p in range(p0, p0 + cnt):
                    _prefetch(pool, eid[p])
    rows = _rows(pool)
    for i in range(a, b):
        p0, p1 = U(ptr[i]), U(ptr[i + 1])
        if fast and not (uniform and ptr[i + 1] - ptr[i] < n_valid[i]):
            r0 = U(base[i] + hi[i] - ptr[i + 1])  # row of output p: r0 + p (modulo 2**64)
            for p in range(p0, p1):
                _put(rows[r0 + p], i, p, root_index, nbr, eid, edge_t)
        else:
            for p in range(p0, p1):
                _put(rows[U(eid[p])], i, p, root_index, nbr, eid, edge_t)
    for i in range(a, b):  # edge times: one independent load per neighbor
        t = ts[i]
        for p in range(U(ptr[i]), U(ptr[i + 1])):
            e = edge_t[U(eid[p])]
            et[p] = e
            dt[p] = t - e


@njit(cache=True)
def _features(feats, ptr, a, b, nbr, eid, et, edge_x, node_x):
    """Roots ``a..b``: the feature rows of their sampled edges and of each neighbor at the edge's time."""
    edge_feat, ustart, udeg, upool, upd_t, node_feat = feats
    if len(edge_x):
        for p in range(ptr[a], ptr[b]):
            edge_x[p, :] = edge_feat[eid[p], :]
    if len(node_x):
        for p in range(ptr[a], ptr[b]):
            ver = _version(ustart, udeg, upool, upd_t, nbr[p], et[p])
            if ver >= 0:
                node_x[p, :] = node_feat[ver, :]


@njit(cache=True)
def _runs(n):
    ints = np.empty((5, n + 1), np.int64)
    ints[4, 0] = 0
    return ints[0], ints[1], ints[2], ints[3], ints[4]


@njit(cache=True)
def _offsets(ptr):
    """``ptr``'s counts turned into offsets; returns the total."""
    for i in range(len(ptr) - 1):
        ptr[i + 1] += ptr[i]
    return ptr[-1]


@njit(cache=True)
def _outputs(ptr, want_edge, edge_dim, want_node, node_dim):
    """Exact-size outputs once ``ptr`` holds the counts (turned into offsets here)."""
    m = _offsets(ptr)
    return (
        np.empty(m, np.int64),
        np.empty(m, np.int64),
        np.empty(m, np.int64),
        np.empty(m, np.float64),
        np.empty(m, np.float64),
        np.empty((m if want_edge else 0, edge_dim), np.float32),
        np.zeros((m if want_node else 0, node_dim), np.float32),
    )


@njit(cache=True)
def sample_hop(
    start, deg, pool, edge_t, edge_del, num_nodes, newest, roots, ts, k, direction, window, uniform, seed,
    call, hop, edge_feat, want_edge, ustart, udeg, upool, upd_t, node_feat, want_node,
):  # fmt: skip
    """One hop for ``roots`` at times ``ts``: ``(ptr, root_index, nbr, eid, t, dt, edge_x, node_x, nan)``.

    ``k < 0`` takes every candidate; ``newest`` is at least every stored edge time (the store's
    watermark). Uniform draws for root ``i`` come from ``mix(mix(key, hop), i)`` with
    ``key = mix(seed, call)`` (``rng.key_of``; ``seed`` and ``call`` are the int64 two's complements of
    the 64-bit values). Feature rows (edge features of each sampled edge, node features of each
    neighbor at the edge's time) are gathered after the fill pass; unwanted ones come back with zero rows.
    ``nan``: some query time is NaN (the caller raises; the outputs are then meaningless).
    """
    graph = (start, deg, pool, edge_t, edge_del)
    n = len(roots)
    runs = _runs(n)
    _count(graph, num_nodes, newest, roots, ts, k, direction, window, uniform, 0, n, runs)
    ptr = runs[4]
    root_index, nbr, eid, et, dt, edge_x, node_x = _outputs(
        ptr, want_edge, edge_feat.shape[1], want_node, node_feat.shape[1]
    )
    hop_key = mix(mix(np.uint64(seed), np.uint64(call)), hop)
    _fill(graph, ts, direction, uniform, hop_key, 0, n, runs, (root_index, nbr, eid, et, dt))
    feats = (edge_feat, ustart, udeg, upool, upd_t, node_feat)
    _features(feats, ptr, 0, n, nbr, eid, et, edge_x, node_x)
    return ptr, root_index, nbr, eid, et, dt, edge_x, node_x, np.isnan(ts).any()


@njit(cache=True)
def sample_hop_plain(
    start, deg, pool, edge_t, edge_del, num_nodes, newest, roots, ts, k, direction, window, uniform, seed,
    call, hop,
):  # fmt: skip
    """``sample_hop`` without features: ``(ints, floats, nan)``, ``ints`` holding ``ptr``, ``root_index``,
    ``nbr`` and ``eid`` back to back and ``floats`` ``t`` and ``dt`` (``sampler._split_plain`` slices them).

    Fewer arrays in and out make the call itself cheaper: boxing an output costs ~0.3 us, slicing it from a
    buffer in Python ~0.1 us, and a hop of a few hundred roots takes only tens of microseconds.
    """
    graph = (start, deg, pool, edge_t, edge_del)
    n = len(roots)
    runs = _runs(n)
    _count(graph, num_nodes, newest, roots, ts, k, direction, window, uniform, 0, n, runs)
    m = _offsets(runs[4])
    ints = np.empty(n + 1 + 3 * m, np.int64)
    ints[: n + 1] = runs[4]
    floats = np.empty(2 * m, np.float64)
    c, d = n + 1 + m, n + 1 + 2 * m
    out = (ints[n + 1 : c], ints[c:d], ints[d:], floats[:m], floats[m:])
    hop_key = mix(mix(np.uint64(seed), np.uint64(call)), hop)
    _fill(graph, ts, direction, uniform, hop_key, 0, n, runs, out)
    return ints, floats, np.isnan(ts).any()


@njit(cache=True, parallel=True)
def sample_hop_parallel(
    start, deg, pool, edge_t, edge_del, num_nodes, newest, roots, ts, k, direction, window, uniform, seed,
    call, hop, edge_feat, want_edge, ustart, udeg, upool, upd_t, node_feat, want_node, chunks,
):  # fmt: skip
    """``sample_hop`` with each pass split into ``chunks`` runs of roots spread over the threads.

    The result is identical: a root's draws depend on its index only, never on the chunking.
    """
    graph = (start, deg, pool, edge_t, edge_del)
    n = len(roots)
    runs = _runs(n)
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
    for c in prange(chunks):
        a, b = bounds[c], bounds[c + 1]
        _count(graph, num_nodes, newest, roots, ts, k, direction, window, uniform, a, b, runs)
    ptr = runs[4]
    root_index, nbr, eid, et, dt, edge_x, node_x = _outputs(
        ptr, want_edge, edge_feat.shape[1], want_node, node_feat.shape[1]
    )
    feats = (edge_feat, ustart, udeg, upool, upd_t, node_feat)
    hop_key = mix(mix(np.uint64(seed), np.uint64(call)), hop)
    for c in prange(chunks):
        a, b = bounds[c], bounds[c + 1]
        _fill(graph, ts, direction, uniform, hop_key, a, b, runs, (root_index, nbr, eid, et, dt))
        _features(feats, ptr, a, b, nbr, eid, et, edge_x, node_x)
    return ptr, root_index, nbr, eid, et, dt, edge_x, node_x, np.isnan(ts).any()
