"""The page: load errors, a summary per run, the step selector, then tabs (timeline, breakdowns, compare).

Two runs are shown side by side: summaries, timelines (sharing the step selector and the x range
in ms from each step's start) and breakdowns in two columns; the Compare tab has the differences.

Strings from traces reach the page only as Dash component children or escaped Plotly text; nothing
here sets raw HTML. Component ids are plain strings ending in the run's index (0 = A, 1 = B).
"""
from __future__ import annotations

import math

from dash import dcc, html

from .cache import FigureCache
from .data import RunData
from .figures import COLORS, collective_color, summary
from .steps import StepChoice, step_choice

GRAPH_CONFIG = {"displaylogo": False, "scrollZoom": True}
NO_DATA = "no data for this run"
_ROW = {"display": "flex", "gap": "24px", "alignItems": "flex-start"}
_COL = {"flex": "1 1 0", "minWidth": "0"}
_CARD = {"border": "1px solid #ddd", "borderRadius": "6px", "padding": "6px 12px", "minWidth": "150px"}


def _fmt(value: float, unit: str = "", digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}{unit}"


def page(runs: list[RunData], cache: FigureCache) -> html.Div:
    ok = [i for i, r in enumerate(runs) if r.ok]
    children: list = [html.H2("overlapscope", style={"margin": "4px 0"}),
                      html.Div(" vs ".join(f"{'AB'[i]}: {r.path}" for i, r in enumerate(runs)), id="run-paths")]
    for i, r in enumerate(runs):
        if not r.ok:
            children.append(html.Div([html.B(f"Could not load run {'AB'[i]}: "), r.error], id=f"load-error-{i}",
                                     className="load-error", role="alert",
                                     style={"background": "#fdecea", "color": "#611a15", "padding": "10px",
                                            "margin": "8px 0", "borderRadius": "4px"}))
    if not ok:
        return html.Div(children, style={"fontFamily": "sans-serif", "margin": "12px"})
    choice = step_choice(runs)
    children.append(html.Div([html.Div(summary_block(runs[i], i), style=_COL) for i in ok], style=_ROW))
    tabs = [dcc.Tab(label="Timeline", value="timeline"), dcc.Tab(label="Breakdowns", value="breakdowns"),
            dcc.Tab(label="What-if", value="whatif")]
    if any(len(runs[i].analysis.all_to_all) or len(runs[i].analysis.ring_steps) for i in ok):
        tabs.append(dcc.Tab(label="EP / CP", value="ep_cp"))  # expert / context parallelism
    if choice.paired:
        tabs.append(dcc.Tab(label="Compare", value="compare"))
    children += [step_selector(choice), dcc.Tabs(id="tabs", value="timeline", children=tabs),
                 html.Div(tab_content("timeline", runs, cache, choice.default), id="tab-content")]
    return html.Div(children, style={"fontFamily": "sans-serif", "margin": "12px"})


def step_selector(choice: StepChoice) -> html.Div:
    """One dropdown for the page: the timeline(s) and the micro-batch Gantt follow it, on every tab."""
    note = ("the k-th step of each run, side by side on the same ms scale from its start" if choice.paired
            else "the timeline and the micro-batch Gantt show this step")
    return html.Div([html.B("step"),
                     html.Div(dcc.Dropdown(id=choice.selector_id, options=choice.options(), value=choice.default,
                                           clearable=False, searchable=False),
                              style={"width": "260px" if choice.paired else "200px", "display": "inline-block"}),
                     html.Span(note, style={"color": "#666", "fontSize": "12px"})],
                    # Sticky: it stays in reach while scrolling down to the Gantt.
                    style={"display": "flex", "alignItems": "center", "gap": "8px", "padding": "6px 0",
                           "position": "sticky", "top": "0", "zIndex": 20, "background": "white"})


def summary_block(data: RunData, i: int) -> list:
    s = summary(data)
    cards = [
        ("step time", f"{_fmt(s.step_ms, ' ms')}", f"mean over {s.ranks} rank(s), {s.steps} step(s)"),
        ("exposed comm", f"{_fmt(s.exposed_ms, ' ms')}", f"{_fmt(s.exposed_pct, '% of step', 1)}"),
        ("overlap", f"{_fmt(s.overlap_pct, '%', 1)}", "of comm hidden behind compute"),
        ("worst rank", f"r{s.worst_rank}", f"{_fmt(s.worst_rank_pct, '% exposed', 1)}"),
        ("worst collective", s.worst_collective or "none", f"{_fmt(s.worst_collective_ms, ' ms/step')} exposed"),
    ]
    row = html.Div([html.Div([html.Div(name, style={"color": "#666", "fontSize": "12px"}),
                              html.Div(value, className="summary-value", style={"fontSize": "20px"}),
                              html.Div(note, style={"color": "#666", "fontSize": "12px"})],
                             id=f"summary-{i}-{name.replace(' ', '-')}", style=_CARD)
                    for name, value, note in cards], style={**_ROW, "gap": "8px", "flexWrap": "wrap"})
    diagnoses = data.analysis.diagnoses
    diag = html.Ul([html.Li(d) for d in diagnoses], id=f"diagnoses-{i}") if diagnoses else \
        html.P("no diagnoses", id=f"diagnoses-{i}", style={"color": "#666"})
    return [html.H4(f"{'AB'[i]}: {data.label}", style={"margin": "8px 0 4px"}), row, diag, rank_table(data, i)]


def data_table(head: list[str], rows: list[list[str]], table_id: str, *, caption: str = "",
               text_columns: int = 1) -> html.Table:
    """A small table of numbers: spaced cells, the first `text_columns` left-aligned and the rest
    right-aligned in tabular figures, so headers and digits line up; `caption` says what the ms are."""
    def cell(tag, value: str, j: int, header: bool = False):
        style = {"padding": "3px 12px 3px 0" if j < text_columns else "3px 0 3px 16px",
                 "textAlign": "left" if j < text_columns else "right", "whiteSpace": "nowrap"}
        if header:
            style.update(borderBottom="1px solid #999", fontWeight="600")
        return tag(value, style=style)

    parts = [html.Caption(caption, style={"captionSide": "top", "textAlign": "left", "color": "#666",
                                          "fontSize": "12px", "paddingBottom": "2px"})] if caption else []
    parts += [html.Thead(html.Tr([cell(html.Th, h, j, header=True) for j, h in enumerate(head)])),
              html.Tbody([html.Tr([cell(html.Td, v, j) for j, v in enumerate(r)]) for r in rows])]
    return html.Table(parts, id=table_id, style={"fontSize": "13px", "borderCollapse": "collapse",
                                                 "marginBottom": "8px", "fontVariantNumeric": "tabular-nums"})


def rank_table(data: RunData, i: int) -> html.Table:
    t = data.analysis.totals
    head = ["rank", "steps", "step ms", "compute ms", "comm ms", "exposed ms", "exposed %", "overlap %"]
    rows = []
    for row in t.itertuples(index=False):  # one row per rank: a handful
        n = max(int(row.steps), 1)
        rows.append([f"r{row.rank}", str(row.steps), _fmt(row.window_ns / n / 1e6), _fmt(row.compute_ns / n / 1e6),
                     _fmt(row.comm_ns / n / 1e6), _fmt(row.exposed_comm_ns / n / 1e6),
                     _fmt(float(row.exposed_comm_pct), "", 1), _fmt(float(row.overlap_pct), "", 1)])
    return data_table(head, rows, f"ranks-{i}", caption="per rank (ms: mean per step)")


def tab_content(tab: str, runs: list[RunData], cache: FigureCache, selected: int | None) -> list:
    """The content of `tab` for the step selector's value `selected`."""
    choice = step_choice(runs)
    steps = choice.steps(selected)
    if tab == "compare" and choice.paired:
        return compare_view(runs, cache)
    if tab == "timeline":
        if choice.paired:
            view_ms = cache.pair_view_ms(steps)
            return [html.Div([html.Div(timeline_view(runs[i], i, cache.pair(i, steps[i], view_ms, default=True)),
                                       style=_COL) for i in choice.shown], style=_ROW)]
        [i] = choice.shown
        return [timeline_view(runs[i], i, cache.timeline(i, steps[i]) if steps[i] is not None else {})]
    if tab == "whatif":
        from .whatif_view import whatif_view

        return [html.Div([html.Div(whatif_view(runs[i], i, steps[i]), style=_COL) for i in choice.shown], style=_ROW)]
    if tab == "ep_cp":
        from .ep_cp_view import ep_cp_view

        return [html.Div([html.Div(ep_cp_view(runs[i], i, steps[i]), id=f"ep-cp-{i}", style=_COL)
                          for i in choice.shown], style=_ROW)]
    return [html.Div([html.Div(breakdown_view(runs[i], i, cache, steps[i]), style=_COL) for i in choice.shown],
                     style=_ROW)]


def timeline_view(data: RunData, i: int, figure: dict) -> html.Div:
    return html.Div([
        html.Div([html.B(f"{'AB'[i]}: {data.label}"),
                  html.Span("drag to zoom (x), double-click to reset; gaps narrower than a pixel are closed in busy "
                            "lanes until you zoom in; the exposed lane is always exact",
                            style={"color": "#666", "fontSize": "12px", "marginLeft": "12px"})],
                 style={"display": "flex", "alignItems": "center", "gap": "8px"}),
        dcc.Graph(id=f"timeline-{i}", figure=figure, config=GRAPH_CONFIG),
        legend(data),
        dcc.Store(id=f"zoom-{i}"),
    ], style={"marginTop": "8px"})


def _swatch(color: str, text: str) -> html.Span:
    return html.Span([html.Span(style={"display": "inline-block", "width": "12px", "height": "12px",
                                       "background": color, "marginRight": "4px", "verticalAlign": "middle"}),
                      text], style={"marginRight": "14px", "fontSize": "12px"})


def legend(data: RunData) -> html.Div:
    """The timeline's colours: one per kind of time, comm by collective (the same in every chart)."""
    kinds = [("compute", "compute"), ("memcpy", "memcpy/memset"), ("ranges", "ranges (record_function / NVTX)"),
             ("exposed", "exposed comm")]
    present = sorted({str(c) for c in data.analysis.by_collective["collective"].astype(str) if str(c)})
    items = [_swatch(COLORS[k], text) for k, text in kinds]
    items += [_swatch(collective_color(c), c) for c in present]
    return html.Div(items, style={"margin": "0 0 8px 260px"})


def _section(title: str, fig, graph_id: str, box_id: str | None = None) -> html.Div:
    body = dcc.Graph(id=graph_id, figure=fig, config={**GRAPH_CONFIG, "displayModeBar": False}) if fig is not None else \
        html.P(NO_DATA, id=graph_id, className="no-data", style={"color": "#666", "fontStyle": "italic"})
    return html.Div([html.H4(title, style={"margin": "12px 0 4px"}), body], id=box_id or f"{graph_id}-box")


GANTT_TITLE = "Micro-batch Gantt"


def gantt_section(cache: FigureCache, i: int, step: int | None) -> html.Div:
    """The Gantt of the selected step: a section of its own, redrawn when the selector changes."""
    return _section(GANTT_TITLE, cache.gantt(i, step) if step is not None else None, f"gantt-{i}")


def breakdown_view(data: RunData, i: int, cache: FigureCache, step: int | None) -> list:
    figs = cache.breakdowns(i)
    titles = {
        "collective": "Exposed comm by collective", "group": "Exposed comm by process group",
        "scope": "Exposed comm by layer / FSDP unit (launching range)", "prefetch": "FSDP prefetch gap",
        "bubbles": "Pipeline bubble per stage vs theory", "gantt": GANTT_TITLE,
        "waits": "Wait vs transfer (rank x collective)", "variation": "Step-to-step variation",
    }
    return [html.H4(f"{'AB'[i]}: {data.label}")] + [
        gantt_section(cache, i, step) if key == "gantt" else _section(title, figs[key], f"{key}-{i}")
        for key, title in titles.items()]


def compare_view(runs: list[RunData], cache: FigureCache) -> list:
    out = []
    for key, title in (("collective", "Exposed comm per collective: B - A"),
                       ("scope", "Exposed comm per layer / unit: B - A")):
        frame, fig = cache.compare(key)
        table = data_table([key, "A ms/step", "B ms/step", "B - A ms/step"],
                           [[str(k), _fmt(r.a_ms), _fmt(r.b_ms), _fmt(r.delta_ms)]
                            for k, r in zip(frame.index, frame.itertuples())], f"compare-table-{key}")
        out.append(html.Div([_section(title, fig, f"compare-{key}"), table]))
    return [html.Div([html.Div(o, style=_COL) for o in out], style=_ROW)]
