"""All-to-all traffic and imbalance, and exposed MoE dispatch/combine (DESIGN.md "All-to-all").

Per all-to-all instance (one cross-rank collective of `collectives`): the bytes each rank sent to
and received from each other rank, from the per-peer split bytes the reader stored
(`send_split_bytes` / `recv_split_bytes`); the imbalance max/mean of the bytes each rank received;
the hot rank (the unique one receiving the most); and the rank the others waited for (the unique
last arrival). Per MoE layer, micro-batch and phase: exposed comm of the comm launched under the
reference label `moe:L<layer>:mb<m>:<dispatch|combine>[:bwd]`, from the by-scope breakdown.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.codes import as_str, isin
from ..core.frames import column_values, built_once, empty_frame

ROW_COLUMNS = ("start_ns", "end_ns", "send_split_bytes", "recv_split_bytes")
TRAFFIC_COLUMNS = ("instance", "step", "src", "dst", "bytes")
INSTANCE_COLUMNS = ("instance", "group", "seq", "step", "scope", "ranks", "bytes", "max_received_bytes",
                    "mean_received_bytes", "imbalance", "hot_rank", "waited_for_rank", "max_wait_ns", "missing")
MOE_COLUMNS = ("rank", "step", "layer", "microbatch", "phase", "pass", "count", "comm_ns", "exposed_comm_ns")
# The reference MoE run's labels (instrumented_models/moe_ep.py); the phase is the all-to-all's role.
MOE_LABEL = re.compile(r"^moe:L(\d+):mb(\d+):(dispatch|combine)(:bwd)?$")


def all_to_all_rows(events: pd.DataFrame, scopes: np.ndarray) -> pd.DataFrame:
    """One rank's all-to-all comm events: ROW_COLUMNS + scope (recorded times, the rank's clock; no
    rank column: `combine` adds the final rank)."""
    rows = np.flatnonzero(isin(column_values(events, "kind"), ("comm",))
                          & isin(column_values(events, "collective"), ("all_to_all",)))
    if rows.size == 0:  # most ranks: the same frame, empty, built once
        no_ints, no_text = np.empty(0, np.int64), np.empty(0, object)
        return built_once("all_to_all_rows", lambda: _rows_frame(no_ints, no_ints, no_text, no_text, no_text))
    return _rows_frame(column_values(events, "start_ns", np.int64)[rows],
                       column_values(events, "end_ns", np.int64)[rows],
                       as_str(column_values(events, "send_split_bytes"))[rows],
                       as_str(column_values(events, "recv_split_bytes"))[rows],
                       np.asarray(scopes, dtype=object)[rows])


def _rows_frame(start, end, send_split_bytes, recv_split_bytes, scope) -> pd.DataFrame:
    return pd.DataFrame({"start_ns": start, "end_ns": end, "send_split_bytes": send_split_bytes,
                         "recv_split_bytes": recv_split_bytes, "scope": scope})


def _peer_bytes(text: np.ndarray, size: int) -> np.ndarray:
    """Split-bytes text per row -> (rows, size) int64, -1 where unknown or of another length."""
    codes, uniques = pd.factorize(np.asarray(text, dtype=object))
    parsed = np.full((len(uniques) + 1, size), -1, dtype=np.int64)  # last row: for codes of -1 (none)
    for i, t in enumerate(uniques):  # distinct split lists: as many as routings, parsed once each
        values = t.split(",") if t else []
        if len(values) == size:
            parsed[i] = np.asarray(values, dtype=np.int64)
    return parsed[codes]


def all_to_all_traffic(collectives: pd.DataFrame, rows: pd.DataFrame, offsets: Mapping[int, int],
                       group_ranks: Mapping[str, Sequence[int]] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(instances with INSTANCE_COLUMNS, traffic with TRAFFIC_COLUMNS).

    collectives: the cross-rank `collectives` section (aligned times); rows: `all_to_all_rows` of
    every rank, concatenated (recorded times; offsets align them). group_ranks: a process group's
    ranks in group order (pg_config); else the ranks that ran the group's all-to-alls, ascending. The
    matrix takes each sender's split bytes, and the receiver's where the sender's are unknown.
    Vectorized per process group (a few), never per instance.
    """
    coll = collectives[collectives["collective"] == "all_to_all"] if len(collectives) else collectives
    if coll is None or coll.empty:
        return _empty_instances(), _empty_traffic()
    recorded = column_values(coll, "start_ns", np.int64) - coll["rank"].map(offsets).fillna(0).to_numpy(np.int64)
    text = ["send_split_bytes", "recv_split_bytes", "scope"]
    joined = coll.assign(recorded_start_ns=recorded).merge(
        rows.rename(columns={"start_ns": "recorded_start_ns"})[["rank", "recorded_start_ns", *text]],
        on=["rank", "recorded_start_ns"], how="left")
    joined[text] = joined[text].fillna("")
    joined["group"] = joined["group"].astype(str)
    entries, sizes, member_rows = [], [], []
    for group, sub in joined.groupby("group", sort=False):  # process groups: a few
        members = np.asarray(list((group_ranks or {}).get(group) or sorted(sub["rank"].astype(int).unique())),
                             dtype=np.int64)
        n = members.size
        sizes.append(pd.DataFrame({"instance": sub["instance"].unique(), "n": n}))
        member_rows.append(pd.DataFrame({"group": group, "member": members}))
        sub = sub[np.isin(column_values(sub, "rank", np.int64), members)]
        inst = np.repeat(sub["instance"].to_numpy(np.int64), n)
        me = np.repeat(column_values(sub, "rank", np.int64), n)
        peer = np.tile(members, len(sub))
        sent = _peer_bytes(sub["send_split_bytes"].to_numpy(object), n).ravel()
        got = _peer_bytes(sub["recv_split_bytes"].to_numpy(object), n).ravel()
        # each sender's row first, then each receiver's column where its sender said nothing
        entries += [pd.DataFrame({"instance": inst, "src": me, "dst": peer, "bytes": sent})[sent >= 0],
                    pd.DataFrame({"instance": inst, "src": peer, "dst": me, "bytes": got})[got >= 0]]
    cells = pd.concat(entries, ignore_index=True).drop_duplicates(["instance", "src", "dst"], keep="first")
    by_inst = joined.groupby("instance", sort=True)
    out = by_inst.agg(group=("group", "first"), seq=("seq", "first"), step=("step", "min"), ranks=("rank", "size"),
                      max_wait_ns=("wait_ns", "max"))
    out["n"] = pd.concat(sizes).set_index("instance")["n"]
    known = cells.groupby("instance").size().reindex(out.index, fill_value=0)
    complete = (known == out["n"] ** 2).to_numpy()
    received = cells.groupby(["instance", "dst"])["bytes"].sum()
    top = received.groupby(level="instance").max().reindex(out.index)
    n_top = (received == received.groupby(level="instance").transform("max")).groupby(level="instance").sum()
    hot = received.groupby(level="instance").idxmax().map(lambda k: k[1]) if len(received) else received
    total = cells.groupby("instance")["bytes"].sum().reindex(out.index)
    out["bytes"] = np.where(complete, total.fillna(-1), -1).astype(np.int64)
    out["max_received_bytes"] = np.where(complete, top.fillna(-1), -1).astype(np.int64)
    out["mean_received_bytes"] = np.where(complete, out["bytes"] / out["n"], np.nan)
    out["imbalance"] = np.where(complete & (out["mean_received_bytes"] > 0),
                                out["max_received_bytes"] / out["mean_received_bytes"].where(out["mean_received_bytes"] > 0),
                                np.nan)
    unique_top = complete & (n_top.reindex(out.index, fill_value=0) == 1).to_numpy()
    out["hot_rank"] = np.where(unique_top, hot.reindex(out.index).fillna(-1), -1).astype(np.int64)
    last = joined[joined["last_arrival"].astype(bool)].groupby("instance")["rank"]
    one_last = last.size().reindex(out.index, fill_value=0) == 1
    out["waited_for_rank"] = np.where(one_last, last.first().reindex(out.index).fillna(-1), -1).astype(np.int64)
    scopes = joined.groupby(["instance", "scope"]).size().rename("k").reset_index() \
        .sort_values(["instance", "k", "scope"], ascending=[True, False, True], kind="stable") \
        .drop_duplicates("instance").set_index("instance")["scope"]
    out["scope"] = scopes.reindex(out.index).fillna("")
    out["missing"] = _missing(cells, out[~complete], pd.concat(member_rows, ignore_index=True)).reindex(out.index)
    out["missing"] = out["missing"].fillna("").astype(str)
    inst_frame = out.reset_index()[list(INSTANCE_COLUMNS)]
    traffic = cells[cells["instance"].isin(out.index[complete])].merge(out["step"].reset_index(), on="instance")
    traffic = traffic.sort_values(["instance", "src", "dst"], kind="stable").reset_index(drop=True)
    return inst_frame, traffic[list(TRAFFIC_COLUMNS)].astype(np.int64)



def moe_exposure(by_key_steps: pd.DataFrame) -> pd.DataFrame:
    """MOE_COLUMNS: the by-scope breakdown per step of the comm launched under MoE labels."""
    if by_key_steps.empty:
        return empty_frame(MOE_COLUMNS, {"phase": object, "pass": object})
    scoped = by_key_steps[by_key_steps["section"] == "by_scope"]
    parsed = scoped["key"].astype(str).str.extract(MOE_LABEL)
    hit = parsed[0].notna().to_numpy()
    sub, parsed = scoped[hit], parsed[hit]
    out = pd.DataFrame({
        "rank": column_values(sub, "rank", np.int64), "step": column_values(sub, "step", np.int64),
        "layer": parsed[0].astype(np.int64).to_numpy(), "microbatch": parsed[1].astype(np.int64).to_numpy(),
        "phase": parsed[2].to_numpy(object),
        "pass": np.where(parsed[3].isna().to_numpy(), "forward", "backward").astype(object),
        "count": column_values(sub, "count", np.int64), "comm_ns": column_values(sub, "comm_ns", np.int64),
        "exposed_comm_ns": column_values(sub, "exposed_comm_ns", np.int64)})
    return out.sort_values(["rank", "step", "pass", "layer", "microbatch", "phase"],
                           ascending=[True, True, False, True, True, False], kind="stable").reset_index(drop=True)


def waited_for_most(instances: pd.DataFrame) -> tuple[int, int, int]:
    """(rank, total max_wait_ns, instances): the rank the others spent the most waiting for over the
    all-to-alls it was the unique last arrival of; (-1, 0, 0) when none was."""
    waited = instances[instances["waited_for_rank"] >= 0] if len(instances) else instances
    if waited.empty:
        return -1, 0, 0
    per = waited.groupby("waited_for_rank")["max_wait_ns"].agg(["sum", "size"]).sort_values(
        ["sum", "size"], ascending=False, kind="stable")
    return int(per.index[0]), int(per["sum"].iloc[0]), int(per["size"].iloc[0])


def diagnose(instances: pd.DataFrame) -> list[str]:
    """One line on imbalance (the worst instance's hot rank, and the rank waited for most) and one on
    what is missing."""
    notes = []
    known = instances[instances["imbalance"].notna()] if len(instances) else instances
    if len(known):
        worst = known.loc[known["imbalance"].idxmax()]
        if worst["imbalance"] >= 1.5 and worst["hot_rank"] >= 0:
            rank, wait_ns, n = waited_for_most(instances)
            notes.append(f"all-to-all imbalance up to {worst['imbalance']:.2f}x (max/mean received): rank "
                         f"{int(worst['hot_rank'])} receives the most"
                         + (f"; the others waited longest for rank {rank} ({wait_ns / 1e6:.1f} ms over {n} "
                            "all-to-alls)" if rank >= 0 else ""))
    unknown = len(instances) - len(known)
    if unknown:
        notes.append(f"{unknown} of {len(instances)} all-to-alls have no per-peer bytes "
                     f"({instances.loc[instances['imbalance'].isna(), 'missing'].iloc[0]}): on gloo they come "
                     "from c10d::alltoall_base_ shapes (record_shapes), on NCCL from record_param_comms split sizes")
    return notes


def moe_summary(moe: pd.DataFrame) -> pd.DataFrame:
    """Per (layer, phase, pass) over ranks, steps and micro-batches: count, comm_ns, exposed_comm_ns."""
    cols = ["layer", "phase", "pass", "count", "comm_ns", "exposed_comm_ns"]
    if moe.empty:
        return pd.DataFrame(columns=cols)
    out = moe.groupby(["layer", "phase", "pass"], as_index=False, sort=False)[
        ["count", "comm_ns", "exposed_comm_ns"]].sum()
    return out.sort_values(["pass", "layer", "phase"], ascending=[False, True, False], kind="stable") \
        .reset_index(drop=True)[cols]


def traffic_matrices(traffic: pd.DataFrame) -> dict[int, tuple[list[int], list[list[int]]]]:
    """instance -> (member ranks, bytes[src][dst]) from the long traffic frame."""
    out = {}
    for inst, sub in traffic.groupby("instance", sort=True):
        members = sorted(set(sub["src"].tolist()) | set(sub["dst"].tolist()))
        pos = {r: i for i, r in enumerate(members)}
        matrix = np.zeros((len(members), len(members)), dtype=np.int64)
        matrix[sub["src"].map(pos).to_numpy(), sub["dst"].map(pos).to_numpy()] = column_values(sub, "bytes", np.int64)
        out[int(inst)] = (members, matrix.tolist())
    return out


def _missing(cells: pd.DataFrame, incomplete: pd.DataFrame, members: pd.DataFrame) -> pd.Series:
    """Per incomplete instance: "no split sizes for ranks a, b" (the ranks whose row and column both
    have an unknown cell), or that the lists do not fit the group."""
    if incomplete.empty:
        return pd.Series(dtype=object)
    grid = incomplete[["group", "n"]].reset_index().merge(members, on="group")
    as_src = cells.groupby(["instance", "src"]).size().rename("as_src")
    as_dst = cells.groupby(["instance", "dst"]).size().rename("as_dst")
    grid = grid.join(as_src, on=["instance", "member"]).join(as_dst, on=["instance", "member"]).fillna(0)
    lost = grid[(grid["as_src"] < grid["n"]) & (grid["as_dst"] < grid["n"])]
    named = lost.groupby("instance")["member"].agg(lambda m: "no split sizes for ranks " + ", ".join(map(str, m)))
    return named.reindex(incomplete.index).fillna("split sizes disagree with the group size")


def _empty_instances() -> pd.DataFrame:
    return empty_frame(INSTANCE_COLUMNS, {"group": object, "scope": object, "missing": object,
                                          "imbalance": np.float64, "mean_received_bytes": np.float64})


def _empty_traffic() -> pd.DataFrame:
    return empty_frame(TRAFFIC_COLUMNS)
