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


class Schedule(NamedTuple):
    """Per layer l, slices [ptr[l], ptr[l + 1]) of flat arrays in layer order."""

    head_ptr: np.ndarray
    heads: np.ndarray
    """The first node of each sub-chain."""
    head_u: np.ndarray
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
    """Each node's sub-chain (ascending), for the segmented cummax."""
    head_at: np.ndarray
    """Per head, its position among its layer's nodes."""
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
        single = bool((lens == 1).all())
        nodes = first if single else concat_ranges(first, stop)
        inner = np.ones(nodes.size, bool)
        inner[np.cumsum(lens) - 1] = False  # a run's last node may be a member: nothing reads its x + d
        must_be_free = np.concatenate([first[seeded] - 1, nodes[inner]])
        head_ptr = np.searchsorted(sub_layer, np.arange(layers + 1))

        # entries: the base term, the chain term where the head continues a chain, the edges into it
        # (explicit edges enter a sub-chain only at its first node: each edge's slot from its head's)
        count = 1 + seeded + in_ptr[first + 1] - in_ptr[first]
        start = np.cumsum(count) - count
        src = np.empty(int(count.sum()), np.int64)
        lag = np.empty(src.size, np.int64)
        src[start], lag[start] = n, graph.base[first]
        chained = start[seeded] + 1
        src[chained], lag[chained] = first[seeded] - 1, graph.g[first[seeded]]
        head_of = np.empty(n, np.int64)
        head_of[first] = np.arange(first.size)
        into = graph.dst[in_edge]  # ascending
        slot = np.arange(in_edge.size, dtype=np.int64) - in_ptr[into]  # the edge's rank among its head's
        head = head_of[into]
        slot += start[head] + 1 + seeded[head]
        src[slot], lag[slot] = graph.src[in_edge], graph.lag[in_edge]
        entry_ptr = np.r_[start, src.size][head_ptr]
        node_ptr = np.r_[0, np.cumsum(lens)][head_ptr]
        multi = np.zeros(layers, bool)
        multi[sub_layer[lens > 1]] = True
        empty = np.empty(0, np.int64)
        schedule = cls(head_ptr, first, graph.u[first], entry_ptr, src, lag, start - entry_ptr[sub_layer],
                       node_ptr, nodes, np.repeat(sub, lens), np.cumsum(lens) - lens - node_ptr[sub_layer], multi,
                       empty, empty, empty, empty, empty, empty, empty, must_be_free)
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
            xh = np.maximum.reduceat(y[s.entry_src[e0:e1]] + s.entry_lag[e0:e1], s.entry_at[h0:h1]) + s.head_u[h0:h1]
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
