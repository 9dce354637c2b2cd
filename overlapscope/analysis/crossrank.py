"""The cross-rank and "why" sections of `analyze`: collectives, clock offsets, prefetch gaps, bubbles.

One entry point so `analyze` wires them with one call; each analyzer stays a pure function of event
tables and step windows.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.table import Run
from ..core import intervals as iv
from ..core.frames import column_values, frame_of, stacked_frames
from .bubbles import bubbles_of_ranks, microbatch_spans, stage_bubbles
from .collectives import collectives_of_ranks, uncovered_set
from .groups import rank_groups
from .matching import MatchConfig, comm_rows
from .overlap import lane_sets
from .prefetch import diagnose as prefetch_diagnoses
from .prefetch import prefetch_gaps


def one_host(run: Run) -> bool:
    """Every rank ran on one host (the run manifest says so): Kineto ranks there share one clock."""
    hosts = (run.manifest or {}).get("hosts")
    return isinstance(hosts, list) and len(hosts) == 1


def group_sizes(run: Run) -> dict[str, int]:
    """Process group name -> size, from the ranks' RankMeta.process_groups."""
    return {pg.name: pg.size for trace in run.ranks for pg in trace.meta.process_groups if pg.size and pg.size > 0}


def rank_parts(events: pd.DataFrame, windows: pd.DataFrame, *,
               sets: dict[str, iv.Intervals] | None = None) -> dict[str, pd.DataFrame]:
    """The per-rank map of the cross-rank sections (small tables; rows carry the reader's rank,
    renumbered by `cross_rank_sections`): comm rows, uncovered time, prefetch gaps, micro-batch
    spans and stage bubbles. sets: `lane_sets(events)` when known."""
    sets = sets or lane_sets(events)
    return {"comm": comm_rows(events), "uncovered": uncovered_set(events, windows, sets=sets),
            # not windows[[...]]: ~0.4 ms
            "windows": frame_of({c: column_values(windows, c) for c in ("start_ns", "end_ns")}),
            "prefetch": prefetch_gaps(events, windows, sets=sets), "spans": microbatch_spans(events),
            "stage_bubbles": stage_bubbles(events, windows, sets=sets), "rank": _carried_rank(events)}


def _carried_rank(events: pd.DataFrame) -> int | None:
    """The one rank every row of the table (so of its parts) carries; None when it holds several."""
    rank = column_values(events, "rank")
    if rank.size == 0 or rank.min() != rank.max():
        return None
    return int(rank[0])


def _numbered(frame: pd.DataFrame, rank: int, carried: int | None) -> pd.DataFrame:
    # Ranks are numbered after every file is read: the map saw the reader's rank (maybe -1). A part
    # whose rows carry `rank` already is kept as it is: no copy (~1 ms a rank), and no column read
    # (~0.1 ms for a frame not read before: three parts of every rank).
    if frame.empty or carried == rank or (carried is None and (column_values(frame, "rank") == rank).all()):
        return frame
    return frame.assign(rank=np.full(len(frame), rank, dtype=frame["rank"].dtype))


def cross_rank_sections(run: Run, parts: Sequence[Mapping[str, pd.DataFrame]]) -> dict[str, Any]:
    """Keyword arguments for `Analysis`: collectives, stragglers, unmatched, clock_offsets_ns,
    prefetch, bubbles, pipeline_spans, diagnoses; and comm_groups (the process group of every comm
    row, inferred where the trace names none, or None), which `combine` uses for by_group. parts: `rank_parts` of each rank, in run.ranks
    (rank) order."""
    ranks = [t.rank for t in run.ranks]
    groups_of = rank_groups((t.rank, t.meta.process_groups) for t in run.ranks)
    coll = collectives_of_ranks({r: _numbered(p["comm"], r, p["rank"]) for r, p in zip(ranks, parts)},
                                {r: p["uncovered"] for r, p in zip(ranks, parts)},
                                group_sizes=group_sizes(run), groups_of=groups_of,
                                windows={r: p["windows"] for r, p in zip(ranks, parts)},
                                config=MatchConfig(shared_clock=one_host(run)))
    prefetch = stacked_frames([_numbered(p["prefetch"], r, p["rank"]) for r, p in zip(ranks, parts)])
    # A rank without events keeps the rank -1 stage_bubbles gives it (as analyzing its table does).
    bubbles, spans, bubble_notes = bubbles_of_ranks(
        [_numbered(p["spans"], r, p["rank"]) for r, p in zip(ranks, parts)],
        lambda: [_numbered(p["stage_bubbles"], r, p["rank"]) if len(t.events) else p["stage_bubbles"]
                 for r, p, t in zip(ranks, parts, run.ranks)],
        run.manifest, len(ranks))
    return {
        "collectives": coll.collectives, "wait_transfer": coll.wait_transfer, "stragglers": coll.stragglers, "unmatched": coll.unmatched,
        "clock_offsets_ns": coll.clock_offsets_ns, "prefetch": prefetch, "bubbles": bubbles,
        "pipeline_spans": spans,
        "diagnoses": coll.diagnoses + prefetch_diagnoses(prefetch) + bubble_notes,
        "comm_groups": coll.comm_groups,
    }


def collective_summary(collectives: pd.DataFrame, wait_transfer: pd.DataFrame) -> pd.DataFrame:
    """Per (group, collective, op) over all ranks: collectives, rows, wait/transfer and their exposed
    parts (ns; per rank the time of the key, wait_transfer.py, summed over ranks), median
    per-collective busbw. Worst exposed first."""
    cols = ["group", "collective", "op", "collectives", "rows", "wait_ns", "transfer_ns", "exposed_wait_ns",
            "exposed_transfer_ns", "median_busbw_gbps"]
    if collectives.empty:
        return pd.DataFrame(columns=cols)
    keys = ["group", "collective", "op"]
    out = collectives.groupby(keys, as_index=False, observed=True).agg(
        collectives=("instance", "nunique"), rows=("rank", "size"), median_busbw_gbps=("instance_busbw_gbps", "median"))
    times = wait_transfer.groupby(keys, as_index=False, observed=True)[
        ["wait_ns", "transfer_ns", "exposed_wait_ns", "exposed_transfer_ns"]].sum()
    out = out.merge(times, on=keys, how="left")
    exposed = out["exposed_wait_ns"] + out["exposed_transfer_ns"]
    return out.assign(_e=exposed).sort_values(["_e", "group"], ascending=[False, True], kind="stable") \
        .drop(columns="_e").reset_index(drop=True)[cols]


def bubble_summary(bubbles: pd.DataFrame) -> pd.DataFrame:
    """Per stage (rank) over its steps: steps, window_ns, bubble_ns, bubble_pct (from the sums), theory_pct,
    schedule, stages, microbatches, chunks."""
    cols = ["rank", "steps", "window_ns", "bubble_ns", "bubble_pct", "theory_pct", "schedule", "stages",
            "microbatches", "chunks"]
    if bubbles.empty:
        return pd.DataFrame(columns=cols)
    out = bubbles.groupby("rank", as_index=False).agg(
        steps=("step", "size"), window_ns=("window_ns", "sum"), bubble_ns=("bubble_ns", "sum"),
        theory_pct=("theory_pct", "first"), schedule=("schedule", "first"), stages=("stages", "first"),
        microbatches=("microbatches", "first"), chunks=("chunks", "first"))
    out["bubble_pct"] = 100.0 * out["bubble_ns"] / out["window_ns"].where(out["window_ns"] > 0)
    return out[cols]
