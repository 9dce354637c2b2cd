"""Step ranges: find them by name and give every event the step whose CPU range holds its launch."""
from __future__ import annotations

import logging
import re

import numpy as np
import pandas as pd

from ..core.frames import column_values, frame_of
from ..core.roles import DEFAULT_STEP_PATTERN
from ..errors import OverlapscopeError

log = logging.getLogger(__name__)

_NUMBER = re.compile(r"(\d+)\s*$")


def step_regex(pattern: str) -> re.Pattern[str]:
    """The compiled step pattern; a pattern that is not a regular expression is a user error."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise OverlapscopeError(f"--step-pattern {pattern!r} is not a regular expression ({exc})") from None


def step_ranges(names: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
                pattern: str = DEFAULT_STEP_PATTERN, source: str = "") -> pd.DataFrame:
    """Rows whose name fully matches `pattern` become steps, numbered by the trailing integer.

    Returns columns step, start_ns, end_ns sorted by start, disjoint. Conflicts are resolved by
    `resolved_steps` (each with a warning naming `source`).
    """
    rx = step_regex(pattern)
    names = np.asarray(names, dtype=object)
    uniq, inverse = np.unique(names.astype(str), return_inverse=True)
    match = np.array([bool(rx.fullmatch(u)) for u in uniq], dtype=bool)
    number = np.array([int(m.group(1)) if (m := _NUMBER.search(u)) else -1 for u in uniq])
    sel = match[inverse]
    if not sel.any():
        return frame_of({"step": np.array([], np.int32), "start_ns": np.array([], np.int64),
                             "end_ns": np.array([], np.int64)})
    steps = frame_of({
        "step": number[inverse][sel].astype(np.int32),
        "start_ns": np.asarray(start_ns, dtype=np.int64)[sel],
        "end_ns": np.asarray(end_ns, dtype=np.int64)[sel],
    })
    return resolved_steps(steps, source)


def resolved_steps(steps: pd.DataFrame, source: str = "") -> pd.DataFrame:
    """Step ranges made disjoint, each rule with a warning (DESIGN.md "Steps"):

    1. Overlapping ranges of one step number (the same name twice, e.g. a CPU and an NVTX copy)
       are one step: the widest range.
    2. One number on disjoint ranges (a profiler restarted, two sessions in one file): the steps
       are renumbered 0, 1, 2... by their order in time.
    3. A step range that encloses another (nested ProfilerStep ranges): the innermost wins, the
       enclosing one is dropped.
    4. Ranges that overlap partly: the earlier ends where the later starts.
    """
    # NumPy on a few arrays (pandas sorts, groupby and duplicated cost ~1.5 ms a rank of fixed overhead).
    number = column_values(steps, "step")
    start, end = column_values(steps, "start_ns", np.int64), column_values(steps, "end_ns", np.int64)
    if number.size == 0 or _disjoint_in_order(number, start, end):  # the common case: nothing to resolve
        return frame_of({"step": number.astype(np.int32), "start_ns": start, "end_ns": end})
    return _resolved(number, start, end, source)


def _disjoint_in_order(number: np.ndarray, start: np.ndarray, end: np.ndarray) -> bool:
    """Distinct numbers on ranges that start in strictly increasing order, each ending by the next
    one's start: what every rule of resolved_steps leaves as it is (checked in a few NumPy calls; the
    rules' ~30 cost a tiny rank ~0.3 ms)."""
    return bool((start[1:] > start[:-1]).all() and (end[:-1] <= start[1:]).all()
                and np.unique(number).size == number.size)


def _resolved(number: np.ndarray, start: np.ndarray, end: np.ndarray, source: str) -> pd.DataFrame:
    """resolved_steps' rules, in order, on its arrays."""
    order = np.lexsort((start, number))  # stable: by step, then start
    number, start, end = number[order], start[order], end[order]
    reach = _cummax_by_group(number, end)  # latest end so far in the step
    new = np.ones(number.size, dtype=bool)
    new[1:] = (number[1:] != number[:-1]) | (start[1:] > reach[:-1])
    heads = np.flatnonzero(new)
    m_step, m_start, m_end = number[heads], np.minimum.reduceat(start, heads), np.maximum.reduceat(end, heads)
    prefix = f"{source}: " if source else ""
    distinct, counts = np.unique(m_step, return_counts=True)
    by_time = np.lexsort((m_step, -m_end, m_start))  # stable: by start, then the longer first, then step
    m_step, m_start, m_end = m_step[by_time], m_start[by_time], m_end[by_time]
    if (counts > 1).any():
        again = distinct[counts > 1].tolist()
        log.warning("%sstep number%s %s appear%s on separate ranges (two profiling sessions?); steps are "
                    "numbered 0-%d by their order in time instead", prefix, "s" if len(again) > 1 else "",
                    ", ".join(map(str, again[:8])) + (" ..." if len(again) > 8 else ""),
                    "" if len(again) > 1 else "s", m_step.size - 1)
        m_step = np.arange(m_step.size, dtype=np.int32)
    s, e = m_start, m_end
    outer = _encloses_another(s, e)
    if outer.any():
        log.warning("%s%d step range%s enclose%s other step ranges (step%s %s); the innermost ranges are "
                    "the steps", prefix, int(outer.sum()), "s" if outer.sum() > 1 else "",
                    "" if outer.sum() > 1 else "s", "s" if outer.sum() > 1 else "",
                    ", ".join(map(str, m_step[outer][:8].tolist())))
        m_step, s, e = m_step[~outer], s[~outer], e[~outer]
    cut = np.zeros(s.size, dtype=bool)
    cut[:-1] = s[1:] < e[:-1]
    if cut.any():
        log.warning("%s%d step range%s overlap%s the next step; each ends where the next starts", prefix,
                    int(cut.sum()), "s" if cut.sum() > 1 else "", "" if cut.sum() > 1 else "s")
        e = e.copy()
        e[:-1][cut[:-1]] = s[1:][cut[:-1]]
    return frame_of({"step": m_step.astype(np.int32), "start_ns": s, "end_ns": e})


def _cummax_by_group(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of `values` restarting at each new value of `group` (sorted by group): the
    values' ranks, offset per group so that one group's maximum never reaches into the next."""
    rank_order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[rank_order] = np.arange(values.size)
    group_index = np.cumsum(np.r_[False, group[1:] != group[:-1]])
    running = np.maximum.accumulate(ranks + group_index * values.size) - group_index * values.size
    return values[rank_order][running]


def _encloses_another(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For ranges sorted by (start, -end): does each contain a later one? A range contains some
    range iff the smallest end among the ranges starting inside it is within it."""
    n = start.size
    if n < 2:
        return np.zeros(n, dtype=bool)
    first = np.arange(1, n + 1)
    last = np.searchsorted(start, end, side="left")  # ranges i+1..last-1 start inside range i
    has = last > first
    bounds = np.stack([np.minimum(first, n - 1), np.minimum(last, n)], axis=1).reshape(-1)
    ends = np.append(end, end[-1])
    smallest = np.minimum.reduceat(ends, bounds)[::2]
    return has & (smallest <= end)


def steps_at(launch_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Step number whose [start, end] range holds each launch time; -1 outside every step."""
    launch_ns = np.asarray(launch_ns, dtype=np.int64)
    out = np.full(launch_ns.shape, -1, dtype=np.int32)
    if steps.empty or launch_ns.size == 0:
        return out
    starts = column_values(steps, "start_ns", np.int64)
    ends = column_values(steps, "end_ns", np.int64)
    idx = np.searchsorted(starts, launch_ns, side="right") - 1
    ok = (idx >= 0) & (launch_ns >= 0)
    ok[ok] &= launch_ns[ok] <= ends[idx[ok]]
    out[ok] = column_values(steps, "step", np.int32)[idx[ok]]
    return out
