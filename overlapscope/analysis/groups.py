"""Process groups for comm that names none (gloo records no group on its ops).

Every rank's trace lists the process groups it belongs to (`RankMeta.process_groups`, from Kineto's
`distributedInfo.pg_config`): the
default group and, on a device mesh, one group per mesh dimension (`mesh_dp`, `mesh_tp`, ...). A
family is the groups of one description; each rank is in exactly one group of a family. A stream of
unnamed comm (one collective type and op) belongs to one family: pick the family whose groups make
the stream most plausible when matched by order inside each group - every rank present at one
instant in each collective (no rank finished before another started), counts equal across the group,
then the tightest ends. On one host the clocks are shared, so raw times can judge this.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.table import ProcessGroup
from .matching import P2P


def rank_groups(groups: Iterable[tuple[int, Sequence[ProcessGroup]]]) -> dict[int, dict[str, str]]:
    """rank -> {family (desc, else the group's rank count): group name} from each rank's process groups
    (those that list their ranks, this rank among them)."""
    out: dict[int, dict[str, str]] = {}
    for rank, rank_pgs in groups:
        for pg in rank_pgs:
            if rank in pg.ranks:
                out.setdefault(rank, {})[pg.desc or f"size{len(pg.ranks)}"] = pg.name
    return out


def _score(rows: pd.DataFrame, groups: np.ndarray) -> tuple[int, float]:
    """(rows that cannot be matched or are impossible in time, median end spread) of order matching in groups."""
    frame = rows.assign(g=groups).sort_values(["g", "rank", "order_ns", "start_ns"], kind="stable")
    frame["pos"] = frame.groupby(["g", "rank"]).cumcount()
    counts = frame.groupby(["g", "rank"]).size()
    per_group = counts.groupby(level="g")
    lost = int((per_group.transform("max") - counts).sum())
    inst = frame.groupby(["g", "pos"]).agg(last_start=("start_ns", "max"), first_end=("end_ns", "min"),
                                           last_end=("end_ns", "max"), n=("rank", "size"))
    inst = inst[inst["n"] >= 2]
    impossible = int(inst.loc[inst["last_start"] > inst["first_end"], "n"].sum())
    spread = float(np.median(inst["last_end"] - inst["first_end"])) if len(inst) else np.inf
    return lost + impossible, spread


def infer_groups(comm: pd.DataFrame, groups_of: Mapping[int, Mapping[str, str]]) -> pd.DataFrame:
    """A copy of `comm` (matching.comm_rows of all ranks) with the group filled where it was empty."""
    comm = comm.copy()
    unknown = (comm["group"].astype(str) == "").to_numpy() & ~np.isin(comm["collective"].astype(str), P2P)
    families = sorted({f for fams in groups_of.values() for f in fams})
    if not unknown.any() or not families:
        return comm
    for _, sub in comm[unknown].groupby(["collective", "op"], sort=False):
        best: tuple[tuple[int, float], np.ndarray] | None = None
        for family in families:
            names = sub["rank"].map({r: groups_of.get(int(r), {}).get(family) for r in sub["rank"].unique()})
            if names.isna().any():
                continue
            names = names.to_numpy(object)
            score = _score(sub, names)
            if best is None or score < best[0]:
                best = (score, names)
        if best is not None:
            comm.loc[sub.index, "group"] = best[1]
    return comm
