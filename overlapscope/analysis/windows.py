"""Step windows W_s (DESIGN.md "Steps"): device time on GPU traces, the CPU step range on CPU traces."""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..core.frames import column_values, frame_of
from ..core.table import RankTrace
from ..core.codes import isin

log = logging.getLogger(__name__)

# Kinds that occupy a lane of work: what the windows must cover (sync and CPU ops do not).
WORK_KINDS = ("compute", "comm", "memcpy", "memset")


def _frame(steps, starts, ends) -> pd.DataFrame:
    return frame_of({
        "step": np.asarray(steps, dtype=np.int32),
        "start_ns": np.asarray(starts, dtype=np.int64),
        "end_ns": np.asarray(ends, dtype=np.int64),
    })


def step_windows(trace: RankTrace, *, no_steps: bool = False) -> pd.DataFrame:
    """Columns step, start_ns, end_ns; sorted, disjoint. step -1 is a whole-trace window."""
    return windows_and_partial(trace, no_steps=no_steps)[0]


def windows_and_partial(trace: RankTrace, *, no_steps: bool = False) -> tuple[pd.DataFrame, dict | None]:
    """`step_windows`, and for a rank that stopped early (RankMeta.incomplete) which steps it analyzed,
    which one was cut short and which are empty (the report's incomplete_ranks); None otherwise."""
    ev = trace.events
    # Only the columns the windows need, from NumPy (a pandas selection of columns, then of rows,
    # costs ~0.6 ms a rank: its labels are built as Arrow strings each time).
    busy = isin(column_values(ev, "kind"), WORK_KINDS)
    work = frame_of({c: column_values(ev, c)[busy] for c in ("step", "start_ns", "end_ns")})
    if work.empty:
        raise TraceError("no device or CPU activity (no kernels, memcpy, compute or comm events)", trace.source)
    if no_steps or trace.steps.empty:
        return _frame([-1], [work["start_ns"].min()], [work["end_ns"].max()]), None
    partial = None
    if trace.meta.incomplete:
        work, trace, partial = _complete_steps(work, trace)
    if trace.device == "gpu":
        return _device_windows(work, trace), partial
    return _cpu_windows(work, trace), partial


def _complete_steps(work: pd.DataFrame, trace: RankTrace) -> tuple[pd.DataFrame, RankTrace, dict]:
    """A rank the run manifest marks incomplete (it raised or stopped mid-capture): its last step
    was cut short and later ones may hold nothing. Analyze the steps before the last that hold
    work; say which they are, and which are not (the report says which steps are missing)."""
    steps = trace.steps.sort_values("start_ns", kind="stable")
    numbers = column_values(steps, "step")
    starts, ends = column_values(steps, "start_ns", np.int64), column_values(steps, "end_ns", np.int64)
    ws, we = np.sort(column_values(work, "start_ns", np.int64)), np.sort(column_values(work, "end_ns", np.int64))
    if trace.device == "gpu":
        has_work = np.isin(numbers, column_values(work, "step"))
    else:
        has_work = np.searchsorted(ws, ends, side="left") - np.searchsorted(we, starts, side="right") > 0
    keep = has_work.copy()
    keep[-1] = False  # the step the rank was in when it stopped
    partial = {"analyzed_steps": numbers[keep].tolist(), "cut_short_step": int(numbers[-1]),
               "empty_steps": numbers[:-1][~has_work[:-1]].tolist()}
    log.warning(
        "%s: rank %d stopped before its capture ended (run manifest: complete false): step %d was cut short%s; "
        "analyzing step%s %s", trace.source, trace.rank, numbers[-1],
        f", steps {', '.join(map(str, partial['empty_steps']))} are empty"
        if partial["empty_steps"] else "", "s" if keep.sum() != 1 else "",
        ", ".join(map(str, numbers[keep].tolist())) or "none")
    if not keep.any():
        raise TraceError("stopped before its capture ended (run manifest: complete false) and has no whole step "
                         "to analyze", trace.source)
    step = column_values(work, "step")
    work = work.assign(step=np.where(np.isin(step, numbers[keep]), step, -1))
    return work, dataclasses.replace(trace, steps=steps[keep].reset_index(drop=True)), partial


def _device_windows(work: pd.DataFrame, trace: RankTrace) -> pd.DataFrame:
    # W_s = [first device start launched in s, first device start launched in s+1); the last
    # window ends at the end of the last device event launched in it.
    step = column_values(work, "step")
    in_step = step >= 0
    if not in_step.any():
        raise TraceError("no device work was launched inside any step range "
                         "(use --no-steps to analyze the whole trace as one window)", trace.source)
    # Per step, its first device start and last device end (NumPy: this runs once per rank).
    numbers, which = np.unique(step[in_step], return_inverse=True)
    firsts = np.full(numbers.size, np.iinfo(np.int64).max, dtype=np.int64)
    last_ends = np.full(numbers.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(firsts, which, column_values(work, "start_ns", np.int64)[in_step])
    np.maximum.at(last_ends, which, column_values(work, "end_ns", np.int64)[in_step])
    order = np.argsort(firsts, kind="stable")
    numbers, firsts, last_ends = numbers[order], firsts[order], last_ends[order]
    # A step range that launched no device work has no device window (real traces end with one: the
    # range the profiler opened for a step it then stopped in). Said, never silently skipped.
    idle = np.setdiff1d(column_values(trace.steps, "step"), numbers)
    if idle.size:
        log.warning("%s: step%s %s launched no device work (no kernel, memcpy or memset launched inside the "
                    "range); left out", trace.source, "s" if idle.size > 1 else "", ", ".join(map(str, idle[:8])))
    ends = np.append(firsts[1:], last_ends[-1])
    return _frame(numbers, firsts, ends)


def _cpu_windows(work: pd.DataFrame, trace: RankTrace) -> pd.DataFrame:
    steps = trace.steps.sort_values("start_ns")
    starts = column_values(steps, "start_ns", np.int64)
    ends = column_values(steps, "end_ns", np.int64)
    # A step range with no work inside is a broken trace, not a fast step.
    # events overlapping [start, end) = #(start_ns < end) - #(end_ns <= start)
    started = np.searchsorted(np.sort(column_values(work, "start_ns", np.int64)), ends, side="left")
    finished = np.searchsorted(np.sort(column_values(work, "end_ns", np.int64)), starts, side="right")
    overlapping = started - finished
    empty = overlapping <= 0
    if empty.any():
        bad = column_values(steps, "step")[empty]
        raise TraceError(f"step {int(bad[0])} has no compute or communication events", trace.source)
    return _frame(column_values(steps, "step"), starts, ends)
