"""Callbacks: switching tabs, choosing a step, and redrawing the timeline after a zoom or pan.

A zoom sends Plotly's relayoutData; the server answers with the same lanes cut to the new range and
merged to its pixel width, so a zoom into a dense step shows every kernel again. `uirevision` keeps
the user's zoom when the figure is replaced.
"""
from __future__ import annotations

from dash import Dash, Input, Output, ctx, no_update

from .cache import FigureCache
from .data import ALL_STEPS, RunData
from .layout import tab_content
from .timeline import view_from_relayout


def register(app: Dash, runs: list[RunData], cache: FigureCache) -> None:
    @app.callback(Output("tab-content", "children"), Input("tabs", "value"), prevent_initial_call=True)
    def _switch_tab(tab: str):
        return tab_content(tab, runs, cache)

    for i, data in enumerate(runs):
        if data.ok:
            _register_timeline(app, data, i, cache)


# Only x-axis changes reach the server: Plotly also reports autosize and other layout events, and a
# round trip for those would race with a real zoom that follows it.
_X_ONLY = """
function(relayout) {
    if (!relayout) { return window.dash_clientside.no_update; }
    const keys = Object.keys(relayout).filter(k => k.startsWith('xaxis.range') || k.startsWith('xaxis.autorange'));
    if (keys.length === 0) { return window.dash_clientside.no_update; }
    const out = {};
    keys.forEach(k => { out[k] = relayout[k]; });
    return out;
}
"""


def _register_timeline(app: Dash, data: RunData, i: int, cache: FigureCache) -> None:
    app.clientside_callback(_X_ONLY, Output(f"zoom-{i}", "data"), Input(f"timeline-{i}", "relayoutData"),
                            prevent_initial_call=True)

    @app.callback(Output(f"timeline-{i}", "figure"), Input(f"step-{i}", "value"), Input(f"zoom-{i}", "data"),
                  prevent_initial_call=True)
    def _redraw(step, relayout):
        if step is None or (step not in data.steps and step != ALL_STEPS):
            return no_update
        if ctx.triggered_id == f"step-{i}":
            return cache.timeline(i, step)
        span = data.span(step)
        if span is None:
            return no_update
        if relayout and any(k.startswith("xaxis.autorange") for k in relayout):
            return cache.timeline(i, step)
        view = view_from_relayout(relayout, span[0])
        if view is None:
            return no_update  # a y-only or hover relayout: nothing to redraw
        return cache.zoomed(i, step, view)
