"""The cross-rank critical path of each step and each collective's slack (DESIGN.md "Critical path").

The reduce over the per-rank graphs (depgraph.rank_graph): times are moved to the common clock, comm
nodes are tied to their cross-rank collective (matching.py via the `collectives` section: one
collective completes when its last rank arrives, J = the latest aligned start; each member then ends
J + its transfer), and the graph is solved (longest_path.py). A step's span on a rank is its latest node
end minus its window start; the step's critical path ends at the node with the largest span and is
followed back through the constraint that set each start: lane order, a launch, a stream wait, an
inferred gate, or, at a collective, the rank that arrived last. Slack of a node = latest end that keeps
every rank within the step's span (backward pass) - its end; a collective's slack is its members' least.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from ..core.frames import stacked_frames
from .depgraph import RankGraph
from .longest_path import Graph, Plan, backward, forward

PATH_COLUMNS = ("step", "order", "rank", "lane", "kind", "label", "collective", "group", "scope", "start_ns", "end_ns",
                "lag_ns")
STEP_COLUMNS = ("step", "rank", "path_ns", "comm_on_path_ns", "ranks_on_path", "lanes_on_path")
_EDGE_PRIORITY = {"gate": 0, "event": 1, "lane": 2, "launch": 3}


class StepGroups(NamedTuple):
    """The nodes grouped by step once, for step_spans (run once per what-if: a pandas groupby of a
    1,024-rank graph cost 4 ms)."""

    order: np.ndarray | None
    """The nodes in step order; None when they already are."""
    starts: np.ndarray
    """Where each step's nodes start in that order."""
    steps: np.ndarray
    """The step numbers, ascending."""
    wstart: np.ndarray
    """Each node's window start, in that order."""

    @classmethod
    def of(cls, step: np.ndarray, wstart: np.ndarray) -> "StepGroups":
        order = None if (step[1:] >= step[:-1]).all() else np.argsort(step, kind="stable")
        in_order = step if order is None else step[order]
        starts = np.flatnonzero(np.r_[True, in_order[1:] != in_order[:-1]]) if step.size else np.empty(0, np.int64)
        return cls(order, starts, in_order[starts], wstart if order is None else wstart[order])

    def spans(self, y: np.ndarray) -> pd.Series:
        """The largest y - window start of each step's nodes."""
        span = (y if self.order is None else y[self.order]) - self.wstart
        return self.series(np.maximum.reduceat(span, self.starts) if self.starts.size else span[:0])

    def series(self, best: np.ndarray) -> pd.Series:
        """Per-step values (one per step, ascending) as spans gives them."""
        return pd.Series(best, index=pd.Index(self.steps, name="step"), name="span_ns")


class Solved(NamedTuple):
    graph: Graph
    nodes: pd.DataFrame
    """All ranks' nodes: rank, step, lane, cls, start_ns, end_ns (aligned), wstart_ns, label, collective,
    group, scope, pass, inst, x, y (the text columns categorical, as the ranks' graphs have them)."""
    edges: pd.DataFrame
    join: np.ndarray
    """J per instance (aligned ns)."""
    instance_ids: np.ndarray
    """The `collectives` section's instance id of each of the graph's instances."""
    plan: Plan
    """The graph's index structure, reused by every what-if solve (longest_path.Plan)."""
    step_groups: StepGroups


def solve(graphs: Mapping[int, RankGraph], offsets: Mapping[int, int], window_starts: Mapping[int, np.ndarray],
          collectives: pd.DataFrame) -> Solved:
    """Assemble every rank's graph on the common clock, tie collectives, and run the forward pass."""
    ranks = sorted(graphs)
    # one concat, then every per-rank shift as one repeat (a per-rank frame copy cost ~4 ms a rank)
    nodes = stacked_frames([graphs[r].nodes for r in ranks], union_categories=True)  # text as codes
    edges = stacked_frames([graphs[r].edges for r in ranks], union_categories=True)
    sizes = np.array([len(graphs[r].nodes) for r in ranks], dtype=np.int64)
    node_off = np.cumsum(sizes) - sizes
    chains = np.zeros(len(ranks), dtype=np.int64)  # each rank's chain count: its largest chain id + 1
    has = sizes > 0
    if has.any():
        chains[has] = np.maximum.reduceat(nodes["chain"].to_numpy(np.int64), node_off[has]) + 1
    off = np.repeat(np.array([int(offsets.get(r, 0)) for r in ranks], dtype=np.int64), sizes)
    nodes.insert(0, "rank", np.repeat(np.array(ranks, dtype=np.int64), sizes))
    for col in ("start_ns", "end_ns", "base_ns"):
        nodes[col] = nodes[col].to_numpy(np.int64) + off
    starts = [np.asarray(window_starts[r], dtype=np.int64) for r in ranks]
    win_off = np.repeat(np.cumsum([w.size for w in starts]) - [w.size for w in starts], sizes)
    all_starts = np.concatenate(starts) if starts else np.empty(0, np.int64)
    nodes["wstart_ns"] = all_starts[nodes["win"].to_numpy(np.int64) + win_off] + off
    nodes["chain"] = nodes["chain"].to_numpy(np.int64) + np.repeat(np.cumsum(chains) - chains, sizes)
    edge_off = np.repeat(node_off, [len(graphs[r].edges) for r in ranks])
    edges["src"] = edges["src"].to_numpy(np.int64) + edge_off
    edges["dst"] = edges["dst"].to_numpy(np.int64) + edge_off
    inst, transfer, join, ids = _tie_collectives(nodes, collectives)
    s, e = nodes["start_ns"].to_numpy(np.int64), nodes["end_ns"].to_numpy(np.int64)
    graph = Graph(chain=nodes["chain"].to_numpy(np.int64), head=nodes["head"].to_numpy(bool),
                  base=nodes["base_ns"].to_numpy(np.int64), g=nodes["g_ns"].to_numpy(np.int64),
                  u=nodes["u_ns"].to_numpy(np.int64), dur=np.where(inst >= 0, 0, e - s).astype(np.int64),
                  inst=inst, transfer=transfer, src=edges["src"].to_numpy(np.int64),
                  dst=edges["dst"].to_numpy(np.int64), lag=edges["lag_ns"].to_numpy(np.int64))
    plan = Plan.of(graph)
    x, y = forward(graph, plan=plan, guess=(s, e))  # the measured times, when the model reproduces them
    nodes["inst"], nodes["x"], nodes["y"] = inst, x, y
    step_groups = StepGroups.of(nodes["step"].to_numpy(), nodes["wstart_ns"].to_numpy(np.int64))
    return Solved(graph, nodes, edges, join, ids, plan, step_groups)


def _tie_collectives(nodes: pd.DataFrame, collectives: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """Per node the instance (dense, -1 none) and transfer t_c; per instance J and the collectives id."""
    n = len(nodes)
    inst = np.full(n, -1, dtype=np.int64)
    if collectives is None or collectives.empty:
        return inst, np.zeros(n, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    keys = ("rank", "start_ns", "end_ns")
    comm = np.flatnonzero((nodes["cls"] == "comm").to_numpy())
    inst[comm] = first_match([nodes[k].to_numpy(np.int64)[comm] for k in keys],
                             [collectives[k].to_numpy(np.int64) for k in keys], collectives["instance"].to_numpy(np.int64))
    s, e = nodes["start_ns"].to_numpy(np.int64), nodes["end_ns"].to_numpy(np.int64)
    for _ in range(2):  # drop members that ended before the last arrival (no real rendezvous), then re-join
        sel = inst >= 0
        dense, codes = np.unique(inst[sel], return_inverse=True)
        join = np.full(dense.size, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(join, codes, s[sel])
        members = np.bincount(codes, minlength=dense.size)
        bad = (e[sel] < join[codes]) | (members[codes] < 2)
        inst[np.flatnonzero(sel)[bad]] = -1
    sel = inst >= 0
    dense, codes = np.unique(inst[sel], return_inverse=True)
    inst[sel] = codes
    join = np.full(dense.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(join, codes, s[sel])
    transfer = np.zeros(n, dtype=np.int64)
    transfer[sel] = e[sel] - join[codes]
    return inst, transfer, join, dense.astype(np.int64)


def first_match(query: list[np.ndarray], table: list[np.ndarray], values: np.ndarray) -> np.ndarray:
    """Per query row, the value of the first table row whose keys (one array per key) all equal its own,
    -1 where none: an inner merge with the table's duplicate keys dropped (the first kept). Where the
    keys pack into one int64 (_one_key), the table is sorted alone and each query row found by a
    binary search (1,024 ranks' comm nodes: ~25 ms); else by one lexsort of both (~70 ms; the pandas
    merge cost 0.15 s)."""
    packed = _one_key(query, table)
    if packed is None:
        return _first_match_sorted(query, table, values)
    asked, known = packed
    out = np.full(asked.size, -1, dtype=np.int64)
    if known.size == 0 or asked.size == 0:
        return out
    order = np.argsort(known, kind="stable")  # equal keys keep table order: the first comes first
    ordered = known[order]
    heads = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    distinct = ordered[heads]
    at = np.minimum(np.searchsorted(distinct, asked), distinct.size - 1)
    found = distinct[at] == asked
    out[found] = values[order[heads[at[found]]]]
    return out


def _one_key(query: list[np.ndarray], table: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's keys as one int64 that is equal where all the keys are (each key less its least,
    times the spans of the keys after it), for the query and the table; None where the spans'
    product reaches 2^63 (or a key is not integer). Only equality matters, so the last key is taken
    as its difference from the one before (end - start: a duration spans far less than an end)."""
    both = [np.r_[np.asarray(t), np.asarray(q)] for t, q in zip(table, query)]
    if not both or both[0].size == 0 or any(k.dtype.kind not in "iu" for k in both):
        return None
    # as int64 (one-to-one: a uint64 past 2^63 wraps), so that the spans below are those of what is packed
    both = [k.astype(np.int64, copy=False) for k in both]
    if len(both) >= 2:  # (.., a, b) <-> (.., a, b - a); int64 wraps, which keeps it one-to-one
        both[-1] = both[-1] - both[-2]
    lows, spans = [], []
    for k in both:
        lo, hi = int(k.min()), int(k.max())
        lows.append(lo)
        spans.append(hi - lo + 1)
    if math.prod(spans) >= 2 ** 63:
        return None
    key = np.zeros(both[0].size, np.int64)
    for k, lo, span in zip(both, lows, spans):
        key = key * span + (k - lo)
    n_table = table[0].size
    return key[n_table:], key[:n_table]


def _first_match_sorted(query: list[np.ndarray], table: list[np.ndarray], values: np.ndarray) -> np.ndarray:
    """first_match by one lexsort of both."""
    n_table = table[0].size
    keys = _packed([np.r_[t, q] for t, q in zip(table, query)])
    from_query = np.r_[np.zeros(n_table, bool), np.ones(query[0].size, bool)]
    order = np.lexsort([from_query] + keys[::-1])  # by the keys, then the table's rows first, stable
    new = np.zeros(order.size, bool)  # where a key group starts
    new[:1] = True
    for k in keys:
        ordered = k[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    group_first = order[np.maximum.accumulate(np.where(new, np.arange(order.size), 0))] if order.size else order
    asked = from_query[order]
    found = ~from_query[group_first[asked]]  # the query's key group starts with a table row
    out = np.full(query[0].size, -1, dtype=np.int64)
    out[order[asked][found] - n_table] = values[group_first[asked][found]]
    return out


def _packed(keys: list[np.ndarray]) -> list[np.ndarray]:
    """The keys with the first two joined into one int64 (first - its least) x span of the second +
    (second - its least), which orders and compares as the pair does, where that fits: one lexsort
    pass fewer (rank and start of 400k rows: ~15 ms)."""
    if len(keys) < 2 or keys[0].size == 0:
        return keys
    a, b = keys[0].astype(np.int64), keys[1].astype(np.int64)
    a_lo, b_lo = int(a.min()), int(b.min())
    a_span, b_span = int(a.max()) - a_lo + 1, int(b.max()) - b_lo + 1
    if a_span * b_span >= 2 ** 63:
        return keys
    return [(a - a_lo) * b_span + (b - b_lo), *keys[2:]]


def spans(solved: Solved, y: np.ndarray | None = None) -> pd.DataFrame:
    """step, rank, span_ns (latest end - window start) per rank and step; y: a what-if's ends."""
    nodes = solved.nodes
    y = nodes["y"].to_numpy(np.int64) if y is None else y
    frame = pd.DataFrame({"step": nodes["step"].to_numpy(), "rank": nodes["rank"].to_numpy(),
                          "span_ns": y - nodes["wstart_ns"].to_numpy(np.int64)})
    return frame.groupby(["step", "rank"], as_index=False)["span_ns"].max()


def step_spans(solved: Solved, y: np.ndarray | None = None) -> pd.Series:
    """The step's span (largest over ranks) per step number: the largest over its nodes, in one
    grouping (per rank first, as `spans`, doubled the cost of each what-if)."""
    return solved.step_groups.spans(solved.nodes["y"].to_numpy(np.int64) if y is None else y)


def slack(solved: Solved) -> np.ndarray:
    """Per node: latest end keeping every rank within its step's span, minus its end (ns, >= 0)."""
    nodes = solved.nodes
    step_span = step_spans(solved)
    deadline = nodes["wstart_ns"].to_numpy(np.int64) + step_span.reindex(nodes["step"]).to_numpy(np.int64)
    _, ly = backward(solved.graph, deadline, plan=solved.plan)
    return ly - nodes["y"].to_numpy(np.int64)


def _binding(solved: Solved) -> np.ndarray:
    """Per node, the node whose end set its start (-1: its base, the window start or a fixed launch)."""
    g, nodes = solved.graph, solved.nodes
    x, y = nodes["x"].to_numpy(np.int64), nodes["y"].to_numpy(np.int64)
    bound = x - g.u
    out = np.full(x.size, -1, dtype=np.int64)
    chained = np.flatnonzero(~g.head)
    tight = y[chained - 1] + g.g[chained] == bound[chained]
    out[chained[tight]] = chained[tight] - 1
    e = solved.edges
    if len(e):
        val = y[g.src] + g.lag
        ok = val == bound[g.dst]
        # the priority of each distinct edge type once (a dict lookup per edge cost 0.1 s at 1,024 ranks),
        # from the column's codes where it is categorical (as the graphs' edges are)
        codes, types = pd.factorize(e["type"].array[ok], use_na_sentinel=False)
        priority = np.array([_EDGE_PRIORITY.get(t, np.nan) for t in types], dtype=np.float64)[codes]
        dst, src = g.dst[ok], g.src[ok]
        by = np.lexsort((src, priority, dst))  # per destination the most binding type, then the lowest source
        first = by[_group_starts(dst[by])]
        out[dst[first]] = src[first]
    return out


def critical_paths(solved: Solved) -> tuple[pd.DataFrame, pd.DataFrame, list[int]]:
    """(path segments PATH_COLUMNS, per step STEP_COLUMNS, the steps whose walk was cut). The walk back
    is a loop over the path's nodes only (at most the step's node count), each hop O(1) on precomputed
    arrays; a walk that reaches a node it has already visited stops there (its segments then cover
    less than path_ns), and its step is listed."""
    nodes, g = solved.nodes, solved.graph
    if nodes.empty:
        return pd.DataFrame(columns=PATH_COLUMNS), pd.DataFrame(columns=STEP_COLUMNS), []
    x, y = nodes["x"].to_numpy(np.int64), nodes["y"].to_numpy(np.int64)
    span = y - nodes["wstart_ns"].to_numpy(np.int64)
    bind = _binding(solved)
    inst = g.inst
    last_arrival = _last_arrivals(nodes, inst)
    rank, step_of = nodes["rank"].to_numpy(), nodes["step"].to_numpy()
    wstart = nodes["wstart_ns"].to_numpy(np.int64)
    order = np.lexsort((rank, -span, step_of))
    steps = step_of[order]
    sinks = order[np.r_[True, steps[1:] != steps[:-1]]]
    visited = np.zeros(len(nodes), dtype=bool)
    cut: list[int] = []
    walks: list[list[tuple]] = []  # per sink, its segments (node, kind, start, end); kind None: the node's class
    for sink in sinks.tolist():
        segs: list[tuple] = []
        n = sink
        while n >= 0 and not visited[n]:
            visited[n] = True
            if inst[n] >= 0:
                j = int(solved.join[inst[n]])
                segs.append((n, "comm", max(j, int(x[n])), int(y[n])))
                m = int(last_arrival[inst[n]])
                # the collective waited for this rank: the path moves to it, unless the walk has been
                # there (the last arrival is downstream of this member, e.g. both on one rank's lane)
                if j > x[n] and m != n and not visited[m]:
                    n = m
                    visited[n] = True
            else:
                segs.append((n, None, int(x[n]), int(y[n])))
            if g.u[n] > 0:
                segs.append((n, "lag", int(x[n] - g.u[n]), int(x[n])))
            p = int(bind[n])
            if p >= 0 and y[p] < x[n] - g.u[n]:
                segs.append((n, "launch", int(y[p]), int(x[n] - g.u[n])))
            elif p < 0 and x[n] - g.u[n] > wstart[n]:
                # a fixed launch: the host issued it only then (what held the host, the graph cannot see)
                segs.append((n, "host", int(wstart[n]), int(x[n] - g.u[n])))
            n = p
        if n >= 0:
            cut.append(int(step_of[sink]))
        segs.reverse()
        walks.append(segs)
    # the text columns of the path's nodes only: converting whole columns of a 1,024-rank run cost 0.4 s
    on_path = np.array([k for segs in walks for k, *_ in segs], dtype=np.int64)
    text = {c: nodes[c].iloc[on_path].to_numpy() for c in ("lane", "cls", "label", "collective", "group", "scope",
                                                          "launch_lane")}
    seg_rows, step_rows = [], []
    i = 0  # where the step's segments start in on_path
    for sink, segs in zip(sinks.tolist(), walks):
        step = int(step_of[sink])
        comm_ns = 0
        for j, (k, kind, a, b) in enumerate(segs):
            kind = text["cls"][i + j] if kind is None else kind
            lane = text["launch_lane"][i + j] if kind == "host" else text["lane"][i + j]
            comm_ns += b - a if kind == "comm" else 0
            seg_rows.append((step, j, int(rank[k]), lane, kind, text["label"][i + j], text["collective"][i + j],
                             text["group"][i + j], text["scope"][i + j], a, b))
        step_rows.append((step, int(rank[sink]), int(span[sink]), comm_ns, len({int(rank[k]) for k, *_ in segs}),
                          len({(int(rank[k]), text["lane"][i + j]) for j, (k, *_) in enumerate(segs)})))
        i += len(segs)
    path = pd.DataFrame(seg_rows, columns=PATH_COLUMNS[:-1])
    return merge_segments(path), pd.DataFrame(step_rows, columns=STEP_COLUMNS), cut


def _last_arrivals(nodes: pd.DataFrame, inst: np.ndarray) -> np.ndarray:
    """Per instance, the member that arrived last (latest x; ties: the lowest rank)."""
    sel = np.flatnonzero(inst >= 0)
    if sel.size == 0:
        return np.empty(0, np.int64)
    by = np.lexsort((nodes["rank"].to_numpy()[sel], -nodes["x"].to_numpy(np.int64)[sel], inst[sel]))
    first = sel[by[_group_starts(inst[sel][by])]]
    out = np.full(int(inst.max()) + 1, -1, dtype=np.int64)
    out[inst[first]] = first
    return out


def _group_starts(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal sorted keys starts (the first row of each group after a sort)."""
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else np.empty(0, np.int64)


def merge_segments(path: pd.DataFrame) -> pd.DataFrame:
    """Consecutive non-comm segments of one step on the same rank and lane (a run of kernels or host ops
    and the lags between them) become one, labelled by its first work segment, with lag_ns their lags;
    each comm segment stays itself. Keeps the JSON small on real traces."""
    if path.empty:
        return path.assign(lag_ns=pd.Series(dtype=np.int64))
    kind = path["kind"].to_numpy(object)
    key = path[["step", "rank", "lane"]].to_numpy(object)
    new = np.r_[True, (key[1:] != key[:-1]).any(axis=1)]
    new |= kind == "comm"
    new[1:] |= kind[:-1] == "comm"
    grp = np.cumsum(new) - 1
    lag = np.where(np.isin(kind, ("lag", "launch")), path["end_ns"] - path["start_ns"], 0)
    work = path.assign(_w=~np.isin(kind, ("lag", "launch")), _g=grp)  # host segments stay "host"
    first_work = work[work["_w"]].drop_duplicates("_g").set_index("_g")
    out = path[new].copy().set_index(pd.Index(np.arange(int(new.sum()))))
    for col in ("kind", "label", "collective", "group", "scope"):
        out[col] = first_work[col].reindex(out.index).fillna(out[col]).to_numpy(object)
    out["end_ns"] = path.groupby(grp)["end_ns"].max().to_numpy()
    out["lag_ns"] = pd.Series(lag).groupby(grp).sum().to_numpy(np.int64)
    out["order"] = out.groupby("step").cumcount().to_numpy()
    return out.reset_index(drop=True)


def critical_comm_by_rank(path: pd.DataFrame) -> pd.DataFrame:
    """rank, step, critical_comm_ns: comm time on the step's critical path, on that rank."""
    comm = path[path["kind"] == "comm"]
    return comm.assign(critical_comm_ns=comm["end_ns"] - comm["start_ns"]).groupby(
        ["rank", "step"], as_index=False)["critical_comm_ns"].sum()
