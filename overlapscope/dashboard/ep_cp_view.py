"""The EP / CP tab: the all-to-all traffic matrix of the selected step, exposed dispatch/combine per
MoE layer, and ring-attention steps (read only from an Analysis: all_to_all, all_to_all_traffic,
moe_layers, ring_steps)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from dash import dcc, html

from .data import ALL_STEPS, RunData, escape
from .figures import COLORS, LEGEND_TOP


def _step_of(frame: pd.DataFrame, step: int | None) -> int | None:
    """The selected step when the frame has it, else its first step (None: no rows)."""
    if frame is None or frame.empty:
        return None
    steps = sorted(set(frame["step"].astype(int).tolist()))
    return steps[0] if step is None or step == ALL_STEPS or step not in steps else int(step)


def traffic_figure(data: RunData, step: int | None) -> go.Figure | None:
    """Bytes sent src -> dst summed over the step's all-to-alls (the matrix with known splits), with the
    worst instance's imbalance and hot rank in the title."""
    traffic = data.analysis.all_to_all_traffic
    step = _step_of(traffic, step)
    if step is None:
        return None
    sub = traffic[traffic["step"] == step]
    ranks = sorted(set(sub["src"].tolist()) | set(sub["dst"].tolist()))
    pos = {r: i for i, r in enumerate(ranks)}
    matrix = np.zeros((len(ranks), len(ranks)), dtype=np.int64)
    np.add.at(matrix, (sub["src"].map(pos).to_numpy(), sub["dst"].map(pos).to_numpy()), sub["bytes"].to_numpy())
    inst = data.analysis.all_to_all
    inst = inst[(inst["step"] == step) & inst["imbalance"].notna()]
    title = f"step {step}: {sub['instance'].nunique()} all-to-alls"
    if len(inst):
        worst = inst.loc[inst["imbalance"].idxmax()]
        title += f"; worst imbalance {worst['imbalance']:.2f}x (max/mean received)"
        if worst["hot_rank"] >= 0:
            title += f", hot rank r{int(worst['hot_rank'])}"
    labels = [f"r{r}" for r in ranks]
    fig = go.Figure(go.Heatmap(z=matrix / 2**20, x=labels, y=labels, colorscale="Blues",
                               colorbar={"title": "MiB"},
                               hovertemplate="%{y} -> %{x}: %{z:.3f} MiB<extra></extra>"))
    fig.update_layout(title={"text": title, "font": {"size": 13}}, height=140 + 40 * len(ranks), meta={"step": step},
                      margin={"l": 60, "r": 20, "t": 40, "b": 50}, xaxis_title="received by (dst)",
                      yaxis={"title": "sent by (src)", "autorange": "reversed"})
    return fig


def moe_figure(data: RunData, step: int | None) -> go.Figure | None:
    """Exposed vs hidden dispatch and combine per layer (forward, summed over ranks and micro-batches)."""
    moe = data.analysis.moe_layers
    step = _step_of(moe, step)
    if step is None:
        return None
    sub = moe[moe["step"] == step]
    g = sub.groupby(["pass", "layer", "phase"], as_index=False)[["comm_ns", "exposed_comm_ns"]].sum()
    g = g.sort_values(["pass", "layer", "phase"], ascending=[False, True, False], kind="stable")
    labels = escape((g["pass"].str[:3] + " L" + g["layer"].astype(str) + " " + g["phase"]).to_numpy(object))
    exposed = g["exposed_comm_ns"].to_numpy(np.float64) / 1e6
    hidden = (g["comm_ns"] - g["exposed_comm_ns"]).to_numpy(np.float64) / 1e6
    fig = go.Figure([go.Bar(y=labels, x=exposed, name="exposed", orientation="h", marker_color=COLORS["exposed"]),
                     go.Bar(y=labels, x=hidden, name="hidden behind compute", orientation="h",
                            marker_color=COLORS["compute"])])
    fig.update_layout(barmode="stack", height=120 + 22 * len(g), margin={"l": 170, "r": 20, "t": 30, "b": 40},
                      xaxis_title=f"ms in step {step} (all ranks, all micro-batches)", legend=LEGEND_TOP,
                      yaxis={"autorange": "reversed"})
    return fig


def ring_figure(data: RunData, step: int | None) -> go.Figure | None:
    """Per ring step: exposed p2p, the part its own attention hid, the part other compute hid."""
    ring = data.analysis.ring_steps
    step = _step_of(ring, step)
    if step is None:
        return None
    sub = ring[ring["step"] == step]
    g = sub.groupby(["pass", "layer", "ring_step"], as_index=False)[
        ["exposed_comm_ns", "hidden_ns", "hidden_by_attn_ns"]].sum()
    g = g.sort_values(["pass", "layer", "ring_step"], ascending=[False, True, True], kind="stable")
    labels = (g["pass"].str[:3] + " L" + g["layer"].astype(str) + " step " + g["ring_step"].astype(str)).tolist()
    ms = lambda c: g[c].to_numpy(np.float64) / 1e6  # noqa: E731
    fig = go.Figure([
        go.Bar(y=labels, x=ms("exposed_comm_ns"), name="exposed p2p", orientation="h", marker_color=COLORS["exposed"]),
        go.Bar(y=labels, x=ms("hidden_by_attn_ns"), name="hidden by its attention", orientation="h",
               marker_color=COLORS["compute"]),
        go.Bar(y=labels, x=ms("hidden_ns") - ms("hidden_by_attn_ns"), name="hidden by other compute",
               orientation="h", marker_color=COLORS["memcpy"])])
    fig.update_layout(barmode="stack", height=120 + 22 * len(g), margin={"l": 150, "r": 20, "t": 30, "b": 40},
                      xaxis_title=f"ms in step {step} (all ranks)", legend=LEGEND_TOP, yaxis={"autorange": "reversed"})
    return fig


def _section(title: str, fig: go.Figure | None, graph_id: str, note: str) -> html.Div:
    from .layout import GRAPH_CONFIG, NO_DATA

    body = dcc.Graph(id=graph_id, figure=fig, config={**GRAPH_CONFIG, "displayModeBar": False}) if fig is not None \
        else html.P(NO_DATA, id=graph_id, className="no-data", style={"color": "#666", "fontStyle": "italic"})
    return html.Div([html.H4(title, style={"margin": "12px 0 2px"}),
                     html.Div(note, style={"color": "#666", "fontSize": "12px"}), body], id=f"{graph_id}-box")


def ep_cp_view(data: RunData, i: int, step: int | None) -> list:
    return [html.H4(f"{'AB'[i]}: {data.label}"),
            _section("All-to-all traffic matrix", traffic_figure(data, step), f"a2a-traffic-{i}",
                     "bytes each rank sent to each rank in the selected step, from the recorded split sizes"),
            _section("Exposed dispatch / combine per MoE layer", moe_figure(data, step), f"moe-layers-{i}",
                     "comm launched under moe:L<layer>:mb<m>:dispatch|combine labels"),
            _section("Ring-attention steps", ring_figure(data, step), f"ring-steps-{i}",
                     "K/V transfer of each ring step (ring:L<layer>:step<k> labels) and the compute that hid it")]
