"""Cross-rank collectives: wait vs transfer, exposed wait vs exposed transfer, bandwidth, stragglers.

DESIGN.md "Wait vs transfer" and "Bandwidth". With clocks aligned (clock.py) and one collective
matched across its ranks (matching.py), last_start = the latest aligned start; per rank
wait_ns = min(end, last_start) - start and transfer_ns = end - max(start, last_start). An NCCL kernel
spends its wait spinning for late ranks, so only the transfer part says anything about the network.
Exposed comm splits the same way: exposed_wait_ns = |wait part ∩ W \\ C| and exposed_transfer_ns =
|transfer part ∩ W \\ C|, on the rank's own compute C and step windows W, per collective (two
collectives overlapping in time both count the shared time, as in the breakdowns).
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.frames import column_values, empty_frame, frame_of, owned_intervals, stacked_frames
from .groups import infer_groups
from .matching import P2P, MatchConfig, comm_rows, match_collectives, on_device
from .overlap import lane_sets
from .wait_transfer import wait_transfer_time

COLLECTIVE_COLUMNS = (
    "instance", "group", "seq", "collective", "op", "match", "bytes", "rank", "step",
    "start_ns", "end_ns", "wait_ns", "transfer_ns", "exposed_wait_ns", "exposed_transfer_ns",
    "algbw_gbps", "busbw_gbps", "ranks", "group_size", "last_arrival",
    "instance_transfer_ns", "instance_algbw_gbps", "instance_busbw_gbps", "device",
)
STRAGGLER_COLUMNS = ("rank", "last_arrivals", "mean_lateness_ns", "collectives")
UNMATCHED_COLUMNS = ("rank", "group", "collective", "op", "reason", "count")


class CollectiveReport(NamedTuple):
    collectives: pd.DataFrame
    """COLLECTIVE_COLUMNS; one row per (collective instance, rank); times aligned."""
    stragglers: pd.DataFrame
    """STRAGGLER_COLUMNS, worst first."""
    unmatched: pd.DataFrame
    """UNMATCHED_COLUMNS: comm events in no cross-rank collective, counted by reason."""
    clock_offsets_ns: dict[int, int]
    diagnoses: list[str]
    wait_transfer: pd.DataFrame | None = None
    """wait_transfer.WAIT_TRANSFER_COLUMNS: wait and transfer per rank and (group, collective, op) as
    lengths of time (wait + transfer <= comm), for tables; the per-instance rows are in `collectives`."""
    comm_groups: pd.DataFrame | None = None
    """rank, row, group of every comm row, with the groups `infer_groups` filled in (gloo names none);
    None when nothing was inferred."""


_SHARE_TIMES = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
"""Bus bandwidth factor = this x (n - 1) / n (nccl-tests' all_reduce 2(n-1)/n; all_gather, reduce_scatter,
all_to_all (n-1)/n)."""
_FACTOR_ONE = ("broadcast", "reduce", "send", "recv", "send_recv")
"""Collectives whose bus bandwidth is their algorithm bandwidth (factor 1)."""


def busbw_factor(collective: np.ndarray | pd.Series, n: np.ndarray) -> np.ndarray:
    """nccl-tests' bus bandwidth factor per collective type and group size; NaN for another type or
    a missing one. Each distinct name is looked up once (comparing every row's text cost ~0.1 s over
    a 1,024-rank run's 200k collective rows)."""
    n = np.asarray(n, dtype=np.float64)
    codes, names = pd.factorize(collective)  # a missing name: code -1, the NaN appended last
    times = np.array([_SHARE_TIMES.get(c, np.nan) if isinstance(c, str) else np.nan for c in names] + [np.nan])
    one = np.array([isinstance(c, str) and c in _FACTOR_ONE for c in names] + [False])
    with np.errstate(divide="ignore", invalid="ignore"):
        share = (n - 1) / n
    return np.where(one[codes], 1.0, times[codes] * share)


def analyze_collectives(tables: Mapping[int, pd.DataFrame],
                        windows: Mapping[int, pd.DataFrame] | None = None, *,
                        group_sizes: Mapping[str, int] | None = None,
                        groups_of: Mapping[int, Mapping[str, str]] | None = None,
                        config: MatchConfig = MatchConfig()) -> CollectiveReport:
    """Match every rank's comm across ranks and measure each collective on each rank.

    tables: rank -> event table. windows: rank -> step windows (step, start_ns, end_ns); exposed time
    is counted inside them (whole trace when absent). group_sizes: process group name -> size, for
    busbw (default: the number of ranks the collective was matched on). groups_of: rank -> {family:
    process group name} (groups.rank_groups), to place comm that names no group (gloo) in its group.
    """
    ranks = sorted(int(r) for r in tables)
    comm = {r: comm_rows(tables[r]) for r in ranks}
    uncovered = {r: uncovered_set(tables[r], None if windows is None else windows.get(r)) for r in ranks}
    return collectives_of_ranks(comm, uncovered, group_sizes=group_sizes, groups_of=groups_of, config=config,
                                windows=windows)


def uncovered_set(events: pd.DataFrame, windows: pd.DataFrame | None, *,
                  sets: dict[str, iv.Intervals] | None = None) -> pd.DataFrame:
    """One rank's part of exposed wait/transfer (the per-rank map): W \\ C as start_ns, end_ns -
    the step windows (the whole trace when None) minus the rank's compute. sets: `lane_sets(events)`
    when known."""
    compute = (sets or lane_sets(events))["compute"]
    if windows is not None:
        inside = iv.merge(column_values(windows, "start_ns", np.int64), column_values(windows, "end_ns", np.int64))
    elif len(events):
        inside = iv.merge(np.array([events["start_ns"].min()]), np.array([events["end_ns"].max()]))
    else:
        inside = iv.empty()
    out = iv.difference(inside, compute)
    return frame_of({"start_ns": out.starts, "end_ns": out.ends})


def collectives_of_ranks(comm: Mapping[int, pd.DataFrame], uncovered: Mapping[int, pd.DataFrame], *,
                         group_sizes: Mapping[str, int] | None = None,
                         groups_of: Mapping[int, Mapping[str, str]] | None = None,
                         config: MatchConfig = MatchConfig(),
                         windows: Mapping[int, pd.DataFrame] | None = None) -> CollectiveReport:
    """The reduce of `analyze_collectives` on small per-rank tables: comm (matching.comm_rows) and
    uncovered (`uncovered_set`), both keyed by rank; windows (rank -> step windows) clip wait and
    transfer time as comm time is clipped."""
    ranks = sorted(int(r) for r in comm)
    comm = stacked_frames([comm[r] for r in ranks])
    if len(ranks) < 2 or comm["rank"].nunique() < 2:
        # One rank: nothing to match, and no clock to align against.
        empty = _empty(COLLECTIVE_COLUMNS)
        return CollectiveReport(empty, stragglers(empty), _unmatched_counts(comm.iloc[:0]),
                                {r: 0 for r in ranks}, [], wait_transfer_time(_empty(_TIMED_COLUMNS), {}))
    if "device" not in comm.columns:
        comm = comm.assign(device=False)
    inferred = None
    if groups_of:
        before = comm["group"]
        comm = infer_groups(comm, groups_of)
        if not comm["group"].equals(before):
            inferred = comm[["rank", "row", "group"]]
    matched = match_collectives(comm, config, ranks)
    offsets = matched.clock.offsets_ns
    rows = _wait_transfer(matched.rows, offsets)
    uncovered = owned_intervals(uncovered)  # each rank's tables read once, not once per section and key
    _add_exposed(rows, uncovered)
    _add_bandwidth(rows, group_sizes or {})
    timed = wait_transfer_time(rows[list(_TIMED_COLUMNS)].assign(
        start_ns=rows["recorded_start_ns"], end_ns=rows["recorded_end_ns"]), uncovered,
        owned_intervals(windows or {}))
    # the output's columns only, in (instance start, instance, rank) order: one take of those, not of
    # every working column (stream keys, recorded times...) and a selection after
    order = np.lexsort([rows[c].to_numpy() for c in ("rank", "instance", "instance_start_ns")])
    out = rows[list(COLLECTIVE_COLUMNS)].take(order).reset_index(drop=True)
    out["instance"] = pd.factorize(out["instance"])[0].astype(np.int64)
    strag = stragglers(out)
    unmatched = _unmatched_counts(matched.unmatched)
    notes = diagnose(out, timed, strag, unmatched, matched.clock.unaligned, len(comm))
    unknown = out[(out["group"] == "") & (out["ranks"] > 2)]
    if len(group_sizes or {}) > 1 and len(unknown):
        # gloo records no process group: with several groups, ranks of different groups look alike.
        notes.append(f"{unknown['instance'].nunique()} collectives name no process group while the run has "
                     f"{len(group_sizes)}: they were matched across every rank that ran them, "
                     "which mixes groups in 2-D layouts")
    return CollectiveReport(out, strag, unmatched, offsets, notes, timed, inferred)


_TIMED_COLUMNS = ("rank", "group", "collective", "op", "instance", "start_ns", "split_ns", "end_ns")


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    text = {"group", "collective", "op", "match"}
    return empty_frame(columns, {c: object if c in text else bool if c in ("last_arrival", "device")
                                 else np.float64 if c.endswith("_gbps") else np.int64 for c in columns})


def _wait_transfer(rows: pd.DataFrame, offsets: Mapping[int, int]) -> pd.DataFrame:
    """Adds the aligned times, wait and transfer to rows (match_collectives' own frame, which nothing
    else keeps: no copy, ~50 ms of 200k rows) and returns it."""
    off = rows["rank"].map(offsets).fillna(0).to_numpy(np.int64)
    rows["recorded_start_ns"] = column_values(rows, "start_ns", np.int64)
    rows["recorded_end_ns"] = column_values(rows, "end_ns", np.int64)
    rows["start_ns"] = rows["recorded_start_ns"] + off
    rows["end_ns"] = rows["recorded_end_ns"] + off
    inst = rows.groupby("instance")
    rows["last_start_ns"] = inst["start_ns"].transform("max")
    rows["instance_start_ns"] = inst["start_ns"].transform("min")
    rows["ranks"] = inst["rank"].transform("size").astype(np.int64)
    start, end = column_values(rows, "start_ns"), column_values(rows, "end_ns")
    last = column_values(rows, "last_start_ns")
    rows["wait_ns"] = np.maximum(np.minimum(end, last) - start, 0)
    rows["transfer_ns"] = np.maximum(end - np.maximum(start, last), 0)
    # The last rank to arrive: unique latest start in a collective of >= 2 ranks (ties: nobody).
    latest = start == last
    n_latest = pd.Series(latest).groupby(rows["instance"].to_numpy()).transform("sum").to_numpy()
    rows["last_arrival"] = latest & (n_latest == 1) & (rows["ranks"].to_numpy() >= 2)
    # Without recorded sequence numbers, the ordinal of the collective in its stream.
    rows["seq"] = np.where(column_values(rows, "seq") >= 0, column_values(rows, "seq"), rows["label"].to_numpy())
    return rows


def _add_exposed(rows: pd.DataFrame, uncovered: iv.OwnedIntervals) -> None:
    """Adds exposed_wait_ns, exposed_transfer_ns and split_ns to rows (`_wait_transfer`'s own frame:
    a copy of 200k rows per step cost ~15 ms each, and their consolidation as much again)."""
    # In each rank's own recorded time: compute and comm share its clock.
    s = column_values(rows, "recorded_start_ns", np.int64)
    e = column_values(rows, "recorded_end_ns", np.int64)
    # where the wait ends and the transfer begins, in recorded time
    split = np.clip(column_values(rows, "last_start_ns", np.int64) - (column_values(rows, "start_ns", np.int64) - s),
                    s, e)
    ranks, at = np.unique(column_values(rows, "rank", np.int64), return_inverse=True)
    gap_s, gap_e, gap_at = uncovered.rows_of(ranks)
    lift = iv.Lifted.of([s, e, gap_s, gap_e], ranks.size)
    if lift is None:  # times too far apart to lift: one rank at a time
        wait, transfer = np.zeros(s.size, np.int64), np.zeros(s.size, np.int64)
        for k in range(ranks.size):
            mine, held = at == k, gap_at == k
            gap = iv.Intervals(gap_s[held], gap_e[held])
            wait[mine] = iv.overlap_lengths(s[mine], split[mine], gap)
            transfer[mine] = iv.overlap_lengths(split[mine], e[mine], gap)
    else:  # every rank at once, each on its own stretch of one axis
        gap = iv.Intervals(lift(gap_s, gap_at), lift(gap_e, gap_at))
        wait = iv.overlap_lengths(lift(s, at), lift(split, at), gap)
        transfer = iv.overlap_lengths(lift(split, at), lift(e, at), gap)
    rows["exposed_wait_ns"], rows["exposed_transfer_ns"], rows["split_ns"] = wait, transfer, split


def _add_bandwidth(rows: pd.DataFrame, group_sizes: Mapping[str, int]) -> None:
    """Sets bytes (the instance's) and adds group_size, instance_transfer_ns and the bandwidths to
    rows (`_wait_transfer`'s own frame)."""
    inst = rows.groupby("instance")
    # S: the whole tensor (the reader stores it so for all_gather / reduce_scatter); ranks agree.
    nbytes = inst["bytes"].transform("max").to_numpy(np.int64)
    rows["bytes"] = nbytes
    codes, names = pd.factorize(rows["group"])  # a lookup per distinct group, not per row
    # code -1 (a missing group) takes the 0 appended last, as .get(nan, 0) did
    sizes = np.array([group_sizes.get(g, 0) for g in names] + [0], dtype=np.int64)[codes]
    rows["group_size"] = np.where(sizes > 0, sizes, rows["ranks"].to_numpy())
    rows["instance_transfer_ns"] = inst["transfer_ns"].transform("max").to_numpy(np.int64)
    factor = busbw_factor(rows["collective"], rows["group_size"].to_numpy())
    with np.errstate(divide="ignore", invalid="ignore"):
        valid = nbytes > 0
        transfer = column_values(rows, "transfer_ns")
        own = np.where(valid & (transfer > 0), nbytes / transfer, np.nan)
        whole = np.where(valid & (column_values(rows, "instance_transfer_ns") > 0),
                         nbytes / column_values(rows, "instance_transfer_ns"), np.nan)
    rows["algbw_gbps"], rows["busbw_gbps"] = own, own * factor
    rows["instance_algbw_gbps"], rows["instance_busbw_gbps"] = whole, whole * factor


def _lateness_rows(collectives: pd.DataFrame) -> pd.DataFrame:
    """The rows that say who is late: collectives of >= 2 ranks, CPU p2p left out (see `stragglers`)."""
    cpu_p2p = collectives["collective"].isin(P2P).to_numpy() & ~on_device(collectives)
    return collectives[(collectives["ranks"].to_numpy() >= 2) & ~cpu_p2p]


def stragglers(collectives: pd.DataFrame) -> pd.DataFrame:
    """Per rank: unique last arrivals and mean lateness (own start - earliest start), collectives of >= 2 ranks.

    NCCL p2p counts (a late send or recv holds its peer's kernel); CPU p2p is left out: gloo's
    buffered send returns before its recv is posted, so its start says nothing about lateness.
    """
    multi = _lateness_rows(collectives)
    if multi.empty:
        return empty_frame(STRAGGLER_COLUMNS, {"mean_lateness_ns": np.float64})
    earliest = multi.groupby("instance")["start_ns"].transform("min")
    frame = multi.assign(lateness_ns=multi["start_ns"] - earliest)
    out = frame.groupby("rank").agg(last_arrivals=("last_arrival", "sum"), mean_lateness_ns=("lateness_ns", "mean"),
                                    collectives=("instance", "size")).reset_index()
    out = out.astype({"rank": np.int64, "last_arrivals": np.int64, "collectives": np.int64})
    return out.sort_values(["last_arrivals", "mean_lateness_ns", "rank"], ascending=[False, False, True],
                           kind="stable").reset_index(drop=True)[list(STRAGGLER_COLUMNS)]


def _unmatched_counts(unmatched: pd.DataFrame) -> pd.DataFrame:
    if unmatched.empty:
        return empty_frame(UNMATCHED_COLUMNS, {"rank": np.int64, "count": np.int64}, default=object)
    out = unmatched.groupby(["rank", "group", "collective", "op", "reason"], sort=True).size()
    return out.rename("count").reset_index().astype({"rank": np.int64, "count": np.int64})


def straggler(collectives: pd.DataFrame, strag: pd.DataFrame) -> dict | None:
    """The straggler, when there is one: the rank with the most last arrivals (`stragglers`' first row),
    if it is last at >= 3 collectives and at twice its chance share of them (three quarters at most).
    By chance a rank is last in 1/n of its n-rank collectives: 2-rank groups give it half of them.
    Returns rank, last_arrivals, collectives, chance (expected last arrivals), mean_lateness_ns."""
    if strag is None or strag.empty or collectives.empty:
        return None
    top = strag.iloc[0]
    multi = _lateness_rows(collectives)
    chance = float((1.0 / multi["ranks"][multi["rank"] == top["rank"]]).sum())
    last, of = int(top["last_arrivals"]), int(top["collectives"])
    if last < 3 or last < min(0.75 * of, 2 * chance):
        return None
    return {"rank": int(top["rank"]), "last_arrivals": last, "collectives": of, "chance": chance,
            "mean_lateness_ns": float(top["mean_lateness_ns"])}


def diagnose(collectives: pd.DataFrame, wait_transfer: pd.DataFrame, strag: pd.DataFrame, unmatched: pd.DataFrame,
             unaligned: list[int], n_comm: int) -> list[str]:
    notes: list[str] = []
    top = straggler(collectives, strag)
    if top is not None:
        notes.append(f"rank {top['rank']} arrives last at {top['last_arrivals']} of its {top['collectives']} "
                     f"collectives (chance: {top['chance']:.3g}; {top['mean_lateness_ns'] / 1e6:.3g} ms late on "
                     "average): it is the straggler, the other ranks wait for it")
    waits = wait_transfer.loc[~wait_transfer["collective"].isin(P2P), ["exposed_wait_ns", "exposed_transfer_ns"]].sum()
    if waits.sum() > 0 and waits["exposed_wait_ns"] > waits["exposed_transfer_ns"]:
        notes.append(f"{100 * waits['exposed_wait_ns'] / waits.sum():.0f}% of exposed matched comm is waiting for "
                     "other ranks, not transfer: fix the imbalance before the network")
    if len(unmatched):
        lost = int(unmatched["count"].sum())
        why = unmatched.groupby("reason")["count"].sum().sort_values(ascending=False)
        notes.append(f"{lost} of {n_comm} comm events could not be matched across ranks: "
                     + "; ".join(f"{int(c)} {r}" for r, c in why.items()))
    if unaligned:
        notes.append(_unaligned_note(collectives, unaligned))
    return notes


def _unaligned_note(collectives: pd.DataFrame, unaligned: list[int]) -> str:
    """What was and was not aligned, and why: clock offsets come from collectives, not p2p (matching.py)."""
    many = len(unaligned) > 1
    who = f"rank{'s' if many else ''} {', '.join(map(str, unaligned))}"
    if (collectives["rank"].isin(unaligned) & collectives["collective"].isin(P2P)).any():
        why = (f"{'they exchange' if many else 'it exchanges'} only send/recv with the other ranks, which aligns "
               "no clock (gloo's buffered send can end before its recv starts); the send/recv pairs are still "
               "matched, by order")
    else:
        why = f"{'they share' if many else 'it shares'} no matched collective with the other ranks"
    return f"clocks not aligned for {who}: {why}. Recorded times are used: exact when the ranks share one host's clock"


def design_records(collectives: pd.DataFrame) -> list[dict]:
    """The JSON `collectives` section of DESIGN.md: one object per collective, its ranks keyed by rank.

    {group, seq, collective, op, match, bytes, ranks: {"<rank>": {start_ns, end_ns, wait_ns, transfer_ns,
    exposed_wait_ns, exposed_transfer_ns}}, transfer_ns, algbw_gbps, busbw_gbps} - bandwidth over the
    slowest rank's transfer. NaN becomes None.
    """
    out: list[dict] = []
    if collectives.empty:
        return out
    per_rank = ("start_ns", "end_ns", "wait_ns", "transfer_ns", "exposed_wait_ns", "exposed_transfer_ns")

    def num(v):
        f = float(v)
        return None if np.isnan(f) else f

    # One pass over columns as Python lists (a groupby + iloc per collective cost ~2 ms each): rows
    # of one instance are contiguous after a stable sort, in their order in the frame.
    order = np.argsort(collectives["instance"].to_numpy(), kind="stable")
    inst = collectives["instance"].to_numpy()[order]
    firsts = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
    stops = np.r_[firsts[1:], inst.size].tolist()
    col = {c: collectives[c].to_numpy()[order].tolist() for c in (
        "rank", *per_rank, "group", "seq", "collective", "op", "match", "bytes", "instance_transfer_ns",
        "instance_algbw_gbps", "instance_busbw_gbps")}
    for i, stop in zip(firsts.tolist(), stops):
        out.append({
            "group": str(col["group"][i]), "seq": int(col["seq"][i]), "collective": str(col["collective"][i]),
            "op": str(col["op"][i]), "match": str(col["match"][i]), "bytes": int(col["bytes"][i]),
            "ranks": {str(int(col["rank"][j])): {k: int(col[k][j]) for k in per_rank} for j in range(i, stop)},
            "transfer_ns": int(col["instance_transfer_ns"][i]),
            "algbw_gbps": num(col["instance_algbw_gbps"][i]), "busbw_gbps": num(col["instance_busbw_gbps"][i]),
        })
    return out
