"""Hand-built event tables for the cross-rank, prefetch and bubble tests: one row per tuple, answers known."""
from __future__ import annotations

from typing import Any

import pandas as pd

from overlapscope.core.table import make_table

MS = 1_000_000
US = 1_000


def ev(lane: str, kind: str, name: str, start: int, end: int, **extra: Any) -> dict[str, Any]:
    """One event; extra: collective, bytes, group, seq, step, launch_ns, launch_lane."""
    return {"lane": lane, "kind": kind, "name": name, "start_ns": start, "end_ns": end, **extra}


def table(rank: int, rows: list[dict[str, Any]]) -> pd.DataFrame:
    cols: dict[str, list[Any]] = {k: [] for k in ("lane", "kind", "name", "start_ns", "end_ns", "collective",
                                                   "bytes", "group", "seq", "step", "launch_ns", "launch_lane")}
    for r in rows:
        cols["lane"].append(r["lane"])
        cols["kind"].append(r["kind"])
        cols["name"].append(r["name"])
        cols["start_ns"].append(r["start_ns"])
        cols["end_ns"].append(r["end_ns"])
        cols["collective"].append(r.get("collective", ""))
        cols["bytes"].append(r.get("bytes", -1))
        cols["group"].append(r.get("group", ""))
        cols["seq"].append(r.get("seq", -1))
        cols["step"].append(r.get("step", 0))
        cols["launch_ns"].append(r.get("launch_ns", r["start_ns"]))
        cols["launch_lane"].append(r.get("launch_lane", r["lane"]))
    return make_table(rank, **cols)


def windows(*spans: tuple[int, int, int]) -> pd.DataFrame:
    """Step windows from (step, start_ns, end_ns)."""
    return pd.DataFrame({"step": [s for s, _, _ in spans], "start_ns": [a for _, a, _ in spans],
                         "end_ns": [b for _, _, b in spans]}).astype("int64")
