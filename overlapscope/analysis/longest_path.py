"""Earliest and latest times on the dependency graph, vectorized (DESIGN.md "Critical path").

The model (depgraph.py): x_n = max(base_n, y_pred + g_n, max over edges (y_src + lag)) + u_n is a node's
start, y_n = x_n + d_n its end; a matched collective member ends at y_c = max(J_I, x_c) + t_c, with
J_I = max of x over the instance's members (the last rank's arrival) and t_c its transfer time.

Forward: along a chain (a run of non-comm nodes of one lane) the recurrence x_n = max(a_n, x_{n-1} + inc_n)
with a_n = ext_n + u_n, inc_n = d_{n-1} + g_n + u_n unrolls to x_n = C_n + max_{k<=n}(a_k - C_k), C the
prefix sum of inc: one cumulative sum and one segmented cumulative max for all chains at once. The
explicit edges (lane edges around comm nodes, event, launch, gate, and the collectives' join) are
relaxed between such passes until nothing changes; each pass is O(N + E) NumPy work and the number of
passes is one more than the most explicit edges on any path (the collectives a step's critical path
passes through, plus the lane edges around them), so the cost is O(K (N + E)), never a Python loop
over events. Backward (latest times that keep every rank's span within the step's) is the mirror image
with a reversed cumulative min. With the measured durations the forward pass reproduces the measured
times exactly (u_n takes up what the constraints leave), which the tests check.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

NEVER = np.int64(-(2 ** 62))
LATEST = np.int64(2 ** 62)
MAX_PASSES = 100_000


class Graph(NamedTuple):
    """All ranks' nodes (sorted by chain, then lane order) and explicit edges, times aligned."""

    chain: np.ndarray
    head: np.ndarray
    """First node of its chain."""
    base: np.ndarray
    g: np.ndarray
    u: np.ndarray
    dur: np.ndarray
    """d = e - s (non-comm and unmatched comm)."""
    inst: np.ndarray
    """Collective instance of a matched comm node, else -1 (dense ids 0..)."""
    transfer: np.ndarray
    """t_c of matched comm nodes (0 elsewhere)."""
    src: np.ndarray
    dst: np.ndarray
    lag: np.ndarray


def _segmented_cummax(values: np.ndarray, chain: np.ndarray) -> np.ndarray:
    """Running max restarting at each chain (chain ids non-decreasing along the array): one
    np.maximum.accumulate after lifting each chain above all before it by chain x span; pandas'
    grouped cummax when that would overflow int64."""
    if values.size == 0:
        return values
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    first = int(chain[0])
    if (int(chain[-1]) - first + 1) * span < 2 ** 62:
        lift = (chain - first) * span
        return np.maximum.accumulate(values - lo + lift) - lift + lo
    return pd.Series(values).groupby(chain).cummax().to_numpy(np.int64)


class _Groups(NamedTuple):
    """A fixed grouping of array positions (edges by endpoint, members by instance), for a grouped
    max/min by one sort and np.*.reduceat instead of the slow ufunc.at."""

    order: np.ndarray
    starts: np.ndarray
    keys: np.ndarray

    @classmethod
    def of(cls, keys: np.ndarray) -> "_Groups":
        order = np.argsort(keys, kind="stable")
        k = keys[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if k.size else np.empty(0, np.int64)
        return cls(order, starts, k[starts] if k.size else k)

    def reduce(self, values: np.ndarray, op: np.ufunc) -> np.ndarray:
        return op.reduceat(values[self.order], self.starts) if self.starts.size else values[:0]


def _chain_prefix(graph: Graph, inc: np.ndarray) -> np.ndarray:
    """Per-chain prefix sum of inc (inc of a chain head is taken as 0)."""
    inc = np.where(graph.head, 0, inc)
    total = np.cumsum(inc)
    start_of = np.flatnonzero(graph.head)
    return total - np.repeat(total[start_of], np.diff(np.r_[start_of, inc.size]))


def forward(graph: Graph, dur: np.ndarray | None = None, transfer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Earliest starts x and ends y; dur/transfer replace the graph's (a what-if)."""
    dur = graph.dur if dur is None else dur
    transfer = graph.transfer if transfer is None else transfer
    n = graph.base.size
    inc = np.zeros(n, dtype=np.int64)
    inc[1:] = dur[:-1] + graph.g[1:] + graph.u[1:]
    c = _chain_prefix(graph, inc)
    matched = np.flatnonzero(graph.inst >= 0)
    by_dst = _Groups.of(graph.dst)
    by_inst = _Groups.of(graph.inst[matched])
    member_join = np.searchsorted(by_inst.keys, graph.inst[matched])
    y = np.full(n, NEVER, dtype=np.int64)
    for _ in range(MAX_PASSES):
        ext = graph.base.copy()
        if graph.src.size:
            # y = NEVER (not reached yet) stays far below any base: never the max
            best = by_dst.reduce(y[graph.src] + graph.lag, np.maximum)
            ext[by_dst.keys] = np.maximum(ext[by_dst.keys], best)
        a = ext + graph.u - c
        x = c + _segmented_cummax(a, graph.chain)
        new_y = x + dur
        if matched.size:
            join = by_inst.reduce(x[matched], np.maximum)
            new_y[matched] = np.maximum(join[member_join], x[matched]) + transfer[matched]
        if np.array_equal(new_y, y):
            return x, y
        y = new_y
    raise AssertionError("dependency graph did not settle: it has a cycle")


def backward(graph: Graph, deadline: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latest starts and ends (Lx, Ly) such that every node ends by its deadline and every constraint holds."""
    n = graph.base.size
    # Ly_n = min(extL_n, Ly_{n+1} - dec_n), dec_n = d_{n+1} + u_{n+1} + g_{n+1} inside a chain.
    dec = np.zeros(n, dtype=np.int64)
    dec[:-1] = graph.dur[1:] + graph.u[1:] + graph.g[1:]
    last = np.r_[graph.head[1:], True]
    dec[last] = 0
    p = _chain_prefix(graph, np.r_[0, dec[:-1]])  # P_n = sum of dec_j for j < n in the chain
    matched = np.flatnonzero(graph.inst >= 0)
    by_src = _Groups.of(graph.src)
    by_inst = _Groups.of(graph.inst[matched])
    member_join = np.searchsorted(by_inst.keys, graph.inst[matched])
    lx = np.full(n, LATEST, dtype=np.int64)
    rev = np.arange(n)[::-1]
    chain_rev = (graph.chain.max() - graph.chain)[rev] if n else graph.chain
    for _ in range(MAX_PASSES):
        ext = deadline.copy()
        if graph.src.size:
            best = by_src.reduce(lx[graph.dst] - graph.u[graph.dst] - graph.lag, np.minimum)
            ext[by_src.keys] = np.minimum(ext[by_src.keys], best)
        # reversed cumulative min per chain = -(cummax of the negation), chains renumbered ascending
        b = (ext - p)[rev]
        ly = p - _segmented_cummax(-b, chain_rev)[rev]
        new_lx = ly - graph.dur
        if matched.size:
            join = by_inst.reduce(ly[matched] - graph.transfer[matched], np.minimum)
            new_lx[matched] = join[member_join]
        if np.array_equal(new_lx, lx):
            return lx, ly
        lx = new_lx
    raise AssertionError("dependency graph did not settle: it has a cycle")
