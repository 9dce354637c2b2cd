"""One rank's dependency graph over its work intervals (DESIGN.md "Critical path"): the per-rank map.

Nodes: every comm event, and the merged compute and copy intervals of each lane (back-to-back or nested
kernels/ops of one lane are one node), each in the step window its start falls in. Per node: the
observed start s and end e, duration d = e - s, and a base time it can never start before (the window
start; for device work launched from a host thread that is no lane of the graph, its launch time).
Edges (y_src + lag <= x_dst, y the end and x the start):
- lane order: each node after the previous node of its lane (lag min(0, s - e_prev): a node that began
  inside its predecessor keeps that offset). Runs of non-comm nodes form chains that the solver
  unrolls at once (longest_path.py); edges into and out of a comm node are explicit edges.
- event: a CUDA stream wait on an event (Kineto `cuda_sync` "Stream Wait Event": the waiting stream,
  `wait_on_stream` and `wait_on_cuda_event_record_corr_id`): the last node of the recording stream
  launched before the record (by correlation id) -> the first node of the waiting stream launched after it.
- launch: device or worker-thread work launched from a lane of the graph (a gloo transfer enqueued by
  the main thread) follows the node of that lane that ended last before the launch, lag = launch - end.
- gate (inferred from timing, when nothing above explains a node's start): the latest-ending node that
  ends inside the unexplained gap before it - a comm node for a non-comm node (work waiting for a
  collective), a non-comm node for a comm node (a collective waiting for its input); on a host thread
  only a collective that thread issued gates it; on a stream only when the rank recorded no stream waits.
What is left between a node's start and its latest constraint is its lag u >= 0, kept as is in every
what-if. Cross-rank edges (a collective completes when its last rank arrives) are added by the reduce
(critical_path.py), after clock alignment.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from ..core.frames import column_values, frame_of
from ..core import intervals as iv
from .breakdown import launch_scopes
from ..core.codes import codes_names, isin, per_name, shared_codes, text_categoricals

NODE_COLUMNS = ("win", "step", "lane", "cls", "start_ns", "end_ns", "base_ns", "chain", "head", "g_ns", "u_ns",
                "label", "collective", "group", "scope", "pass", "launch_lane")
EDGE_COLUMNS = ("src", "dst", "lag_ns", "type")
_CLASS = {"compute": "compute", "comm": "comm", "memcpy": "copy", "memset": "copy"}
_TEXT = {"lane", "cls", "label", "collective", "group", "scope", "pass", "launch_lane"}
_TEXT_ORDER = tuple(c for c in NODE_COLUMNS if c in _TEXT)


class RankGraph(NamedTuple):
    nodes: pd.DataFrame
    """NODE_COLUMNS; sorted by chain, then start (the solver's order). Times in the rank's own clock."""
    edges: pd.DataFrame
    """EDGE_COLUMNS: src, dst are positions in `nodes`; type (categorical) lane, event, launch or gate."""


def _pass_of(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """forward / backward / '' per selected row: the innermost annotation around its launch naming a pass."""
    ann_name = per_name(column_values(events, "name"), lambda n: "backward" if "backward" in n.lower() else
                        "forward" if "forward" in n.lower() else "")
    ann = np.flatnonzero(isin(column_values(events, "kind"), ("annotation",)) & (ann_name != ""))
    lanes, launch_lanes = shared_codes(column_values(events, "lane"), column_values(events, "launch_lane"))
    found = iv.innermost_containing(lanes[ann], column_values(events, "start_ns", np.int64)[ann],
                                    column_values(events, "end_ns", np.int64)[ann], launch_lanes[rows],
                                    column_values(events, "launch_ns", np.int64)[rows])
    return np.where(found >= 0, ann_name[ann[np.maximum(found, 0)]] if ann.size else "", "").astype(object)


def rank_graph(events: pd.DataFrame, windows: pd.DataFrame, stream_waits: Mapping[str, list] | None = None) -> RankGraph:
    """The graph of one rank's event table inside its step windows (module docstring). stream_waits: the
    reader's record of CUDA stream waits (RankMeta.stream_waits), when the trace has them."""
    kind = events["kind"]
    work = np.flatnonzero(isin(kind, tuple(_CLASS)))
    start = column_values(events, "start_ns", np.int64)
    end = column_values(events, "end_ns", np.int64)
    wins_s = column_values(windows, "start_ns", np.int64)
    wins_e = column_values(windows, "end_ns", np.int64)
    win = np.searchsorted(wins_s, start[work], side="right") - 1
    ok = win >= 0
    ok[ok] = start[work][ok] < wins_e[win[ok]]
    work, win = work[ok], win[ok]
    if work.size == 0:
        return RankGraph(_node_frame({c: _EMPTY.get(c, np.empty(0, np.int64)) for c in (*NODE_COLUMNS, "corr")}),
                         _edge_frame(*(np.empty(0, np.int64),) * 3, np.empty(0, dtype=object)))
    kind_codes, kind_names = codes_names(kind)
    cls = np.array([_CLASS.get(k, "") for k in kind_names], dtype=object)[kind_codes[work]]
    lane_codes, lane_names = codes_names(column_values(events, "lane"))
    name_codes, names = codes_names(column_values(events, "name"))
    lane = lane_codes[work]
    is_comm = cls == "comm"
    # Merge non-comm rows per (window, lane, class): a new node where the key changes or a start lies
    # beyond everything before it in the key has reached.
    cls_code = np.where(is_comm, 0, np.where(cls == "compute", 1, 2))
    order = np.lexsort((start[work], cls_code, lane, win))
    work, win, lane, cls, is_comm, cls_code = (a[order] for a in (work, win, lane, cls, is_comm, cls_code))
    s, e = start[work], end[work]
    key_change = np.r_[True, (win[1:] != win[:-1]) | (lane[1:] != lane[:-1]) | (cls_code[1:] != cls_code[:-1])]
    reach = _cummax_per_run(e, np.cumsum(key_change) - 1)
    new = key_change.copy()
    new[1:] |= s[1:] > reach[:-1]
    new |= is_comm  # every comm event is a node of its own
    if is_comm.any():
        new[1:] |= is_comm[:-1]
    first = np.flatnonzero(new)
    n = first.size
    node_end = np.maximum.reduceat(e, first) if n else e[:0]
    rows = work[first]
    comm_rows = np.zeros(len(events), dtype=bool)
    comm_rows[rows[is_comm[first]]] = True
    pass_ = np.full(len(events), "", dtype=object)
    scope = launch_scopes(events, comm_rows) if comm_rows.any() else pass_
    if comm_rows.any():
        pass_[comm_rows] = _pass_of(events, np.flatnonzero(comm_rows))
    coll_codes, colls = codes_names(column_values(events, "collective"))
    group_codes, groups = codes_names(column_values(events, "group"))
    launch_lane_codes, launch_lane_names = codes_names(column_values(events, "launch_lane"))
    # the solver's order: window, lane, start (compute and copy nodes of one lane interleave)
    at = np.lexsort((node_end, s[first], lane[first], win[first]))
    first, rows, node_end = first[at], rows[at], node_end[at]
    node_comm = is_comm[first]
    nodes = {
        "win": win[first].astype(np.int64), "step": column_values(windows, "step", np.int64)[win[first]],
        "lane": lane_names[lane[first]], "cls": cls[first], "start_ns": s[first], "end_ns": node_end,
        "launch_ns": column_values(events, "launch_ns", np.int64)[rows],
        "launch_lane": launch_lane_names[launch_lane_codes[rows]],
        "label": names[name_codes[rows]],
        "collective": np.where(node_comm, colls[coll_codes[rows]], ""),
        "group": np.where(node_comm, groups[group_codes[rows]], ""),
        "scope": scope[rows], "pass": pass_[rows], "corr": events["correlation"].to_numpy(np.int64)[rows],
    }
    return _edges_and_lags(nodes, wins_s, stream_waits)


def _cummax_per_run(values: np.ndarray, run_id: np.ndarray) -> np.ndarray:
    """The running maximum of `values` restarting at each run (run_id non-decreasing): the values'
    ranks offset by run, so that one cumulative max never carries across a run boundary."""
    if values.size == 0:
        return values.copy()
    order = np.argsort(values, kind="stable")
    rank = np.empty(values.size, dtype=np.int64)
    rank[order] = np.arange(values.size)
    top = np.maximum.accumulate(run_id.astype(np.int64) * values.size + rank) - run_id * values.size
    return values[order[top]]


def _edges_and_lags(nodes: dict[str, np.ndarray], wins_s: np.ndarray,
                    stream_waits: Mapping[str, list] | None) -> RankGraph:
    """Edges and lags of the nodes (NODE_COLUMNS' inputs as arrays, in the solver's order)."""
    s, e, win = nodes["start_ns"], nodes["end_ns"], nodes["win"]
    n = s.size
    lane = nodes["lane"].astype(str)
    is_comm = nodes["cls"] == "comm"
    node_lanes = set(np.unique(lane).tolist())
    base = wins_s[win].copy()
    src, dst, lag, etype = [], [], [], []

    # lane order (nodes are sorted by window, lane, start)
    same = np.r_[False, (win[1:] == win[:-1]) & (lane[1:] == lane[:-1])]
    g = np.zeros(n, dtype=np.int64)
    g[1:] = np.where(same[1:], np.minimum(0, s[1:] - e[:-1]), 0)
    head = ~same
    via_edge = same.copy()
    via_edge[1:] &= is_comm[1:] | is_comm[:-1]
    k = np.flatnonzero(via_edge)
    src.append(k - 1), dst.append(k), lag.append(g[k]), etype.append(np.full(k.size, "lane", dtype=object))
    head |= via_edge
    g[head] = 0

    # launch: from a host thread of the graph, else the launch time is a fixed release
    launch = nodes["launch_ns"]
    launch_lane = nodes["launch_lane"].astype(str)
    launched = (launch >= 0) & (launch_lane != lane) & (launch_lane != "")
    from_graph = launched & np.isin(launch_lane, list(node_lanes))
    fixed = launched & ~from_graph
    base[fixed] = np.maximum(base[fixed], np.minimum(launch[fixed], s[fixed]))
    for lname in np.unique(launch_lane[from_graph]):
        cand = np.flatnonzero(lane == lname)
        order = cand[np.lexsort((e[cand], win[cand]))]
        q = np.flatnonzero(from_graph & (launch_lane == lname))
        # latest node of that lane, same window, ending at or before the launch
        key_c = np.stack([win[order], e[order]])
        pos = _search_pairs(key_c, win[q], np.minimum(launch[q], s[q]))
        hit = pos >= 0
        hit[hit] = win[order[pos[hit]]] == win[q[hit]]
        p = order[pos[hit]]
        src.append(p), dst.append(q[hit]), lag.append(np.minimum(launch[q[hit]], s[q[hit]]) - e[p])
        etype.append(np.full(p.size, "launch", dtype=object))
        miss = q[~hit]
        base[miss] = np.maximum(base[miss], np.minimum(launch[miss], s[miss]))

    ev_src, ev_dst = _event_edges(nodes, stream_waits)
    src.append(ev_src), dst.append(ev_dst), lag.append(np.zeros(ev_src.size, np.int64))
    etype.append(np.full(ev_src.size, "event", dtype=object))

    e_src, e_dst = np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)
    e_lag, e_type = np.concatenate(lag).astype(np.int64), np.concatenate(etype)
    # An edge the observed times violate is no dependency.
    kept = e[e_src] + e_lag <= s[e_dst]
    e_src, e_dst, e_lag, e_type = e_src[kept], e_dst[kept], e_lag[kept], e_type[kept]
    bound = _bound(s, e, g, head, base, e_src, e_dst, e_lag)
    g_src, g_dst = _gate_edges(nodes, bound, has_events=ev_src.size > 0)
    e_src, e_dst = np.concatenate([e_src, g_src]), np.concatenate([e_dst, g_dst])
    e_lag = np.concatenate([e_lag, np.zeros(g_src.size, np.int64)])
    e_type = np.concatenate([e_type, np.full(g_src.size, "gate", dtype=object)])
    bound = _bound(s, e, g, head, base, e_src, e_dst, e_lag)
    u = s - bound
    assert (u >= 0).all(), "a node starts before one of its constraints"
    derived = {"base_ns": base, "chain": (np.cumsum(head) - 1).astype(np.int64), "head": head, "g_ns": g, "u_ns": u}
    columns = {**nodes, **derived}
    return RankGraph(_node_frame(columns), _edge_frame(e_src, e_dst, e_lag, e_type))


def _node_frame(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """NODE_COLUMNS and corr, the text columns as categoricals of the rank's few names (one dtype shared
    by the 8: the reduce reads a rank's names once): the reduce joins 1,024 ranks' nodes by their
    codes (stacked_frames' union_categories), where joining 400k rows of text per column cost
    ~0.1-0.3 s. Every graph, empty or not, is built here, so that all ranks' frames have one block
    layout."""
    text = dict(zip(_TEXT_ORDER, text_categoricals([columns[c] for c in _TEXT_ORDER])))  # one dtype for all 8
    return frame_of({c: text[c] if c in _TEXT else columns[c] for c in (*NODE_COLUMNS, "corr")})


def _edge_frame(src: np.ndarray, dst: np.ndarray, lag: np.ndarray, etype: np.ndarray) -> pd.DataFrame:
    """EDGE_COLUMNS, the type a categorical of the rank's few types (joined by codes over ranks, as the
    nodes' text; the critical path reads each type's priority once per category)."""
    return frame_of({"src": src, "dst": dst, "lag_ns": lag, "type": text_categoricals([etype])[0]})


_EMPTY = {**{c: np.empty(0, dtype=object) for c in _TEXT}, "head": np.empty(0, bool)}
"""The columns of a graph without nodes that are not int64."""


def _bound(s, e, g, head, base, src, dst, lag) -> np.ndarray:
    """The latest constraint on each node's start from observed times: base, lane predecessor, edges."""
    bound = base.copy()
    chained = np.flatnonzero(~head)
    bound[chained] = np.maximum(bound[chained], e[chained - 1] + g[chained])
    if src.size:
        np.maximum.at(bound, dst, e[src] + lag)
    return np.minimum(bound, s)


def _search_pairs(sorted_keys: np.ndarray, q_major: np.ndarray, q_minor: np.ndarray) -> np.ndarray:
    """Index of the last (major, minor) key <= each query in keys sorted by (major, minor) whose major
    equals the query's; -1 if none. One int64 key major * span + minor (span > the minor range)."""
    major, minor = sorted_keys
    out = np.full(q_major.size, -1, dtype=np.int64)
    if major.size == 0 or q_major.size == 0:
        return out
    lo = min(int(minor.min()), int(q_minor.min()))
    span = max(int(minor.max()), int(q_minor.max())) - lo + 1
    assert (int(major.max()) + 1) * span < 2 ** 62, "window count x time range overflows the search key"
    pos = np.searchsorted(major * span + (minor - lo), q_major * span + (q_minor - lo), side="right") - 1
    ok = pos >= 0
    ok[ok] = major[pos[ok]] == q_major[ok]
    out[ok] = pos[ok]
    return out


def _gate_edges(nodes: dict[str, np.ndarray], bound: np.ndarray, *, has_events: bool) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of the gate edges (module docstring)."""
    s, e, win = nodes["start_ns"], nodes["end_ns"], nodes["win"]
    lane = nodes["lane"].astype(str)
    is_comm = nodes["cls"] == "comm"
    launch_lane = nodes["launch_lane"].astype(str)
    on_stream = np.char.startswith(lane, "stream:")
    want = (s > bound) & ~(on_stream & has_events)
    src_out, dst_out = [], []
    for producer_comm in (True, False):
        cand = np.flatnonzero(is_comm == producer_comm)
        q = np.flatnonzero(want & (is_comm != producer_comm))
        if cand.size == 0 or q.size == 0:
            continue
        order = cand[np.lexsort((e[cand], win[cand]))]
        pos = _search_pairs(np.stack([win[order], e[order]]), win[q], s[q])
        hit = pos >= 0
        p = np.where(hit, order[np.maximum(pos, 0)], 0)
        hit &= (win[p] == win[q]) & (e[p] > bound[q]) & (lane[p] != lane[q])
        # a host thread waits only on the collectives it issued
        hit &= on_stream[q] | (not producer_comm) | (launch_lane[p] == lane[q])
        src_out.append(p[hit]), dst_out.append(q[hit])
    src = np.concatenate(src_out) if src_out else np.empty(0, np.int64)
    dst = np.concatenate(dst_out) if dst_out else np.empty(0, np.int64)
    return src.astype(np.int64), dst.astype(np.int64)


def _event_edges(nodes: dict[str, np.ndarray], waits: Mapping[str, list] | None) -> tuple[np.ndarray, np.ndarray]:
    """Stream waits (the reader's `stream_waits`: lane, corr, wait_lane, record_corr lists) as node pairs:
    the last node of wait_lane launched before the record -> the first node of lane launched after the wait
    (correlation ids number a process's CUDA calls in call order)."""
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    if not waits or not waits.get("lane"):
        return empty
    lane = nodes["lane"].astype(str)
    corr = nodes["corr"]
    w_lane = np.asarray(waits["lane"], dtype=object).astype(str)
    w_from = np.asarray(waits["wait_lane"], dtype=object).astype(str)
    w_corr = np.asarray(waits["corr"], dtype=np.int64)
    rec_corr = np.asarray(waits["record_corr"], dtype=np.int64)
    producer = np.full(w_lane.size, -1, np.int64)
    consumer = np.full(w_lane.size, -1, np.int64)
    for ln in np.unique(np.concatenate([w_lane, w_from])):  # a loop over streams, not events
        on = np.flatnonzero((lane == ln) & (corr >= 0))
        on = on[np.argsort(corr[on], kind="stable")]
        c = corr[on]
        if c.size == 0:
            continue
        prod = np.flatnonzero(w_from == ln)
        i = np.searchsorted(c, rec_corr[prod], side="left") - 1
        producer[prod] = np.where(i >= 0, on[np.maximum(i, 0)], -1)
        cons = np.flatnonzero(w_lane == ln)
        j = np.searchsorted(c, w_corr[cons], side="right")
        consumer[cons] = np.where(j < c.size, on[np.minimum(j, c.size - 1)], -1)
    ok = (producer >= 0) & (consumer >= 0)
    ok[ok] = nodes["win"][producer[ok]] == nodes["win"][consumer[ok]]
    return producer[ok], consumer[ok]
