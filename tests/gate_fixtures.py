"""Hand-built `Analysis` objects with exactly known per-step numbers, for the gate's tests."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from overlapscope.analysis.result import Analysis

MS = 1_000_000


def make_analysis(exposed_ms: Mapping[int, Sequence[float]], *, comm_ms: float = 40.0, compute_ms: float = 50.0,
                  window_ms: float = 100.0, collectives: Mapping[str, Mapping[int, Sequence[float]]] | None = None,
                  per_step_breakdown: bool = False, world_size: int | None = None, path: str = "run",
                  first_step: int = 1, **run: object) -> Analysis:
    """Steps for each rank: `exposed_ms[rank][i]` is step i's exposed comm; the rest follows from it.

    comm is fixed, so overlapped = comm - exposed and overlap_pct = 100 * overlapped / comm.
    `collectives` splits the exposed time by collective (default: all of it is all_reduce); scopes
    mirror collectives as `unit.<collective>`. Breakdowns are per rank totals (the Analysis
    contract) unless `per_step_breakdown`, which adds a step column.
    """
    rows = []
    for rank, values in exposed_ms.items():
        for i, exposed in enumerate(values):
            exposed_ns = int(round(exposed * MS))
            comm_ns, compute_ns, window_ns = int(comm_ms * MS), int(compute_ms * MS), int(window_ms * MS)
            rows.append({
                "rank": rank, "step": first_step + i, "window_start_ns": i * window_ns,
                "window_end_ns": (i + 1) * window_ns, "window_ns": window_ns, "compute_ns": compute_ns,
                "comm_ns": comm_ns, "overlapped_ns": comm_ns - exposed_ns, "exposed_comm_ns": exposed_ns,
                "exposed_memcpy_ns": 0, "idle_ns": window_ns - compute_ns - exposed_ns,
                "overlap_pct": 100.0 * (comm_ns - exposed_ns) / comm_ns,
                "exposed_comm_pct": 100.0 * exposed_ns / window_ns,
            })
    columns = ["rank", "step", "window_start_ns", "window_end_ns", "window_ns", "compute_ns", "comm_ns",
               "overlapped_ns", "exposed_comm_ns", "exposed_memcpy_ns", "idle_ns", "overlap_pct", "exposed_comm_pct"]
    steps = pd.DataFrame(rows, columns=columns)
    steps = steps.astype({c: np.int64 for c in steps.columns if c.endswith("_ns")} | {"rank": np.int32, "step": np.int32})
    collectives = collectives or {"all_reduce": exposed_ms}
    breakdown = []
    for name, per_rank in collectives.items():
        for rank, values in per_rank.items():
            for i, exposed in enumerate(values):
                breakdown.append({"rank": rank, "step": first_step + i, "key": name, "count": 2,
                                  "comm_ns": int(comm_ms * MS), "exposed_comm_ns": int(round(exposed * MS))})
    frame = pd.DataFrame(breakdown, columns=["rank", "step", "key", "count", "comm_ns", "exposed_comm_ns"])
    if not per_step_breakdown:
        frame = frame.groupby(["rank", "key"], as_index=False)[["count", "comm_ns", "exposed_comm_ns"]].sum()
    by_collective = frame.rename(columns={"key": "collective"})
    by_scope = frame.assign(key="unit." + frame["key"]).rename(columns={"key": "scope"})
    by_group = frame.iloc[0:0].rename(columns={"key": "group"})
    totals = steps.groupby("rank", as_index=False)[[c for c in steps.columns if c.endswith("_ns")]].sum()
    ranks = sorted(exposed_ms)
    identity = {"path": path, "world_size": world_size or len(ranks), "ranks": ranks, "device": "gpu"} | dict(run)
    return Analysis(run=identity, steps=steps, totals=totals, by_collective=by_collective, by_group=by_group,
                    by_scope=by_scope)


BASE6 = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]


def shifted(values: Sequence[float], by: float) -> list[float]:
    return [v + by for v in values]
