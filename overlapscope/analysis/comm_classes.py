"""What counted as communication in a run, from each rank's reader summary (ingest/comm_summary.py).

- families: per rule (library rule, user rule, launch context), its kernels and device-time share;
- candidates: kernels counted as compute that look like communication, with their device-time
  share and the `--comm-pattern` that would count them; never silent (one warning per run);
- conflicts: comm kernels whose name says one collective while the op they ran in says another.
Shares are of the summed device time (kernels, memcpys, memsets) of the ranks that have it.
"""
from __future__ import annotations

import logging
import shlex
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..core.table import Run

log = logging.getLogger(__name__)

FAMILY_COLUMNS = ("rule", "kernels", "example", "count", "device_ns", "device_pct")
CANDIDATE_COLUMNS = ("name", "ranks", "count", "device_ns", "device_pct", "why", "comm_pattern")
CONFLICT_COLUMNS = ("collective", "kernel_collective", "kernel", "count")
_SHOWN = 5


class CommClasses(NamedTuple):
    families: pd.DataFrame
    candidates: pd.DataFrame
    conflicts: pd.DataFrame
    notes: list[str]


def _frame(rows: list[dict], columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns)) if rows else pd.DataFrame(columns=list(columns))


def comm_classes(run: Run) -> CommClasses:
    summaries = [(t.rank, t.meta.comm_classification) for t in run.ranks]
    summaries = [(r, s) for r, s in summaries if isinstance(s, dict)]
    device_ns = sum(int(s.get("device_ns", 0)) for _, s in summaries)
    fam = _frame([f for _, s in summaries for f in s.get("families", [])], ("rule", "kernels", "example", "count",
                                                                           "device_ns"))
    cand = _frame([{**c, "rank": r} for r, s in summaries for c in s.get("candidates", [])],
                  ("name", "count", "device_ns", "why", "comm_pattern", "rank"))
    conf = _frame([c for _, s in summaries for c in s.get("collective_conflicts", [])], CONFLICT_COLUMNS)
    share = (lambda ns: 100.0 * ns / device_ns) if device_ns else (lambda ns: ns * np.nan)
    if len(fam):
        # The example is the kernel with the most time on the rank that has most of the family.
        fam = fam.sort_values("device_ns", ascending=False, kind="stable").groupby("rule", as_index=False, sort=False) \
            .agg(kernels=("kernels", "max"), example=("example", "first"), count=("count", "sum"),
                 device_ns=("device_ns", "sum"))
        fam["device_pct"] = share(fam["device_ns"].astype(np.float64))
        fam = fam.sort_values(["device_ns", "rule"], ascending=[False, True], kind="stable").reset_index(drop=True)
    if len(cand):
        cand = cand.groupby(["name", "why", "comm_pattern"], as_index=False, sort=False).agg(
            ranks=("rank", "nunique"), count=("count", "sum"), device_ns=("device_ns", "sum"))
        cand["device_pct"] = share(cand["device_ns"].astype(np.float64))
        cand = cand.sort_values(["device_ns", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    if len(conf):
        conf = conf.groupby(["collective", "kernel_collective", "kernel"], as_index=False, sort=True)["count"].sum()
    notes = []
    if len(cand):
        notes.append(candidates_note(cand))
        log.warning("%s", notes[-1])
    if len(conf):
        notes.append(f"{int(conf['count'].sum())} comm kernel(s) ran inside an op that names another collective "
                     "than their kernel name (" + "; ".join(
                         f"{int(r.count)} {r.kernel_collective} kernels in {r.collective}"
                         for r in conf.itertuples(index=False)) + "): counted as the op's collective")
    return CommClasses(fam.reindex(columns=list(FAMILY_COLUMNS)), cand.reindex(columns=list(CANDIDATE_COLUMNS)),
                       conf.reindex(columns=list(CONFLICT_COLUMNS)), notes)


def candidates_note(cand: pd.DataFrame) -> str:
    """One line: how much device time looks like comm but was counted as compute, and how to count it."""
    total = float(cand["device_pct"].sum())
    shown = cand.head(_SHOWN)
    names = ", ".join(f"{r.name[:80]} ({r.device_pct:.1f}%)" for r in shown.itertuples(index=False))
    more = f" and {len(cand) - _SHOWN} more" if len(cand) > _SHOWN else ""
    flags = " ".join(f"--comm-pattern {shlex.quote(p)}" for p in shown["comm_pattern"])
    return (f"{len(cand)} kernel name(s) that look like communication were counted as compute "
            f"({total:.1f}% of device time): {names}{more}; to count them as communication: {flags}")
