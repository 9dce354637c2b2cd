"""Analysis: pure functions from event tables to numbers. `analyze` runs them all for a run."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..ingest.table import RankTrace, Run
from .breakdown import exposed_by_key, launch_scopes
from .overlap import overlap_by_step, totals
from .result import Analysis, OVERLAP_COLUMNS
from .windows import step_windows

__all__ = ["analyze", "analyze_rank", "combine", "Analysis", "OVERLAP_COLUMNS", "RANK_SECTIONS"]


# Per-rank sections: each is computed from one rank's table alone, so ranks can be analyzed
# anywhere (a process pool, a Dask worker) and only these small frames travel back.
RANK_SECTIONS = ("steps", "by_collective", "by_group", "by_scope")


def analyze(run: Run, *, no_steps: bool = False) -> Analysis:
    """Every number of DESIGN.md for a run; sections a run cannot give are empty frames."""
    return combine(run, [analyze_rank(trace, no_steps=no_steps) for trace in run.ranks])


def analyze_rank(trace: RankTrace, *, no_steps: bool = False) -> dict[str, pd.DataFrame]:
    """The per-rank sections (RANK_SECTIONS) of one rank, without the rank column."""
    windows = step_windows(trace, no_steps=no_steps)
    ev = trace.events
    comm_rows = (ev["kind"] == "comm").to_numpy()
    out = {"steps": overlap_by_step(ev, windows)}
    for column, keys in (
        ("collective", ev["collective"].astype(str).to_numpy()),
        ("group", ev["group"].astype(str).to_numpy()),
        ("scope", launch_scopes(ev, comm_rows)),
    ):
        out[f"by_{column}"] = exposed_by_key(ev, windows, keys, column)
    return out


def combine(run: Run, sections: list[dict[str, pd.DataFrame]]) -> Analysis:
    """The cross-rank reduce: per-rank sections (in run.ranks order) into one Analysis.

    Reads only rank metadata from `run` (the distributed path hands in ranks whose events hold
    just the comm rows); cross-rank analyzers belong here and must need no more than that.
    """
    def stacked(name: str) -> pd.DataFrame:
        frames = []
        for trace, sec in zip(run.ranks, sections, strict=True):
            frame = sec[name].copy()
            frame.insert(0, "rank", np.int32(trace.rank))
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    per_step = stacked("steps")
    total = totals(per_step)
    sources = {t.rank: t.source for t in run.ranks}
    total.insert(1, "source", total["rank"].map(sources))
    return Analysis(
        run=run_identity(run),
        steps=per_step,
        totals=total,
        by_collective=stacked("by_collective"),
        by_group=stacked("by_group"),
        by_scope=stacked("by_scope"),
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
