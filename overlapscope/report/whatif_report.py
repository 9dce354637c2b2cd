"""Words and JSON for the what-if sections: overlap bounds, critical path, slack, what-if, cost model.

tables.py, json_report.py and the gate call in here, so their own edits stay one line each.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.bounds import BOUND_COLUMNS, worst_steps
from ..analysis.result import Analysis

MS = 1e6
# What-if keys named in the summary lines, the finest first: they say which collective, where.
HEADLINE_KEYS = ("collective_pass", "collective_scope", "collective")
_KEY_WORDS = {"collective": "every {}", "group": "process group {}", "scope": "everything launched in {}",
              "pass": "every collective in the {} pass", "collective_scope": "{}", "collective_pass": "{}"}


def _ms(ns: float) -> str:
    return "-" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else f"{ns / MS:,.3f}"


def _pct(p: float) -> str:
    return "-" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:.1f}"


def _frame(analysis: Analysis, name: str) -> pd.DataFrame:
    frame = getattr(analysis, name, None)
    return frame if isinstance(frame, pd.DataFrame) else pd.DataFrame()


def whatif_lines(analysis: Analysis, top: int = 3) -> list[str]:
    """"hiding all_gather of layers.3 would save 4.100 ms/step (6.0% of the critical path; 5.2 ms/step
    without waiting for its last rank)": the best key of each headline type."""
    w = _frame(analysis, "whatif")
    if w.empty:
        return []
    steps = max(len(_frame(analysis, "critical_steps")), 1)
    lines, said = [], set()
    for key_type in HEADLINE_KEYS:
        best = w[(w["key_type"] == key_type) & (w["saved_ns"] > 0)].head(1)
        for r in best.itertuples(index=False):
            if (r.saved_ns, r.collectives) in said:
                continue  # the same collectives under another name
            said.add((r.saved_ns, r.collectives))
            lines.append(f"hiding {_KEY_WORDS[key_type].format(r.key)} would save {_ms(r.saved_per_step_ns)} ms/step "
                         f"({_pct(r.saved_pct)}% of the critical path"
                         + (f"; {_ms(r.saved_no_sync_ns / steps)} ms/step without waiting for its last rank)"
                            if r.saved_no_sync_ns > r.saved_ns else ")"))
    if not lines:
        waits = w[w["saved_no_sync_ns"] > 0].sort_values("saved_no_sync_ns", ascending=False, kind="stable").head(1)
        if len(waits):
            r = waits.iloc[0]
            lines.append("hiding any collective's transfer would save nothing: the critical path runs through the ranks "
                         f"they wait for; without that wait, {_KEY_WORDS[r['key_type']].format(r['key'])} would save "
                         f"{_ms(r['saved_no_sync_ns'] / steps)} ms/step")
        else:
            lines.append("hiding any one collective would save nothing: the critical path runs through compute, "
                         "host launches and waits, not through communication")
    return lines[:top] + _instance_line(analysis)


def _instance_line(analysis: Analysis) -> list[str]:
    """The one collective whose hiding alone saves most."""
    s = _frame(analysis, "collective_slack")
    if s.empty or not (s["saved_ns"] > 0).any():
        return []
    r = s.iloc[0]
    where = ", ".join(dict.fromkeys(str(v) for v in (r["pass"], r["scope"]) if str(v)))
    return [f"the single collective that matters most: {r['collective']} #{int(r['instance'])} of step {int(r['step'])}"
            + (f" ({where})" if where else "") + f", {_ms(r['saved_ns'])} ms saved if hidden alone"]


def _bounds_table(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["rank", "measured ms", "perfect overlap ms", "no overlap ms", "launch-bound idle ms", "efficiency %"]
    b, t = _frame(analysis, "overlap_bounds"), analysis.totals
    if b.empty:
        return header, []
    steps = t.set_index("rank")["steps"].clip(lower=1)
    return header, [[str(r.rank), _ms(r.window_ns / steps[r.rank]), _ms(r.perfect_overlap_ns / steps[r.rank]),
                     _ms(r.no_overlap_ns / steps[r.rank]), _ms(r.launch_bound_idle_ns / steps[r.rank]),
                     _pct(r.overlap_efficiency_pct)] for r in b.itertuples(index=False)]


def _critical_table(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["step", "ends on rank", "path ms", "comm on path ms", "ranks crossed", "lanes crossed"]
    c = _frame(analysis, "critical_steps")
    return header, [[str(r.step), str(r.rank), _ms(r.path_ns), _ms(r.comm_on_path_ns), str(r.ranks_on_path),
                     str(r.lanes_on_path)] for r in c.itertuples(index=False)]


def _whatif_table(analysis: Analysis, top: int = 12) -> tuple[list[str], list[list[str]]]:
    header = ["key type", "key", "collectives", "saved ms/step", "saved % of path", "without its sync ms/step"]
    w = _frame(analysis, "whatif")
    steps = max(len(_frame(analysis, "critical_steps")), 1)
    return header, [[str(r.key_type), str(r.key) or "(none)", str(r.collectives), _ms(r.saved_per_step_ns),
                     _pct(r.saved_pct), _ms(r.saved_no_sync_ns / steps)] for r in w.head(top).itertuples(index=False)]


def _cost_table(analysis: Analysis, top: int = 12) -> tuple[list[str], list[list[str]]]:
    header = ["group", "collective", "MB", "count", "link", "peak GB/s", "busbw GB/s", "% of peak",
              "expected ms", "measured ms", "flags"]
    c = _frame(analysis, "cost_model")
    if c.empty:
        return header, []
    flags = np.select([c["latency_bound"], c["below_peak"]], ["latency-bound", "below peak"], "")
    flags = np.where(c["tp_across_hosts"], np.char.add(flags.astype(str), " tp across hosts"), flags)
    g = c.assign(flags=flags).groupby(["group", "collective", "bytes", "link", "flags"], as_index=False, dropna=False).agg(
        count=("instance", "size"), peak=("peak_gbps", "first"), busbw=("busbw_gbps", "median"),
        pct=("pct_of_peak", "median"), expected=("expected_ns", "first"), measured=("transfer_ns", "median"))
    g = g.sort_values(["count", "bytes"], ascending=False, kind="stable").head(top)
    num = lambda v: "-" if pd.isna(v) else f"{v:,.1f}"  # noqa: E731
    return header, [[str(r.group) or "-", str(r.collective), f"{r.bytes / 1e6:,.3f}", str(r.count), str(r.link) or "-",
                     num(r.peak), num(r.busbw), _pct(r.pct), _ms(r.expected), _ms(r.measured), str(r.flags).strip() or "-"]
                    for r in g.itertuples(index=False)]


def sections(analysis: Analysis) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the what-if tables, for tables.sections."""
    return [("Overlap bounds per rank (ms per step)", *_bounds_table(analysis)),
            ("Critical path per step (across ranks)", *_critical_table(analysis)),
            ("What-if: step time saved if fully hidden", *_whatif_table(analysis)),
            ("Cost model: collectives with a known size", *_cost_table(analysis))]


def _records(frame: pd.DataFrame, columns: list[str] | None = None) -> list[dict[str, Any]]:
    from .json_report import records

    return records(frame, columns)


def json_sections(analysis: Analysis) -> dict[str, Any]:
    """The JSON report's what-if sections (DESIGN.md "Interfaces")."""
    steps = analysis.steps
    bound_cols = ["rank", "step", *BOUND_COLUMNS]
    return {
        "overlap_bounds": {
            "ranks": _records(_frame(analysis, "overlap_bounds")),
            "steps": _records(steps, bound_cols) if set(BOUND_COLUMNS) <= set(steps.columns) else [],
            "worst_steps": _records(worst_steps(steps)) if set(BOUND_COLUMNS) <= set(steps.columns) else [],
        },
        "critical_path": {"steps": _records(_frame(analysis, "critical_steps")),
                          "segments": _records(_frame(analysis, "critical_path"))},
        "collective_slack": _records(_frame(analysis, "collective_slack")),
        "whatif": _records(_frame(analysis, "whatif")),
        "cost_model": _records(_frame(analysis, "cost_model")),
    }
