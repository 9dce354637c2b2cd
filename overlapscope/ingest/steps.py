"""Step ranges: find them by name and give every event the step whose CPU range holds its launch."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

DEFAULT_STEP_PATTERN = r"ProfilerStep#\d+|step\s*\d+"
_NUMBER = re.compile(r"(\d+)\s*$")


def step_ranges(names: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
                pattern: str = DEFAULT_STEP_PATTERN) -> pd.DataFrame:
    """Rows whose name fully matches `pattern` become steps, numbered by the trailing integer.

    Returns columns step, start_ns, end_ns sorted by start. Overlapping duplicates of one step
    (the same name twice, e.g. a CPU and an NVTX copy) keep the widest range.
    """
    rx = re.compile(pattern, re.IGNORECASE)
    names = np.asarray(names, dtype=object)
    uniq, inverse = np.unique(names.astype(str), return_inverse=True)
    match = np.array([bool(rx.fullmatch(u)) for u in uniq], dtype=bool)
    number = np.array([int(m.group(1)) if (m := _NUMBER.search(u)) else -1 for u in uniq])
    sel = match[inverse]
    if not sel.any():
        return pd.DataFrame({"step": np.array([], np.int32), "start_ns": np.array([], np.int64),
                             "end_ns": np.array([], np.int64)})
    steps = pd.DataFrame({
        "step": number[inverse][sel].astype(np.int32),
        "start_ns": np.asarray(start_ns, dtype=np.int64)[sel],
        "end_ns": np.asarray(end_ns, dtype=np.int64)[sel],
    })
    steps = steps.groupby("step", as_index=False).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
    return steps.sort_values("start_ns", kind="stable").reset_index(drop=True)


def steps_at(launch_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Step number whose [start, end] range holds each launch time; -1 outside every step."""
    launch_ns = np.asarray(launch_ns, dtype=np.int64)
    out = np.full(launch_ns.shape, -1, dtype=np.int32)
    if steps.empty or launch_ns.size == 0:
        return out
    starts = steps["start_ns"].to_numpy(np.int64)
    ends = steps["end_ns"].to_numpy(np.int64)
    idx = np.searchsorted(starts, launch_ns, side="right") - 1
    ok = (idx >= 0) & (launch_ns >= 0)
    ok[ok] &= launch_ns[ok] <= ends[idx[ok]]
    out[ok] = steps["step"].to_numpy(np.int32)[idx[ok]]
    return out
