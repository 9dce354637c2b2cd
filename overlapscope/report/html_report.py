"""One self-contained HTML file a reviewer can open: summary, diagnoses, one step's timeline, the
breakdowns and, with a baseline, the gate's verdict per metric with its evidence.

No server and no network: the vendored plotly.js bundle (overlapscope/dashboard/assets, read as a
file, not imported) is inlined, the figures are plain plotly JSON inlined beside it, and a
Content-Security-Policy forbids the page any request at all. The tables are `tables.sections`, the
very rows `analyze` prints, so both show the same numbers. Every trace-supplied string is escaped.
"""
from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.overlap import lane_sets
from ..analysis.result import Analysis
from ..core import intervals as iv
from . import gate_baseline as gb
from . import tables
from .gate import MetricResult, Verdict
from .summary import change_text, describe, fmt, outcome_line

PLOTLY_JS = Path(__file__).resolve().parents[1] / "dashboard" / "assets" / "plotly-cartesian.min.js"
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "font-src data:; connect-src 'none'")
MAX_TIMELINE_RANKS = 16
"""The timeline draws at most this many ranks (those with the most exposed comm in the step): a page for
512 ranks stays readable and small."""
# the dashboard's colours (dashboard/figures.py COLORS; tests/test_palette.py checks exposed stands apart)
LANE_COLORS = {"compute": "#4c78a8", "comm": "#f58518", "exposed": "#8b0000"}
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1400px;color:#222;padding:0 16px}
h1{font-size:22px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0 16px} td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px}
th{background:#f4f4f4;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
.regression{color:#b00020;font-weight:600} .inconclusive{color:#8a6d00;font-weight:600}
.pass,.improved{color:#1b7f3b;font-weight:600} .line{font-family:ui-monospace,monospace;font-size:12px}
.fig{width:100%;min-height:320px} ul{padding-left:20px}
"""


def render_html(analysis: Analysis, *, verdict: Verdict | None = None, baseline: dict[str, Any] | None = None,
                title: str | None = None) -> str:
    """The report page. verdict/baseline: the gate's verdict of this run and the baseline it was judged against."""
    path = str(analysis.run.get("path", ""))
    figures: dict[str, dict] = {}
    body = [f"<h1>overlapscope report: {_e(title or path)}</h1>", _identity(analysis)]
    if verdict is not None:
        body += _verdict_section(verdict, baseline, analysis, figures)
    lines = tables.summary_lines(analysis)
    diagnoses = set(analysis.diagnoses)
    body += ["<h2 id='summary'>Summary</h2>", _list([x for x in lines if x not in diagnoses], "summary-lines"),
             "<h2 id='diagnoses'>Diagnoses</h2>",
             _list(list(analysis.diagnoses), "diagnoses") if analysis.diagnoses else "<p>No diagnoses.</p>"]
    step = typical_step(analysis)
    timeline = timeline_figure(analysis, step) if step is not None else None
    if timeline is not None:
        figures["timeline"] = timeline
        body += [f"<h2 id='timeline'>Timeline of step {step}</h2>",
                 "<p>The step whose exposed communication (summed over ranks) is the median of the run's steps; "
                 "the exposed lane draws exactly the intervals counted as exposed"
                 + (f"; the {MAX_TIMELINE_RANKS} ranks with the most exposed time" if
                    analysis.steps["rank"].nunique() > MAX_TIMELINE_RANKS else "") + ".</p>",
                 "<div id='timeline-fig' class='fig'></div>"]
    bars = _breakdown_figure(analysis)
    body.append("<h2 id='breakdowns'>Breakdowns</h2>")
    if bars is not None:
        figures["breakdown"] = bars
        body.append("<div id='breakdown-fig' class='fig'></div>")
    for section_title, header, rows in tables.sections(analysis):
        body.append(_table(section_title, header, rows))
    return _page(title or path, "\n".join(body), figures)


def typical_step(analysis: Analysis) -> int | None:
    """The step whose exposed comm summed over ranks is the median of the run's steps (the lower one on a tie)."""
    steps = analysis.steps
    if steps.empty:
        return None
    per_step = steps.groupby("step")["exposed_comm_ns"].sum().sort_index()
    order = per_step.sort_values(kind="stable")
    return int(order.index[(len(order) - 1) // 2])


def timeline_figure(analysis: Analysis, step: int) -> dict | None:
    """Compute, comm and exposed lanes of every rank for one step (aligned clock, ms from the step's start)."""
    run = analysis.traces
    if run is None:
        return None
    rows = analysis.steps[analysis.steps["step"] == step]
    offsets = analysis.clock_offsets_ns or {}
    starts = rows["window_start_ns"].to_numpy(np.int64) + np.array([offsets.get(int(r), 0) for r in rows["rank"]],
                                                                   dtype=np.int64)
    if starts.size == 0:
        return None
    t0 = int(starts.min())
    shown = set(rows.nlargest(MAX_TIMELINE_RANKS, "exposed_comm_ns", keep="first")["rank"].astype(int))
    kinds = ("compute", "comm", "exposed")
    xs: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
    ys: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
    ticks, labels = [], []
    for trace in run.ranks:
        win = rows[rows["rank"] == trace.rank]
        if win.empty or trace.rank not in shown:
            continue
        lo, hi = int(win["window_start_ns"].iloc[0]), int(win["window_end_ns"].iloc[0])
        sets = lane_sets(trace.events)
        lanes = {"compute": iv.clip(sets["compute"], lo, hi), "comm": iv.clip(sets["comm"], lo, hi)}
        lanes["exposed"] = iv.difference(lanes["comm"], lanes["compute"])  # (M ∩ W) \ C, as analyze counts it
        shift = int(offsets.get(trace.rank, 0)) - t0
        for i, kind in enumerate(kinds):
            y = -(trace.rank * (len(kinds) + 1) + i)
            x_rect, y_rect = _rects(lanes[kind], shift, y)
            xs[kind].append(x_rect)
            ys[kind].append(y_rect)
            ticks.append(y)
            labels.append(f"rank {trace.rank} {kind}")
    data = [{"type": "scatter", "mode": "lines", "fill": "toself", "name": kind, "hoverinfo": "skip",
             "line": {"width": 0}, "fillcolor": LANE_COLORS[kind], "meta": {"kind": kind},
             "x": _list_nan(np.concatenate(xs[kind])), "y": _list_nan(np.concatenate(ys[kind]))} for kind in kinds]
    layout = {"height": 80 + 26 * len(ticks), "margin": {"l": 130, "r": 20, "t": 10, "b": 40},
              "xaxis": {"title": {"text": f"ms from the start of step {step}"}, "zeroline": False},
              "yaxis": {"tickvals": ticks, "ticktext": labels, "zeroline": False, "showgrid": False},
              "legend": {"orientation": "h"}, "meta": {"step": step}}
    return {"data": data, "layout": layout}


def _rects(s: iv.Intervals, shift: int, y: float) -> tuple[np.ndarray, np.ndarray]:
    """Closed rectangle paths (5 corners and a gap) for every interval, x in ms."""
    n = len(s)
    x0 = (s.starts + shift) / 1e6
    x1 = (s.ends + shift) / 1e6
    x = np.column_stack([x0, x1, x1, x0, x0, np.full(n, np.nan)]).ravel()
    yy = np.tile(np.array([y - 0.4, y - 0.4, y + 0.4, y + 0.4, y - 0.4, np.nan]), n)
    return x, yy


def _breakdown_figure(analysis: Analysis) -> dict | None:
    frame = analysis.by_collective
    if frame.empty or not frame["exposed_comm_ns"].any():
        return None
    steps = max(int(analysis.totals["steps"].max()), 1)
    g = frame.groupby("collective", observed=True)["exposed_comm_ns"].sum().sort_values(ascending=False).head(12)
    ranks = max(len(analysis.totals), 1)
    return {"data": [{"type": "bar", "x": [html.escape(str(k) or "(none)") for k in g.index],
                      "y": (g.to_numpy(np.float64) / 1e6 / steps / ranks).round(4).tolist(),
                      "marker": {"color": LANE_COLORS["exposed"]}, "name": "exposed"}],
            "layout": {"height": 300, "margin": {"l": 60, "r": 20, "t": 30, "b": 60},
                       "title": {"text": "exposed comm per collective, ms per step per rank"}}}


def _verdict_section(verdict: Verdict, baseline: dict[str, Any] | None, analysis: Analysis,
                     figures: dict[str, dict]) -> list[str]:
    th = verdict.thresholds
    out = [f"<h2 id='verdict'>Verdict: <span class='{verdict.outcome}' id='outcome'>{_e(outcome_line(verdict))}</span>"
           "</h2>",
           f"<p>Baseline <code>{_e(verdict.baseline_run.get('path', '?'))}</code> ({verdict.baseline_runs} "
           f"run{'s' if verdict.baseline_runs > 1 else ''}) against this run. A metric regresses when its worsening "
           f"is significant ({100 * (1 - th.alpha):g}% one-sided) and larger than the allowance; it is inconclusive "
           f"when the smallest worsening its data could detect with {100 * th.power:g}% power is larger than the "
           "threshold.</p>"]
    header = ["metric", "status", "baseline median", "this run", "change per step", "allowed worsening",
              "smallest detectable", "noise model"]
    rows = []
    for r in verdict.results:
        m = r.metric
        rows.append([m.name, r.status, fmt(r.baseline_median, m.unit), fmt(r.current_median, m.unit),
                     change_text(r, th.alpha), fmt(r.allowed, m.unit, delta=True),
                     fmt(r.detectable, m.unit, delta=True) if math.isfinite(r.detectable) else "none",
                     "run-to-run (each run one sample)" if r.model == "runs" else "step-to-step"])
    out.append(_table("Verdict per metric", header, rows, table_id="verdict-table", status_column=1))
    out.append("<ul class='line' id='verdict-lines'>" + "".join(
        f"<li>{_e(describe(r, th.alpha, th.power))}</li>" for r in verdict.results) + "</ul>")
    if verdict.notes or verdict.warnings:
        out.append(_list([f"note: {n}" for n in verdict.notes] + [f"warning: {w}" for w in verdict.warnings],
                         "verdict-notes"))
    if baseline is not None:
        for i, r in enumerate(x for x in verdict.results if x.metric.section == "steps"):
            fig = _evidence_figure(r, baseline, analysis)
            if fig is not None:
                figures[f"evidence-{i}"] = fig
                out.append(f"<div id='evidence-{i}-fig' class='fig'></div>")
    return out


def _evidence_figure(r: MetricResult, baseline: dict[str, Any], analysis: Analysis) -> dict | None:
    """Per-step values of each baseline run and of this run, with the baseline median and the failure line."""
    m = r.metric
    scale = 1e6 if m.unit == "ns" else 1.0
    current = gb.build_baseline(analysis)
    runs = gb.split_runs(baseline)
    data = []
    for i, doc in enumerate([*runs, current]):
        values = gb.step_series(doc, m.column).to_numpy(np.float64) / scale
        name = "this run" if i == len(runs) else f"baseline run {i + 1}"
        data.append({"type": "box", "y": _list_nan(values), "name": name, "boxpoints": "all", "jitter": 0.4,
                     "pointpos": 0, "marker": {"color": "#e45756" if i == len(runs) else "#4c78a8"}})
    if not math.isfinite(r.baseline_median):
        return None
    base = r.baseline_median / scale
    fail = (r.baseline_median + m.worse * r.allowed) / scale
    unit = "ms" if m.unit == "ns" else "%"
    shapes = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": y, "y1": y,
               "line": {"dash": dash, "color": color}} for y, dash, color in
              ((base, "dot", "#444"), (fail, "dash", "#b00020"))]
    return {"data": data, "layout": {
        "height": 300, "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "showlegend": False, "shapes": shapes,
        "title": {"text": f"{m.name}: per-step values ({unit}); dotted: baseline median, dashed: the allowance"},
        "meta": {"metric": m.name}}}


def _identity(analysis: Analysis) -> str:
    run = analysis.run
    keys = ("path", "world_size", "device", "device_name", "backend")
    items = [f"{k}: <code>{_e(run[k])}</code>" for k in keys if run.get(k) not in (None, "")]
    return "<p id='identity'>" + " · ".join(items) + "</p>"


def _list(lines: list[str], list_id: str) -> str:
    return f"<ul id='{list_id}'>" + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul>"


def _table(title: str, header: list[str], rows: list[list[str]], *, table_id: str | None = None,
           status_column: int | None = None) -> str:
    slug = table_id or "table-" + re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for j, cell in enumerate(row):
            cls = cell if j == status_column else ("" if tables._is_text(header[j]) else "num")
            cells.append(f"<td class='{cls}'>{_e(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<h3>{_e(title)}</h3><table id='{slug}' data-title='{_e(title)}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _page(title: str, body: str, figures: dict[str, dict]) -> str:
    data = json.dumps(figures, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")
    plotly = PLOTLY_JS.read_text(encoding="utf-8")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>overlapscope: {_e(title)}</title><style>{_STYLE}</style></head>
<body>
{body}
<script>{plotly}</script>
<script type="application/json" id="figures">{data}</script>
<script>
const FIGURES = JSON.parse(document.getElementById("figures").textContent);
for (const [id, fig] of Object.entries(FIGURES)) {{
  const el = document.getElementById(id + "-fig");
  Plotly.newPlot(el, fig.data, fig.layout, {{displaylogo: false, responsive: true}})
    .then(() => {{ el.dataset.drawn = "1"; }});
}}
</script>
</body></html>
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _list_nan(values: np.ndarray) -> list:
    """JSON has no NaN: plotly reads null as a gap."""
    values = np.asarray(values, np.float64)
    out = np.round(values, 6).astype(object)
    out[~np.isfinite(values)] = None
    return out.tolist()


def write_report(path: str | Path, analysis: Analysis, **kw: Any) -> None:
    from ..io_atomic import write_text

    write_text(path, render_html(analysis, **kw))

