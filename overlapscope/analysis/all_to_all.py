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
    rows = np.flatnonzero(isin(events["kind"], ("comm",)) & isin(events["collective"], ("all_to_all",)))
    return pd.DataFrame({
        "start_ns": events["start_ns"].to_numpy(np.int64)[rows],
        "end_ns": events["end_ns"].to_numpy(np.int64)[rows],
        "send_split_bytes": as_str(events["send_split_bytes"])[rows],
        "recv_split_bytes": as_str(events["recv_split_bytes"])[rows],
        "scope": np.asarray(scopes, dtype=object)[rows],
    })


def _peer_bytes(text: np.ndarray, size: int) -> np.ndarray:
    """Split-bytes text per row -> (rows, size) int64, -1 where unknown or of another length."""
    out = np.full((len(text), size), -1, dtype=np.int64)
    for i, t in enumerate(text):  # one per all-to-all (a few per layer and step), not per event
        values = t.split(",") if t else []
        if len(values) == size:
            out[i] = np.asarray(values, dtype=np.int64)
    return out


def all_to_all_traffic(collectives: pd.DataFrame, rows: pd.DataFrame, offsets: Mapping[int, int],
                       group_ranks: Mapping[str, Sequence[int]] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(instances with INSTANCE_COLUMNS, traffic with TRAFFIC_COLUMNS).

    collectives: the cross-rank `collectives` section (aligned times); rows: `all_to_all_rows` of
    every rank, concatenated (recorded times; offsets align them). group_ranks: a process group's
    ranks in group order (pg_config); else the instance's ranks, sorted. The matrix takes each
    sender's split bytes, and the receiver's where the sender's are unknown.
    """
    coll = collectives[collectives["collective"] == "all_to_all"] if len(collectives) else collectives
    if coll is None or coll.empty:
        return (pd.DataFrame({c: pd.Series(dtype=object if c in ("group", "scope", "missing") else
                                           np.float64 if c in ("imbalance", "mean_received_bytes") else np.int64)
                              for c in INSTANCE_COLUMNS}),
                pd.DataFrame({c: pd.Series(dtype=np.int64) for c in TRAFFIC_COLUMNS}))
    recorded = coll["start_ns"].to_numpy(np.int64) - coll["rank"].map(offsets).fillna(0).to_numpy(np.int64)
    joined = coll.assign(recorded_start_ns=recorded).merge(
        rows.rename(columns={"start_ns": "recorded_start_ns"})[
            ["rank", "recorded_start_ns", "send_split_bytes", "recv_split_bytes", "scope"]],
        on=["rank", "recorded_start_ns"], how="left")
    joined[["send_split_bytes", "recv_split_bytes", "scope"]] = \
        joined[["send_split_bytes", "recv_split_bytes", "scope"]].fillna("")
    instances, traffic = [], []
    for inst, sub in joined.groupby("instance", sort=True):  # one per collective: tens to thousands
        group = str(sub["group"].iloc[0])
        members = list((group_ranks or {}).get(group) or sorted(sub["rank"].astype(int).unique()))
        n = len(members)
        pos = {r: i for i, r in enumerate(members)}
        matrix = np.full((n, n), -1, dtype=np.int64)  # [src position, dst position]
        sent = _peer_bytes(sub["send_split_bytes"].to_numpy(object), n)
        got = _peer_bytes(sub["recv_split_bytes"].to_numpy(object), n)
        at = np.array([pos.get(int(r), -1) for r in sub["rank"]])
        ok = at >= 0
        matrix[at[ok]] = sent[ok]  # each sender's row
        into = matrix[:, at[ok]]  # each receiver's column, where its senders said nothing
        matrix[:, at[ok]] = np.where(into < 0, got[ok].T, into)
        missing_ranks = [m for m in members if (matrix[pos[m]] < 0).any() and (matrix[:, pos[m]] < 0).any()]
        step = int(sub["step"].min())
        known = (matrix >= 0).all()
        received = matrix.sum(axis=0) if known else np.full(n, -1)
        mean = float(received.mean()) if known and n else np.nan
        top = received.max() if known and n else -1
        hot = members[int(np.argmax(received))] if known and n and (received == top).sum() == 1 else -1
        last = sub[sub["last_arrival"].astype(bool)]
        waited_for = int(last["rank"].iloc[0]) if len(last) == 1 else -1
        scope = sub["scope"].mode()
        missing = "" if known else ("no split sizes for ranks " + ", ".join(map(str, missing_ranks))
                                    if missing_ranks else "split sizes disagree with the group size")
        instances.append((int(inst), group, int(sub["seq"].iloc[0]), step, str(scope.iloc[0]) if len(scope) else "",
                          int(len(sub)), int(matrix.sum()) if known else -1, int(top), mean,
                          float(top / mean) if known and mean > 0 else np.nan, int(hot), waited_for,
                          int(sub["wait_ns"].max()), missing))
        if known:
            src, dst = np.divmod(np.arange(n * n), n)
            traffic.append(pd.DataFrame({"instance": int(inst), "step": step, "src": np.asarray(members)[src],
                                         "dst": np.asarray(members)[dst], "bytes": matrix.ravel()}))
    inst_frame = pd.DataFrame(instances, columns=list(INSTANCE_COLUMNS))
    traffic_frame = pd.concat(traffic, ignore_index=True).astype(np.int64) if traffic else \
        pd.DataFrame({c: pd.Series(dtype=np.int64) for c in TRAFFIC_COLUMNS})
    return inst_frame, traffic_frame


def moe_exposure(by_key_steps: pd.DataFrame) -> pd.DataFrame:
    """MOE_COLUMNS: the by-scope breakdown per step of the comm launched under MoE labels."""
    if by_key_steps.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("phase", "pass") else np.int64) for c in MOE_COLUMNS})
    scoped = by_key_steps[by_key_steps["section"] == "by_scope"]
    parsed = scoped["key"].astype(str).str.extract(MOE_LABEL)
    hit = parsed[0].notna().to_numpy()
    sub, parsed = scoped[hit], parsed[hit]
    out = pd.DataFrame({
        "rank": sub["rank"].to_numpy(np.int64), "step": sub["step"].to_numpy(np.int64),
        "layer": parsed[0].astype(np.int64).to_numpy(), "microbatch": parsed[1].astype(np.int64).to_numpy(),
        "phase": parsed[2].to_numpy(object),
        "pass": np.where(parsed[3].isna().to_numpy(), "forward", "backward").astype(object),
        "count": sub["count"].to_numpy(np.int64), "comm_ns": sub["comm_ns"].to_numpy(np.int64),
        "exposed_comm_ns": sub["exposed_comm_ns"].to_numpy(np.int64)})
    return out.sort_values(["rank", "step", "pass", "layer", "microbatch", "phase"],
                           ascending=[True, True, False, True, True, False], kind="stable").reset_index(drop=True)


def diagnose(instances: pd.DataFrame) -> list[str]:
    """One line on imbalance (the worst instance's hot rank) and one on what is missing."""
    notes = []
    known = instances[instances["imbalance"].notna()] if len(instances) else instances
    if len(known):
        worst = known.loc[known["imbalance"].idxmax()]
        if worst["imbalance"] >= 1.5 and worst["hot_rank"] >= 0:
            notes.append(f"all-to-all imbalance up to {worst['imbalance']:.2f}x (max/mean received): rank "
                         f"{int(worst['hot_rank'])} receives the most"
                         + (f"; the others waited for rank {int(worst['waited_for_rank'])}"
                            if worst["waited_for_rank"] >= 0 else ""))
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
        matrix[sub["src"].map(pos).to_numpy(), sub["dst"].map(pos).to_numpy()] = sub["bytes"].to_numpy(np.int64)
        out[int(inst)] = (members, matrix.tolist())
    return out
