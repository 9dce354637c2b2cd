"""The forward sweep that computes every unit (DESIGN.md "Critical path"), its layers laid out once.

longest_path._sweep visits units layer by layer and tracks which moved, ~30 NumPy calls a layer: right
for a what-if that changes a few units, ~0.6 ms a layer when every unit is computed anyway (a cold
solve, a key hidden on every rank: 1,024 ranks x 200 all-reduces are 400 layers, 0.25 s). Here every
layer's inputs are laid out once, flat, in layer order (a Schedule), so that a layer costs ~10 calls on
slices of them:

- a sub-chain's first node f starts at x_f = u_f + max(base_f, y_src + lag over the edges into f,
  y_(f-1) + g_f where f continues its chain): each term an entry (src, lag), the base one reading a
  slot of y held at 0, the chain one the end of f - 1, which is x + d there because a chain's nodes
  are not collective members (depgraph: comm nodes head their own chain; a schedule is refused
  otherwise). One gather and one np.maximum.reduceat per layer.
- the rest of a sub-chain by the chain recurrence (longest_path's segmented cummax), only in layers
  that hold a sub-chain of more than one node;
- a collective's members end at max(J, x) + t, J the largest x among them.

The result is the one _sweep gives, bit for bit (both are the recurrences of the model on int64);
the tests compare them on every graph they build.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np
import pandas as pd

from ..core.intervals import concat_ranges

if TYPE_CHECKING:
    from .longest_path import Graph, Members, Order

LATEST = np.int64(2 ** 62)
"""Above any time: the latest start or end of a node nothing constrains."""


class Schedule(NamedTuple):
    """Per layer l, slices [ptr[l], ptr[l + 1]) of flat arrays in layer order."""

    head_ptr: np.ndarray
    heads: np.ndarray
    """The first node of each sub-chain."""
    entry_ptr: np.ndarray
    entry_src: np.ndarray
    """Where each entry reads y (the last slot, held at 0, for the base term)."""
    entry_lag: np.ndarray
    entry_at: np.ndarray
    """Per head, where its entries start, counted from its layer's first entry."""
    node_ptr: np.ndarray
    nodes: np.ndarray
    """Every node of the layer's sub-chains, sub-chain by sub-chain (used where multi)."""
    node_run: np.ndarray
    """Each node's sub-chain (ascending), for the segmented cummax (empty without multi layers)."""
    head_at: np.ndarray
    """Per head, its position among its layer's nodes (empty without multi layers)."""
    multi: np.ndarray
    """Per layer: it holds a sub-chain of more than one node."""
    free_ptr: np.ndarray
    free: np.ndarray
    """The layer's nodes that are no collective member: y = x + d."""
    inst_ptr: np.ndarray
    """Into the per-collective arrays: member_at, member_count."""
    member_at: np.ndarray
    """Per collective, where its members start, counted from its layer's first member."""
    member_count: np.ndarray
    member_ptr: np.ndarray
    members: np.ndarray
    """The members of the layer's collectives, collective by collective."""

    must_be_free: np.ndarray
    """Nodes whose x + d another node of their chain reads: no collective member may be among them."""

    @classmethod
    def of(cls, graph: "Graph", order: "Order", in_ptr: np.ndarray, in_edge: np.ndarray,
           members: "Members") -> "Schedule | None":
        """None where a chain continues after a collective member (no graph depgraph builds: a comm
        node heads its own chain, and the node after it another)."""
        n, subs = graph.base.size, order.sub_start.size
        layers = order.layer_ptr.size - 1
        unit_layer = np.repeat(np.arange(layers, dtype=np.int64), np.diff(order.layer_ptr))
        is_sub = order.layer_units < subs
        sub, sub_layer = order.layer_units[is_sub], unit_layer[is_sub]
        first, stop = order.sub_start[sub], order.sub_stop[sub]
        lens = stop - first
        seeded = ~graph.head[first]
        single = bool((lens == 1).all())  # one node each (the common case): no runs to lay out
        nodes = first if single else concat_ranges(first, stop)
        if single:
            must_be_free = first[seeded] - 1
        else:
            inner = np.ones(nodes.size, bool)
            inner[np.cumsum(lens) - 1] = False  # a run's last node may be a member: nothing reads its x + d
            must_be_free = np.concatenate([first[seeded] - 1, nodes[inner]])
        head_ptr = np.searchsorted(sub_layer, np.arange(layers + 1))

        # entries: the base term, the chain term where the head continues a chain, the edges into it
        # (explicit edges enter a sub-chain only at its first node: each edge's slot from its head's).
        # Positions as int32 where they fit: the schedule's arrays are fresh pages, paid on first touch.
        count = 1 + seeded + in_ptr[first + 1] - in_ptr[first]
        start = np.cumsum(count) - count
        total = int(count.sum())
        position = np.int32 if max(total, n + 1) < 2 ** 31 else np.int64
        src = np.empty(total, position)
        lag = np.empty(total, np.int64)
        src[start], lag[start] = n, graph.base[first]
        chained = start[seeded] + 1
        src[chained], lag[chained] = first[seeded] - 1, graph.g[first[seeded]]
        head_of = np.empty(n, position)
        head_of[first] = np.arange(first.size, dtype=position)
        into = graph.dst[in_edge]  # ascending
        slot = np.arange(in_edge.size, dtype=np.int64) - in_ptr[into]  # the edge's rank among its head's
        head = head_of[into]
        slot += start[head] + 1 + seeded[head]
        src[slot], lag[slot] = graph.src[in_edge], graph.lag[in_edge]
        entry_ptr = np.r_[start, total][head_ptr]
        node_ptr = np.r_[0, np.cumsum(lens)][head_ptr]
        multi = np.zeros(layers, bool)
        multi[sub_layer[lens > 1]] = True
        empty = np.empty(0, np.int64)
        run, head_at = (empty, empty) if single else (np.repeat(sub, lens), np.cumsum(lens) - lens - node_ptr[sub_layer])
        schedule = cls(head_ptr, first, entry_ptr, src, lag, (start - entry_ptr[sub_layer]).astype(position),
                       node_ptr, nodes, run, head_at, multi, empty, empty, empty, empty, empty, empty, empty,
                       must_be_free)
        return schedule.with_members(graph, order, members)

    def with_members(self, graph: "Graph", order: "Order", members: "Members") -> "Schedule | None":
        """This schedule for graph.inst and its members (a what-if that takes nodes out of their
        collectives keeps the order and the entries); None where a member's x + d would be read."""
        if (graph.inst[self.must_be_free] >= 0).any():
            return None
        layers, subs = self.multi.size, order.sub_start.size
        free_sel = graph.inst[self.nodes] < 0
        inst_sel = order.layer_units >= subs
        inst = order.layer_units[inst_sel] - subs
        inst_layer = np.repeat(np.arange(layers, dtype=np.int64), np.diff(order.layer_ptr))[inst_sel]
        lo, hi = members.ptr[inst], members.ptr[inst + 1]
        kept = hi > lo  # a collective whose members were all taken out has nothing to compute
        inst_layer, lo, hi = inst_layer[kept], lo[kept], hi[kept]
        count = hi - lo
        start = np.cumsum(count) - count
        inst_ptr = np.searchsorted(inst_layer, np.arange(layers + 1))
        member_ptr = np.r_[start, count.sum()][inst_ptr]
        return self._replace(free_ptr=np.r_[0, np.cumsum(free_sel)][self.node_ptr], free=self.nodes[free_sel],
                             inst_ptr=inst_ptr, member_at=start - member_ptr[inst_layer], member_count=count,
                             member_ptr=member_ptr, members=members.nodes[concat_ranges(lo, hi)])


def sweep(schedule: Schedule, graph: "Graph", c: np.ndarray, dur: np.ndarray,
          transfer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every unit once, in the schedule's layers: the starts x and ends y. c: the chain prefix of dur's
    increments (longest_path._chain_prefix), read only in multi layers."""
    n = graph.base.size
    x, y = np.empty(n, np.int64), np.empty(n + 1, np.int64)
    y[n] = 0  # the base term's slot
    sweep_layers(schedule, graph, c, dur, transfer, x, y, 0)
    return x, y[:n]


def sweep_layers(schedule: Schedule, graph: "Graph", c: np.ndarray, dur: np.ndarray, transfer: np.ndarray,
                 x: np.ndarray, y: np.ndarray, first: int,
                 done: Callable[[int, np.ndarray, np.ndarray], bool] | None = None) -> int:
    """Every unit of the layers from first on, in place on x and y (y with one more slot, 0, at the end;
    the layers before first already solved): the last layer computed, which is the last layer unless
    done(layer, x, y), asked after each, said True there."""
    s = schedule
    for layer in range(first, s.multi.size):
        h0, h1 = s.head_ptr[layer], s.head_ptr[layer + 1]
        if h1 > h0:
            e0, e1 = s.entry_ptr[layer], s.entry_ptr[layer + 1]
            heads = s.heads[h0:h1]
            xh = np.maximum.reduceat(y[s.entry_src[e0:e1]] + s.entry_lag[e0:e1], s.entry_at[h0:h1]) + graph.u[heads]
            if s.multi[layer]:
                n0, n1 = s.node_ptr[layer], s.node_ptr[layer + 1]
                idx = s.nodes[n0:n1]
                v = graph.base[idx] + graph.u[idx] - c[idx]
                v[s.head_at[h0:h1]] = xh - c[heads]
                x[idx] = c[idx] + segmented_cummax(v, s.node_run[n0:n1])
            else:
                x[heads] = xh
            free = s.free[s.free_ptr[layer]:s.free_ptr[layer + 1]]
            y[free] = x[free] + dur[free]
        i0, i1 = s.inst_ptr[layer], s.inst_ptr[layer + 1]
        if i1 > i0:
            m = s.members[s.member_ptr[layer]:s.member_ptr[layer + 1]]
            xm = x[m]
            join = np.maximum.reduceat(xm, s.member_at[i0:i1])
            y[m] = np.maximum(np.repeat(join, s.member_count[i0:i1]), xm) + transfer[m]
        if done is not None and done(layer, x, y):
            return layer
    return s.multi.size - 1


def sweep_back(schedule: Schedule, graph: "Graph", out_ptr: np.ndarray, out_edge: np.ndarray, p: np.ndarray,
               deadline: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Latest starts and ends (Lx, Ly) by the forward schedule's layers in reverse (longest_path.backward:
    Ly_n = min(deadline_n, Lx_dst - u_dst - lag over the edges out of n, Ly_(n+1) - dec_n inside a
    chain), Lx = Ly - d, a collective's members Lx = the least Ly - t over them). Every unit that reads
    a node's times forward lies in a later layer, so it is final when the reverse sweep reaches the
    node: a layer's collectives first take their members' Ly from the edges out of them (a member is
    a one-node sub-chain its collective's layer stands for; nothing continues its chain), then the
    layer's other sub-chains by a reversed running min over each. Each node's terms are entries into
    one array w (Lx - u of every node, then Ly, then LATEST for the deadline-only term), gathered and
    min-reduced once a layer. p: the chain prefix of dec (longest_path.backward). None where a
    member is not a sub-chain of its own (no graph depgraph builds), for the passes to solve."""
    s = schedule
    n, layers = graph.base.size, s.multi.size
    is_head = np.zeros(n, bool)
    is_head[s.heads] = True
    if not is_head[s.members].all():
        return None  # a member that ends a longer sub-chain: its layer would need the member first
    # per layer, the collectives' members (s.members' order) and the other sub-chains' nodes
    rest, rest_ptr = s.free, s.free_ptr
    cont = np.zeros(rest.size, bool)  # a run's last node whose chain goes on: Ly_(n+1) - dec_n
    after = rest + 1 < n
    cont[after] = ~graph.head[np.minimum(rest[after] + 1, n - 1)]
    if s.node_run.size:
        run = np.empty(n, np.int64)
        run[s.nodes] = s.node_run
        cont &= np.r_[run[rest][1:] != run[rest][:-1], True]
    member_entries = _out_entries(graph, s.members, np.zeros(s.members.size, bool), s.member_ptr, out_ptr, out_edge)
    rest_entries = _out_entries(graph, rest, cont, rest_ptr, out_ptr, out_edge)

    w = np.full(2 * n + 1, LATEST, np.int64)  # Lx - u of every node, then Ly, then LATEST
    for layer in range(layers - 1, -1, -1):
        m0, m1 = s.member_ptr[layer], s.member_ptr[layer + 1]
        if m1 > m0:  # the collectives: their members' latest ends, then one latest start each
            m = s.members[m0:m1]
            ly_m = np.minimum(deadline[m], member_entries.reduce(w, layer))
            w[n + m] = ly_m
            i0, i1 = s.inst_ptr[layer], s.inst_ptr[layer + 1]
            join = np.minimum.reduceat(ly_m - graph.transfer[m], s.member_at[i0:i1])
            w[m] = np.repeat(join, s.member_count[i0:i1]) - graph.u[m]
        r0, r1 = rest_ptr[layer], rest_ptr[layer + 1]
        if r1 > r0:
            r = rest[r0:r1]
            ly_r = np.minimum(deadline[r], rest_entries.reduce(w, layer))
            if s.multi[layer]:  # reversed running min per run = -(running max of the negation, reversed)
                v = ly_r - p[r]
                seg = run[r]
                ly_r = p[r] - segmented_cummax(-v[::-1], (seg.max() - seg)[::-1])[::-1]
            w[n + r] = ly_r
            w[r] = ly_r - graph.dur[r] - graph.u[r]
    return w[:n] + graph.u, w[n:2 * n].copy()


class _Entries(NamedTuple):
    """Per node of a flat list (ptr: each layer's slice), its terms as (w position, lag)."""

    src: np.ndarray
    lag: np.ndarray
    ptr: np.ndarray
    at: np.ndarray
    """Per node, where its entries start, counted from its layer's first entry."""
    node_ptr: np.ndarray

    def reduce(self, w: np.ndarray, layer: int) -> np.ndarray:
        """The least term of each of the layer's nodes."""
        e0, e1 = self.ptr[layer], self.ptr[layer + 1]
        n0, n1 = self.node_ptr[layer], self.node_ptr[layer + 1]
        return np.minimum.reduceat(w[self.src[e0:e1]] - self.lag[e0:e1], self.at[n0:n1])


def _out_entries(graph: "Graph", nodes: np.ndarray, cont: np.ndarray, node_ptr: np.ndarray, out_ptr: np.ndarray,
                 out_edge: np.ndarray) -> _Entries:
    """The backward terms of each node: LATEST (a node nothing follows keeps its deadline), Lx_dst -
    u_dst - lag for each edge out of it, and Ly_(n+1) - dec_n where cont."""
    n = graph.base.size
    lo, hi = out_ptr[nodes], out_ptr[nodes + 1]
    count = 1 + (hi - lo) + cont
    start = np.cumsum(count) - count
    src = np.empty(int(count.sum()), np.int64)
    lag = np.zeros(src.size, np.int64)
    src[start] = 2 * n
    edge = out_edge[concat_ranges(lo, hi)]
    at = concat_ranges(start + 1, start + 1 + hi - lo)
    src[at], lag[at] = graph.dst[edge], graph.lag[edge]
    last, nxt = start[cont] + count[cont] - 1, nodes[cont] + 1
    src[last], lag[last] = n + nxt, graph.dur[nxt] + graph.u[nxt] + graph.g[nxt]
    ptr = np.r_[start, src.size][node_ptr]
    layer_of = np.repeat(np.arange(node_ptr.size - 1), np.diff(node_ptr))
    return _Entries(src, lag, ptr, start - ptr[layer_of], node_ptr)


def segmented_cummax(values: np.ndarray, chain: np.ndarray) -> np.ndarray:
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
