"""The timeline figure: per rank, a range lane, compute/comm lanes, a memcpy lane and the exposed lane.

Each interval is a filled rectangle; all rectangles of one colour are one SVG trace (NaN-separated
polygons with fill "toself", which Plotly draws as a single path element), and invisible traces
(mode "none": no element per point) carry the hover: a few hundred thousand intervals stay about
ten traces and ten paths. Not WebGL: its context alone took ~0.3 s to create in a browser that
renders it in software, and Plotly's SVG lines would be one element per interval. Only what meets
the current view is sent, merged to the pixel width when a lane has more intervals than
`max_exact` (data.decimate). The exposed lane is never merged below `max_exposed`: it is drawn
from `exposed_intervals` clipped to the step window, so its total is analyze()'s exposed_comm_ns.
"""
from __future__ import annotations

from dataclasses import dataclass

import base64

import numpy as np

from ..core import intervals as iv
from .data import ALL_STEPS, LANE_ORDER, Blocks, Lane, RunData, decimate
from .figures import COLORS, collective_color

LANE_PX = 22
BAR_PX = 14


@dataclass(frozen=True, kw_only=True)
class TimelineConfig:
    width_px: int = 1200
    """Pixels the x axis spans (about, on a laptop screen): how narrow a gap can be merged unseen."""
    max_exact: int = 200
    """Per lane, up to this many visible intervals are drawn one by one; more have their sub-pixel gaps
    closed (invisible at this zoom; zooming in brings every interval back). Keeps a step of 8 ranks
    at a few thousand points, which is what software WebGL in a headless browser draws in time."""
    max_exposed: int = 50_000
    """Above this many exposed intervals in view even the exposed lane is merged (its total stays exact)."""

    def __post_init__(self) -> None:
        if self.width_px < 100 or self.max_exact < 1 or self.max_exposed < 1:
            raise ValueError("TimelineConfig: width_px >= 100, max_exact >= 1 and max_exposed >= 1")


BAR_HALF = BAR_PX / LANE_PX / 2
"""Half a bar's height in lane units (lanes are 1 apart and LANE_PX high)."""


def _rects(starts: np.ndarray, ends: np.ndarray, t0: int, y: float,
           dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """x (ms from t0) and y of rectangles [start, end) x [y - h, y + h], five vertices each:
    (s, y-h) (e, y-h) (e, y+h) (s, y+h) NaN. float32 is exact to well under a pixel and halves what
    is sent; the exposed lane uses float64 so its drawn widths add up to the ns."""
    s, e = (starts - t0) / 1e6, (ends - t0) / 1e6
    x = np.column_stack([s, e, e, s, np.full(starts.size, np.nan)]).astype(dtype)
    yy = np.tile(np.array([y - BAR_HALF, y - BAR_HALF, y + BAR_HALF, y + BAR_HALF, np.nan], np.float32),
                 (starts.size, 1))
    return x.ravel(), yy.ravel()


def rect_widths(x: np.ndarray) -> np.ndarray:
    """Width of each rectangle of a `_rects` x array (for tests and tools reading a figure back)."""
    v = np.asarray(x, dtype=np.float64).reshape(-1, 5)
    return v[:, 1] - v[:, 0]


def _fill_trace(x: np.ndarray, y: np.ndarray, color: str, opacity: float, meta: dict) -> dict:
    return {"type": "scatter", "mode": "none", "fill": "toself", "fillcolor": color, "opacity": opacity,
            "x": typed(x), "y": typed(y), "hoverinfo": "skip", "hoveron": "points", "showlegend": False,
            "meta": meta}


def typed(values: np.ndarray) -> dict:
    """A float array as plotly.js's typed-array spec: base64 bytes, parsed without JSON numbers."""
    arr = np.ascontiguousarray(values)
    code = {np.dtype(np.float32): "f4", np.dtype(np.float64): "f8"}[arr.dtype]
    return {"dtype": code, "bdata": base64.b64encode(arr.tobytes()).decode("ascii")}


def untyped(spec: dict | list) -> np.ndarray:
    """The inverse of `typed` (for tests and tools reading a figure back)."""
    if isinstance(spec, dict):
        return np.frombuffer(base64.b64decode(spec["bdata"]), dtype={"f4": np.float32, "f8": np.float64}[spec["dtype"]])
    return np.asarray([np.nan if v is None else v for v in spec], dtype=float)


def _ms(values: np.ndarray) -> np.ndarray:
    return np.char.mod("%.3f ms", values / 1e6).astype(object)


def _hover_rows(lane: Lane, b: Blocks) -> tuple[np.ndarray, str]:
    """customdata rows and the hover kind ("basic" or "comm") of a lane's blocks.

    The lane itself is on the y axis, so the hover names only the event (or the merged block).
    """
    one = b.count == 1
    names = lane.names[b.first].astype(str)
    merged = np.char.add(np.char.add(np.char.add(b.count.astype(str), " events, busy "), _ms(b.busy_ns).astype(str)),
                         np.char.add(", first ", names))
    cols = [np.where(one, names, merged).astype(object), _ms(b.ends - b.starts)]
    kind = "basic"
    if lane.kind == "comm":
        kind = "comm"
        coll = np.where(one, lane.collective[b.first], "merged").astype(object)
        nbytes = lane.nbytes[b.first]
        wait, transfer = lane.wait_ns[b.first], lane.transfer_ns[b.first]
        known = one & (wait >= 0)
        cols += [coll, np.where(one & (nbytes >= 0), np.char.mod("%d", nbytes), "?").astype(object),
                 np.where(known, _ms(wait), "n/a").astype(object),
                 np.where(known, _ms(np.maximum(transfer, 0)), "n/a").astype(object)]
    return np.column_stack(cols), kind


_TEMPLATES = {
    "basic": "<b>%{customdata[0]}</b><br>%{customdata[1]}<extra></extra>",
    "comm": ("<b>%{customdata[0]}</b><br>%{customdata[1]}"
             "<br>collective %{customdata[2]} · bytes %{customdata[3]}"
             "<br>wait %{customdata[4]} · transfer %{customdata[5]}<extra></extra>"),
    "exposed": "<b>exposed comm</b><br>%{customdata}<extra></extra>",
}


class _Collector:
    """Rectangles grouped by colour and hover points grouped by template, across all lanes and ranks.

    Drawing cost grows with the number of traces (and SVG elements) far more than with points, so a
    whole figure is about ten traces: one fill per colour, one hover trace per template, one exposed fill.
    """

    def __init__(self, t0: int) -> None:
        self.t0 = t0
        self.lines: dict[tuple[str, float], list[tuple[np.ndarray, np.ndarray]]] = {}
        self.hovers: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    def add_lines(self, color: str, opacity: float, starts: np.ndarray, ends: np.ndarray, y: float) -> None:
        if starts.size:
            self.lines.setdefault((color, opacity), []).append(_rects(starts, ends, self.t0, y))

    def add_hover(self, kind: str, x_ns: np.ndarray, y: float, custom: np.ndarray) -> None:
        if x_ns.size:
            self.hovers.setdefault(kind, []).append(
                (((x_ns - self.t0) / 1e6).astype(np.float32), np.full(x_ns.size, y, dtype=np.float32), custom))

    def traces(self) -> list[dict]:
        # Plain dicts: plotly.py's validating objects cost more than building the data (a zoom is
        # answered on every drag).
        out = [_fill_trace(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                           color, opacity, {"kind": "lines", "color": color})
               for (color, opacity), parts in self.lines.items()]
        for kind, parts in self.hovers.items():
            out.append({
                "type": "scatter", "mode": "none",
                "x": typed(np.concatenate([p[0] for p in parts])), "y": typed(np.concatenate([p[1] for p in parts])),
                "customdata": np.concatenate([p[2] for p in parts]).tolist(),
                "hovertemplate": _TEMPLATES[kind], "showlegend": False, "meta": {"kind": "hover", "template": kind}})
        return out


def _add_lane(col: _Collector, lane: Lane, b: Blocks, y: float, px_ns: float) -> None:
    if b.starts.size == 0:
        return
    if lane.kind == "comm":
        colls = np.where(b.count == 1, lane.collective[b.first], "").astype(str)
        for coll in np.unique(colls):
            sel = colls == coll
            col.add_lines(collective_color(coll), 1.0, b.starts[sel], b.ends[sel], y)
    else:
        col.add_lines(COLORS[lane.kind], 0.55 if lane.kind == "ranges" else 1.0, b.starts, b.ends, y)
    custom, kind = _hover_rows(lane, b)
    # Hover points: the middle of every block, plus both ends of blocks wide enough to hover away from it.
    wide = np.flatnonzero((b.ends - b.starts) > 3 * BAR_PX * px_ns)
    hx = np.concatenate([(b.starts + b.ends) / 2, b.starts[wide] + px_ns * BAR_PX, b.ends[wide] - px_ns * BAR_PX])
    col.add_hover(kind, hx, y, np.concatenate([custom, custom[wide], custom[wide]]))


def _exposed_segments(exposed: iv.Intervals, px_ns: float, cfg: TimelineConfig) -> tuple[iv.Intervals, bool]:
    if len(exposed) <= cfg.max_exposed:
        return exposed, False
    gap = np.int64(max(1, int(px_ns)))
    grown = iv.merge(exposed.starts, exposed.ends + gap)
    return iv.Intervals(grown.starts, grown.ends - gap), True


def timeline_figure(data: RunData, step: int, view_ns: tuple[int, int] | None = None,
                    cfg: TimelineConfig = TimelineConfig()) -> dict:
    """The timeline of `step` (or ALL_STEPS); `view_ns` is the aligned [lo, hi) shown, default the step.

    The exposed trace's meta holds, per rank, its lane's y and the step's exact exposed total.
    """
    span = data.span(step)
    if span is None:
        return {"data": [], "layout": {"title": {"text": f"step {step} is not in this run"}}}
    t0 = span[0]
    lo, hi = view_ns if view_ns else span
    px_ns = (hi - lo) / cfg.width_px
    col = _Collector(t0)
    exposed_parts: list[tuple[np.ndarray, np.ndarray]] = []
    exposed_meta: dict = {"kind": "exposed", "exposed_ns": {}, "lane_y": {}, "merged": {}}
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
                _add_lane(col, lane, b._replace(starts=b.starts + off, ends=b.ends + off), y, px_ns)
                points += b.starts.size
                ticks.append((y, label))
                y += 1
        exposed = iv.clip(rv.exposed, *window)
        label = f"r{rv.rank} exposed comm"
        keep = (exposed.ends + off > lo) & (exposed.starts + off < hi)
        shown, merged = _exposed_segments(
            iv.Intervals(exposed.starts[keep] + off, exposed.ends[keep] + off), px_ns, cfg)
        exposed_parts.append(_rects(shown.starts, shown.ends, t0, y, dtype=np.float64))
        col.add_hover("exposed", (shown.starts + shown.ends) / 2, y, _ms(shown.ends - shown.starts))
        for key, value in (("exposed_ns", exposed.total), ("lane_y", y), ("merged", merged)):
            exposed_meta[key][str(rv.rank)] = value
        points += len(shown)
        ticks.append((y, f"{label} ({exposed.total / 1e6:.3f} ms)"))
        y += 1
        shapes.append({"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": top - 0.5, "y1": y - 0.5,
                       "line": {"width": 1, "color": "#bbbbbb"}, "fillcolor": "rgba(0,0,0,0)", "layer": "below"})
    # Where the step ends: two runs side by side share an x range, so the shorter step ends inside it.
    end_ms = (span[1] - t0) / 1e6
    shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": end_ms, "x1": end_ms, "y0": 0, "y1": 1,
                   "line": {"color": "#555555", "width": 1, "dash": "dot"}, "layer": "above"})
    traces = col.traces()
    if exposed_parts:
        traces.append(_fill_trace(np.concatenate([p[0] for p in exposed_parts]),
                                  np.concatenate([p[1] for p in exposed_parts]), COLORS["exposed"], 1.0, exposed_meta))
    step_label = "all steps" if step == ALL_STEPS else f"step {step}"
    layout = {
        "height": int(max(y, 1) * LANE_PX + 110),
        "margin": {"l": 260, "r": 20, "t": 40, "b": 50},
        "title": {"text": f"{data.label}: {step_label}", "font": {"size": 14}},
        "hovermode": "closest", "plot_bgcolor": "white", "shapes": shapes, "uirevision": f"{data.path}|{step}",
        "meta": {"step": step, "view_ms": [(lo - t0) / 1e6, (hi - t0) / 1e6], "points": points, "t0_ns": t0},
        "xaxis": {"title": {"text": f"ms from the start of {step_label}"},
                  "range": [(lo - t0) / 1e6, (hi - t0) / 1e6], "showgrid": True, "gridcolor": "#eeeeee",
                  "zeroline": False},
        "yaxis": {"tickvals": [t for t, _ in ticks], "ticktext": [s for _, s in ticks], "autorange": "reversed",
                  "fixedrange": True, "showgrid": False, "zeroline": False},
    }
    return {"data": traces, "layout": layout}


def range_ms(relayout: dict | None) -> tuple[float, float] | None:
    """The x range (ms, sorted) a Plotly relayoutData sets; None for autorange/reset or no x change."""
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
    return lo, hi


def view_from_relayout(relayout: dict | None, t0_ns: int) -> tuple[int, int] | None:
    """Aligned ns range from a Plotly relayoutData, None for autorange/reset or no x change."""
    view = range_ms(relayout)
    if view is None:
        return None
    return t0_ns + int(round(view[0] * 1e6)), t0_ns + int(round(view[1] * 1e6))
