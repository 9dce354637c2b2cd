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
    matched = graph.inst >= 0
    n_inst = int(graph.inst.max()) + 1 if matched.any() else 0
    y = np.full(n, NEVER, dtype=np.int64)
    for _ in range(MAX_PASSES):
        ext = graph.base.copy()
        if graph.src.size:
            val = y[graph.src]
            ok = val > NEVER
            np.maximum.at(ext, graph.dst[ok], val[ok] + graph.lag[ok])
        a = ext + graph.u - c
        x = c + pd.Series(a).groupby(graph.chain).cummax().to_numpy(np.int64)
        new_y = x + dur
        if n_inst:
            join = np.full(n_inst, NEVER, dtype=np.int64)
            np.maximum.at(join, graph.inst[matched], x[matched])
            new_y[matched] = np.maximum(join[graph.inst[matched]], x[matched]) + transfer[matched]
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
    matched = graph.inst >= 0
    n_inst = int(graph.inst.max()) + 1 if matched.any() else 0
    lx = np.full(n, LATEST, dtype=np.int64)
    rev = np.arange(n)[::-1]
    for _ in range(MAX_PASSES):
        ext = deadline.copy()
        if graph.src.size:
            val = lx[graph.dst]
            ok = val < LATEST
            np.minimum.at(ext, graph.src[ok], val[ok] - graph.u[graph.dst[ok]] - graph.lag[ok])
        b = (ext - p)[rev]
        ly = p + pd.Series(b).groupby(graph.chain[rev]).cummin().to_numpy(np.int64)[rev]
        new_lx = ly - graph.dur
        if n_inst:
            join = np.full(n_inst, LATEST, dtype=np.int64)
            np.minimum.at(join, graph.inst[matched], ly[matched] - graph.transfer[matched])
            new_lx[matched] = join[graph.inst[matched]]
        if np.array_equal(new_lx, lx):
            return lx, ly
        lx = new_lx
    raise AssertionError("dependency graph did not settle: it has a cycle")
