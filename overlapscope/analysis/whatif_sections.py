"""The "what would hiding it buy" sections of `analyze`: critical path, slack, what-if, cost model.

One entry point for `combine`, like crossrank.py for the cross-rank sections; each analyzer stays a
pure function (depgraph, longest_path, critical_path, whatif, costmodel).
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.frames import stacked_frames
from ..core.table import Run
from .costmodel import COST_COLUMNS, CostConfig, cost_model
from .critical_path import PATH_COLUMNS, STEP_COLUMNS, critical_comm_by_rank, critical_paths, slack, solve
from .depgraph import RankGraph
from .whatif import WHATIF_COLUMNS, whatif_by_instance, whatif_by_key

SLACK_COLUMNS = ("instance", "step", "group", "collective", "scope", "pass", "slack_ns", "on_critical_path",
                 "saved_ns")


def hosts_of(run: Run) -> dict[int, str]:
    """rank -> host name from the run manifest (`ranks.<r>.host`), else the reader's meta; '' unknown."""
    ranks = (run.manifest or {}).get("ranks") or {}
    out = {}
    for t in run.ranks:
        entry = ranks.get(str(t.rank)) if isinstance(ranks, dict) else None
        out[t.rank] = str((entry or {}).get("host") or t.meta.host or "")
    return out


def tp_groups(run: Run) -> set[str]:
    """Process groups whose description names tensor parallelism (`mesh_tp`, `tp`...)."""
    out = set()
    for t in run.ranks:
        for pg in t.meta.process_groups:
            if "tp" in re.split(r"[^a-z0-9]+", pg.desc.lower()):
                out.add(pg.name)
    return out


def cost_section(run: Run, collectives: pd.DataFrame, config: CostConfig = CostConfig(),
                 device_name: str | None = None) -> pd.DataFrame:
    name = device_name or next((t.meta.device_name for t in run.ranks if t.meta.device_name), None)
    return cost_model(collectives, hosts=hosts_of(run), device_name=name, tp_groups=tp_groups(run), config=config)


def whatif_sections(run: Run, graphs: Sequence[RankGraph], windows: Sequence[pd.DataFrame],
                    cross: Mapping[str, Any], cost: CostConfig = CostConfig()) -> dict[str, Any]:
    """Keyword arguments for `Analysis`: critical_steps, critical_path, collective_slack, whatif, cost_model,
    and critical_comm (rank, step, critical_comm_ns) for the steps frame. graphs, windows: per rank in
    run.ranks order; cross: crossrank.cross_rank_sections' result."""
    ranks = [t.rank for t in run.ranks]
    collectives = cross["collectives"]
    empty = {"critical_steps": pd.DataFrame(columns=STEP_COLUMNS), "critical_path": pd.DataFrame(columns=PATH_COLUMNS),
             "collective_slack": pd.DataFrame(columns=SLACK_COLUMNS), "whatif": pd.DataFrame(columns=WHATIF_COLUMNS),
             "cost_model": cost_section(run, collectives, cost) if len(collectives) else pd.DataFrame(columns=COST_COLUMNS),
             "critical_comm": pd.DataFrame({"rank": [], "step": [], "critical_comm_ns": []}), "path_notes": []}
    if not any(len(g.nodes) for g in graphs):
        return empty
    solved = solve(dict(zip(ranks, graphs)), cross["clock_offsets_ns"], _window_starts(ranks, windows), collectives)
    path, per_step, cut = critical_paths(solved)
    node_slack = slack(solved)
    out = dict(empty, critical_steps=per_step, critical_path=path, whatif=whatif_by_key(solved, node_slack),
               critical_comm=critical_comm_by_rank(path), path_notes=_cut_note(cut))
    out["collective_slack"] = _slack_table(solved, node_slack)
    return out


def _window_starts(ranks: list[int], windows: Sequence[pd.DataFrame]) -> dict[int, np.ndarray]:
    """rank -> the starts of its step windows, read from the ranks' frames stacked once (the first
    column read of a frame builds its columns' hash table: ~0.1 ms a rank read one by one)."""
    if not windows:
        return {}
    starts = stacked_frames(list(windows))["start_ns"].to_numpy(np.int64)
    return dict(zip(ranks, np.split(starts, np.cumsum([len(w) for w in windows])[:-1])))


def _cut_note(cut: list[int]) -> list[str]:
    if not cut:
        return []
    shown = ", ".join(map(str, cut[:8])) + (", ..." if len(cut) > 8 else "")
    return [f"the critical path of {len(cut)} step(s) ({shown}) runs back into itself (host-thread work that "
            "overlaps its lane predecessor, as gloo send/recv can) and is cut there: those steps' path "
            "segments cover less than their path_ns"]


def _slack_table(solved, node_slack: np.ndarray) -> pd.DataFrame:
    nodes, inst = solved.nodes, solved.graph.inst
    sel = inst >= 0
    if not sel.any():
        return pd.DataFrame(columns=SLACK_COLUMNS)
    frame = nodes.loc[sel, ["step", "group", "collective", "scope", "pass"]].assign(
        inst=inst[sel], slack_ns=node_slack[sel])
    per = frame.groupby("inst").agg(step=("step", "min"), group=("group", "first"),
                                    collective=("collective", "first"), scope=("scope", "first"),
                                    **{"pass": ("pass", "first")}, slack_ns=("slack_ns", "min")).reset_index()
    for text in ("group", "collective", "scope", "pass"):  # the nodes' categorical text, as str
        per[text] = per[text].astype("str")
    saved = whatif_by_instance(solved, node_slack).set_index("instance")["saved_ns"]
    per["saved_ns"] = saved.reindex(per["inst"]).to_numpy(np.float64)
    per["on_critical_path"] = per["slack_ns"].to_numpy() == 0
    per["instance"] = solved.instance_ids[per["inst"].to_numpy()]
    return per.sort_values(["saved_ns", "slack_ns", "instance"], ascending=[False, True, True],
                           kind="stable", na_position="last").reset_index(drop=True)[list(SLACK_COLUMNS)]
