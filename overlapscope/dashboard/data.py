"""What the dashboard draws, computed once per run when the server starts.

A run is read and analyzed once (`load_run_data`); every rank's events are then split into lanes
(annotation ranges, one per compute/comm stream or thread, one memcpy/memset lane, the exposed-comm
lane) whose intervals are sorted by start, so a redraw after a zoom only slices arrays
(`Lane.visible`) and merges what is narrower than a pixel (`decimate`). Nothing here re-parses a
trace on a request, and a run that fails to load becomes a `RunData` with an `error` message.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..analysis.overlap import exposed_intervals
from ..analysis.result import Analysis
from ..analysis.windows import step_windows
from ..core import intervals as iv
from ..core.table import RankTrace, Run
from ..errors import OverlapscopeError
from ..pipeline.options import RunOptions
from ..pipeline.run import analyze_run

log = logging.getLogger(__name__)

# Lane kinds, top to bottom inside a rank's row group.
LANE_ORDER = ("ranges", "compute", "comm", "memcpy", "exposed")
ALL_STEPS = -999
HOVER_NAME_CHARS = 60  # step selector value for "every step"
# Step ranges are the windows themselves; drawing them as a range would cover every lane label.
_STEP_RANGE_PREFIX = "ProfilerStep#"


def escape(values: np.ndarray | pd.Series, limit: int = 0) -> np.ndarray:
    """HTML-escape trace-supplied strings for Plotly text (Plotly renders a subset of HTML tags),
    cut to `limit` characters when given (templated kernel names run to kilobytes)."""
    cat = pd.Categorical(np.asarray(values, dtype=object).astype(str))
    cut = [c if not limit or len(c) <= limit else c[:limit] + "…" for c in cat.categories]
    safe = np.array([html.escape(c, quote=False) for c in cut], dtype=object)
    return safe[cat.codes] if safe.size else np.array([], dtype=object)


@dataclass
class Lane:
    """One row of the timeline: intervals sorted by start, with what the hover needs."""

    rank: int
    kind: str
    """One of LANE_ORDER."""
    label: str
    starts: np.ndarray
    ends: np.ndarray
    names: np.ndarray
    """Escaped event names (object)."""
    collective: np.ndarray
    nbytes: np.ndarray
    wait_ns: np.ndarray
    """-1 where the cross-rank analysis has no match."""
    transfer_ns: np.ndarray
    max_end_before: np.ndarray = field(init=False)
    """Running max of ends: ranges nest, so ends are not sorted even when starts are."""

    def __post_init__(self) -> None:
        self.max_end_before = np.maximum.accumulate(self.ends) if self.ends.size else self.ends

    def visible(self, lo_ns: int, hi_ns: int) -> np.ndarray:
        """Indices of the intervals that meet [lo, hi): a binary search plus one mask over a prefix."""
        stop = int(np.searchsorted(self.starts, hi_ns, side="left"))
        first = int(np.searchsorted(self.max_end_before[:stop], lo_ns, side="right"))
        idx = np.arange(first, stop)
        return idx[self.ends[first:stop] > lo_ns]


class Blocks(NamedTuple):
    """Intervals to draw: either the events themselves or merged groups (count > 1)."""

    starts: np.ndarray
    ends: np.ndarray
    count: np.ndarray
    busy_ns: np.ndarray
    first: np.ndarray
    """Index (into the lane) of the first event of each block."""


def decimate(lane: Lane, idx: np.ndarray, px_ns: float, max_exact: int) -> Blocks:
    """Events `idx` of `lane` as drawable blocks: exact when few, else merged across gaps under a pixel.

    Gaps narrower than `px_ns` cannot be seen, so closing them loses nothing visible and bounds the
    blocks by the pixel width of the view. `busy_ns` stays the exact busy time of each block.
    """
    s, e = lane.starts[idx], lane.ends[idx]
    if idx.size <= max_exact or px_ns <= 0:
        return Blocks(s, e, np.ones(idx.size, np.int64), e - s, idx)
    gap = np.int64(max(1, int(px_ns)))
    grown = iv.merge(s, e + gap)
    g_starts, g_ends = grown.starts, grown.ends - gap
    group = np.searchsorted(g_starts, s, side="right") - 1
    count = np.bincount(group, minlength=g_starts.size).astype(np.int64)
    busy = iv.overlap_lengths(g_starts, g_ends, iv.merge(s, e))
    first = idx[np.searchsorted(group, np.arange(g_starts.size), side="left")]
    return Blocks(g_starts, g_ends, count, busy, first)


@dataclass
class RankView:
    rank: int
    offset_ns: int
    """Clock offset: aligned time = recorded time + offset."""
    windows: pd.DataFrame
    """step, start_ns, end_ns (recorded clock)."""
    lanes: list[Lane]
    exposed: iv.Intervals
    """(M ∩ windows) \\ C for the whole rank, recorded clock: exactly what analyze() counts."""

    def window(self, step: int) -> tuple[int, int] | None:
        if step == ALL_STEPS:
            return int(self.windows["start_ns"].min()), int(self.windows["end_ns"].max())
        row = self.windows[self.windows["step"].to_numpy() == step]
        if row.empty:
            return None
        return int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])


@dataclass
class RunData:
    """One run as the dashboard needs it; `error` set (and the rest empty) when it failed to load."""

    path: str
    label: str
    run: Run | None = None
    analysis: Analysis | None = None
    ranks: list[RankView] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def span(self, step: int) -> tuple[int, int] | None:
        """Aligned [start, end) covering `step` on every rank that has it."""
        spans = [(w[0] + r.offset_ns, w[1] + r.offset_ns) for r in self.ranks if (w := r.window(step))]
        if not spans:
            return None
        return min(s for s, _ in spans), max(e for _, e in spans)


def load_run_data(path: str | Path, options: RunOptions | None = None) -> RunData:
    """Read, analyze and lay out one run; a failure becomes a readable `error`, never an exception."""
    options = options or RunOptions()
    path = str(path)
    label = Path(path.rstrip("/")).name or path
    try:
        analysis = analyze_run(path, options, keep_events=True)
        run = analysis.traces
        ranks = [rank_view(trace, analysis, no_steps=options.no_steps) for trace in run.ranks]
    except OverlapscopeError as exc:
        return RunData(path=path, label=label, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - the page must say what broke rather than go blank
        log.exception("loading %s failed", path)
        return RunData(path=path, label=label, error=f"{path}: internal error: {type(exc).__name__}: {exc}")
    steps = sorted({int(s) for s in analysis.steps["step"].to_numpy()})
    return RunData(path=path, label=label, run=run, analysis=analysis, ranks=ranks, steps=steps)


def rank_view(trace: RankTrace, analysis: Analysis, *, no_steps: bool = False) -> RankView:
    windows = step_windows(trace, no_steps=no_steps)
    ev = trace.events
    wait, transfer = _wait_transfer(ev, analysis, trace.rank)
    offset = int(analysis.clock_offsets_ns.get(trace.rank, 0)) if analysis.clock_offsets_ns else 0
    return RankView(rank=trace.rank, offset_ns=offset, windows=windows, lanes=_lanes(trace, wait, transfer),
                    exposed=exposed_intervals(ev, windows))


def _codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and their string categories: compare and escape each distinct value once."""
    cat = column if isinstance(column.dtype, pd.CategoricalDtype) else column.astype("category")
    return cat.cat.codes.to_numpy(), np.asarray(cat.cat.categories.astype(str), dtype=object)


def _lanes(trace: RankTrace, wait: np.ndarray, transfer: np.ndarray) -> list[Lane]:
    ev = trace.events
    kind, kinds = _codes(ev["kind"])
    lane_of, lanes_names = _codes(ev["lane"])
    name, names = _codes(ev["name"])
    coll, colls = _codes(ev["collective"])
    start, end = ev["start_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64)
    nbytes = ev["bytes"].to_numpy(np.int64)
    safe_names = escape(names, limit=HOVER_NAME_CHARS)

    def code(k: str) -> int:
        hit = np.flatnonzero(kinds == k)
        return int(hit[0]) if hit.size else -2

    step_range = np.char.startswith(names.astype(str), _STEP_RANGE_PREFIX) if names.size else np.zeros(0, bool)
    is_range = (kind == code("annotation")) & ~step_range[name] if names.size else np.zeros(len(ev), bool)
    groups: list[tuple[str, str, np.ndarray]] = [("ranges", "ranges", is_range)]
    for k in ("compute", "comm"):
        sel = kind == code(k)
        for lc in sorted(np.unique(lane_of[sel]), key=lambda c: lanes_names[c]):
            groups.append((k, f"{k} {lanes_names[lc]}", sel & (lane_of == lc)))
    groups.append(("memcpy", "memcpy/memset", np.isin(kind, [code("memcpy"), code("memset")])))
    lanes = []
    for k, label, sel in groups:
        rows = np.flatnonzero(sel)
        if rows.size == 0:
            continue
        rows = rows[np.argsort(start[rows], kind="stable")]
        lanes.append(Lane(
            rank=trace.rank, kind=k, label=html.escape(label, quote=False), starts=start[rows], ends=end[rows],
            names=safe_names[name[rows]], collective=colls[coll[rows]], nbytes=nbytes[rows],
            wait_ns=wait[rows], transfer_ns=transfer[rows]))
    return lanes


def _wait_transfer(ev: pd.DataFrame, analysis: Analysis, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Per event row: wait_ns / transfer_ns from Analysis.collectives (-1 when unmatched).

    The cross-rank frame names each instance by rank and interval; comm events are joined on
    (start_ns, end_ns), recorded or aligned clock, whichever the frame uses.
    """
    wait = np.full(len(ev), -1, dtype=np.int64)
    transfer = np.full(len(ev), -1, dtype=np.int64)
    col = analysis.collectives
    needed = {"rank", "start_ns", "end_ns", "wait_ns", "transfer_ns"}
    if col is None or col.empty or not needed <= set(col.columns):
        return wait, transfer
    mine = col[col["rank"].to_numpy() == rank]
    if mine.empty:
        return wait, transfer
    comm = np.flatnonzero(ev["kind"].to_numpy() == "comm")
    offset = int(analysis.clock_offsets_ns.get(rank, 0)) if analysis.clock_offsets_ns else 0
    keys = pd.MultiIndex.from_arrays([mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)])
    keys_unique = ~keys.duplicated()
    keys, mine = keys[keys_unique], mine[keys_unique]
    for shift in (0, offset) if offset else (0,):
        probe = pd.MultiIndex.from_arrays([ev["start_ns"].to_numpy(np.int64)[comm] + shift,
                                           ev["end_ns"].to_numpy(np.int64)[comm] + shift])
        pos = keys.get_indexer(probe)
        hit = (pos >= 0) & (wait[comm] < 0)
        wait[comm[hit]] = mine["wait_ns"].to_numpy(np.int64)[pos[hit]]
        transfer[comm[hit]] = mine["transfer_ns"].to_numpy(np.int64)[pos[hit]]
    return wait, transfer
