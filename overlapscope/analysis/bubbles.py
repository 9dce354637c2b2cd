"""Pipeline bubbles (DESIGN.md "Pipeline bubble"): how long each stage's compute lane sits idle per step.

bubble_ns = |W \\ C| on the stage's rank: the step window minus its compute. A stage blocked in a
receive waiting for its neighbour is not computing, so that time is bubble, not communication (the
event table never counts p2p or its wait as compute). Beside it, the schedule's theoretical bubble
fraction with p stages, m micro-batches and v stages (chunks) per rank, assuming equal forward,
backward(-input) and weight-gradient times as the papers do:
  GPipe, 1F1B                       (p-1)/(m+p-1)
  interleaved 1F1B, looped BFS      (p-1)/(v·m+p-1)
  interleaved zero bubble (ZB1P)    (p-1)/(3·v·m+p-1)   ZB-H1 of arXiv:2401.10241, per chunk
  ZB-V (ScheduleZBVZeroBubble)      0                   its zero-bubble property (torch docs)
  DualPipeV / unknown               NaN (no closed form)
Schedule, stages and micro-batches come from the run manifest's layout (`schedule`, `stages`,
`microbatches`, `chunks` / `virtual_stages` / `stages_per_rank`; p counts pipeline ranks), else from the labels: `Forward i` / `Backward i`
(GPipe and reference runs) and `PP:<stage><action><mb>` (torch's multi-stage schedules).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.codes import isin, per_name, shared_codes
from ..core.frames import column_values, empty_frame, frame_of, stacked_frames
from ..core.roles import microbatch_label
from .overlap import lane_sets

BUBBLE_COLUMNS = ("rank", "step", "window_ns", "compute_ns", "bubble_ns", "bubble_pct", "theory_pct",
                  "schedule", "stages", "microbatches", "chunks")
SPAN_COLUMNS = ("rank", "step", "stage", "action", "microbatch", "start_ns", "end_ns")
_INTERLEAVED = ("interleaved1f1b", "loopedbfs", "interleaved")
_ZB1P = ("interleavedzerobubble", "zb1p", "zbh1")
_ZERO = ("zbvzerobubble", "zbv", "zbh2")


def normalize_schedule(name: str | None) -> str:
    """'ScheduleInterleaved1F1B' -> 'interleaved1f1b'; '' when unknown."""
    key = re.sub(r"[^a-z0-9]", "", str(name or "").lower())
    return key[len("schedule"):] if key.startswith("schedule") else key


def theory_fraction(schedule: str, stages: int, microbatches: int, chunks: int = 1) -> float:
    """The schedule's bubble fraction (0-1) with equal F/B/W times; NaN when there is no closed form."""
    s, p, m, v = normalize_schedule(schedule), stages, microbatches, max(chunks, 1)
    if p < 1 or m < 1:
        return float("nan")
    if s in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if s in _INTERLEAVED:
        return (p - 1) / (v * m + p - 1)
    if s in _ZB1P:
        return (p - 1) / (3 * v * m + p - 1)
    if s in _ZERO:
        return 0.0
    return float("nan")


def microbatch_spans(events: pd.DataFrame) -> pd.DataFrame:
    """SPAN_COLUMNS for one rank: each micro-batch label's compute, from the first start to the last end
    of the compute it launched (the label's own range when it launched none)."""
    # The labels are the rows whose `role` is microbatch; names are parsed once each (categorical codes).
    lab = np.flatnonzero(isin(column_values(events, "role"), ("microbatch",)))
    if lab.size == 0:
        return empty_frame(SPAN_COLUMNS, {"action": object})
    info = per_name(column_values(events, "name"), microbatch_label)[lab]
    start = column_values(events, "start_ns", np.int64)
    end = column_values(events, "end_ns", np.int64)
    lanes, launch_lanes = shared_codes(column_values(events, "lane"), column_values(events, "launch_lane"))
    comp = np.flatnonzero(isin(column_values(events, "kind"), ("compute",)) & (end > start))
    owner = iv.innermost_containing(lanes[lab], start[lab], end[lab], launch_lanes[comp],
                                    column_values(events, "launch_ns", np.int64)[comp])
    hit = owner >= 0
    agg = pd.DataFrame({"o": owner[hit], "s": start[comp][hit], "e": end[comp][hit]}).groupby("o").agg(
        s=("s", "min"), e=("e", "max"))
    s_ns, e_ns = start[lab].copy(), end[lab].copy()
    s_ns[agg.index.to_numpy()] = agg["s"].to_numpy()
    e_ns[agg.index.to_numpy()] = agg["e"].to_numpy()
    out = pd.DataFrame({
        "rank": column_values(events, "rank", np.int64)[lab], "step": column_values(events, "step", np.int64)[lab],
        "stage": np.array([i[0] for i in info], dtype=np.int64), "action": np.array([i[1] for i in info], dtype=object),
        "microbatch": np.array([i[2] for i in info], dtype=np.int64), "start_ns": s_ns, "end_ns": e_ns,
    })
    return out.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)


def pipeline_layout(manifest: Mapping[str, Any] | None, spans: pd.DataFrame, n_ranks: int) -> dict[str, Any]:
    """schedule, stages, microbatches, chunks, source ("manifest" | "labels" | "")."""
    layout = dict((manifest or {}).get("layout") or {})
    flat = manifest or {}
    schedule = layout.get("schedule", flat.get("pp_schedule"))
    stages = layout.get("stages", flat.get("pp_stages"))
    micro = layout.get("microbatches", flat.get("pp_microbatches"))
    chunks = layout.get("chunks", layout.get("virtual_stages", layout.get("stages_per_rank", flat.get("pp_chunks"))))
    if schedule and stages and micro:
        return {"schedule": normalize_schedule(schedule), "stages": int(stages), "microbatches": int(micro),
                "chunks": int(chunks or 1), "source": "manifest"}
    if spans.empty:
        return {"schedule": "", "stages": 0, "microbatches": 0, "chunks": 1, "source": ""}
    per_rank_step = spans[spans["action"] == "F"].groupby(["rank", "step"])["microbatch"].nunique()
    multi = (spans["stage"] >= 0).any()
    chunks_found = int(spans[spans["stage"] >= 0].groupby("rank")["stage"].nunique().max()) if multi else 1
    # p counts pipeline ranks: with v chunks per rank, the stage indices number p·v.
    stages_found = int(spans["stage"].nunique()) // chunks_found if multi else int(spans["rank"].nunique())
    micro_found = int(per_rank_step.max()) if len(per_rank_step) else 0
    if multi:
        kind = "interleavedzerobubble" if spans["action"].isin(["I", "W"]).any() else (
            "interleaved1f1b" if chunks_found > 1 else "1f1b")
    else:
        # GPipe runs every forward before the first backward; 1F1B starts backwards while forwards remain.
        first_b = spans[spans["action"] == "B"].groupby(["rank", "step"])["start_ns"].min()
        last_f = spans[spans["action"] == "F"].groupby(["rank", "step"])["start_ns"].max()
        both = first_b.index.intersection(last_f.index)
        kind = "1f1b" if (first_b[both] < last_f[both]).any() else "gpipe"
    return {"schedule": normalize_schedule(schedule) or kind, "stages": int(stages or stages_found),
            "microbatches": int(micro or micro_found), "chunks": int(chunks or chunks_found), "source": "labels"}


def stage_bubbles(events: pd.DataFrame, windows: pd.DataFrame, *, sets: dict[str, iv.Intervals] | None = None) -> pd.DataFrame:
    """rank, step, window_ns, compute_ns, bubble_ns, bubble_pct for one stage's rank. sets:
    `lane_sets(events)` when known."""
    compute = (sets or lane_sets(events))["compute"]
    starts = column_values(windows, "start_ns", np.int64)
    ends = column_values(windows, "end_ns", np.int64)
    window_ns = ends - starts
    compute_ns = iv.overlap_lengths(starts, ends, compute)
    bubble_ns = window_ns - compute_ns
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(window_ns > 0, 100.0 * bubble_ns / window_ns, np.nan)
    rank = int(events["rank"].iloc[0]) if len(events) else -1
    return frame_of({"rank": np.full(len(windows), rank, np.int64), "step": column_values(windows, "step", np.int64),
                         "window_ns": window_ns, "compute_ns": compute_ns, "bubble_ns": bubble_ns, "bubble_pct": pct})


def pipeline_bubbles(tables: Mapping[int, pd.DataFrame], windows: Mapping[int, pd.DataFrame],
                     manifest: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(bubbles with BUBBLE_COLUMNS, micro-batch spans with SPAN_COLUMNS, diagnoses).

    Empty frames for a run that is not a pipeline (no layout in the manifest, no micro-batch labels).
    """
    ranks = sorted(tables)
    return bubbles_of_ranks([microbatch_spans(tables[r]) for r in ranks],
                            lambda: [stage_bubbles(tables[r], windows[r]) for r in ranks], manifest, len(tables))


def bubbles_of_ranks(spans: list[pd.DataFrame], stages: Callable[[], list[pd.DataFrame]],
                     manifest: Mapping[str, Any] | None, n_ranks: int) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The reduce of `pipeline_bubbles`: per-rank `microbatch_spans` and (called only for a pipeline)
    per-rank `stage_bubbles`, in rank order."""
    spans = stacked_frames(spans)
    layout = pipeline_layout(manifest, spans, n_ranks)
    if not layout["source"]:
        return (pd.DataFrame(columns=list(BUBBLE_COLUMNS)), spans, [])
    out = stacked_frames(stages())
    theory = theory_fraction(layout["schedule"], layout["stages"], layout["microbatches"], layout["chunks"])
    out["theory_pct"] = 100.0 * theory
    out["schedule"] = layout["schedule"]
    out["stages"] = np.int64(layout["stages"])
    out["microbatches"] = np.int64(layout["microbatches"])
    out["chunks"] = np.int64(layout["chunks"])
    notes: list[str] = []
    measured = 100.0 * out["bubble_ns"].sum() / max(int(out["window_ns"].sum()), 1)
    if np.isfinite(theory):
        notes.append(f"pipeline bubble {measured:.1f}% of step time ({layout['schedule']}, p={layout['stages']}, "
                     f"m={layout['microbatches']}{', v=' + str(layout['chunks']) if layout['chunks'] > 1 else ''}); "
                     f"the schedule's theory is {100 * theory:.1f}%")
    return out[list(BUBBLE_COLUMNS)], spans, notes
