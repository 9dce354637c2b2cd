"""The `overlapscope.report/1` JSON document (DESIGN.md "Interfaces"). Keys are only ever added."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson
import pandas as pd

from ..analysis.all_to_all import traffic_matrices
from ..analysis.collectives import design_records
from ..analysis.result import OVERLAP_COLUMNS, Analysis
from .whatif_report import json_sections

SCHEMA = "overlapscope.report/1"
STEP_KEYS = ("step",) + OVERLAP_COLUMNS
STEP_RECORD_KEYS = list(STEP_KEYS) + ["window_start_ns", "window_end_ns", "overlap_pct", "exposed_comm_pct"]
"""The keys of a rank's step records, in order."""


def _clean(value: Any) -> Any:
    """NumPy scalars to Python; NaN to None (JSON null), never NaN."""
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return None if math.isnan(f) else f
    if isinstance(value, np.bool_):
        return bool(value)
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def records(frame: pd.DataFrame, columns: list[str] | tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    if frame is None or frame.empty:
        return []
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    return [{c: _clean(v) for c, v in zip(cols, row)} for row in frame[cols].itertuples(index=False, name=None)]


def to_dict(analysis: Analysis) -> dict[str, Any]:
    ranks = []
    steps_of = _steps_by_rank(analysis.steps)
    for total in records(analysis.totals):
        rank = total["rank"]
        ranks.append({
            "rank": rank,
            "source": total.pop("source", None),
            "steps": steps_of.get(rank, []),
            "total": {k: v for k, v in total.items() if k != "rank"},
        })
    run = {k: v for k, v in analysis.run.items()}
    return {
        "schema": SCHEMA,
        "run": run,
        "ranks": ranks,
        "by_collective": records(analysis.by_collective),
        "by_group": records(analysis.by_group),
        "by_scope": records(analysis.by_scope),
        "collectives": design_records(analysis.collectives),
        "wait_transfer": records(analysis.wait_transfer),
        "unmatched": records(analysis.unmatched),
        "pipeline_spans": records(analysis.pipeline_spans),
        "stragglers": records(analysis.stragglers),
        "prefetch": records(analysis.prefetch),
        "bubbles": records(analysis.bubbles),
        "all_to_all": all_to_all_records(analysis),
        "moe_layers": records(analysis.moe_layers),
        "ring_steps": records(analysis.ring_steps),
        "moe_passes": records(analysis.moe_passes),
        "ring_passes": records(analysis.ring_passes),
        "comm_classification": records(analysis.comm_families),
        "unclassified_comm_candidates": records(analysis.comm_candidates),
        "collective_conflicts": records(analysis.collective_conflicts),
        "clock_offsets_ns": {str(k): int(v) for k, v in analysis.clock_offsets_ns.items()},
        "diagnoses": list(analysis.diagnoses),
        **json_sections(analysis),
    }


def _steps_by_rank(steps: pd.DataFrame) -> dict[Any, list[dict[str, Any]]]:
    """Each rank's step records (STEP_RECORD_KEYS), in the frame's order: one pass over all rows, not
    a filter of the whole frame per rank (quadratic: 4,096 ranks took 3 s)."""
    out: dict[Any, list[dict[str, Any]]] = {}
    if steps is None or steps.empty:
        return out
    keys = [c for c in STEP_RECORD_KEYS if c in steps.columns]
    for rank, rec in zip(steps["rank"].tolist(), records(steps, keys)):
        out.setdefault(rank, []).append(rec)
    return out


def all_to_all_records(analysis: Analysis) -> list[dict[str, Any]]:
    """One object per all-to-all instance, with its traffic matrix when the splits are known: `members`
    (the ranks, ascending) and `traffic_bytes`[i][j], the bytes members[i] sent to members[j]."""
    matrices = traffic_matrices(analysis.all_to_all_traffic) if len(analysis.all_to_all_traffic) else {}
    out = records(analysis.all_to_all)
    for rec in out:
        if rec["instance"] in matrices:
            rec["members"], rec["traffic_bytes"] = matrices[rec["instance"]]
    return out


def to_json(analysis: Analysis) -> str:
    return orjson.dumps(to_dict(analysis), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
                        default=_clean).decode()
