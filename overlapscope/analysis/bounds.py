"""Overlap bounds per rank and step (DESIGN.md "Overlap bounds"): where the measured step sits between
no overlap at all and perfect overlap.

- perfect_overlap_ns = max(|C|, |M|): every collective hidden behind compute (or compute behind comm).
- no_overlap_ns = |C| + |M| + exposed_memcpy + idle not launch-bound: compute and comm serialized, copies
  and the device's own waits kept; launch-bound idle is left out because with comm serialized in front
  of it the host has that much longer to launch the next work.
- launch-bound idle: a maximal idle segment [a, b) of W \\ (C ∪ M ∪ X) counts in full when every work
  event that starts at b was launched after a - the device had nothing queued, it waited for the CPU.
  Work launched by its own lane (a host op on CPU traces) never waits on a launch; unknown launches neither.
- overlap_efficiency_pct = 100 · (no_overlap - measured) / (no_overlap - perfect), measured = |W|:
  100 = as good as perfect overlap, 0 = as bad as none; NaN when the bounds coincide. It can leave
  [0, 100] only below 0 (more launch-bound idle than overlapped comm); it is not clipped.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.codes import isin, shared_codes
from ..core.frames import column_values
from .overlap import lane_sets, window_set
from .windows import WORK_KINDS

BOUND_COLUMNS = ("launch_bound_idle_ns", "no_overlap_ns", "perfect_overlap_ns", "overlap_efficiency_pct")


def launch_bound_idle(events: pd.DataFrame, windows: pd.DataFrame, sets: dict[str, iv.Intervals]) -> np.ndarray:
    """Launch-bound idle ns per window (module docstring), int64."""
    busy = iv.union(sets["compute"], sets["comm"], sets["copy"])
    wins = window_set(windows)
    idle = iv.cut_at(iv.difference(iv.merge(*wins), busy), wins.starts)  # each piece in one window
    out = np.zeros(len(windows), dtype=np.int64)
    if len(idle) == 0:
        return out
    work = isin(column_values(events, "kind"), WORK_KINDS)
    start = column_values(events, "start_ns", np.int64)[work]
    launch = column_values(events, "launch_ns", np.int64)[work]
    # work that launches itself (a host op: launch lane = its lane) never waits on a launch
    lane, launch_lane = shared_codes(column_values(events, "lane"), column_values(events, "launch_lane"))
    own = (launch_lane == lane)[work]
    launch = np.where(own | (launch < 0), np.iinfo(np.int64).min, launch)
    # per distinct start time, the earliest launch of the work starting then
    order = np.argsort(start, kind="stable")
    start, launch = start[order], launch[order]
    firsts = np.flatnonzero(np.r_[True, start[1:] != start[:-1]])
    uniq_start = start[firsts]
    min_launch = np.minimum.reduceat(launch, firsts) if firsts.size else launch
    j = np.searchsorted(uniq_start, idle.ends)
    ok = j < uniq_start.size
    ok[ok] = uniq_start[j[ok]] == idle.ends[ok]
    bound = np.zeros(len(idle), dtype=bool)
    bound[ok] = min_launch[j[ok]] > idle.starts[ok]
    win = np.searchsorted(wins.starts, idle.starts, side="right") - 1
    np.add.at(out, win[bound], (idle.ends - idle.starts)[bound])
    return out


def bound_columns(events: pd.DataFrame, windows: pd.DataFrame, per_step: Mapping[str, np.ndarray], *,
                  sets: dict[str, iv.Intervals] | None = None) -> dict[str, np.ndarray]:
    """BOUND_COLUMNS per window, as arrays, from per_step's (overlap.overlap_columns of the same windows)."""
    sets = sets or lane_sets(events)
    inputs = {c: np.asarray(per_step[c], dtype=np.int64) for c in _BOUND_INPUTS[:-1]}
    inputs["launch_bound_idle_ns"] = launch_bound_idle(events, windows, sets)
    return _bounds(inputs)


_BOUND_INPUTS = ("window_ns", "compute_ns", "comm_ns", "exposed_memcpy_ns", "idle_ns", "launch_bound_idle_ns")


def _bounds(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """BOUND_COLUMNS as arrays from the _BOUND_INPUTS arrays (int64)."""
    compute, comm = inputs["compute_ns"], inputs["comm_ns"]
    no_overlap = compute + comm + inputs["exposed_memcpy_ns"] + inputs["idle_ns"] - inputs["launch_bound_idle_ns"]
    perfect = np.maximum(compute, comm)
    span = (no_overlap - perfect).astype(np.float64)
    gained = (no_overlap - inputs["window_ns"]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        efficiency = np.where(span > 0, 100.0 * gained / span, np.nan)
    return {"launch_bound_idle_ns": inputs["launch_bound_idle_ns"], "no_overlap_ns": no_overlap,
            "perfect_overlap_ns": perfect, "overlap_efficiency_pct": efficiency}


def add_bounds(frame: pd.DataFrame) -> pd.DataFrame:
    """no_overlap_ns, perfect_overlap_ns and overlap_efficiency_pct from window, compute, comm,
    exposed_memcpy, idle and launch_bound_idle columns (per step, or summed over steps)."""
    bounds = _bounds({c: frame[c].to_numpy(np.int64) for c in _BOUND_INPUTS})
    for c in BOUND_COLUMNS[1:]:
        frame[c] = bounds[c]
    return frame


def bound_totals(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank over its steps: rank, the summed inputs, BOUND_COLUMNS (efficiency from the sums)."""
    cols = ["window_ns", "compute_ns", "comm_ns", "exposed_memcpy_ns", "idle_ns", "launch_bound_idle_ns"]
    summed = steps.groupby("rank", as_index=False)[cols].sum()
    return add_bounds(summed)[["rank", *cols[:3], *BOUND_COLUMNS]]


def worst_steps(steps: pd.DataFrame, top: int = 5) -> pd.DataFrame:
    """The steps farthest above perfect overlap (measured - perfect, ns), worst first."""
    lost = steps["window_ns"] - steps["perfect_overlap_ns"]
    cols = ["rank", "step", "window_ns", "perfect_overlap_ns", "no_overlap_ns", "overlap_efficiency_pct"]
    return steps.assign(above_perfect_ns=lost).sort_values(
        ["above_perfect_ns", "rank", "step"], ascending=[False, True, True], kind="stable")[
        cols + ["above_perfect_ns"]].head(top).reset_index(drop=True)
