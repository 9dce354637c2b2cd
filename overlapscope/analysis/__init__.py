"""Analysis: pure functions from event tables to numbers. `analyze` runs them all for a run."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..ingest.table import Run
from .breakdown import exposed_by_key, launch_scopes
from .crossrank import cross_rank_sections
from .overlap import overlap_by_step, totals
from .result import Analysis, OVERLAP_COLUMNS
from .streams import comm_on_compute_lanes, diagnose as diagnose_streams
from .windows import step_windows

__all__ = ["analyze", "Analysis", "OVERLAP_COLUMNS"]


def analyze(run: Run, *, no_steps: bool = False) -> Analysis:
    """Every number of DESIGN.md for a run; sections a run cannot give are empty frames."""
    steps, by_collective, by_group, by_scope = [], [], [], []
    diagnoses: list[str] = []
    all_windows = {}
    for trace in run.ranks:
        windows = step_windows(trace, no_steps=no_steps)
        all_windows[trace.rank] = windows
        per_step = overlap_by_step(trace.events, windows)
        per_step.insert(0, "rank", np.int32(trace.rank))
        steps.append(per_step)
        ev = trace.events
        comm_rows = (ev["kind"] == "comm").to_numpy()
        for column, keys, sink in (
            ("collective", ev["collective"].astype(str).to_numpy(), by_collective),
            ("group", ev["group"].astype(str).to_numpy(), by_group),
            ("scope", launch_scopes(ev, comm_rows), by_scope),
        ):
            frame = exposed_by_key(ev, windows, keys, column)
            frame.insert(0, "rank", np.int32(trace.rank))
            sink.append(frame)
        diagnoses += diagnose_streams(trace.rank, comm_on_compute_lanes(ev))
    per_step = pd.concat(steps, ignore_index=True)
    total = totals(per_step)
    sources = {t.rank: t.source for t in run.ranks}
    total.insert(1, "source", total["rank"].map(sources))
    cross = cross_rank_sections(run, all_windows)
    cross["diagnoses"] = diagnoses + cross["diagnoses"]
    return Analysis(
        run=run_identity(run),
        steps=per_step,
        totals=total,
        by_collective=pd.concat(by_collective, ignore_index=True),
        by_group=pd.concat(by_group, ignore_index=True),
        by_scope=pd.concat(by_scope, ignore_index=True),
        **cross,
    )


def run_identity(run: Run) -> dict:
    first = run.ranks[0]
    manifest = run.manifest or {}
    return {
        "path": run.path,
        "world_size": run.world_size,
        "ranks": [t.rank for t in run.ranks],
        "device": first.device,
        "device_name": first.meta.get("device_name") or manifest.get("device_name"),
        "backend": first.meta.get("backend") or manifest.get("backend"),
        "rank_from": {str(t.rank): t.rank_from for t in run.ranks},
        "manifest": manifest,
    }
