"""Analysis: pure functions from event tables to numbers. `analyze` runs them all for a run."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.table import RankTrace, Run
from .bounds import bound_columns, bound_totals
from . import all_to_all as a2a
from .ring import RING_LABEL, ring_attention_part, ring_steps
from .breakdown import exposed_by_key_and_step, exposed_by_key_of_intervals, exposed_by_label_pass, launch_scopes
from .costmodel import CostConfig
from ..core.codes import as_str, isin
from ..core.frames import (built_once, column_values, frame_of, schema_of, shared_result, stacked_frames,
                           with_shared_labels)
from .comm_classes import comm_classes
from .crossrank import cross_rank_sections, rank_parts
from .depgraph import rank_graph
from .overlap import lane_sets, overlap_columns, totals
from .result import Analysis, OVERLAP_COLUMNS
from .streams import comm_on_compute_lanes, diagnose as diagnose_streams
from .whatif_sections import whatif_sections
from .windows import windows_and_partial

__all__ = ["analyze", "analyze_rank", "combine", "Analysis", "OVERLAP_COLUMNS", "RANK_SECTIONS"]

# Per-rank sections: each comes from one rank's table alone, so ranks can be analyzed anywhere
# (a process pool, a Dask worker) and only these frames travel back. None has a rank column: ranks
# are numbered only once every file is read (the cross-rank parts carry the reader's rank, which
# cross_rank_sections replaces).
RANK_SECTIONS = ("steps", "by_collective", "by_group", "by_scope", "by_key_steps")


def analyze(run: Run, *, no_steps: bool = False, cost: CostConfig | None = None) -> Analysis:
    """Every number of DESIGN.md for a run; sections a run cannot give are empty frames. cost: the
    cost model's link peaks and latency (default: from the GPU model)."""
    return combine(run, [analyze_rank(trace, no_steps=no_steps) for trace in run.ranks], cost=cost)


def analyze_rank(trace: RankTrace, *, no_steps: bool = False) -> dict[str, pd.DataFrame]:
    """One rank's share of `analyze`: RANK_SECTIONS, its step windows, its comm-on-compute lanes and
    "cross_rank", the per-rank map of the cross-rank sections (crossrank.rank_parts): the reduce then
    needs no event table."""
    windows, partial = windows_and_partial(trace, no_steps=no_steps)
    ev = trace.events
    comm_rows = isin(column_values(ev, "kind"), ("comm",))
    sets = lane_sets(ev)  # merged compute/comm/copy, shared by every analyzer below
    overlap = overlap_columns(ev, windows, sets=sets)
    overlap = frame_of({**overlap, **bound_columns(ev, windows, overlap, sets=sets)})  # one frame (a concat: ~0.3 ms)
    out = {"windows": windows, "partial": partial, "steps": overlap,
           "comm_on_compute": comm_on_compute_lanes(ev, sets["compute"]),
           "graph": rank_graph(ev, windows, trace.meta.stream_waits)}
    key_steps = {}
    scopes = launch_scopes(ev, comm_rows)
    for column, keys in (
        ("collective", as_str(column_values(ev, "collective"))),
        ("group", as_str(column_values(ev, "group"))),
        ("scope", scopes),
    ):
        out[f"by_{column}"], key_steps[column] = exposed_by_key_and_step(ev, windows, keys, column, sets=sets)
    out["by_key_steps"] = _by_key_steps(key_steps)
    out["cross_rank"] = rank_parts(ev, windows, sets=sets)
    # expert / context parallelism: all-to-all split bytes and ring-step attention (small frames)
    out["all_to_all_rows"] = a2a.all_to_all_rows(ev, scopes)
    out["ring_parts"] = ring_attention_part(ev, windows, scopes, sets=sets)
    out["moe_passes"] = exposed_by_label_pass(ev, windows, scopes, a2a.MOE_LABEL, sets=sets)
    out["ring_passes"] = exposed_by_label_pass(ev, windows, scopes, RING_LABEL, sets=sets)
    # every rank's frames of one schema share their labels' Index, and an empty one is one shared frame:
    # the reduce checks each once per batch, not once per rank
    out["cross_rank"] = {k: shared_result(v) if isinstance(v, pd.DataFrame) else v for k, v in out["cross_rank"].items()}
    for frame in out["graph"]:
        with_shared_labels(frame)
    return {k: shared_result(v) if isinstance(v, pd.DataFrame) else v for k, v in out.items()}


def _by_key_steps(per_step: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The three per-step breakdowns (keyed by their column) as one frame: step, section, key,
    count, comm_ns, exposed_comm_ns. Column by column (a Series concat each): renaming, assigning
    and concatenating three frames cost ~2 ms a rank, the most of any step of analyze_rank."""
    frames = list(per_step.values())
    if not any(len(f) for f in frames):  # a rank without comm: the same frame, empty, built once per schema
        schema = tuple((c, schema_of(f)) for c, f in per_step.items())
        return built_once(f"by_key_steps {schema}", lambda: _stacked_steps(per_step, frames))
    return _stacked_steps(per_step, frames)


def _stacked_steps(per_step: dict[str, pd.DataFrame], frames: list[pd.DataFrame]) -> pd.DataFrame:
    def stacked(columns: list[str]) -> pd.Series | np.ndarray:
        parts = [f[c] for f, c in zip(frames, columns)]
        dtypes = {p.dtype for p in parts}
        if len(dtypes) == 1 and isinstance(next(iter(dtypes)), np.dtype) and next(iter(dtypes)).kind in "iub":
            # one NumPy number dtype throughout: what pd.concat gives, without its ~0.4 ms
            return np.concatenate([p.to_numpy() for p in parts])
        return pd.concat(parts, ignore_index=True)

    sections = np.repeat(np.array([f"by_{c}" for c in per_step], dtype=object), [len(f) for f in frames])
    out = {"step": stacked(["step"] * len(frames)), "section": pd.Series(sections, dtype="str"), "key": stacked(list(per_step))}
    for c in ("count", "comm_ns", "exposed_comm_ns"):
        out[c] = stacked([c] * len(frames))
    return pd.DataFrame(out)


def combine(run: Run, sections: list[dict[str, pd.DataFrame]], *, cost: CostConfig | None = None) -> Analysis:
    """The reduce: per-rank results (in run.ranks order) plus the cross-rank sections, one Analysis."""
    def stacked(name: str) -> pd.DataFrame:
        frames = [sec[name] for sec in sections]
        if len(frames) != len(run.ranks):
            raise ValueError(f"{len(frames)} per-rank sections for {len(run.ranks)} ranks")
        # one concat and one rank column (a per-rank copy and column insert cost ~1 ms a rank)
        out = stacked_frames(frames)
        out.insert(0, "rank", np.repeat(np.array([t.rank for t in run.ranks], dtype=np.int32),
                                        [len(f) for f in frames]))
        return out

    per_step = stacked("steps")
    total = totals(per_step)
    sources = {t.rank: t.source for t in run.ranks}
    total.insert(1, "source", total["rank"].map(sources))
    diagnoses: list[str] = []
    for trace, sec in zip(run.ranks, sections):
        diagnoses += diagnose_streams(trace.rank, sec["comm_on_compute"])
    cross = cross_rank_sections(run, [sec["cross_rank"] for sec in sections])
    comm_groups = cross.pop("comm_groups")
    if comm_groups is not None:
        sections = [_regrouped(trace.rank, sec, comm_groups) for trace, sec in zip(run.ranks, sections)]
    by_key_steps = stacked("by_key_steps")
    instances, traffic = a2a.all_to_all_traffic(cross["collectives"], stacked("all_to_all_rows"),
                                                cross["clock_offsets_ns"], group_ranks(run))
    classes = comm_classes(run)
    cross["diagnoses"] = classes.notes + diagnoses + cross["diagnoses"] + a2a.diagnose(instances)
    hiding = whatif_sections(run, [sec["graph"] for sec in sections], [sec["windows"] for sec in sections], cross,
                             cost or CostConfig())
    critical = hiding.pop("critical_comm")
    cross["diagnoses"] = cross["diagnoses"] + hiding.pop("path_notes")
    per_step = per_step.merge(critical, on=["rank", "step"], how="left")
    per_step["critical_comm_ns"] = per_step["critical_comm_ns"].fillna(0).astype(np.int64)
    return Analysis(
        run=run_identity(run, {t.rank: sec["partial"] for t, sec in zip(run.ranks, sections) if sec["partial"]}),
        steps=per_step,
        totals=total,
        by_collective=stacked("by_collective"),
        by_group=stacked("by_group"),
        by_scope=stacked("by_scope"),
        by_key_steps=by_key_steps,
        comm_families=classes.families, comm_candidates=classes.candidates,
        collective_conflicts=classes.conflicts,
        overlap_bounds=bound_totals(per_step),
        all_to_all=instances,
        all_to_all_traffic=traffic,
        moe_layers=a2a.moe_exposure(by_key_steps),
        ring_steps=ring_steps(by_key_steps, stacked("ring_parts")),
        moe_passes=stacked("moe_passes"),
        ring_passes=stacked("ring_passes"),
        **cross,
        **hiding,
    )


def _regrouped(rank: int, section: dict[str, pd.DataFrame], comm_groups: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A rank's section with by_group (and its per-step rows) recomputed from the process groups
    inferred across ranks: gloo names no group on its ops, but every rank's trace lists its groups
    (RankMeta.process_groups), so the by-group table names the group the wait/transfer table does."""
    comm = section["cross_rank"]["comm"]
    groups = comm_groups.loc[column_values(comm_groups, "rank") == rank].sort_values("row")
    if comm.empty or len(groups) != len(comm) or (groups["group"].to_numpy() == comm["group"].to_numpy()).all():
        return section
    by_group, per_step = exposed_by_key_of_intervals(
        column_values(comm, "start_ns", np.int64), column_values(comm, "end_ns", np.int64),
        groups["group"].to_numpy(object),
        section["windows"], section["cross_rank"]["uncovered"], "group")
    key_steps = section["by_key_steps"]
    regrouped = per_step.rename(columns={"group": "key"}).assign(section="by_group")[key_steps.columns]
    key_steps = pd.concat([regrouped if name == "by_group" else part
                           for name, part in key_steps.groupby("section", sort=False)], ignore_index=True)
    return {**section, "by_group": by_group, "by_key_steps": key_steps}


def group_ranks(run: Run) -> dict[str, list[int]]:
    """Process group name -> its ranks in group order, from the ranks' RankMeta.process_groups."""
    return {pg.name: list(pg.ranks) for trace in run.ranks for pg in trace.meta.process_groups if pg.ranks}


def run_identity(run: Run, partial: dict[int, dict] | None = None) -> dict:
    """The run's `run` section; partial: rank -> the steps it analyzed, for ranks that stopped early."""
    first = run.ranks[0]
    manifest = run.manifest or {}
    identity = {
        "path": run.path,
        "world_size": run.world_size,
        "ranks": [t.rank for t in run.ranks],
        "device": first.device,
        "device_name": first.meta.device_name or manifest.get("device_name"),
        "backend": first.meta.backend or manifest.get("backend"),
        "rank_from": {str(t.rank): t.rank_from for t in run.ranks},
        "manifest": manifest,
    }
    if partial:  # ranks that stopped early: which steps each analyzed, and which it lacks
        every = sorted({int(s) for t in run.ranks for s in t.steps["step"].tolist()})
        identity["incomplete_ranks"] = {
            str(rank): {**p, "missing_steps": [s for s in every if s not in p["analyzed_steps"]]}
            for rank, p in sorted(partial.items())}
    return identity
