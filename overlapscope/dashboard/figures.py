"""Summary numbers and breakdown figures, read only from an Analysis (and, for the Gantt, the lanes).

One colour per kind of time and per collective, shared by the timeline and every chart, so the
orange of an all-reduce bar is the orange of its kernels. Every function returns None when its
section has no data, and the layout says "no data for this run" instead of drawing an empty chart.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.result import key_label
from ..core.roles import microbatch_label
from .data import RunData, escape
from .steps import step_label

COLORS = {"ranges": "#9e9e9e", "compute": "#4c78a8", "comm": "#f58518", "memcpy": "#54a24b",
          # dark red: tests/test_palette.py keeps it far (CIELAB dE >= 25) from every other colour here, also
          # under simulated protanopia, deuteranopia and tritanopia (the old #e45756 was dE 1.7 from memcpy
          # green for a deuteranope)
          "exposed": "#8b0000", "hidden": "#f5b971", "theory": "#222222"}
COLLECTIVE_COLORS = {
    "all_reduce": "#f58518", "all_gather": "#b279a2", "reduce_scatter": "#ff9da6", "broadcast": "#9d755d",
    "reduce": "#d67195", "all_to_all": "#eeca3b", "send_recv": "#72b7b2", "send": "#72b7b2", "recv": "#439894",
    "barrier": "#79706e",
}
PASS_COLORS = {"forward": "#4c78a8", "backward": "#b279a2"}
RANK_COLORS = ("#4c78a8", "#e45756", "#54a24b", "#b279a2", "#f58518", "#72b7b2", "#eeca3b", "#9d755d")
# Legends above the plot, right-aligned: below it they collide with the axis title.
LEGEND_TOP = {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1.0, "xanchor": "right"}
TOP_KEYS = 20


def collective_color(collective: str | None) -> str:
    return COLLECTIVE_COLORS.get(collective or "", "#bab0ac")


@dataclass(frozen=True)
class Summary:
    step_ms: float
    exposed_ms: float
    exposed_pct: float
    overlap_pct: float
    worst_rank: int
    worst_rank_pct: float
    worst_collective: str
    worst_collective_ms: float
    ranks: int
    steps: int


def _pct(num: float, den: float) -> float:
    return 100.0 * num / den if den > 0 else float("nan")


def summary(data: RunData) -> Summary:
    """Run-level numbers: per-step means over ranks, percentages from sums over ranks and steps."""
    t = data.analysis.totals
    steps = t["steps"].to_numpy(np.float64)
    pct = t["exposed_comm_pct"].fillna(0.0).to_numpy()
    worst = int(np.argmax(pct)) if len(t) else 0
    by = data.analysis.by_collective.groupby("collective", observed=True)["exposed_comm_ns"].sum()
    by = by[by.index.astype(str) != ""] if (by.index.astype(str) != "").any() else by
    worst_coll = str(by.idxmax()) if len(by) and by.max() > 0 else ""
    return Summary(
        step_ms=float(np.mean(t["window_ns"] / steps) / 1e6),
        exposed_ms=float(np.mean(t["exposed_comm_ns"] / steps) / 1e6),
        exposed_pct=_pct(t["exposed_comm_ns"].sum(), t["window_ns"].sum()),
        overlap_pct=_pct(t["overlapped_ns"].sum(), t["comm_ns"].sum()),
        worst_rank=int(t["rank"].iloc[worst]) if len(t) else -1,
        worst_rank_pct=float(pct[worst]) if len(t) else float("nan"),
        worst_collective=worst_coll,
        worst_collective_ms=float(by.max() / steps.sum() / 1e6) if worst_coll else 0.0,
        ranks=len(t), steps=int(steps.max()) if len(t) else 0,
    )


def per_rank_step_ms(frame: pd.DataFrame, column: str, data: RunData) -> pd.Series:
    """Exposed comm per key in ms per step, averaged over ranks (sum over ranks / rank-steps)."""
    rank_steps = float(data.analysis.totals["steps"].sum()) or 1.0
    keys = frame[column].astype(str)
    return frame.groupby(keys)["exposed_comm_ns"].sum() / rank_steps / 1e6


def breakdown_figure(frame: pd.DataFrame, column: str, title: str) -> go.Figure | None:
    """Exposed vs hidden comm per key, summed over ranks and steps, largest exposed first."""
    if frame is None or frame.empty:
        return None
    keys = frame[column].astype(str)
    agg = frame.groupby(keys)[["comm_ns", "exposed_comm_ns"]].sum()
    agg = agg.sort_values("exposed_comm_ns", ascending=False).head(TOP_KEYS)[::-1]
    labels = escape(np.array([key_label(k, column) for k in agg.index], dtype=object))
    exposed_ms = agg["exposed_comm_ns"].to_numpy() / 1e6
    hidden_ms = (agg["comm_ns"] - agg["exposed_comm_ns"]).to_numpy() / 1e6
    exposed_color = [collective_color(k) for k in agg.index] if column == "collective" else COLORS["exposed"]
    fig = go.Figure([
        go.Bar(y=labels, x=exposed_ms, orientation="h", name="exposed", marker_color=exposed_color,
               marker_line={"color": COLORS["exposed"], "width": 2}, hovertemplate="%{y}: %{x:.3f} ms exposed"),
        go.Bar(y=labels, x=hidden_ms, orientation="h", name="hidden behind compute",
               marker_color=COLORS["hidden"], hovertemplate="%{y}: %{x:.3f} ms hidden"),
    ])
    fig.update_layout(barmode="stack", xaxis_title="comm ms, all ranks and steps", meta={"section": title},
                      height=120 + 26 * len(agg), margin={"l": 220, "r": 20, "t": 30, "b": 40}, legend=LEGEND_TOP)
    return fig


def prefetch_figure(prefetch: pd.DataFrame) -> go.Figure | None:
    """FSDP prefetch gap per unit, one bar per pass, mean over ranks and steps."""
    needed = {"unit", "pass", "prefetch_gap_ns"}
    if prefetch is None or prefetch.empty or not needed <= set(prefetch.columns):
        return None
    agg = prefetch.groupby(["unit", "pass"], observed=True)["prefetch_gap_ns"].mean().reset_index()
    fig = go.Figure([
        go.Bar(y=escape(part["unit"].to_numpy()), x=part["prefetch_gap_ns"].to_numpy() / 1e6, orientation="h",
               name=str(p), marker_color=PASS_COLORS.get(str(p), "#888888"),
               hovertemplate="%{y}: %{x:.3f} ms")
        for p, part in agg.groupby("pass", observed=True)])
    units = agg["unit"].nunique()
    fig.update_layout(barmode="group",
                      xaxis_title="ms compute waited for the unit's all-gather (mean over ranks, steps)",
                      height=130 + 30 * units, margin={"l": 220, "r": 20, "t": 30, "b": 40}, legend=LEGEND_TOP)
    return fig


def bubble_figure(bubbles: pd.DataFrame) -> go.Figure | None:
    """PP bubble per stage (rank): measured bars, the schedule's theory as a marker."""
    needed = {"rank", "bubble_pct", "theory_pct"}
    if bubbles is None or bubbles.empty or not needed <= set(bubbles.columns):
        return None
    agg = bubbles.groupby("rank")[["bubble_pct", "theory_pct"]].mean().reset_index()
    stages = [f"stage r{r}" for r in agg["rank"]]
    fig = go.Figure([
        go.Bar(x=stages, y=agg["bubble_pct"], name="measured", marker_color=COLORS["exposed"],
               hovertemplate="%{x}: %{y:.1f}% bubble"),
        go.Scatter(x=stages, y=agg["theory_pct"], name="theory", mode="markers",
                   marker={"symbol": "line-ew-open", "size": 40, "line": {"width": 3, "color": COLORS["theory"]}},
                   hovertemplate="%{x}: theory %{y:.1f}%"),
    ])
    fig.update_layout(yaxis_title="% of step (mean over steps)",
                      height=300, margin={"l": 60, "r": 20, "t": 30, "b": 40}, legend=LEGEND_TOP)
    return fig


def microbatch_gantt(data: RunData, step: int) -> go.Figure | None:
    """Micro-batch ranges (`Forward i`, `Backward i`, `PP:...`) per stage in one step (or ALL_STEPS)."""
    bars = []
    t0 = None
    for rv in data.ranks:
        window = rv.window(step)
        ranges = [ln for ln in rv.lanes if ln.kind == "ranges"]
        if window is None or not ranges:
            continue
        lane = ranges[0]
        idx = lane.visible(*window)
        names = lane.names[idx].astype(str)
        uniq, inverse = np.unique(names, return_inverse=True)  # parse each distinct label once
        labels = [microbatch_label(n) for n in uniq]  # the syntax bubbles.py reads (core/roles.py)
        hit = np.array([lb is not None for lb in labels], dtype=bool)[inverse]
        if not hit.any():
            continue
        forward = np.array([lb is not None and lb[1] == "F" for lb in labels], dtype=bool)[inverse][hit]
        s, e = lane.starts[idx][hit] + rv.offset_ns, lane.ends[idx][hit] + rv.offset_ns
        t0 = s.min() if t0 is None else min(t0, s.min())
        bars.append((rv.rank, names[hit], forward, s, e))
    if not bars:
        return None
    fig = go.Figure()
    for rank, names, forward, s, e in bars:
        fig.add_trace(go.Bar(
            y=[f"stage r{rank}"] * s.size, base=(s - t0) / 1e6, x=(e - s) / 1e6, orientation="h", text=names,
            marker_color=np.where(forward, PASS_COLORS["forward"], PASS_COLORS["backward"]), showlegend=False,
            hovertemplate="%{text}: %{x:.3f} ms<extra></extra>", textposition="inside"))
    fig.update_layout(barmode="overlay", xaxis_title=f"ms from the first micro-batch of {step_label(step)}",
                      meta={"step": step},
                      height=120 + 40 * len(bars), margin={"l": 100, "r": 20, "t": 40, "b": 40})
    return fig


def wait_heatmap(collectives: pd.DataFrame) -> go.Figure | None:
    """Rank x collective: share of the collective's time spent waiting for the last rank (from
    Analysis.wait_transfer: times, not sums over collectives that ran at once)."""
    needed = {"rank", "collective", "wait_ns", "transfer_ns"}
    if collectives is None or collectives.empty or not needed <= set(collectives.columns):
        return None
    agg = collectives.groupby(["rank", collectives["collective"].astype(str)])[["wait_ns", "transfer_ns"]].sum()
    wait = agg["wait_ns"].unstack(fill_value=0)
    transfer = agg["transfer_ns"].unstack(fill_value=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = 100.0 * wait / (wait + transfer)
    text = (wait / 1e6).round(3).astype(str) + " ms wait / " + (transfer / 1e6).round(3).astype(str) + " ms transfer"
    fig = go.Figure(go.Heatmap(
        z=share.to_numpy(), x=escape(share.columns.to_numpy()), y=[f"r{r}" for r in share.index],
        text=text.to_numpy(), colorscale="Reds", zmin=0, zmax=100, colorbar={"title": "% wait"},
        hovertemplate="%{y} %{x}: %{z:.1f}% wait<br>%{text}<extra></extra>"))
    fig.update_layout(xaxis_title="share of each collective's time spent waiting for the last rank",
                      height=140 + 30 * len(share), margin={"l": 60, "r": 20, "t": 10, "b": 60})
    return fig


def step_variation(steps: pd.DataFrame) -> go.Figure | None:
    """Step time and exposed comm per step, one line per rank."""
    if steps is None or steps.empty:
        return None
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("step time (ms)", "exposed comm (ms)"))
    for rank, part in steps.groupby("rank"):
        x = [str(s) for s in part["step"]]
        for row, col in ((1, "window_ns"), (2, "exposed_comm_ns")):
            fig.add_trace(go.Scatter(x=x, y=part[col] / 1e6, mode="lines+markers", name=f"r{rank}",
                                     legendgroup=f"r{rank}", showlegend=row == 1,
                                     line={"color": RANK_COLORS[int(rank) % len(RANK_COLORS)]},
                                     hovertemplate=f"r{rank} step %{{x}}: %{{y:.3f}} ms<extra></extra>"),
                          row=row, col=1)
    fig.update_xaxes(type="category", title_text="step", row=2, col=1)
    fig.update_layout(height=400, margin={"l": 60, "r": 20, "t": 30, "b": 40})
    return fig


def compare_frame(a: RunData, b: RunData, section: str, column: str) -> pd.DataFrame:
    """Exposed comm per key (ms per step, mean over ranks) in both runs and B - A, largest change first."""
    left = per_rank_step_ms(getattr(a.analysis, section), column, a).rename("a_ms")
    right = per_rank_step_ms(getattr(b.analysis, section), column, b).rename("b_ms")
    both = pd.concat([left, right], axis=1).fillna(0.0)
    both["delta_ms"] = both["b_ms"] - both["a_ms"]
    both.index = [key_label(k, column) for k in both.index.astype(str)]
    order = np.argsort(-np.abs(both["delta_ms"].to_numpy()), kind="stable")
    return both.iloc[order].head(TOP_KEYS)


def compare_figure(frame: pd.DataFrame, a_label: str, b_label: str, title: str) -> go.Figure | None:
    if frame.empty:
        return None
    keys = escape(frame.index.to_numpy())[::-1]
    fig = go.Figure([
        go.Bar(y=keys, x=frame["a_ms"][::-1], orientation="h", name=f"A {a_label}", marker_color="#4c78a8"),
        go.Bar(y=keys, x=frame["b_ms"][::-1], orientation="h", name=f"B {b_label}", marker_color="#f58518"),
        go.Bar(y=keys, x=frame["delta_ms"][::-1], orientation="h", name="B - A", marker_color=COLORS["exposed"]),
    ])
    fig.update_layout(barmode="group", xaxis_title="exposed comm, ms per step (mean over ranks)", meta={"section": title},
                      height=140 + 60 * len(frame), margin={"l": 220, "r": 20, "t": 30, "b": 40}, legend=LEGEND_TOP)
    return fig
