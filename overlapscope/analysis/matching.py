"""Cross-rank matching: which comm events on different ranks are one collective (DESIGN.md "Wait vs transfer").

A stream is the comm of one (process group, collective type, launching op) on every rank; the op is
the innermost `nccl:*` / `c10d::*` range around the launch, which names what torch asked for when the
kernel name does not (all-to-alls and all-reduces that run as `SendRecv` kernels). Within a stream:

1. by sequence number, when every event carries one (`seq` >= 0);
2. else by order of launch on each rank, when every rank has the same count and sizes agree;
3. else - or when an order match is impossible in time, some rank finishing before another started
   (after clock alignment) - by time: pair each rank's events with the reference rank's (the rank with
   most events) whose aligned end is the mutual nearest and within tolerance. This is what recovers
   traces with missing events (event-sampled traces, profiling windows that cut a stream).

p2p: a send from a to b and the recv on b from a form one collective, the k-th of that direction in
the group: the direction comes from the ranks the op names (`nccl:send 0->1`), else from the two ranks
of a group where exactly two do p2p. The k-th is by `Seq` order when every op has one (torch numbers a
rank's p2p ops of a group together, so the two ends' numbers differ), else by launch order. gloo's
buffered send can end before its recv even starts (seen in real CPU pipeline traces), so the in-time
check never applies to p2p and the clock estimate uses device-stream (NCCL) p2p only.
Clock offsets are estimated twice: from the seq/order matches (a median, so a few wrong pairs do not
move it), then from all final matches.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from ..core import intervals as iv
from .clock import ClockOffsets, estimate_offsets
from ..core.codes import codes_names, isin, per_name, shared_codes, str_codes
from ..core.frames import column_values, built_once

P2P = ("send", "recv")
# torch's ProcessGroupNCCL names p2p ops by the group ranks of both ends.
_SEND_OP = re.compile(r"\bsend (\d+)->(\d+)")
_RECV_OP = re.compile(r"\brecv (\d+)<-(\d+)")

COMM_COLUMNS = ("rank", "row", "group", "collective", "op", "bytes", "seq",
                "start_ns", "end_ns", "order_ns", "step", "device")


@dataclass(frozen=True, kw_only=True)
class MatchConfig:
    end_tolerance_ns: int = 1_000_000
    """Matching by time: two ranks' aligned ends of one collective may differ by this much..."""
    end_tolerance_frac: float = 0.25
    """...or by this fraction of the shorter of the two durations, whichever is larger (CPU
    collectives under load have tails of milliseconds)."""
    shared_clock: bool = False
    """The ranks share one clock (all on one host, DESIGN.md "Clock alignment"): offsets are 0, not
    estimated - gloo all-reduce ends on one host differ by milliseconds under load."""

    def __post_init__(self) -> None:
        if self.end_tolerance_ns < 0 or not 0 <= self.end_tolerance_frac <= 1:
            raise ValueError("end_tolerance_ns must be >= 0 and end_tolerance_frac in [0, 1]")


class Matched(NamedTuple):
    rows: pd.DataFrame
    """Matched comm events: COMM_COLUMNS + key, label (the instance's seq or ordinal in its stream),
    instance, match ("seq", "order", "time")."""
    unmatched: pd.DataFrame
    """Comm events in no collective: COMM_COLUMNS + key, reason."""
    clock: ClockOffsets


def comm_rows(events: pd.DataFrame) -> pd.DataFrame:
    """The comm events of one rank's table with their launching op and order key (COMM_COLUMNS)."""
    # Strings are decided per distinct name (categorical codes), never per event.
    rows = np.flatnonzero(isin(column_values(events, "kind"), ("comm",)))
    if rows.size == 0:  # a rank without comm: the same frame, empty, built once
        no_ints, no_text = np.empty(0, np.int64), np.empty(0, object)
        return built_once("comm_rows", lambda: _comm_frame(no_ints, no_ints, no_text, no_text, no_text,
                                                           *[no_ints] * 6, np.empty(0, bool)))
    name_codes, names = codes_names(column_values(events, "name"))
    # The ranges that name the operation torch performed (role comm_op: nccl:*, c10d::*).
    ann = np.flatnonzero(isin(column_values(events, "role"), ("comm_op",)))
    launch_ns = column_values(events, "launch_ns", np.int64)[rows]
    lane, launch_lane = shared_codes(column_values(events, "lane"), column_values(events, "launch_lane"))
    found = iv.innermost_containing(
        lane[ann], column_values(events, "start_ns", np.int64)[ann],
        column_values(events, "end_ns", np.int64)[ann], launch_lane[rows], launch_ns)
    op = np.where(found >= 0, names[name_codes[ann[np.maximum(found, 0)]]] if ann.size else "", "")
    start = column_values(events, "start_ns", np.int64)[rows]
    group_codes, groups = codes_names(column_values(events, "group"))
    coll_codes, colls = codes_names(column_values(events, "collective"))
    return _comm_frame(column_values(events, "rank", np.int64)[rows], rows.astype(np.int64),
                       groups[group_codes[rows]], colls[coll_codes[rows]], op.astype(object),
                       column_values(events, "bytes", np.int64)[rows], column_values(events, "seq", np.int64)[rows],
                       start,
                       column_values(events, "end_ns", np.int64)[rows],
                       # Issue order: the launch on the CPU (same program order on every rank), else the start.
                       np.where(launch_ns >= 0, launch_ns, start),
                       column_values(events, "step", np.int64)[rows],
                       # On a device stream (NCCL): a p2p kernel spins until its peer's runs, so both end together.
                       per_name(column_values(events, "lane"), lambda n: n.startswith("stream:"), dtype=bool)[rows])


def _comm_frame(rank, row, group, collective, op, bytes_, seq, start, end, order_ns, step, device) -> pd.DataFrame:
    return pd.DataFrame({"rank": rank, "row": row, "group": group, "collective": collective, "op": op,
                         "bytes": bytes_, "seq": seq, "start_ns": start, "end_ns": end, "order_ns": order_ns,
                         "step": step, "device": device})


def op_peers(op: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of each p2p op torch names `nccl:send A->B` / `nccl:recv B<-A` (ranks in the
    group), -1 where the op does not say."""
    src = np.full(len(op), -1, dtype=np.int64)
    dst = np.full(len(op), -1, dtype=np.int64)
    if len(op) == 0:
        return src, dst
    codes, uniques = pd.factorize(np.asarray(op, dtype=object))
    pairs = np.full((len(uniques), 2), -1, dtype=np.int64)
    for i, name in enumerate(uniques):  # once per distinct op name
        m = _SEND_OP.search(str(name))
        if m:
            pairs[i] = (int(m.group(1)), int(m.group(2)))
        elif (m := _RECV_OP.search(str(name))):
            pairs[i] = (int(m.group(2)), int(m.group(1)))
    return pairs[codes, 0], pairs[codes, 1]


def stream_keys(comm: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(key, reason) per comm row; reason is non-empty where no stream can hold the row.

    A p2p row's stream is its direction in its group, `group|p2p|src->dst`: from the op's own
    ranks (`nccl:send 0->1`; group ranks) when every p2p row of the group has them, else - in a
    group where exactly two ranks do p2p - from those two ranks (global)."""
    # `group|collective|op`, joined once per distinct triple (a few per run), not per row
    (g, group_names), (c, coll_names), (o, op_names) = (str_codes(comm[col]) for col in ("group", "collective", "op"))
    triple, at = np.unique((g.astype(np.int64) * len(coll_names) + c) * len(op_names) + o, return_inverse=True)
    gi, rest = np.divmod(triple, len(coll_names) * len(op_names))
    ci, oi = np.divmod(rest, len(op_names))
    names = [f"{a}|{b}|{d}" for a, b, d in zip(group_names[gi].tolist(), coll_names[ci].tolist(), op_names[oi].tolist())]
    key = np.array(names, dtype=object)[at.reshape(-1)]
    reason = np.full(len(comm), "", dtype=object)
    p2p = np.isin(coll_names, P2P)[c]
    if p2p.any():
        group, coll = group_names[g], coll_names[c]
        rank = column_values(comm, "rank", np.int64)
        op_src, op_dst = op_peers(comm["op"].to_numpy(object))
        for g in np.unique(group[p2p]):
            sel = p2p & (group == g)
            peers = np.unique(rank[sel])
            if g and (op_src[sel] >= 0).all():
                src, dst = op_src[sel], op_dst[sel]
            elif peers.size == 2:
                other = np.where(rank[sel] == peers[0], peers[1], peers[0])
                src = np.where(coll[sel] == "send", rank[sel], other)
                dst = np.where(coll[sel] == "send", other, rank[sel])
            else:
                reason[sel] = f"p2p peer unknown ({peers.size} ranks of the group do p2p)"
                continue
            key[sel] = np.char.add(np.char.add(f"{g}|p2p|", src.astype(str)),
                                   np.char.add("->", dst.astype(str))).astype(object)
    return key, reason


def match_collectives(comm: pd.DataFrame, config: MatchConfig = MatchConfig(),
                      ranks: list[int] | None = None) -> Matched:
    """Assign every comm row (from `comm_rows` of all ranks, concatenated) to a collective instance."""
    comm = comm.reset_index(drop=True)  # a copy already (pandas 2), or copied on write (3)
    comm["key"], reason = stream_keys(comm)
    comm["label"] = -1
    comm["match"] = ""
    comm["reason"] = reason
    comm = comm.sort_values(["key", "rank", "order_ns", "start_ns"], kind="stable").reset_index(drop=True)
    comm["pos"] = comm.groupby(["key", "rank"], sort=False).cumcount().astype(np.int64)

    pending: list[str] = []
    for key, sub in comm[comm["reason"] == ""].groupby("key", sort=False):
        _match_by_seq_or_order(comm, key, sub, pending)
    clock = _clock(comm, ranks, config)
    # An order match where some rank ended before another started is not one collective; its
    # wrong pairs must not steer the clocks the time match relies on: estimate again without them.
    impossible = _impossible_keys(comm, clock.offsets_ns)
    pending += impossible
    for key in pending:
        sel = (comm["key"] == key).to_numpy()
        comm.loc[sel, "label"] = -1
        comm.loc[sel, "match"] = ""
    if impossible:
        clock = _clock(comm, ranks, config)
    for key in pending:
        _match_by_time(comm, key, clock.offsets_ns, config)
    if pending:  # labels changed since the last solve (else it would give the same offsets again)
        clock = _clock(comm, ranks, config)

    matched = comm["label"].to_numpy() >= 0
    # A sequence number seen on one rank only is no cross-rank collective.
    alone = matched & (comm.groupby(["key", "label"])["rank"].transform("size").to_numpy() < 2)
    comm.loc[alone, "reason"] = "no other rank has this sequence number"
    matched &= ~alone
    # all rows matched (a healthy run): the frame itself, shallowly (columns set on rows stay on rows),
    # not a take and a copy of every row (~60 ms of 1,024 ranks x 200 collectives)
    rows = comm.copy(deep=False) if matched.all() else comm.take(np.flatnonzero(matched))
    rows["instance"] = _instance_ids(rows)
    unmatched = comm[~matched].copy()
    unmatched.loc[unmatched["reason"] == "", "reason"] = "no other rank has this collective"
    return Matched(rows.drop(columns=["pos", "reason"]).reset_index(drop=True),
                   unmatched.drop(columns=["label", "pos", "match"]).reset_index(drop=True), clock)


def _clock(comm: pd.DataFrame, ranks: list[int] | None, config: MatchConfig) -> ClockOffsets:
    if config.shared_clock:
        every = sorted(set(ranks or []) | set(comm["rank"].astype(int).tolist()))
        return ClockOffsets({r: 0 for r in every}, {r: 0 for r in every}, [])
    return estimate_offsets(_instances(comm), ranks)


def _match_by_seq_or_order(comm: pd.DataFrame, key: str, sub: pd.DataFrame, pending: list[str]) -> None:
    if sub["rank"].nunique() < 2:
        comm.loc[sub.index, "reason"] = "no other rank has this collective"
        return
    seq = column_values(sub, "seq")
    if (seq >= 0).all() and "|p2p|" in key:
        # torch's p2p Seq counts every p2p op of a rank in the group (seqP2P_), so a send's number is
        # not its recv's: Seq orders each rank's ops of this direction, the k-th pairs with the k-th.
        counts = sub.groupby("rank").size()
        if counts.nunique() == 1:
            by_seq = sub.sort_values(["rank", "seq", "order_ns"], kind="stable")
            comm.loc[by_seq.index, "label"] = by_seq.groupby("rank").cumcount().to_numpy()
            comm.loc[by_seq.index, "match"] = "seq"
        else:
            pending.append(key)
        return
    if (seq >= 0).all():
        dup = sub.duplicated(["rank", "seq"]).to_numpy()
        comm.loc[sub.index[dup], "reason"] = "sequence number repeated on its rank"
        comm.loc[sub.index[~dup], "label"] = seq[~dup]
        comm.loc[sub.index[~dup], "match"] = "seq"
        return
    counts = sub.groupby("rank").size()
    nbytes = pd.Series(_comparable_bytes(sub), index=sub.index)
    nbytes = nbytes.where(nbytes >= 0)
    sizes_agree = bool((nbytes.groupby(sub["pos"]).nunique() <= 1).all())
    if counts.nunique() == 1 and sizes_agree:
        comm.loc[sub.index, "label"] = column_values(sub, "pos")
        comm.loc[sub.index, "match"] = "order"
    else:
        pending.append(key)


def _comparable_bytes(rows: pd.DataFrame) -> np.ndarray:
    """Sizes that must agree across the ranks of one collective; -1 (unknown) for all-to-alls, whose
    input sizes differ per rank by design (all_to_allv: each rank sends what its tokens need)."""
    return np.where(rows["collective"].to_numpy(object) == "all_to_all", -1, column_values(rows, "bytes", np.int64))


def _instances(comm: pd.DataFrame) -> pd.DataFrame:
    """Matched ends that tie clocks together: CPU p2p is left out (gloo's eager send ends before its
    recv starts); NCCL p2p kernels end together, so they align pipeline-only runs."""
    m = comm[(comm["label"].to_numpy() >= 0) & ~(_is_p2p(comm) & ~on_device(comm))]
    return pd.DataFrame({"instance": _instance_ids(m), "rank": column_values(m, "rank"),
                         "start_ns": column_values(m, "start_ns"), "end_ns": column_values(m, "end_ns")})


def _instance_ids(m: pd.DataFrame) -> np.ndarray:
    """Each row's (key, label) pair numbered in order of first appearance (groupby(sort=False,
    dropna=False).ngroup(): a missing key, which stream_keys never makes, is a key of its own): one
    factorize of the keys and one of the pairs as int64 (a third of the grouping's time)."""
    if m.empty:
        return np.empty(0, np.int64)
    keys, names = pd.factorize(m["key"], use_na_sentinel=False)
    label = m["label"].to_numpy(np.int64)
    lo, span = int(label.min()), int(label.max()) - int(label.min()) + 1
    if len(names) * span >= 2 ** 62:  # the pair would not fit an int64: pandas' grouping
        return m.groupby(["key", "label"], sort=False, dropna=False).ngroup().to_numpy(np.int64)
    return pd.factorize(keys.astype(np.int64) * span + (label - lo))[0].astype(np.int64)


def on_device(comm: pd.DataFrame) -> np.ndarray:
    """Comm rows that ran on a device stream (False for tables made without the column)."""
    return comm["device"].to_numpy(bool) if "device" in comm.columns else np.zeros(len(comm), bool)


def _is_p2p(comm: pd.DataFrame) -> np.ndarray:
    return comm["key"].astype(str).str.contains("|p2p|", regex=False).to_numpy()


def _impossible_keys(comm: pd.DataFrame, offsets: Mapping[int, int]) -> list[str]:
    # Only collectives need every rank present at once; a buffered send may end before the recv starts.
    m = comm[(comm["match"] == "order").to_numpy() & ~_is_p2p(comm)]
    if m.empty:
        return []
    off = m["rank"].map(offsets).fillna(0).to_numpy(np.int64)
    aligned = m.assign(s=column_values(m, "start_ns") + off, e=column_values(m, "end_ns") + off)
    per = aligned.groupby(["key", "label"]).agg(last_start=("s", "max"), first_end=("e", "min"))
    bad = per[per["last_start"] > per["first_end"]]
    return sorted(set(bad.index.get_level_values("key")))


def _match_by_time(comm: pd.DataFrame, key: str, offsets: Mapping[int, int], config: MatchConfig) -> None:
    sub = comm[(comm["key"] == key).to_numpy()]
    counts = sub.groupby("rank").size()
    ref = int(counts[counts == counts.max()].index.min())
    a = sub[sub["rank"] == ref]
    a_off = offsets.get(ref, 0)
    a_s, a_e = column_values(a, "start_ns") + a_off, column_values(a, "end_ns") + a_off
    order = np.argsort(a_e, kind="stable")
    a_idx, a_s, a_e, a_b = a.index.to_numpy()[order], a_s[order], a_e[order], _comparable_bytes(a)[order]
    a_pos = column_values(a, "pos")[order]
    partnered = np.zeros(a_idx.size, dtype=bool)
    for r, b in sub[sub["rank"] != ref].groupby("rank"):
        off = offsets.get(int(r), 0)
        b = b.iloc[np.argsort(column_values(b, "end_ns"), kind="stable")]
        b_s, b_e = column_values(b, "start_ns") + off, column_values(b, "end_ns") + off
        j = _nearest(a_e, b_e)          # ref event nearest to each b
        i_of_j = _nearest(b_e, a_e)     # b event nearest to each ref event
        mutual = i_of_j[j] == np.arange(b_e.size)
        tol = np.maximum(config.end_tolerance_ns, config.end_tolerance_frac *
                         np.minimum(a_e[j] - a_s[j], b_e - b_s))
        close = np.abs(a_e[j] - b_e) <= tol
        together = np.maximum(a_s[j], b_s) <= np.minimum(a_e[j], b_e)
        b_bytes = _comparable_bytes(b)
        same_size = (a_b[j] < 0) | (b_bytes < 0) | (a_b[j] == b_bytes)
        ok = mutual & close & together & same_size
        idx = b.index.to_numpy()
        comm.loc[idx[ok], "label"] = a_pos[j[ok]]
        comm.loc[idx[ok], "match"] = "time"
        comm.loc[idx[~ok], "reason"] = np.where(
            (mutual & close & together)[~ok], f"size differs from rank {ref}",
            f"no collective on rank {ref} ends with it")
        partnered[j[ok]] = True
    comm.loc[a_idx[partnered], "label"] = a_pos[partnered]
    comm.loc[a_idx[partnered], "match"] = "time"
    comm.loc[a_idx[~partnered], "reason"] = "no collective on another rank ends with it"


def _nearest(sorted_values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of the nearest sorted value to each query (ties to the earlier)."""
    i = np.clip(np.searchsorted(sorted_values, queries), 1, max(sorted_values.size - 1, 1))
    if sorted_values.size == 1:
        return np.zeros(queries.size, dtype=np.int64)
    left = sorted_values[i - 1]
    right = sorted_values[i]
    return np.where(queries - left <= right - queries, i - 1, i).astype(np.int64)
