"""Earliest and latest times on the dependency graph, vectorized (DESIGN.md "Critical path").

The model (depgraph.py): x_n = max(base_n, y_pred + g_n, max over edges (y_src + lag)) + u_n is a node's
start, y_n = x_n + d_n its end; a matched collective member ends at y_c = max(J_I, x_c) + t_c, with
J_I = max of x over the instance's members (the last rank's arrival) and t_c its transfer time.

Forward: along a chain (a run of non-comm nodes of one lane) the recurrence x_n = max(a_n, x_{n-1} + inc_n)
with a_n = ext_n + u_n, inc_n = d_{n-1} + g_n + u_n unrolls to x_n = C_n + max_{k<=n}(a_k - C_k), C the
prefix sum of inc: one cumulative sum and one segmented cumulative max for many chains at once. With a
topological order of sub-chains (runs that explicit edges enter only at their first node) and
collective instances, each is computed once, layer by layer: O(N + E) NumPy work and a few calls per
layer, never a Python loop over events. A graph with a cycle (gloo p2p on host threads) instead
relaxes the explicit edges (lane edges around comm nodes, event, launch, gate, and the collectives'
join) between whole-chain passes until nothing changes, one more pass than the most explicit edges on
any path: O(K (N + E)). Backward (latest times that keep every rank's span within the step's) is the
mirror image of the passes, with a reversed cumulative min. With the measured durations the forward pass reproduces the measured
times exactly (u_n takes up what the constraints leave), which the tests check.
"""
from __future__ import annotations

import itertools
from typing import Iterable, Iterator, NamedTuple

import numpy as np
import pandas as pd

from ..core.intervals import concat_ranges, distinct
from .full_sweep import LATEST, Schedule, segmented_cummax, sweep as full_sweep, sweep_back as full_sweep_back, sweep_layers
from .uniform_shift import NO_CHECK, Cuts, ShiftedSpans

NEVER = np.int64(-(2 ** 62))
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
    """Edges out of node n: out_edge[out_ptr[n]:out_ptr[n + 1]], their destinations out_dst[...]."""
    out_edge: np.ndarray
    out_dst: np.ndarray
    inst: np.ndarray
    """The instances the member grouping below was built for (the graph's)."""
    member_ptr: np.ndarray
    """Members of instance i: members[member_ptr[i]:member_ptr[i + 1]]."""
    members: np.ndarray
    order: "Order | None"
    """The sweeps' topological order (forward, and backward in reverse); None when the graph has none
    (the passes then run)."""
    schedule: "Schedule | None"
    """The forward order laid out for sweeps that compute every unit (full_sweep.py); None without an
    order, or for a graph whose chains continue after a collective member."""

    @classmethod
    def of(cls, graph: Graph) -> "Plan":
        n = graph.base.size
        node_chain = np.cumsum(graph.head) - 1 if n else np.empty(0, np.int64)
        chain_start = np.flatnonzero(graph.head)
        chain_stop = np.r_[chain_start[1:], n].astype(np.int64)
        in_edge = np.argsort(graph.dst, kind="stable")
        out_edge = np.argsort(graph.src, kind="stable")
        in_ptr, out_ptr = _ptr(graph.dst, n), _ptr(graph.src, n)
        members, order = Members(*_members(graph.inst)), Order.forward(graph, in_ptr)
        schedule = None if order is None else Schedule.of(graph, order, in_ptr, in_edge, members)
        return cls(node_chain, chain_start, chain_stop, in_ptr, in_edge, out_ptr, out_edge, graph.dst[out_edge],
                   graph.inst, *members, order, schedule)

    def members_of(self, instances: np.ndarray) -> np.ndarray:
        """The member nodes of these instances, instance by instance."""
        return self.members[concat_ranges(self.member_ptr[instances], self.member_ptr[instances + 1])]


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


def _segment_max(values: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max of each non-empty consecutive segment of values (lengths lens): (which segments, maxima)."""
    has = lens > 0
    return has, np.maximum.reduceat(values, (np.cumsum(lens) - lens)[has]) if values.size else values


def forward(graph: Graph, dur: np.ndarray | None = None, transfer: np.ndarray | None = None, *,
            plan: Plan | None = None, warm: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
            guess: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Earliest starts x and ends y; dur/transfer replace the graph's (a what-if). plan: Plan.of(graph)
    (its members are rebuilt when graph.inst is another array). warm: (x, y, changed) - the graph's own
    solution and the nodes whose duration, transfer or instance the what-if changed: only the units
    downstream of them whose inputs move are computed again. guess: candidate (x, y), e.g. the measured
    times, which the model reproduces by construction (depgraph's u): returned as they are when they
    satisfy every equation (`_solves`, one vectorized pass), else solved.

    With a topological order (Plan.order) every unit is computed once, layer by layer: cost O(N + E)
    plus ~10 NumPy calls per layer with the plan's schedule (full_sweep.py; cold or warm alike: at
    ~0.06 ms a layer, computing every unit costs less than tracking which moved, ~0.6 ms a layer), else
    ~30 (_sweep, from the units warm changed). Without one (a cycle), passes relax the explicit edges
    until nothing moves (_passes_forward), each recomputing the chains whose inputs moved."""
    dur = graph.dur if dur is None else dur
    transfer = graph.transfer if transfer is None else transfer
    plan = Plan.of(graph) if plan is None else plan
    members = _members_of(graph, plan)
    c = _chain_prefix(graph, _increments(graph, dur))
    if plan.order is None:
        return _passes_forward(graph, plan, members, c, dur, transfer)  # no topological order: passes until settled
    n = graph.base.size
    if guess is not None and _solves(graph, plan, members, c, dur, transfer, *guess):
        return guess[0].copy(), guess[1].copy()
    schedule = _schedule_of(graph, plan, members)
    if schedule is not None:  # every unit computed, ~10 calls a layer: cheaper than tracking what moved
        return full_sweep(schedule, graph, c, dur, transfer)
    if warm is None:
        return _sweep(graph, plan, members, c, dur, transfer, np.full(n, NEVER, dtype=np.int64),
                      np.full(n, NEVER, dtype=np.int64), np.ones(_units(plan), dtype=bool))
    return _sweep(graph, plan, members, c, dur, transfer, warm[0].copy(), warm[1].copy(),
                  _warm_dirty(graph, plan, np.flatnonzero(warm[2])))


def _solves(graph: Graph, plan: Plan, members: "Members", c: np.ndarray, dur: np.ndarray, transfer: np.ndarray,
            x: np.ndarray, y: np.ndarray) -> bool:
    """Whether x, y satisfy every equation of the forward model at once: each chain's starts from the
    ends that enter it (one pass of _passes_forward over every chain), each end from its start (a
    matched member's from its instance's last arrival). On a DAG the equations determine the solution
    unit by unit in a topological order, so a pair that satisfies them all is the solution: checking
    the measured times costs a few calls over all nodes, against a few per layer for a sweep."""
    n = graph.base.size
    if x.shape != (n,) or y.shape != (n,):
        return False
    every = np.arange(n)
    xi = c + segmented_cummax(_ext(graph, plan, every, y) + graph.u - c, plan.node_chain)
    if not np.array_equal(xi, x):
        return False
    yi = x + dur
    matched = np.flatnonzero(graph.inst >= 0)
    if matched.size:
        settled = y.copy()
        _settle_members(np.arange(members.ptr.size - 1), members, x, settled, transfer)
        yi[matched] = settled[matched]
    return bool(np.array_equal(yi, y))


MAX_COPY_NODES = 1 << 19
"""Nodes of all the variants forward_many sweeps at once, at most (int64 arrays of 4 MB). At 1 << 22 (32 MB
arrays, allocated fresh each batch and paid in page faults) the what-if by instance of 1,024 ranks x 200
all-reduces took 2.6-3.0 s in a fresh process against 1.4-1.7 s; with the sweep visiting only the layers
that have work, sweeping copies together saves little once a variant stops after a few layers."""


def forward_many(graph: Graph, variants: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], *, plan: Plan,
                 warm: tuple[np.ndarray, np.ndarray],
                 steps: tuple[np.ndarray, int, np.ndarray] | None = None) -> Iterator[np.ndarray]:
    """The ends y of each what-if in variants, (dur, transfer, changed) each, in order: what
    forward(graph, dur, transfer, plan=plan, warm=(*warm, changed))[1] gives for each, but the
    variants swept together (_sweep's copies) in batches of up to MAX_COPY_NODES nodes, so a sweep's
    per-layer NumPy calls are paid once per batch, not once per variant; a batch of one variant (a
    graph of over MAX_COPY_NODES / 2 nodes) is swept by the plan's schedule from its first changed
    layer (full_sweep.sweep_layers), ~10 calls a layer against ~30. A variant whose change has
    become a uniform shift stops there (uniform_shift.py). Without a topological order (a cycle)
    each is solved alone. steps: (each node's step index, the number of steps, each node's window
    start): then each variant's step spans instead of its y, the largest y - window start per step
    (read from the layers it changed where uniform_shift.ShiftedSpans applies)."""
    n = graph.base.size
    batch = max(1, MAX_COPY_NODES // max(n, 1))
    members = _members_of(graph, plan)
    cuts = c_measured = tables = None  # built with the first batch that sweeps
    work = solo = None  # ShiftedSpans' x and y (copies, and one variant), the measured times except
    # where a variant is being computed
    pending = iter(variants)
    while chunk := list(itertools.islice(pending, batch)):
        if plan.order is None:
            for dur, transfer, changed in chunk:
                y = forward(graph, dur, transfer, plan=plan, warm=(*warm, changed))[1]
                yield y if steps is None else _step_max(y, steps)
            continue
        copies = len(chunk)
        dur, transfer = _stacked([v[0] for v in chunk]), _stacked([v[1] for v in chunk])
        if c_measured is None:
            c_measured = _chain_prefix(graph, _increments(graph, graph.dur))
        # a variant that keeps every duration (one hiding transfers only) keeps the measured chain prefix
        c = _stacked([c_measured if v[0] is graph.dur or np.array_equal(v[0], graph.dur) else
                      _chain_prefix(graph, _increments(graph, v[0])) for v in chunk])
        changed = [np.flatnonzero(v[2]) for v in chunk]  # once per variant: each is a pass over every node
        if cuts is None:
            cuts = Cuts.of(graph, plan, *warm)
            tables = None if steps is None else ShiftedSpans.of(cuts, *steps)
        if copies == 1 and (schedule := _schedule_of(graph, plan, members)) is not None:
            # a variant alone (a large graph): every unit of its layers, ~10 calls a layer, not ~30
            if tables is None or solo is None:
                solo = (warm[0].copy(), np.r_[warm[1], 0])  # y with sweep_layers' slot for the base term
            x, y = solo
            check = _Check(cuts, cuts.first_check(changed[0]), write=tables is None)
            first = _first_layer(plan.order, changed[0])
            last = sweep_layers(schedule, graph, c, dur, transfer, x, y, first, check)
            if tables is None:
                yield y[:n] if steps is None else _step_max(y[:n], steps)
            else:
                yield tables.spans(y, 0, first, last, check.shift)
                tables.restore(x, y, 0, first, last, *warm)
            continue
        dirty = _stacked([_warm_dirty(graph, plan, at) for at in changed])
        early = _EarlyStop(cuts, n, np.array([cuts.first_check(at) for at in changed], np.int64),
                           write=tables is None)
        if tables is None:
            _, y = _sweep(graph, plan, members, c, dur, transfer, _tiled(warm[0], copies), _tiled(warm[1], copies),
                          dirty, copies, early)
            yield from (y.reshape(copies, n) if steps is None else (_step_max(v, steps) for v in y.reshape(copies, n)))
            continue
        if work is None:
            work = (_tiled(warm[0], copies), _tiled(warm[1], copies))
        x, y = work[0][:copies * n], work[1][:copies * n]
        first = [_first_layer(plan.order, at) for at in changed]
        _sweep(graph, plan, members, c, dur, transfer, x, y, dirty, copies, early)
        for k in range(copies):
            last = int(early.at[k]) if early.finished[k] else cuts.layers - 1
            yield tables.spans(y, k * n, int(first[k]), last, early.shift[k])
            tables.restore(x, y, k * n, int(first[k]), last, *warm)


def _first_layer(order: "Order", changed: np.ndarray) -> int:
    """The first layer a variant with the nodes at positions changed computes (the layers count if
    none): their sub-chains' (the next sub-chain of a lane and a member's instance come later)."""
    return int(order.unit_layer[order.node_sub[changed]].min()) if changed.size else order.layer_ptr.size - 1


def _step_max(y: np.ndarray, steps: tuple[np.ndarray, int, np.ndarray]) -> np.ndarray:
    """The largest y - window start per step index."""
    step_of, count, wstart = steps
    out = np.full(count, NEVER, np.int64)
    np.maximum.at(out, step_of, y - wstart)
    return out


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays back to back; a lone one as it is (the sweep only reads c, dur and transfer, and a
    variant's dirty array is its own)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _tiled(values: np.ndarray, copies: int) -> np.ndarray:
    """values repeated copies times back to back (one broadcast copy; np.tile goes through repeat)."""
    out = np.empty(copies * values.size, values.dtype)
    out.reshape(copies, values.size)[:] = values
    return out


def _members_of(graph: Graph, plan: Plan) -> "Members":
    """The plan's member grouping, rebuilt when graph.inst is another array than the plan's (no_sync)."""
    if graph.inst is plan.inst:
        return Members(plan.member_ptr, plan.members)
    return Members(*_members(graph.inst, plan.member_ptr.size - 1))


def _schedule_of(graph: Graph, plan: Plan, members: "Members") -> Schedule | None:
    """The plan's schedule, for graph.inst's members where a what-if took nodes out of collectives."""
    if plan.schedule is None or graph.inst is plan.inst:
        return plan.schedule
    return plan.schedule.with_members(graph, plan.order, members)


def _increments(graph: Graph, dur: np.ndarray) -> np.ndarray:
    """inc_n = d_{n-1} + g_n + u_n (the chain recurrence's step; a head's is ignored)."""
    inc = np.zeros(graph.base.size, dtype=np.int64)
    inc[1:] = dur[:-1] + graph.g[1:] + graph.u[1:]
    return inc


def _units(plan: Plan) -> int:
    return plan.order.sub_start.size + plan.member_ptr.size - 1


def _warm_dirty(graph: Graph, plan: Plan, changed: np.ndarray) -> np.ndarray:
    """The units a warm solve computes first: those holding a changed node, the lane's next sub-chain
    after each (a changed duration moves it), and the instances the changed nodes belong to. changed:
    their positions."""
    order = plan.order
    dirty = np.zeros(_units(plan), dtype=bool)
    sub = order.node_sub[changed]
    dirty[sub] = True
    nxt = sub + 1
    nxt = nxt[nxt < order.sub_start.size]
    dirty[nxt[~graph.head[order.sub_start[nxt]]]] = True
    for inst in (graph.inst[changed], plan.inst[changed]):
        dirty[order.sub_start.size + inst[inst >= 0]] = True
    return dirty


class Members(NamedTuple):
    ptr: np.ndarray
    nodes: np.ndarray


def _settle_members(touched: np.ndarray, members: Members, x: np.ndarray, y: np.ndarray,
                    transfer: np.ndarray, node_off: np.ndarray | int = 0) -> np.ndarray:
    """Each touched collective's members end at max(J, x) + t (J its last arrival); the members whose end
    moved. node_off: per touched collective, where its copy's nodes start in x, y and transfer (copies)."""
    lo, hi = members.ptr[touched], members.ptr[touched + 1]
    m = members.nodes[concat_ranges(lo, hi)]
    if not np.isscalar(node_off):
        m = m + np.repeat(node_off, hi - lo)
    has, join = _segment_max(x[m], hi - lo)
    ym = np.maximum(np.repeat(join, (hi - lo)[has]), x[m]) + transfer[m]
    moved = m[ym != y[m]]
    y[m] = ym
    return moved


def _ext(graph: Graph, plan: Plan, nodes: np.ndarray, y: np.ndarray, node_off: np.ndarray | int = 0) -> np.ndarray:
    """max(base, y_src + lag over the explicit edges into each node); node_off: per node, where its
    copy's ends start in y (copies)."""
    ext = graph.base[nodes]
    lo, hi = plan.in_ptr[nodes], plan.in_ptr[nodes + 1]
    into = plan.in_edge[concat_ranges(lo, hi)]
    if into.size:
        src = graph.src[into] if np.isscalar(node_off) else graph.src[into] + np.repeat(node_off, hi - lo)
        # y = NEVER (not reached yet) stays far below any base: never the max
        has, best = _segment_max(y[src] + graph.lag[into], hi - lo)
        ext[has] = np.maximum(ext[has], best)
    return ext


def _update(graph, plan, members, idx, xi, x, y, dur, transfer, touched) -> np.ndarray:
    """Store the recomputed starts xi of nodes idx, their ends, and the touched collectives' ends:
    the destinations of the edges out of every node whose end moved (the next pass's inputs)."""
    inst_i = graph.inst[idx]
    free = inst_i < 0
    touched = distinct(np.r_[touched, inst_i[~free & (xi != x[idx])]])
    x[idx] = xi
    fi = idx[free]
    yi = xi[free] + dur[fi]
    moved = [fi[yi != y[fi]]]
    y[fi] = yi
    if touched.size:
        moved.append(_settle_members(touched, members, x, y, transfer))
    moved = np.concatenate(moved)
    return plan.out_dst[concat_ranges(plan.out_ptr[moved], plan.out_ptr[moved + 1])]


def _passes_forward(graph, plan, members, c, dur, transfer) -> tuple[np.ndarray, np.ndarray]:
    n = graph.base.size
    x = np.full(n, NEVER, dtype=np.int64)
    y = np.full(n, NEVER, dtype=np.int64)
    chains = np.arange(plan.chain_start.size)
    touched = np.arange(members.ptr.size - 1)
    for _ in range(MAX_PASSES):
        if chains.size == 0 and touched.size == 0:
            return x, y
        idx = concat_ranges(plan.chain_start[chains], plan.chain_stop[chains])
        a = _ext(graph, plan, idx, y) + graph.u[idx] - c[idx]
        xi = c[idx] + segmented_cummax(a, plan.node_chain[idx])
        moved_into = _update(graph, plan, members, idx, xi, x, y, dur, transfer, touched)
        chains = _distinct(plan.node_chain[moved_into], plan.chain_start.size)
        touched = touched[:0]
    raise AssertionError("dependency graph did not settle: it has a cycle")


class Order(NamedTuple):
    """A topological order of the graph in layers of units, for the one-visit sweeps. Units: sub-chains
    (0..S-1) and collective instances (S + i); a unit's layer is one more than the latest of the units
    it reads, found by Kahn's algorithm one layer at a time. Forward (Order.forward), a sub-chain is a
    run of one chain that explicit edges enter only at its first node, and it reads the sub-chain before
    it in its lane and the producers of the edges into its first node (the backward sweep visits the
    same layers in reverse). An instance reads its members."""

    sub_start: np.ndarray
    sub_stop: np.ndarray
    node_sub: np.ndarray
    layer_ptr: np.ndarray
    """Units of layer l: layer_units[layer_ptr[l]:layer_ptr[l + 1]] (sub-chains first, then instances)."""
    layer_units: np.ndarray
    unit_layer: np.ndarray
    """The layer of each unit."""

    @classmethod
    def forward(cls, graph: Graph, in_ptr: np.ndarray) -> "Order | None":
        """None when the units do not form a DAG (a cycle)."""
        n = graph.base.size
        sub_start = np.flatnonzero(graph.head | (np.diff(in_ptr) > 0))
        node_sub, matched, subs = np.repeat(np.arange(sub_start.size), np.diff(np.r_[sub_start, n])), \
            np.flatnonzero(graph.inst >= 0), sub_start.size
        lane = np.flatnonzero(~graph.head[sub_start])  # sub-chains that continue the one before them
        src_unit = np.where(graph.inst[graph.src] >= 0, subs + graph.inst[graph.src], node_sub[graph.src])
        return cls._of(sub_start, n, node_sub, graph, np.concatenate([lane - 1, src_unit, node_sub[matched]]),
                       np.concatenate([lane, node_sub[graph.dst], subs + graph.inst[matched]]))

    @classmethod
    def _of(cls, sub_start, n, node_sub, graph, prod, cons) -> "Order | None":
        matched = graph.inst >= 0
        units = sub_start.size + (int(graph.inst[matched].max()) + 1 if matched.any() else 0)
        if (prod == cons).any():
            return None
        indeg = np.bincount(cons, minlength=units)
        by_prod = np.argsort(prod, kind="stable")
        dep_ptr, dep_cons = _ptr(prod, units), cons[by_prod]
        layers, frontier = [], np.flatnonzero(indeg == 0)
        stamp = np.empty(units, np.int64)
        while frontier.size:
            layers.append(frontier)
            outs = dep_cons[concat_ranges(dep_ptr[frontier], dep_ptr[frontier + 1])]
            if outs.size == 0:
                break
            np.subtract.at(indeg, outs, 1)
            # the units this layer freed, once each and ascending (np.unique's order), without sorting
            # every edge (np.unique(outs, return_counts=True) per layer: ~0.1 ms of ~0.2 at 1,024 ranks)
            ready = outs[indeg[outs] == 0]
            copy = np.arange(ready.size)
            stamp[ready] = copy
            frontier = np.sort(ready[stamp[ready] == copy])
        if sum(layer.size for layer in layers) != units:
            return None
        sizes = np.array([layer.size for layer in layers], dtype=np.int64)
        layer_units = np.concatenate(layers) if layers else np.empty(0, np.int64)
        unit_layer = np.empty(units, np.int64)
        unit_layer[layer_units] = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
        return cls(sub_start, np.r_[sub_start[1:], n].astype(np.int64), node_sub,
                   np.r_[0, np.cumsum(sizes)].astype(np.int64), layer_units, unit_layer)


class _EarlyStop:
    """The copies' uniform-shift checks (uniform_shift.Cuts): each copy's next check layer, first its
    last changed layer, then 1, 2, 4... checkable layers further after each miss."""

    def __init__(self, cuts: Cuts, n: int, first: np.ndarray, write: bool = True) -> None:
        self.cuts, self.n, self.write = cuts, n, write
        self.next, self.gap = first, np.ones(first.size, np.int64)
        self.finished = np.zeros(first.size, bool)
        self.at = np.full(first.size, NO_CHECK, np.int64)
        """The layer each finished copy stopped after."""
        self.shift: list[np.ndarray | None] = [None] * first.size
        """Without write: each finished copy's shift per component, its later times left the measured."""

    def before(self, layer: int, x: np.ndarray, y: np.ndarray, by_copy: np.ndarray, order: "Order") -> None:
        """Before the sweep computes layer (the layers since the last it computed had nothing to do, so
        the state after each of them is the current one): make every check due before it - finish
        each copy that has shifted uniformly (its later times written, its later units no longer
        dirty), reschedule the others."""
        finished = []
        while (due := np.flatnonzero(self.next < layer)).size:
            for k in due:
                at = int(self.next[k])
                if self._shifted(k, at, x, y):
                    finished.append(k)
                    self.next[k], self.finished[k], self.at[k] = NO_CHECK, True, at
                else:
                    self.next[k] = self.cuts.next_checkable(at + int(self.gap[k]))
                    self.gap[k] *= 2
        if not self.finished.all():  # else the sweep stops here: no need to undo the rest (most units, ~1 ms)
            for k in finished:
                by_copy[k, order.layer_units[order.layer_ptr[self.at[k] + 1]:]] = False

    def _shifted(self, k: int, at: int, x: np.ndarray, y: np.ndarray) -> bool:
        """Whether copy k has shifted uniformly at layer at: its later times written (write), else its shift kept."""
        if self.write:
            return self.cuts.shift_rest(at, x, y, k * self.n)
        self.shift[k] = self.cuts.uniform_shift(at, x, y, k * self.n)
        return self.shift[k] is not None


class _Check:
    """One variant's uniform-shift checks for sweep_layers, as _EarlyStop makes them for copies: first at
    its last changed layer, then 1, 2, 4... checkable layers further after each miss."""

    def __init__(self, cuts: Cuts, first: int, write: bool) -> None:
        self.cuts, self.next, self.gap, self.write = cuts, first, 1, write
        self.shift: np.ndarray | None = None
        """Without write, once finished: the shift per component (the later times left the measured)."""

    def __call__(self, layer: int, x: np.ndarray, y: np.ndarray) -> bool:
        if layer < self.next:
            return False
        if self.write:
            finished = self.cuts.shift_rest(layer, x, y, 0)
        else:
            self.shift = self.cuts.uniform_shift(layer, x, y, 0)
            finished = self.shift is not None
        if not finished:
            self.next = self.cuts.next_checkable(layer + self.gap)
            self.gap *= 2
        return finished


def _sweep(graph: Graph, plan: Plan, members: Members, c: np.ndarray, dur: np.ndarray, transfer: np.ndarray,
           x: np.ndarray, y: np.ndarray, dirty: np.ndarray, copies: int = 1,
           early: _EarlyStop | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each dirty unit once, layer by layer: its inputs are final when its layer comes. A unit whose
    result moved marks the units that read it (the next sub-chain of its lane, the sub-chains its
    edges enter, its instance); cold, every unit is dirty. copies: c, dur, transfer, x and y hold that
    many variants of the graph's times back to back (node n of copy k at k N + n) and dirty their
    units (unit u at k U + u), all swept at once: the layers' NumPy calls are paid once, not per copy.
    Only the layers holding a dirty unit are visited. early: the copies' uniform-shift checks, made
    between the layers visited (forward_many)."""
    order = plan.order
    n, subs = graph.base.size, order.sub_start.size
    layers = order.layer_ptr.size - 1
    per_copy = dirty.size // copies
    by_copy = dirty.reshape(copies, per_copy)
    # the layers holding a dirty unit of some copy (and a sentinel past the last): only those are
    # visited - a batch of warm what-ifs, each a few layers long, would walk every layer between them
    pending = np.zeros(layers + 1, bool)
    pending[order.unit_layer[np.flatnonzero(dirty) % per_copy]] = True
    pending[layers] = True
    layer = -1
    while (layer := layer + 1 + int(np.argmax(pending[layer + 1:]))) < layers:
        if early is not None:
            early.before(layer, x, y, by_copy, order)
            if early.finished.all():
                break
        layer_units = order.layer_units[order.layer_ptr[layer]:order.layer_ptr[layer + 1]]
        copy, at_unit = np.nonzero(by_copy[:, layer_units])
        if copy.size == 0:
            continue
        units = layer_units[at_unit]
        is_sub = units < subs
        moved, marked = [], []  # the nodes whose end moved, the units marked dirty
        if is_sub.any():
            sub, sub_copy = units[is_sub], copy[is_sub]
            first, stop = order.sub_start[sub], order.sub_stop[sub]
            lens = stop - first
            single = bool((lens == 1).all())  # one node each (the common case): no runs to accumulate
            idx = first if single else concat_ranges(first, stop)
            idx_copy = sub_copy if single else np.repeat(sub_copy, lens)
            at = np.arange(sub.size) if single else np.cumsum(lens) - lens
            first_off, idx_off = (sub_copy * n, idx_copy * n) if copies > 1 else (0, 0)
            fidx, ffirst = idx + idx_off, first + first_off  # positions in the copies' arrays
            # only a sub-chain's first node has explicit edges
            v = np.empty(0, np.int64) if single else graph.base[idx] + graph.u[idx] - c[fidx]
            head_v = _ext(graph, plan, first, y, first_off) + graph.u[first] - c[ffirst]
            seeded = ~graph.head[first]
            before = ffirst[seeded] - 1
            head_v[seeded] = np.maximum(head_v[seeded], x[before] - c[before])
            if single:
                xi = c[fidx] + head_v
            else:
                v[at] = head_v
                xi = c[fidx] + segmented_cummax(v, np.repeat(np.arange(sub.size), lens))
            inst_i = graph.inst[idx]
            free = inst_i < 0
            shifted = xi != x[fidx]
            tied = ~free & shifted
            marked.append(subs + inst_i[tied])
            dirty[idx_copy[tied] * per_copy + marked[-1]] = True
            x[fidx] = xi
            fi = fidx[free]
            yi = xi[free] + dur[fi]
            moved.append(fi[yi != y[fi]])
            y[fi] = yi
            # the lane's next sub-chain reads this one's last start (and its duration)
            last_shifted = shifted[at + lens - 1]
            nxt, nxt_copy = sub[last_shifted] + 1, sub_copy[last_shifted]
            keep = nxt < subs
            nxt, nxt_copy = nxt[keep], nxt_copy[keep]
            keep = ~graph.head[order.sub_start[nxt]]
            marked.append(nxt[keep])
            dirty[nxt_copy[keep] * per_copy + marked[-1]] = True
        if not is_sub.all():
            inst_copy = copy[~is_sub]
            moved.append(_settle_members(units[~is_sub] - subs, members, x, y, transfer,
                                         inst_copy * n if copies > 1 else 0))
        moved = np.concatenate(moved)
        moved_copy, moved = np.divmod(moved, n) if copies > 1 else (None, moved)
        lo, hi = plan.out_ptr[moved], plan.out_ptr[moved + 1]
        reads = order.node_sub[plan.out_dst[concat_ranges(lo, hi)]]
        dirty[reads if moved_copy is None else np.repeat(moved_copy * per_copy, hi - lo) + reads] = True
        pending[order.unit_layer[np.concatenate(marked + [reads])]] = True
    return x, y


def _distinct(values: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct ids in 0..n-1: a sort when they are few, one O(n) mark array when many."""
    if values.size * 16 < n:
        return distinct(values)
    mark = np.zeros(n, dtype=bool)
    mark[values] = True
    return np.flatnonzero(mark)


def backward(graph: Graph, deadline: np.ndarray, *, plan: Plan | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Latest starts and ends (Lx, Ly) such that every node ends by its deadline and every constraint
    holds. With the plan's schedule each unit once, in the forward layers reversed
    (full_sweep.sweep_back); without one, passes until nothing moves."""
    n = graph.base.size
    # Ly_n = min(extL_n, Ly_{n+1} - dec_n), dec_n = d_{n+1} + u_{n+1} + g_{n+1} inside a chain.
    dec = np.zeros(n, dtype=np.int64)
    dec[:-1] = graph.dur[1:] + graph.u[1:] + graph.g[1:]
    last = np.r_[graph.head[1:], True]
    dec[last] = 0
    p = _chain_prefix(graph, np.r_[0, dec[:-1]])  # P_n = sum of dec_j for j < n in the chain
    plan = Plan.of(graph) if plan is None else plan
    if plan.schedule is not None and graph.inst is plan.inst:
        solved = full_sweep_back(plan.schedule, graph, plan.out_ptr, plan.out_edge, p, deadline)
        if solved is not None:
            return solved
    return _passes_back(graph, p, deadline)


def _passes_back(graph: Graph, p: np.ndarray, deadline: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = graph.base.size
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
        ly = p - segmented_cummax(-b, chain_rev)[rev]
        new_lx = ly - graph.dur
        if matched.size:
            join = by_inst.reduce(ly[matched] - graph.transfer[matched], np.minimum)
            new_lx[matched] = join[member_join]
        if np.array_equal(new_lx, lx):
            return lx, ly
        lx = new_lx
    raise AssertionError("dependency graph did not settle: it has a cycle")
