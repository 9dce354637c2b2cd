"""The solvers the topological sweeps replaced, kept as the oracle: every pass recomputes every chain
and every collective until nothing moves (overlapscope/analysis/longest_path.py before the sweeps).
The backward one is still longest_path's fallback for cyclic graphs, so it is called, not copied."""
from __future__ import annotations

import numpy as np

from overlapscope.analysis.full_sweep import segmented_cummax
from overlapscope.analysis.longest_path import (MAX_PASSES, NEVER, Graph, Plan, _chain_prefix, _Groups,
                                                backward)


def full_forward(graph: Graph, dur: np.ndarray | None = None, transfer: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
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
        x = c + segmented_cummax(a, graph.chain)
        new_y = x + dur
        if matched.size:
            join = by_inst.reduce(x[matched], np.maximum)
            new_y[matched] = np.maximum(join[member_join], x[matched]) + transfer[matched]
        if np.array_equal(new_y, y):
            return x, y
        y = new_y
    raise AssertionError("dependency graph did not settle: it has a cycle")


def full_backward(graph: Graph, deadline: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latest starts and ends (Lx, Ly) such that every node ends by its deadline and every constraint holds:
    longest_path.backward without a backward order, i.e. its relaxing passes (the cyclic-graph fallback)."""
    return backward(graph, deadline, plan=Plan.of(graph)._replace(schedule=None))
