"""Exposed communication per rank and step window (DESIGN.md "The numbers").

C = union of compute, M = union of comm, X = union of memcpy/memset, all clipped to the window W:
compute |C|, comm |M|, overlapped |M ∩ C|, exposed comm |M \\ C|, exposed memcpy |X \\ (C ∪ M)|,
idle |W \\ (C ∪ M ∪ X)|; so compute + exposed comm + exposed memcpy + idle = |W| exactly.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.frames import column_values
from ..core import intervals as iv
from ..core.codes import isin
from .result import OVERLAP_COLUMNS


def lane_sets(events: pd.DataFrame) -> dict[str, iv.Intervals]:
    """Merged compute, comm and copy (memcpy + memset) sets of one rank's event table."""
    start = column_values(events, "start_ns", np.int64)
    end = column_values(events, "end_ns", np.int64)

    def of(*kinds: str) -> iv.Intervals:
        sel = isin(column_values(events, "kind"), kinds)
        return iv.merge(start[sel], end[sel])

    return {"compute": of("compute"), "comm": of("comm"), "copy": of("memcpy", "memset")}


def window_set(windows: pd.DataFrame) -> iv.Intervals:
    return iv.Intervals(column_values(windows, "start_ns", np.int64), column_values(windows, "end_ns", np.int64))


def overlap_columns(events: pd.DataFrame, windows: pd.DataFrame, *,
                    sets: dict[str, iv.Intervals] | None = None) -> dict[str, np.ndarray]:
    """One entry per window: step, window_start_ns, window_end_ns, OVERLAP_COLUMNS, percentages, as
    arrays (analyze_rank joins them with bounds.bound_columns' into one frame). sets: `lane_sets(events)`
    when known (analyze_rank computes them once for every analyzer)."""
    sets = sets or lane_sets(events)
    wins = window_set(windows)
    c, m, x = sets["compute"], sets["comm"], sets["copy"]
    seg = iv.segments(wins, c, m, x)
    in_c = iv.covered_at(c, seg.starts)
    in_m = iv.covered_at(m, seg.starts)
    in_x = iv.covered_at(x, seg.starts)
    n = len(windows)

    def total(mask: np.ndarray) -> np.ndarray:
        return iv.sum_by_window(seg, mask, n)

    columns = {
        "step": column_values(windows, "step", np.int32),
        "window_start_ns": wins.starts,
        "window_end_ns": wins.ends,
        "window_ns": wins.ends - wins.starts,
        "compute_ns": total(in_c),
        "comm_ns": total(in_m),
        "overlapped_ns": total(in_m & in_c),
        "exposed_comm_ns": total(in_m & ~in_c),
        "exposed_memcpy_ns": total(in_x & ~in_c & ~in_m),
        "idle_ns": total(~in_c & ~in_m & ~in_x),
    }
    # the percentages as arrays into one frame: two column inserts and Series arithmetic cost ~0.5 ms a rank
    columns["overlap_pct"], columns["exposed_comm_pct"] = percentages(
        columns["comm_ns"], columns["window_ns"], columns["overlapped_ns"], columns["exposed_comm_ns"])
    return columns


def percentages(comm_ns: np.ndarray, window_ns: np.ndarray, overlapped_ns: np.ndarray,
                exposed_comm_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """overlap_pct = 100·overlapped/comm, exposed_comm_pct = 100·exposed/window (float64); NaN where
    undefined."""
    comm = np.asarray(comm_ns).astype(np.float64)
    window = np.asarray(window_ns).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        overlap_pct = np.where(comm > 0, 100.0 * np.asarray(overlapped_ns) / comm, np.nan)
        exposed_pct = np.where((comm > 0) & (window > 0), 100.0 * np.asarray(exposed_comm_ns) / window, np.nan)
    return overlap_pct, exposed_pct


def add_percentages(frame: pd.DataFrame) -> pd.DataFrame:
    """frame with overlap_pct and exposed_comm_pct (`percentages`) from its comm_ns, window_ns,
    overlapped_ns and exposed_comm_ns."""
    frame["overlap_pct"], frame["exposed_comm_pct"] = percentages(
        *(frame[c].to_numpy() for c in ("comm_ns", "window_ns", "overlapped_ns", "exposed_comm_ns")))
    return frame


def totals(per_step: pd.DataFrame) -> pd.DataFrame:
    """Per-rank sums over steps, percentages recomputed from the sums."""
    summed = per_step.groupby("rank", as_index=False)[list(OVERLAP_COLUMNS)].sum()
    summed.insert(1, "steps", per_step.groupby("rank").size().to_numpy())
    return add_percentages(summed)


def exposed_intervals(events: pd.DataFrame, windows: pd.DataFrame) -> iv.Intervals:
    """The exact intervals counted as exposed comm: (M ∩ W) \\ C - what the dashboard draws."""
    sets = lane_sets(events)
    inside = iv.intersect(sets["comm"], iv.merge(*window_set(windows)))
    return iv.difference(inside, sets["compute"])
