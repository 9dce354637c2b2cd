"""The timeline figure: per rank, a range lane, compute/comm lanes, a memcpy lane and the exposed lane.

Every lane is one WebGL line trace (segments separated by NaN, drawn as thick strokes) plus one
invisible marker trace that carries the hover: a few hundred thousand intervals stay a handful of
traces. Only what meets the current view is sent, merged to the pixel width when a lane has more
intervals than `max_exact` (data.decimate). The exposed lane is never merged: it is drawn from
`exposed_intervals` clipped to the step window, so its total is analyze()'s exposed_comm_ns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from ..analysis import intervals as iv
from .data import ALL_STEPS, LANE_ORDER, Blocks, Lane, RunData, decimate
from .figures import COLORS, collective_color

LANE_PX = 22
BAR_PX = 14


@dataclass(frozen=True, kw_only=True)
class TimelineConfig:
    width_px: int = 1600
    """Pixels the x axis spans: sets how narrow a gap can be merged without being seen."""
    max_exact: int = 2000
    """Per lane, up to this many visible intervals are drawn one by one; more are merged per pixel."""
    max_exposed: int = 50_000
    """Above this many exposed intervals in view even the exposed lane is merged (its total stays exact)."""

    def __post_init__(self) -> None:
        if self.width_px < 100 or self.max_exact < 1 or self.max_exposed < 1:
            raise ValueError("TimelineConfig: width_px >= 100, max_exact >= 1 and max_exposed >= 1")


def _segments(starts: np.ndarray, ends: np.ndarray, t0: int, y: float) -> tuple[np.ndarray, np.ndarray]:
    x = np.full((starts.size, 3), np.nan)
    x[:, 0] = (starts - t0) / 1e6
    x[:, 1] = (ends - t0) / 1e6
    yy = np.full((starts.size, 3), np.nan)
    yy[:, :2] = y
    return x.ravel(), yy.ravel()


def _ms(values: np.ndarray) -> np.ndarray:
    return np.char.mod("%.3f ms", values / 1e6).astype(object)


def _hover_rows(lane: Lane, b: Blocks) -> tuple[np.ndarray, str]:
    """customdata rows and the hovertemplate for a lane's blocks."""
    one = b.count == 1
    names = lane.names[b.first]
    what = np.where(one, names, np.char.add(np.char.add(b.count.astype(str), " events, first "),
                                           names.astype(str)).astype(object))
    cols = [what, _ms(b.ends - b.starts), _ms(b.busy_ns)]
    tpl = "<b>%{customdata[0]}</b><br>duration %{customdata[1]} (busy %{customdata[2]})"
    if lane.kind == "comm":
        coll = np.where(one, lane.collective[b.first], "merged").astype(object)
        nbytes = lane.nbytes[b.first]
        wait, transfer = lane.wait_ns[b.first], lane.transfer_ns[b.first]
        known = one & (wait >= 0)
        cols += [coll, np.where(one & (nbytes >= 0), np.char.mod("%d", nbytes), "?").astype(object),
                 np.where(known, _ms(wait), "n/a").astype(object),
                 np.where(known, _ms(np.maximum(transfer, 0)), "n/a").astype(object)]
        tpl += ("<br>collective %{customdata[3]} · bytes %{customdata[4]}"
                "<br>wait %{customdata[5]} · transfer %{customdata[6]}")
    return np.column_stack(cols), tpl


def _lane_traces(lane: Lane, b: Blocks, t0: int, y: float, label: str, px_ns: float) -> list[go.Scattergl]:
    if b.starts.size == 0:
        return []
    custom, tpl = _hover_rows(lane, b)
    traces = []
    if lane.kind == "comm":
        colls = np.where(b.count == 1, lane.collective[b.first], "").astype(str)
        groups = [(c, colls == c) for c in np.unique(colls)]
    else:
        groups = [(None, np.ones(b.starts.size, bool))]
    for coll, sel in groups:
        color = collective_color(coll) if lane.kind == "comm" else COLORS[lane.kind]
        x, yy = _segments(b.starts[sel], b.ends[sel], t0, y)
        traces.append(go.Scattergl(
            x=x, y=yy, mode="lines", line={"color": color, "width": BAR_PX}, hoverinfo="skip",
            opacity=0.55 if lane.kind == "ranges" else 1.0, showlegend=False,
            name=label, meta={"lane": label, "kind": lane.kind, "rank": lane.rank}))
    # Hover points: the middle of every block, plus both ends of blocks wide enough to hover away from it.
    wide = np.flatnonzero((b.ends - b.starts) > 3 * BAR_PX * px_ns)
    hx = np.concatenate([(b.starts + b.ends) / 2, b.starts[wide] + px_ns * BAR_PX, b.ends[wide] - px_ns * BAR_PX])
    traces.append(go.Scattergl(
        x=(hx - t0) / 1e6, y=np.full(hx.size, y), mode="markers", marker={"size": BAR_PX, "opacity": 0},
        customdata=np.concatenate([custom, custom[wide], custom[wide]]), hovertemplate=tpl + f"<extra>{label}</extra>",
        showlegend=False, name=label, meta={"lane": label, "kind": "hover", "rank": lane.rank}))
    return traces


def _exposed_traces(exposed: iv.Intervals, t0: int, y: float, label: str, rank: int, total_ns: int,
                    px_ns: float, cfg: TimelineConfig) -> list[go.Scattergl]:
    s, e = exposed.starts, exposed.ends
    merged = s.size > cfg.max_exposed
    if merged:
        grown = iv.merge(s, e + np.int64(max(1, int(px_ns))))
        s, e = grown.starts, grown.ends - np.int64(max(1, int(px_ns)))
    x, yy = _segments(s, e, t0, y)
    meta = {"lane": label, "kind": "exposed", "rank": rank, "exposed_ns": total_ns, "merged": merged}
    line = go.Scattergl(x=x, y=yy, mode="lines", line={"color": COLORS["exposed"], "width": BAR_PX},
                        hoverinfo="skip", showlegend=False, name=label, meta=meta)
    mid = (s + e) / 2
    hover = go.Scattergl(
        x=(mid - t0) / 1e6, y=np.full(s.size, y), mode="markers", marker={"size": BAR_PX, "opacity": 0},
        customdata=_ms(e - s), showlegend=False, name=label,
        hovertemplate="<b>exposed comm</b><br>%{customdata}<extra>" + label + "</extra>",
        meta={"lane": label, "kind": "hover", "rank": rank})
    return [line, hover]


def timeline_figure(data: RunData, step: int, view_ns: tuple[int, int] | None = None,
                    cfg: TimelineConfig = TimelineConfig()) -> go.Figure:
    """The timeline of `step` (or ALL_STEPS); `view_ns` is the aligned [lo, hi) shown, default the step."""
    span = data.span(step)
    if span is None:
        return go.Figure(layout={"title": f"step {step} is not in this run"})
    t0 = span[0]
    lo, hi = view_ns if view_ns else span
    px_ns = (hi - lo) / cfg.width_px
    traces: list[go.Scattergl] = []
    ticks: list[tuple[float, str]] = []
    shapes = []
    y = 0.0
    points = 0
    for rv in data.ranks:
        window = rv.window(step)
        if window is None:
            continue
        top = y
        off = rv.offset_ns
        for kind in LANE_ORDER[:-1]:
            for lane in (ln for ln in rv.lanes if ln.kind == kind):
                b = decimate(lane, lane.visible(lo - off, hi - off), px_ns, cfg.max_exact)
                label = f"r{rv.rank} {lane.label}"
                traces += _lane_traces(lane, b._replace(starts=b.starts + off, ends=b.ends + off), t0, y, label, px_ns)
                points += b.starts.size
                ticks.append((y, label))
                y += 1
        exposed = iv.clip(rv.exposed, *window)
        total_ns = exposed.total
        label = f"r{rv.rank} exposed comm"
        keep = (exposed.ends + off > lo) & (exposed.starts + off < hi)
        shown = iv.Intervals(exposed.starts[keep] + off, exposed.ends[keep] + off)
        traces += _exposed_traces(shown, t0, y, label, rv.rank, total_ns, px_ns, cfg)
        points += len(shown)
        ticks.append((y, f"{label} ({total_ns / 1e6:.3f} ms)"))
        y += 1
        shapes.append({"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": top - 0.5, "y1": y - 0.5,
                       "line": {"width": 1, "color": "#bbbbbb"}, "fillcolor": "rgba(0,0,0,0)", "layer": "below"})
    step_label = "all steps" if step == ALL_STEPS else f"step {step}"
    fig = go.Figure(data=traces)
    fig.update_layout(
        height=int(max(y, 1) * LANE_PX + 110), margin={"l": 260, "r": 20, "t": 40, "b": 50},
        title={"text": f"{data.label}: {step_label}", "font": {"size": 14}},
        hovermode="closest", plot_bgcolor="white", shapes=shapes,
        uirevision=f"{data.path}|{step}",
        meta={"step": step, "view_ms": [(lo - t0) / 1e6, (hi - t0) / 1e6], "points": points, "t0_ns": t0},
        xaxis={"title": f"ms from the start of {step_label}", "range": [(lo - t0) / 1e6, (hi - t0) / 1e6],
               "showgrid": True, "gridcolor": "#eeeeee", "zeroline": False},
        yaxis={"tickvals": [t for t, _ in ticks], "ticktext": [s for _, s in ticks], "autorange": "reversed",
               "fixedrange": True, "showgrid": False, "zeroline": False},
    )
    return fig


def view_from_relayout(relayout: dict | None, t0_ns: int) -> tuple[int, int] | None:
    """Aligned ns range from a Plotly relayoutData, None for autorange/reset or no x change."""
    if not relayout:
        return None
    if "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        a, b = relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]
    elif isinstance(relayout.get("xaxis.range"), list) and len(relayout["xaxis.range"]) == 2:
        a, b = relayout["xaxis.range"]
    else:
        return None
    try:
        lo, hi = sorted((float(a), float(b)))
    except (TypeError, ValueError):
        return None
    return t0_ns + int(round(lo * 1e6)), t0_ns + int(round(hi * 1e6))
