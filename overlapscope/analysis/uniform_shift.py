"""Where a what-if's change has become one uniform shift, so the rest of its sweep is a subtraction
(longest_path.forward_many's early stop; DESIGN.md "What-if").

Every step of the forward model is max-plus: x_n = max(base_n, inputs) + u_n, y_n = x_n + d_n, a
member's end max(J, x) + t. Shift every input of a node by the same -delta (delta > 0) and its start
moves by -delta too, unless its base then binds: exactly when delta <= its headroom h_n = x_n - u_n -
base_n in the measured solution. So once a sweep has passed layer L, if every quantity that a unit
after L reads from a unit at or before L (a start for the lane or a rendezvous, an end for an
edge) has moved by the same delta within its weakly connected component, every node after L in that
component had headroom >= delta, and the what-if changed nothing after L (no duration, transfer or
chain prefix), then every later start and end is exactly the measured one minus delta: by
induction over the layers. Hiding one collective that every rank of a step then waits on makes such
a shift a few layers later, and the sweep of the other half of the graph becomes one subtraction.

The check is exact or declines; it is made at layers whose frontier is small enough (a budget over
all of them), starting at the variant's last changed layer and backing off 1, 2, 4... layers after
each miss, so a variant that never shifts uniformly pays O(log layers) small checks.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

NO_CHECK = np.iinfo(np.int64).max
"""A copy's next check layer once it is finished or has no checkable layer left."""
FRONTIER_BUDGET = 8
"""Frontier entries kept over all checkable layers, at most this many per node and edge."""


class Cuts(NamedTuple):
    """Built once per graph and measured solution (Cuts.of), shared by every variant of a sweep."""

    layers: int
    components: int
    unit_layer: np.ndarray
    """Per unit (longest_path.Order), its layer."""
    comp: np.ndarray
    """Per node, its weakly connected component (lane, edges and rendezvous joined)."""
    x_layer: np.ndarray
    """Per node, the layer of the unit that computes its start (its sub-chain)."""
    y_layer: np.ndarray
    """Per node, the layer of the unit that computes its end (its instance's for a member)."""
    chain_layer: np.ndarray
    """Per node, the last layer of any unit of its chain (a changed duration moves its chain prefix to there)."""
    checkable: np.ndarray
    """The layers whose frontier is listed, ascending."""
    front_ptr: np.ndarray
    """Frontier of checkable layer i: entries front_ptr[i]:front_ptr[i + 1], sorted by component."""
    front_node: np.ndarray
    front_is_y: np.ndarray
    """True: the entry is the node's end; False: its start."""
    front_was: np.ndarray
    """The entry's measured value."""
    front_new: np.ndarray
    """True where an entry's component differs from the entry before it in its layer."""
    room_key: np.ndarray
    """comp * (layers + 1) + x_layer of every node, ascending (the headroom's index)."""
    room_after: np.ndarray
    """Least headroom over the nodes from this position to the end of its component's run."""
    x0: np.ndarray
    """The measured starts."""
    y0: np.ndarray
    """The measured ends."""

    @classmethod
    def of(cls, graph, plan, x0: np.ndarray, y0: np.ndarray) -> "Cuts":
        order = plan.order
        n, subs = graph.base.size, order.sub_start.size
        layers = order.layer_ptr.size - 1
        unit_layer = order.unit_layer
        member = graph.inst >= 0
        x_layer = unit_layer[order.node_sub]
        y_layer = x_layer.copy()
        y_layer[member] = unit_layer[subs + graph.inst[member]]
        chain_layer = np.maximum.reduceat(x_layer, plan.chain_start)[plan.node_chain] if n else x_layer
        comp = _components(graph, plan, n)
        # what is read across a layer boundary, and by which layer at the latest
        cont = np.flatnonzero(~graph.head[order.sub_start])  # sub-chains that continue their lane
        before = order.sub_start[cont] - 1  # its previous node's start seeds it
        x_node = np.r_[before, np.flatnonzero(member)]
        x_read = np.r_[unit_layer[cont], y_layer[member]]
        y_node, y_read = graph.src, x_layer[graph.dst]
        q_node = np.r_[x_node, y_node].astype(np.int64)
        q_is_y = np.r_[np.zeros(x_node.size, bool), np.ones(y_node.size, bool)]
        q_hi = np.r_[x_read, y_read].astype(np.int64)
        # one entry per (node, start or end): its latest reader
        key = q_node * 2 + q_is_y
        uniq, inv = np.unique(key, return_inverse=True)
        hi = np.full(uniq.size, -1, np.int64)
        np.maximum.at(hi, inv, q_hi)
        q_node, q_is_y = uniq // 2, (uniq % 2).astype(bool)
        lo = np.where(q_is_y, y_layer[q_node], x_layer[q_node])
        live = hi > lo
        q_node, q_is_y, lo, hi = q_node[live], q_is_y[live], lo[live], hi[live]
        size = np.zeros(layers + 1, np.int64)
        np.add.at(size, lo, 1)
        np.add.at(size, hi, -1)
        size = np.cumsum(size)[:layers]
        checkable = _within_budget(size, FRONTIER_BUDGET * (n + graph.src.size))
        first, stop = np.searchsorted(checkable, lo), np.searchsorted(checkable, hi)
        lens = stop - first
        entry = np.repeat(np.arange(q_node.size), lens)
        at = np.repeat(first - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()), dtype=np.int64)
        node = q_node[entry]
        by = np.lexsort((comp[node], at))
        at, node, is_y = at[by], node[by], q_is_y[entry][by]
        c = comp[node]
        new = np.r_[True, (at[1:] != at[:-1]) | (c[1:] != c[:-1])] if at.size else np.zeros(0, bool)
        front_ptr = np.r_[0, np.cumsum(np.bincount(at, minlength=checkable.size))].astype(np.int64)
        # headroom, least over each component's nodes from a layer on
        room = np.minimum(x0 - graph.u - graph.base, np.int64(2 ** 61))
        room_key = comp * (layers + 1) + x_layer
        by_key = np.argsort(room_key, kind="stable")
        room_key, room = room_key[by_key], room[by_key]
        room_after = pd.Series(room[::-1]).groupby(comp[by_key][::-1]).cummin().to_numpy(np.int64)[::-1]
        return cls(layers, int(comp.max()) + 1 if n else 0, unit_layer, comp, x_layer, y_layer, chain_layer, checkable, front_ptr,
                   node, is_y, np.where(is_y, y0[node], x0[node]), new, room_key, room_after, x0, y0)

    def first_check(self, changed_mask: np.ndarray) -> int:
        """The first layer at which a variant with these nodes changed can be shortcut: past every
        unit of their chains and their instances' units."""
        changed = np.flatnonzero(changed_mask)
        last = int(max(self.chain_layer[changed].max(), self.y_layer[changed].max())) if changed.size else 0
        return self.next_checkable(last)

    def next_checkable(self, layer: int) -> int:
        i = int(np.searchsorted(self.checkable, layer))
        return int(self.checkable[i]) if i < self.checkable.size else NO_CHECK

    def shift_rest(self, layer: int, x: np.ndarray, y: np.ndarray, offset: int) -> bool:
        """If the copy at offset (its nodes at offset + n in x, y) has shifted uniformly per component
        at layer (checkable), write every later start and end as the measured one minus the shift
        and say True; else change nothing and say False."""
        i = int(np.searchsorted(self.checkable, layer))
        lo, hi = self.front_ptr[i], self.front_ptr[i + 1]
        node, is_y = self.front_node[lo:hi], self.front_is_y[lo:hi]
        if node.size == 0:
            return True  # nothing crosses: every later component is untouched, its times still the measured
        moved = self.front_was[lo:hi] - np.where(is_y, y[offset + node], x[offset + node])
        starts = np.flatnonzero(self.front_new[lo:hi])
        least, most = np.minimum.reduceat(moved, starts), np.maximum.reduceat(moved, starts)
        if (least != most).any() or (least < 0).any():
            return False
        comps = self.comp[node[starts]]
        if (least > self._room_after(comps, layer)).any():
            return False
        shift = np.zeros(self.components, np.int64)
        shift[comps] = least
        by_node = shift[self.comp] if self.components > 1 else shift[0]
        n = self.comp.size  # the copy's own stretch of x and y; one masked subtraction each, no scatter
        np.subtract(self.y0, by_node, out=y[offset:offset + n], where=self.y_layer > layer)
        np.subtract(self.x0, by_node, out=x[offset:offset + n], where=self.x_layer > layer)
        return True

    def _room_after(self, comps: np.ndarray, layer: int) -> np.ndarray:
        """Least headroom over each component's nodes whose start is computed after layer."""
        width = self.layers + 1
        pos = np.searchsorted(self.room_key, comps * width + layer, side="right")
        inside = pos < self.room_key.size
        inside[inside] = self.room_key[pos[inside]] < (comps[inside] + 1) * width
        out = np.full(comps.size, np.iinfo(np.int64).max, np.int64)
        out[inside] = self.room_after[pos[inside]]
        return out


def _components(graph, plan, n: int) -> np.ndarray:
    """Weakly connected components of the nodes: lane neighbours, explicit edges, a rendezvous's members."""
    if n == 0:
        return np.zeros(0, np.int64)
    lane = np.flatnonzero(~graph.head)
    member = plan.members
    first_member = np.repeat(member[plan.member_ptr[:-1]], np.diff(plan.member_ptr))
    src = np.r_[lane - 1, graph.src, first_member].astype(np.int64)
    dst = np.r_[lane, graph.dst, member].astype(np.int64)
    return _weak_components(n, src, dst)


def _weak_components(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Component of each of n nodes under undirected edges src-dst, numbered 0, 1... by their least
    node. NumPy union-find, not scipy.sparse.csgraph: SciPy costs a small analyze its import
    (test_cli_startup). Each round hooks every edge's larger root under its smaller one (a parent is
    never above its child, so no cycle) and then pointer-jumps to the roots; a lane of k nodes is
    one round, and rounds stop when every edge's ends share a root."""
    parent = np.arange(n, dtype=np.int64)
    while True:
        a, b = parent[src], parent[dst]
        apart = a != b
        if not apart.any():
            break
        a, b = a[apart], b[apart]
        np.minimum.at(parent, np.maximum(a, b), np.minimum(a, b))
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped
    return np.unique(parent, return_inverse=True)[1].astype(np.int64)


def _within_budget(size: np.ndarray, budget: int) -> np.ndarray:
    """The layers to list, ascending: all of them if their frontiers fit the budget, else those of the
    smallest frontiers that do."""
    if int(size.sum()) <= budget:
        return np.arange(size.size, dtype=np.int64)
    by_size = np.argsort(size, kind="stable")
    keep = by_size[np.cumsum(size[by_size]) <= budget]
    return np.sort(keep).astype(np.int64)
