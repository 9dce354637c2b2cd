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

from .full_sweep import segmented_cummax

NO_CHECK = np.iinfo(np.int64).max
"""A copy's next check layer once it is finished or has no checkable layer left."""
FRONTIER_BUDGET = 8
"""Frontier entries over all checkable layers, at most this many per node and edge."""
SHORT_SPAN = 4
"""Entries read at most this many layers after the layer that computes them are found by one range of
their layer (Cuts.frontier); the others by a scan of their list."""


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
    """The layers whose frontier may be checked, ascending."""
    entry_node: np.ndarray
    """What is read across a layer boundary: one entry per node start or end that a later layer reads,
    by entry_lo ascending; its frontier is every entry with entry_lo <= L < entry_hi."""
    entry_is_y: np.ndarray
    """True: the entry is the node's end; False: its start."""
    entry_lo: np.ndarray
    """The layer that computes it."""
    entry_hi: np.ndarray
    """The latest layer that reads it."""
    long_entries: np.ndarray
    """The entries read more than SHORT_SPAN layers after entry_lo (the others of a frontier lie in one
    range of entry_lo)."""
    fronts: dict
    """The frontiers built so far (Cuts.frontier), by layer."""
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
        # one entry per (node, start or end): its latest reader (by key node * 2 + is_y, dense: no sort)
        latest = np.full(2 * n, -1, np.int64)
        np.maximum.at(latest, q_node * 2 + q_is_y, q_hi)
        uniq = np.flatnonzero(latest >= 0)
        hi = latest[uniq]
        q_node, q_is_y = uniq // 2, (uniq % 2).astype(bool)
        lo = np.where(q_is_y, y_layer[q_node], x_layer[q_node])
        live = hi > lo
        q_node, q_is_y, lo, hi = q_node[live], q_is_y[live], lo[live], hi[live]
        size = np.cumsum(np.bincount(lo, minlength=layers + 1) - np.bincount(hi, minlength=layers + 1))[:layers]
        checkable = _within_budget(size, FRONTIER_BUDGET * (n + graph.src.size))
        # the frontiers themselves are built when a check first asks for them (Cuts.frontier): listing
        # all 400 layers' of a 1,024-rank graph cost ~60 MB of fresh pages, 0.2-0.4 s on this VM
        by_lo = _stable_order(lo, layers + 1)
        q_node, q_is_y, lo, hi = q_node[by_lo], q_is_y[by_lo], lo[by_lo], hi[by_lo]
        components = int(comp.max()) + 1 if n else 0
        # headroom, least over each component's nodes from a layer on
        # (clipped to +-2^61, far past any shift, so that negating it cannot overflow)
        room = np.clip(x0 - graph.u - graph.base, -np.int64(2 ** 61), np.int64(2 ** 61))
        room_key = comp * (layers + 1) + x_layer
        by_key = _stable_order(room_key, components * (layers + 1))
        room_key, room = room_key[by_key], room[by_key]
        # a least from the end, restarting per component: the running max of -room read backwards
        # (component ids ascending along by_key, so components - 1 - comp ascends read backwards)
        room_after = -segmented_cummax(-room[::-1], (components - 1 - comp[by_key])[::-1])[::-1]
        return cls(layers, components, unit_layer, comp, x_layer, y_layer, chain_layer, checkable, q_node, q_is_y,
                   lo, hi, np.flatnonzero(hi - lo > SHORT_SPAN), {}, room_key, room_after, x0, y0)

    def first_check(self, changed: np.ndarray) -> int:
        """The first layer at which a variant with the nodes at positions `changed` can be
        shortcut: past every unit of their chains and their instances' units."""
        last = int(max(self.chain_layer[changed].max(), self.y_layer[changed].max())) if changed.size else 0
        return self.next_checkable(last)

    def next_checkable(self, layer: int) -> int:
        i = int(np.searchsorted(self.checkable, layer))
        return int(self.checkable[i]) if i < self.checkable.size else NO_CHECK

    def shift_rest(self, layer: int, x: np.ndarray, y: np.ndarray, offset: int) -> bool:
        """If the copy at offset (its nodes at offset + n in x, y) has shifted uniformly per component
        at layer (checkable), write every later start and end as the measured one minus the shift
        and say True; else change nothing and say False."""
        shift = self.uniform_shift(layer, x, y, offset)
        if shift is None:
            return False
        if not shift.any():
            return True  # nothing crosses or nothing moved: every later time is still the measured one
        by_node = shift[self.comp] if self.components > 1 else shift[0]
        n = self.comp.size  # the copy's own stretch of x and y; one masked subtraction each, no scatter
        np.subtract(self.y0, by_node, out=y[offset:offset + n], where=self.y_layer > layer)
        np.subtract(self.x0, by_node, out=x[offset:offset + n], where=self.x_layer > layer)
        return True

    def uniform_shift(self, layer: int, x: np.ndarray, y: np.ndarray, offset: int) -> np.ndarray | None:
        """Each component's shift (>= 0) if the copy at offset has shifted uniformly at layer
        (checkable): every later start and end is then the measured one minus its component's shift.
        None if it has not."""
        node, is_y, was, starts = self.frontier(layer)
        shift = np.zeros(self.components, np.int64)
        if node.size == 0:
            return shift  # nothing crosses: every later component is untouched, its times still the measured
        moved = was - np.where(is_y, y[offset + node], x[offset + node])
        least, most = np.minimum.reduceat(moved, starts), np.maximum.reduceat(moved, starts)
        if (least != most).any() or (least < 0).any():
            return None
        comps = self.comp[node[starts]]
        if (least > self._room_after(comps, layer)).any():
            return None
        shift[comps] = least
        return shift

    def frontier(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What crosses the boundary after layer, grouped by component: (node, is_y, measured value, where
        each component's entries start); built once per layer."""
        if layer not in self.fronts:
            lo, hi = self.entry_lo, self.entry_hi
            near = np.arange(np.searchsorted(lo, layer - SHORT_SPAN + 1), np.searchsorted(lo, layer, side="right"))
            near = near[(hi[near] > layer) & (hi[near] - lo[near] <= SHORT_SPAN)]
            far = self.long_entries[(lo[self.long_entries] <= layer) & (hi[self.long_entries] > layer)]
            at = np.r_[near, far]
            at = at[_stable_order(self.comp[self.entry_node[at]], self.components)]
            node, is_y, c = self.entry_node[at], self.entry_is_y[at], self.comp[self.entry_node[at]]
            was = np.where(is_y, self.y0[node], self.x0[node])
            self.fronts[layer] = (node, is_y, was, np.flatnonzero(np.r_[True, c[1:] != c[:-1]]) if c.size else at[:0])
        return self.fronts[layer]

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
    """Weakly connected components of the nodes: lane neighbours, explicit edges, a rendezvous's members.
    Lane neighbours are the nodes of one chain, so the union-find runs on chains (explicit edges and
    members mapped to their chains) and each node takes its chain's component: a chain's nodes are
    consecutive, so numbering by least chain is numbering by least node."""
    if n == 0:
        return np.zeros(0, np.int64)
    member = plan.members
    first_member = np.repeat(member[plan.member_ptr[:-1]], np.diff(plan.member_ptr))
    chain = plan.node_chain
    src = chain[np.r_[graph.src, first_member].astype(np.int64)]
    dst = chain[np.r_[graph.dst, member].astype(np.int64)]
    return _weak_components(plan.chain_start.size, src, dst)[chain]


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


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """np.argsort(keys, kind="stable") for keys in [0, bound): as int16 where they fit, which NumPy sorts
    by radix (0.015 s for 816k keys against 0.07 s as int64)."""
    if bound <= np.iinfo(np.int16).max:
        keys = keys.astype(np.int16)
    return np.argsort(keys, kind="stable")


def _within_budget(size: np.ndarray, budget: int) -> np.ndarray:
    """The layers to list, ascending: all of them if their frontiers fit the budget, else those of the
    smallest frontiers that do."""
    if int(size.sum()) <= budget:
        return np.arange(size.size, dtype=np.int64)
    by_size = np.argsort(size, kind="stable")
    keep = by_size[np.cumsum(size[by_size]) <= budget]
    return np.sort(keep).astype(np.int64)


MAX_SPAN_TABLE = 4
"""ShiftedSpans' two tables hold at most this many entries per node (layers x components x steps)."""


class ShiftedSpans(NamedTuple):
    """A variant's step spans (the largest y - window start of each step's nodes) read from what it
    changed, without its whole y: before its first changed layer its ends are the measured ones, from
    its first to its last computed layer they are its own, and after a uniform shift (Cuts.uniform_shift)
    the measured ones minus its component's shift. The measured maxima before and after every layer are
    tabled once (ShiftedSpans.of), so a variant costs O(its layers' nodes + components x steps) instead
    of a pass over every node (at 1,024 ranks x 200 all-reduces a copy of x and y, the subtraction of
    the rest and the spans: ~5 ms a variant, 64 of them)."""

    steps: int
    step_of: np.ndarray
    """Per node, its step's index (0..steps-1)."""
    wstart: np.ndarray
    """Per node, its window start."""
    by_x_layer: np.ndarray
    """The nodes by the layer that computes their start; those of layer l at x_ptr[l]:x_ptr[l + 1]."""
    x_ptr: np.ndarray
    by_y_layer: np.ndarray
    """The nodes by the layer that computes their end; those of layer l at y_ptr[l]:y_ptr[l + 1]."""
    y_ptr: np.ndarray
    before: np.ndarray
    """before[l, s]: the largest measured y - window start of step s's nodes ending in a layer < l."""
    after: np.ndarray
    """after[l, c, s]: the same over component c's nodes ending in a layer > l."""

    @classmethod
    def of(cls, cuts: Cuts, step_of: np.ndarray, steps: int, wstart: np.ndarray) -> "ShiftedSpans | None":
        """None when the tables would exceed MAX_SPAN_TABLE entries per node."""
        n, layers, comps = cuts.comp.size, cuts.layers, cuts.components
        if layers * (comps + 1) * max(steps, 1) > MAX_SPAN_TABLE * max(n, 1) or n == 0:
            return None
        span0 = cuts.y0 - wstart
        per_layer = np.full((layers, comps, steps), NEVER_SPAN, np.int64)
        np.maximum.at(per_layer, (cuts.y_layer, cuts.comp, step_of), span0)
        by_layer = per_layer.max(axis=1)
        before = np.full((layers + 1, steps), NEVER_SPAN, np.int64)
        np.maximum.accumulate(by_layer, axis=0, out=before[1:])
        after = np.full((layers, comps, steps), NEVER_SPAN, np.int64)
        after[:-1] = np.maximum.accumulate(per_layer[::-1], axis=0)[::-1][1:]
        by_x, by_y = _stable_order(cuts.x_layer, layers), _stable_order(cuts.y_layer, layers)
        x_ptr = np.r_[0, np.cumsum(np.bincount(cuts.x_layer, minlength=layers))].astype(np.int64)
        y_ptr = np.r_[0, np.cumsum(np.bincount(cuts.y_layer, minlength=layers))].astype(np.int64)
        return cls(steps, step_of, wstart, by_x, x_ptr, by_y, y_ptr, before, after)

    def spans(self, y: np.ndarray, offset: int, first: int, last: int, shift: np.ndarray | None) -> np.ndarray:
        """Per step, the span of the copy at offset in y whose ends differ from the measured ones only in
        layers first..last and, with shift, after last by its component's shift."""
        out = self.before[first].copy()
        if shift is not None and last + 1 < self.after.shape[0]:
            np.maximum(out, (self.after[last] - shift[:, None]).max(axis=0), out=out)
        nodes = self.by_y_layer[self.y_ptr[first]:self.y_ptr[last + 1]]
        np.maximum.at(out, self.step_of[nodes], y[offset + nodes] - self.wstart[nodes])
        return out

    def restore(self, x: np.ndarray, y: np.ndarray, offset: int, first: int, last: int, x0: np.ndarray,
                y0: np.ndarray) -> None:
        """Put the measured times back where the copy at offset computed its own (layers first..last)."""
        nodes = self.by_x_layer[self.x_ptr[first]:self.x_ptr[last + 1]]
        x[offset + nodes] = x0[nodes]
        nodes = self.by_y_layer[self.y_ptr[first]:self.y_ptr[last + 1]]
        y[offset + nodes] = y0[nodes]


NEVER_SPAN = np.int64(-(2 ** 62))
"""Below any span: the maximum of no nodes."""
