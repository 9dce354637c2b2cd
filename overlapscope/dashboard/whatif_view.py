"""The What-if tab: the selected step's cross-rank critical path on its lanes, the step time each key
would save if hidden, and each collective's busbw against its link's peak (read only from an Analysis)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from dash import dcc, html

from .data import ALL_STEPS, RunData, escape
from .figures import COLORS, LEGEND_TOP, collective_color

KIND_COLORS = {"compute": COLORS["compute"], "copy": COLORS["memcpy"], "lag": "#d9d9d9", "launch": "#bdbdbd",
               "host": "#8c8c8c"}
TOP_KEYS = 15


def critical_path_figure(data: RunData, step: int | None) -> go.Figure | None:
    """The path's segments as bars on rank/lane rows, x in ms from the step's start (aligned clock);
    collectives in their colour, the waits it carries (lag, launch) grey."""
    path = data.analysis.critical_path
    if path is None or path.empty:
        return None
    steps = path["step"].to_numpy()
    step = int(steps[0]) if step is None or step == ALL_STEPS or step not in set(steps.tolist()) else step
    seg = path[steps == step]
    t0 = int(seg["start_ns"].min())
    rows = escape((seg["rank"].map("r{}".format) + " " + seg["lane"].astype(str)).to_numpy(object), 40)
    colors = np.where(seg["kind"] == "comm", [collective_color(c) for c in seg["collective"].astype(str)],
                      seg["kind"].map(KIND_COLORS).fillna(COLORS["compute"]).to_numpy(object))
    width_ms = (seg["end_ns"] - seg["start_ns"]).to_numpy(np.float64) / 1e6
    label = escape(seg["label"].astype(str).to_numpy(object), 80)
    hover = [f"{k}: {lab}<br>{w:.3f} ms" + (f" (lag {g / 1e6:.3f} ms)" if g else "")
             for k, lab, w, g in zip(seg["kind"], label, width_ms, seg["lag_ns"].to_numpy())]
    fig = go.Figure(go.Bar(y=rows, x=width_ms, base=(seg["start_ns"].to_numpy(np.int64) - t0) / 1e6, orientation="h",
                           marker_color=colors, hovertext=hover, hoverinfo="text", name="critical path"))
    fig.update_layout(height=120 + 26 * len(set(rows.tolist())), margin={"l": 200, "r": 20, "t": 30, "b": 40},
                      xaxis_title=f"ms from the start of step {step} (critical path only)", barmode="overlay",
                      showlegend=False, yaxis={"autorange": "reversed"})
    return fig


def whatif_figure(data: RunData) -> go.Figure | None:
    w = data.analysis.whatif
    if w is None or w.empty or not (w["saved_ns"] > 0).any():
        return None
    top = w[w["saved_ns"] > 0].head(TOP_KEYS).iloc[::-1]
    labels = escape((top["key_type"] + ": " + top["key"].astype(str)).to_numpy(object), 70)
    fig = go.Figure(go.Bar(y=labels, x=top["saved_per_step_ns"].to_numpy(np.float64) / 1e6, orientation="h",
                           marker_color=COLORS["exposed"],
                           hovertext=[f"{p:.1f}% of the critical path" for p in top["saved_pct"]], hoverinfo="x+text"))
    fig.update_layout(height=120 + 22 * len(top), margin={"l": 320, "r": 20, "t": 20, "b": 40},
                      xaxis_title="step time saved if fully hidden, ms/step")
    return fig


def busbw_figure(data: RunData) -> go.Figure | None:
    """Achieved busbw per collective against its size, with the link peak as a line per link."""
    c = data.analysis.cost_model
    if c is None or c.empty or not np.isfinite(c["busbw_gbps"].to_numpy(np.float64)).any():
        return None
    fig = go.Figure()
    for coll, part in c.groupby("collective"):
        fig.add_trace(go.Scatter(x=part["bytes"], y=part["busbw_gbps"], mode="markers", name=str(coll),
                                 marker_color=collective_color(str(coll)),
                                 hovertext=[f"{p:.0f}% of {link}" if np.isfinite(p) else str(link)
                                            for p, link in zip(part["pct_of_peak"], escape(part["link"].to_numpy(object)))]))
    peaks = c[np.isfinite(c["peak_gbps"].to_numpy(np.float64))].drop_duplicates("link")
    for r in peaks.itertuples(index=False):
        fig.add_hline(y=float(r.peak_gbps), line_dash="dash", line_color="#444",
                      annotation_text=f"peak {escape(np.array([r.link], dtype=object))[0]}")
    fig.update_layout(height=360, margin={"l": 60, "r": 20, "t": 40, "b": 50}, legend=LEGEND_TOP,
                      xaxis={"type": "log", "title": "bytes (nccl-tests size)"}, yaxis_title="busbw GB/s")
    return fig


def _section(title: str, fig: go.Figure | None, graph_id: str, note: str) -> html.Div:
    from .layout import GRAPH_CONFIG, NO_DATA

    body = dcc.Graph(id=graph_id, figure=fig, config={**GRAPH_CONFIG, "displayModeBar": False}) if fig is not None \
        else html.P(NO_DATA, id=graph_id, className="no-data", style={"color": "#666", "fontStyle": "italic"})
    return html.Div([html.H4(title, style={"margin": "12px 0 2px"}),
                     html.Div(note, style={"color": "#666", "fontSize": "12px"}), body], id=f"{graph_id}-box")


def whatif_view(data: RunData, i: int, step: int | None) -> list:
    return [html.H4(f"{'AB'[i]}: {data.label}"),
            _section("Critical path of the step", critical_path_figure(data, step), f"critical-path-{i}",
                     "what the step waited for, across ranks and lanes; a collective completes when its last rank "
                     "arrives; the graph cannot see host-side waits without a collective or stream event"),
            _section("What-if: step time saved if fully hidden", whatif_figure(data), f"whatif-{i}",
                     "each key's collectives' transfer removed, everything else kept"),
            _section("Bus bandwidth vs link peak", busbw_figure(data), f"busbw-{i}",
                     "collectives with a known size; peak from the GPU model or --link-gbps / --inter-node-gbps")]
