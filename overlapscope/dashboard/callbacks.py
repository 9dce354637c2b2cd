"""Callbacks: switching tabs, choosing a step, and redrawing the timeline after a zoom or pan.

A zoom sends Plotly's relayoutData; the server answers with the same lanes cut to the new range and
merged to its pixel width, so a zoom into a dense step shows every kernel again. `uirevision` keeps
the user's zoom when the figure is replaced. Two runs side by side share the step selector and the
x range: a zoom in either column redraws both at that range (ms from each step's start).
Callbacks whose output is on another tab do not fire; the tab is drawn from the selector's value.
"""
from __future__ import annotations

from dash import Dash, Input, Output, State, ctx, no_update

from .cache import FigureCache
from .data import ALL_STEPS, RunData
from .layout import gantt_section, tab_content
from .steps import StepChoice, step_choice
from .timeline import range_ms, view_from_relayout


def register(app: Dash, runs: list[RunData], cache: FigureCache) -> None:
    choice = step_choice(runs)
    if choice is None:
        return

    @app.callback(Output("tab-content", "children"), Input("tabs", "value"), State(choice.selector_id, "value"),
                  prevent_initial_call=True)
    def _switch_tab(tab: str, selected: int):
        return tab_content(tab, runs, cache, selected)

    for i in choice.shown:
        app.clientside_callback(_X_ONLY, Output(f"zoom-{i}", "data"), Input(f"timeline-{i}", "relayoutData"),
                                prevent_initial_call=True)
    _register_gantt(app, choice, cache)
    _register_ep_cp(app, runs, choice)
    if choice.paired:
        _register_pair(app, choice, cache)
    else:
        _register_timeline(app, runs[choice.shown[0]], choice, cache)


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


def _autorange(relayout: dict | None) -> bool:
    return bool(relayout) and any(k.startswith("xaxis.autorange") for k in relayout)


def _register_gantt(app: Dash, choice: StepChoice, cache: FigureCache) -> None:
    outputs = [Output(f"gantt-{i}-box", "children") for i in choice.shown]

    @app.callback(outputs, Input(choice.selector_id, "value"), prevent_initial_call=True)  # a list: one value each
    def _gantt(selected):
        steps = choice.steps(selected)
        return [gantt_section(cache, i, steps[i]).children for i in choice.shown]  # the box keeps its id


def _register_ep_cp(app: Dash, runs: list[RunData], choice: StepChoice) -> None:
    """The EP / CP tab follows the step selector (its views show the selected step)."""
    outputs = [Output(f"ep-cp-{i}", "children") for i in choice.shown]

    @app.callback(outputs, Input(choice.selector_id, "value"), prevent_initial_call=True)
    def _ep_cp(selected):
        from .ep_cp_view import ep_cp_view

        steps = choice.steps(selected)
        return [ep_cp_view(runs[i], i, steps[i]) for i in choice.shown]


def _register_timeline(app: Dash, data: RunData, choice: StepChoice, cache: FigureCache) -> None:
    [i] = choice.shown

    @app.callback(Output(f"timeline-{i}", "figure"), Input(choice.selector_id, "value"), Input(f"zoom-{i}", "data"),
                  prevent_initial_call=True)
    def _redraw(step, relayout):
        if step is None or (step not in data.steps and step != ALL_STEPS):
            return no_update
        if ctx.triggered_id == choice.selector_id:
            return cache.timeline(i, step)
        span = data.span(step)
        if span is None:
            return no_update
        if _autorange(relayout):
            return cache.timeline(i, step)
        view = view_from_relayout(relayout, span[0])
        if view is None:
            return no_update  # a y-only or hover relayout: nothing to redraw
        return cache.zoomed(i, step, view)


def _register_pair(app: Dash, choice: StepChoice, cache: FigureCache) -> None:
    outputs = [Output(f"timeline-{i}", "figure") for i in choice.shown]
    zooms = [Input(f"zoom-{i}", "data") for i in choice.shown]

    @app.callback(outputs, Input(choice.selector_id, "value"), *zooms, prevent_initial_call=True)
    def _redraw_pair(selected, *relayouts):
        steps = choice.steps(selected)
        if all(s is None for s in steps.values()):
            return [no_update] * len(choice.shown)
        relayout = next((r for i, r in zip(choice.shown, relayouts) if ctx.triggered_id == f"zoom-{i}"), None)
        view_ms = None if relayout is None or _autorange(relayout) else range_ms(relayout)
        if relayout is not None and not _autorange(relayout) and view_ms is None:
            return [no_update] * len(choice.shown)
        default = view_ms is None
        view_ms = view_ms or cache.pair_view_ms(steps)
        return [cache.pair(i, steps[i], view_ms, default=default) for i in choice.shown]
