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
WHOLE_CHAINS_ABOVE = 8
"""A warm pass recomputes whole chains when more than 1/WHOLE_CHAINS_ABOVE of the nodes may move."""


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


class Plan(NamedTuple):
    """The graph's fixed index structure, built once per graph and reused by every what-if solve:
    chains as [start, stop) ranges, edges grouped by destination and by source (CSR), and the matched
    members grouped by instance."""

    node_chain: np.ndarray
    """Dense chain index of each node (0..chains-1, non-decreasing)."""
    chain_start: np.ndarray
    chain_stop: np.ndarray
    in_ptr: np.ndarray
    """Edges into node n: in_edge[in_ptr[n]:in_ptr[n + 1]]."""
    in_edge: np.ndarray
    out_ptr: np.ndarray
    """Destinations of the edges out of node n: out_dst[out_ptr[n]:out_ptr[n + 1]]."""
    out_dst: np.ndarray
    inst: np.ndarray
    """The instances the member grouping below was built for (the graph's)."""
    member_ptr: np.ndarray
    """Members of instance i: members[member_ptr[i]:member_ptr[i + 1]]."""
    members: np.ndarray

    @classmethod
    def of(cls, graph: Graph) -> "Plan":
        n = graph.base.size
        node_chain = np.cumsum(graph.head) - 1 if n else np.empty(0, np.int64)
        chain_start = np.flatnonzero(graph.head)
        chain_stop = np.r_[chain_start[1:], n].astype(np.int64)
        in_edge = np.argsort(graph.dst, kind="stable")
        out_edge = np.argsort(graph.src, kind="stable")
        return cls(node_chain, chain_start, chain_stop, _ptr(graph.dst, n), in_edge, _ptr(graph.src, n),
                   graph.dst[out_edge], graph.inst, *_members(graph.inst))


def _ptr(keys: np.ndarray, n: int) -> np.ndarray:
    """CSR offsets of keys in 0..n-1 (after a stable sort by key)."""
    return np.r_[0, np.cumsum(np.bincount(keys, minlength=n))].astype(np.int64)


def _members(inst: np.ndarray, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the matched nodes by instance, for instances 0..count-1 (None: up to the largest)."""
    matched = np.flatnonzero(inst >= 0)
    order = matched[np.argsort(inst[matched], kind="stable")]
    if count is None:
        count = int(inst[matched].max()) + 1 if matched.size else 0
    return _ptr(inst[matched], count), order


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start, stop) for each pair, in one vector operation."""
    lens = stops - starts
    offsets = np.cumsum(lens) - lens
    return np.repeat(starts - offsets, lens) + np.arange(int(lens.sum()), dtype=np.int64)


def _segment_max(values: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max of each non-empty consecutive segment of values (lengths lens): (which segments, maxima)."""
    has = lens > 0
    return has, np.maximum.reduceat(values, (np.cumsum(lens) - lens)[has]) if values.size else values


def forward(graph: Graph, dur: np.ndarray | None = None, transfer: np.ndarray | None = None, *,
            plan: Plan | None = None, warm: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Earliest starts x and ends y; dur/transfer replace the graph's (a what-if). plan: Plan.of(graph)
    (its members are rebuilt when graph.inst is another array). warm: (x, y, changed) - the graph's own
    solution, and the nodes whose duration, transfer or instance the what-if changed; times may only
    shrink (durations and transfers no larger, members only leave instances), as hiding does.

    Cold, each pass recomputes the chains whose inputs moved in the pass before (the first: all) and the
    collectives a member of which moved. Warm, the solution only moves down from the old one, so a pass
    recomputes each node whose input moved and the run of its chain after it up to the next node its own
    inputs bind (whose start therefore cannot move): a pass costs what changed in it, not the graph."""
    dur = graph.dur if dur is None else dur
    transfer = graph.transfer if transfer is None else transfer
    plan = Plan.of(graph) if plan is None else plan
    members = Members(plan.member_ptr, plan.members) if graph.inst is plan.inst \
        else Members(*_members(graph.inst, plan.member_ptr.size - 1))
    inc = np.zeros(graph.base.size, dtype=np.int64)
    inc[1:] = dur[:-1] + graph.g[1:] + graph.u[1:]
    c = _chain_prefix(graph, inc)
    if warm is None:
        return _cold(graph, plan, members, c, dur, transfer)
    left = (plan.inst >= 0) & (graph.inst < 0)  # members that left: they now end at x + d (d 0 when tied)
    if (dur > graph.dur).any() or (transfer > graph.transfer).any() or (dur[left] > 0).any():
        raise ValueError("a warm solve only shrinks times: a duration or transfer grew")
    return _warm(graph, plan, members, c, dur, transfer, warm)


class Members(NamedTuple):
    ptr: np.ndarray
    nodes: np.ndarray


def _settle_members(touched: np.ndarray, members: Members, x: np.ndarray, y: np.ndarray,
                    transfer: np.ndarray) -> np.ndarray:
    """Each touched collective's members end at max(J, x) + t (J its last arrival); the members whose end moved."""
    lo, hi = members.ptr[touched], members.ptr[touched + 1]
    m = members.nodes[_ranges(lo, hi)]
    has, join = _segment_max(x[m], hi - lo)
    ym = np.maximum(np.repeat(join, (hi - lo)[has]), x[m]) + transfer[m]
    moved = m[ym != y[m]]
    y[m] = ym
    return moved


def _ext(graph: Graph, plan: Plan, nodes: np.ndarray, y: np.ndarray) -> np.ndarray:
    """max(base, y_src + lag over the explicit edges into each node)."""
    ext = graph.base[nodes]
    lo, hi = plan.in_ptr[nodes], plan.in_ptr[nodes + 1]
    into = plan.in_edge[_ranges(lo, hi)]
    if into.size:
        # y = NEVER (not reached yet) stays far below any base: never the max
        has, best = _segment_max(y[graph.src[into]] + graph.lag[into], hi - lo)
        ext[has] = np.maximum(ext[has], best)
    return ext


def _update(graph, plan, members, idx, xi, x, y, dur, transfer, touched) -> np.ndarray:
    """Store the recomputed starts xi of nodes idx, their ends, and the touched collectives' ends:
    the destinations of the edges out of every node whose end moved (the next pass's inputs)."""
    inst_i = graph.inst[idx]
    free = inst_i < 0
    touched = np.unique(np.r_[touched, inst_i[~free & (xi != x[idx])]])
    x[idx] = xi
    fi = idx[free]
    yi = xi[free] + dur[fi]
    moved = [fi[yi != y[fi]]]
    y[fi] = yi
    if touched.size:
        moved.append(_settle_members(touched, members, x, y, transfer))
    moved = np.concatenate(moved)
    return plan.out_dst[_ranges(plan.out_ptr[moved], plan.out_ptr[moved + 1])]


def _cold(graph, plan, members, c, dur, transfer) -> tuple[np.ndarray, np.ndarray]:
    n = graph.base.size
    x = np.full(n, NEVER, dtype=np.int64)
    y = np.full(n, NEVER, dtype=np.int64)
    chains = np.arange(plan.chain_start.size)
    touched = np.arange(members.ptr.size - 1)
    for _ in range(MAX_PASSES):
        if chains.size == 0 and touched.size == 0:
            return x, y
        idx = _ranges(plan.chain_start[chains], plan.chain_stop[chains])
        a = _ext(graph, plan, idx, y) + graph.u[idx] - c[idx]
        xi = c[idx] + _segmented_cummax(a, plan.node_chain[idx])
        moved_into = _update(graph, plan, members, idx, xi, x, y, dur, transfer, touched)
        chains = _distinct(plan.node_chain[moved_into], plan.chain_start.size)
        touched = touched[:0]
    raise AssertionError("dependency graph did not settle: it has a cycle")


def _warm(graph, plan, members, c, dur, transfer, warm) -> tuple[np.ndarray, np.ndarray]:
    n = graph.base.size
    x, y = warm[0].copy(), warm[1].copy()
    changed = np.flatnonzero(warm[2])
    ext = _ext(graph, plan, np.arange(n), y)
    # a node whose own inputs bind its start (x = ext + u) keeps it while its chain only moves down
    bound = x == ext + graph.u
    stops = np.r_[np.flatnonzero(bound), n]
    cand = changed
    touched = np.unique(np.r_[graph.inst[changed], plan.inst[changed]])
    touched = touched[touched >= 0]
    for _ in range(MAX_PASSES):
        if cand.size == 0 and touched.size == 0:
            return x, y
        if cand.size * WHOLE_CHAINS_ABOVE > n:
            # most of the graph moves (a whole collective type hidden): whole chains cost less than runs
            chains = _distinct(plan.node_chain[cand], plan.chain_start.size)
            idx = _ranges(plan.chain_start[chains], plan.chain_stop[chains])
            ext[idx] = _ext(graph, plan, idx, y)
            xi = c[idx] + _segmented_cummax(ext[idx] + graph.u[idx] - c[idx], plan.node_chain[idx])
        else:
            ext[cand] = _ext(graph, plan, cand, y)
            idx, xi = _runs(plan, graph.head, c, cand, x, ext + graph.u, bound, stops)
        bound[idx] = xi == ext[idx] + graph.u[idx]
        cand = _distinct(_update(graph, plan, members, idx, xi, x, y, dur, transfer, touched), n)
        touched = touched[:0]
    raise AssertionError("dependency graph did not settle: it has a cycle")


def _runs(plan: Plan, head: np.ndarray, c: np.ndarray, cand: np.ndarray, x: np.ndarray, own: np.ndarray,
          bound: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nodes to recompute and their new starts: each candidate (a node whose input moved) and the
    run of its chain after it, up to the next node still bound by its own inputs (stops: those bound
    in the warm solution, each checked against bound now; own = ext + u), seeded with the node before."""
    chain_end = plan.chain_stop[plan.node_chain[cand]]
    k = np.searchsorted(stops, cand, side="right")
    while True:
        q = stops[k]
        lost = (q < chain_end) & ~bound[np.minimum(q, bound.size - 1)]
        if not lost.any():
            break
        k[lost] += 1
    q = np.minimum(q, chain_end)
    # overlapping or adjacent runs of one chain merge (a run's seed is the node before it, which this
    # pass leaves as it is); a run never crosses into the next chain
    ch = plan.node_chain[cand]
    first = np.r_[True, (cand[1:] > np.maximum.accumulate(q)[:-1]) | (ch[1:] != ch[:-1])]
    starts = cand[first]
    ends = np.maximum.reduceat(q, np.flatnonzero(first))
    lens = ends - starts
    idx = _ranges(starts, ends)
    v = own[idx] - c[idx]
    seeded = ~head[starts]
    at = (np.cumsum(lens) - lens)[seeded]
    before = starts[seeded] - 1
    v[at] = np.maximum(v[at], x[before] - c[before])
    return idx, c[idx] + _segmented_cummax(v, np.repeat(np.arange(starts.size), lens))


def _distinct(values: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct ids in 0..n-1: a sort when they are few, one O(n) mark array when many."""
    if values.size * 16 < n:
        return np.unique(values)
    mark = np.zeros(n, dtype=bool)
    mark[values] = True
    return np.flatnonzero(mark)


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
