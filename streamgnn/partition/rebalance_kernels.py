"""Numba kernels of rebalancing: re-place chosen vertices from their whole adjacency (the store's blocks).

``refine`` restreams candidates through the placement score of their partitioner (Nishimura & Ugander,
KDD 2013: restreamed LDG/Fennel approach offline quality), moving a vertex only when its best partition
beats staying by more than ``min_gain`` and the move keeps every partition within capacity.
Adjacency is read as the store keeps it: ``pool[start[v]:start[v]+deg[v], 0]`` are v's neighbors,
one row per incident edge (both directions, repeated edges repeated); only edges with ids below
``edge_limit`` count, so a check run in the middle of a batch sees the graph as of its stream position.
"""

from __future__ import annotations

from numba import njit

from .greedy_kernels import fennel_alpha, score


@njit(cache=True)
def _count(v, start, deg, pool, edge_limit, labels, counts):
    """``counts[p]`` += v's edges (below ``edge_limit``) to placed neighbors in p."""
    s0 = start[v]
    for j in range(deg[v]):
        w = pool[s0 + j, 0]
        c = pool[s0 + j, 1]
        e = c if c >= 0 else -c - 1
        if w != v and e < edge_limit and labels[w] >= 0:
            counts[labels[w]] += 1


@njit(cache=True)
def refine(cands, start, deg, pool, edge_limit, labels, sizes, counts, n, m, method, slack, gamma, alpha,
           min_gain, max_moves, moved, to):  # fmt: skip
    """Re-place ``cands`` in order; ``moved``/``to`` receive the moves; returns how many."""
    k = len(sizes)
    cap = (1.0 + slack) * n / k
    a = fennel_alpha(k, n, m, gamma, alpha)
    nm = 0
    for v in cands:
        if nm >= max_moves:
            break
        here = labels[v]
        if here < 0:
            continue
        _count(v, start, deg, pool, edge_limit, labels, counts)
        sizes[here] -= 1
        best = here
        best_s = score(counts[here], sizes[here], method, cap, gamma, a) + min_gain
        for p in range(k):
            s = score(counts[p], sizes[p], method, cap, gamma, a)
            if s > best_s:
                best, best_s = p, s
        sizes[best] += 1
        counts[:] = 0
        if best != here:
            labels[v] = best
            moved[nm] = v
            to[nm] = best
            nm += 1
    return nm


@njit(cache=True)
def drain(cands, start, deg, pool, edge_limit, labels, sizes, counts, limit, max_moves, moved, to):
    """Move vertices out of partitions above ``limit`` vertices into ones below it, each to the allowed
    partition holding most of its neighbors (ties: the smaller one); returns how many moved."""
    k = len(sizes)
    nm = 0
    for v in cands:
        if nm >= max_moves:
            break
        here = labels[v]
        if here < 0 or sizes[here] <= limit:
            continue
        _count(v, start, deg, pool, edge_limit, labels, counts)
        best = -1
        for p in range(k):
            if (
                p != here
                and sizes[p] + 1 <= limit
                and (
                    best < 0
                    or counts[p] > counts[best]
                    or (counts[p] == counts[best] and sizes[p] < sizes[best])
                )
            ):
                best = p
        counts[:] = 0
        if best >= 0:
            labels[v] = best
            sizes[here] -= 1
            sizes[best] += 1
            moved[nm] = v
            to[nm] = best
            nm += 1
    return nm
