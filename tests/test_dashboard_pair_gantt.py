"""Two runs side by side (one step selector, one x range) and the micro-batch Gantt of every step, in
real headless Chromium, against numbers computed here from the runs' own events and analysis."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from overlapscope import analyze, load_run
from overlapscope.analysis.windows import step_windows
from overlapscope.dashboard import testing as T
from overlapscope.dashboard.data import ALL_STEPS, load_run_data
from overlapscope.dashboard.figures import collective_color
from overlapscope.dashboard.steps import step_choice

from test_dashboard import choose_step, click_tab, exposed_drawn_ns, figure_where, open_page

REPO = Path(__file__).resolve().parents[1]
PP, PP_M2 = REPO / "traces/pp", REPO / "traces/pp_m2"
FSDP2, NO_PREFETCH = REPO / "traces/fsdp2", REPO / "traces/fsdp2_no_prefetch"

needs_browser = pytest.mark.needs_browser


@pytest.fixture(scope="module")
def browser():
    with T.chromium() as driver:
        yield driver


def microbatches(path: Path, step: int) -> dict[str, tuple[list[str], list[float]]]:
    """Per stage row, the `PP:` ranges of `step` (every step for ALL_STEPS) in start order: names and ms."""
    out = {}
    for trace in load_run(path).ranks:
        w = step_windows(trace)
        if step != ALL_STEPS:
            w = w[w["step"] == step]
        ev = trace.events
        pp = ev[(ev["kind"] == "annotation") & ev["name"].astype(str).str.startswith("PP:")]
        inside = np.zeros(len(pp), bool)
        for lo, hi in zip(w["start_ns"], w["end_ns"]):
            inside |= (pp["start_ns"].to_numpy() < hi) & (pp["end_ns"].to_numpy() > lo)
        pp = pp[inside].sort_values("start_ns", kind="stable")
        out[f"stage r{trace.rank}"] = (pp["name"].astype(str).tolist(),
                                       ((pp["end_ns"] - pp["start_ns"]) / 1e6).tolist())
    return out


def drawn_bars(fig: dict) -> dict[str, tuple[list[str], list[float]]]:
    return {t["y"][0]: (t["text"], t["x"]) for t in fig["traces"]}


def test_step_choice_pairs_steps_by_position():
    a, b = load_run_data(PP), load_run_data(PP_M2)
    choice = step_choice([a, b])
    assert choice.selector_id == "step-ab" and choice.options()[:3] == [
        {"label": "step 2", "value": 0}, {"label": "step 3", "value": 1}, {"label": "step 4", "value": 2}]
    assert choice.options()[-1] == {"label": "all steps", "value": ALL_STEPS}
    assert choice.steps(1) == {0: 3, 1: 3} and choice.steps(7) == {0: None, 1: None}
    b.steps = [5, 6]  # numbered differently and shorter: labelled per run, nothing for B at the end
    choice = step_choice([a, b])
    assert [o["label"] for o in choice.options()] == ["A step 2 · B step 5", "A step 3 · B step 6",
                                                       "A step 4 · B -", "all steps"]
    assert choice.steps(2) == {0: 4, 1: None}
    single = step_choice([a])
    assert single.selector_id == "step-0" and single.default == 2 and single.steps(3) == {0: 3}
    assert single.steps(9) == {0: None}


@needs_browser
@pytest.mark.parametrize("path, per_stage", [(PP, 8), (PP_M2, 4)])
def test_gantt_follows_the_step_selector(browser, path, per_stage):
    ctx = open_page(browser, [path])
    try:
        figure_where(browser, "timeline-0", lambda f: f["meta"]["step"] == 2)
        click_tab(browser, "Breakdowns")
        for label, step in (("step 2", 2), ("step 4", 4), ("all steps", ALL_STEPS), ("step 3", 3)):
            if label != "step 2":
                choose_step(browser, 0, label)
            fig = figure_where(browser, "gantt-0", lambda f: f["meta"] and f["meta"]["step"] == step)
            want = microbatches(path, step)
            assert drawn_bars(fig) == want
            n = per_stage * (3 if step == ALL_STEPS else 1)
            assert [len(names) for names, _ in want.values()] == [n, n]
            assert fig["xtitle"] == f"ms from the first micro-batch of {label}"
            assert min(min(t["base"]) for t in fig["traces"]) == 0.0
        # Step 3's bars are not step 2's: the figure really changed.
        assert microbatches(path, 3) != microbatches(path, 2)
        # The selector is above the tabs: the timeline shows the step chosen on the Breakdowns tab.
        click_tab(browser, "Timeline")
        figure_where(browser, "timeline-0", lambda f: f["meta"]["step"] == 3)
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)


def _rect(browser, element_id: str) -> dict:
    return browser.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return {left: r.left, right: r.right, top: r.top};", element_id)


def _relayout(browser, graph_id: str, update: dict) -> None:
    browser.execute_script(
        "Plotly.relayout(document.querySelector('[id=\"' + arguments[0] + '\"] .js-plotly-plot'), arguments[1]);",
        graph_id, update)


@needs_browser
def test_two_runs_side_by_side_share_step_and_x_range(browser):
    from selenium.webdriver.common.by import By

    runs = {0: FSDP2, 1: NO_PREFETCH}
    data = {i: load_run_data(p) for i, p in runs.items()}
    analyses = {i: analyze(load_run(p)) for i, p in runs.items()}

    def check(step: int, view_ms: list[float] | None = None) -> None:
        span_ms = max((data[i].span(step)[1] - data[i].span(step)[0]) / 1e6 for i in runs)
        shown = view_ms or [0, span_ms]  # both columns: 0 to the longer step unless zoomed
        for i in runs:
            fig = figure_where(browser, f"timeline-{i}",
                               lambda f: f["meta"]["step"] == step and f["meta"]["view_ms"] == shown)
            assert fig["xrange"] == shown
            steps = analyses[i].steps
            want = {int(r): int(v) for r, v in steps.loc[steps["step"] == step, ["rank", "exposed_comm_ns"]].values}
            assert all(v > 0 for v in want.values())
            [lane] = [t for t in fig["traces"] if t["meta"] and t["meta"].get("kind") == "exposed"]
            assert lane["meta"]["exposed_ns"] == {str(r): v for r, v in want.items()}  # the lane labels
            if view_ms is None:
                assert exposed_drawn_ns(fig) == want
            else:  # zoomed: only the rectangles that meet the view are sent
                x = np.array([np.nan if v is None else v for v in lane["x"]], dtype=float).reshape(-1, 5)
                assert len(x) and ((x[:, 1] > view_ms[0]) & (x[:, 0] < view_ms[1])).all()
            if view_ms is None:  # the same colour per collective in both columns
                colors = {t["fillcolor"] for t in fig["traces"] if t["meta"] and t["meta"].get("kind") == "lines"}
                assert {collective_color("all_gather"), collective_color("reduce_scatter")} <= colors

    ctx = open_page(browser, [FSDP2, NO_PREFETCH])
    try:
        check(2)
        left, right = _rect(browser, "timeline-0"), _rect(browser, "timeline-1")
        assert left["right"] <= right["left"] and abs(left["top"] - right["top"]) < 2  # two columns
        assert browser.find_elements(By.ID, "step-0") == [] and browser.find_elements(By.ID, "step-1") == []
        choose_step(browser, "ab", "step 4")
        check(4)
        _relayout(browser, "timeline-1", {"xaxis.range[0]": 10, "xaxis.range[1]": 30})
        check(4, [10, 30])  # a zoom in B's column redraws A's at the same range
        _relayout(browser, "timeline-0", {"xaxis.autorange": True})
        check(4)  # a reset in A's brings both back to the longer step

        click_tab(browser, "Breakdowns")
        for i in runs:  # FSDP runs have no micro-batches: the Gantt says so in each column
            assert T.wait_for(lambda: browser.find_elements(By.ID, f"gantt-{i}"))[0].text == "no data for this run"
        click_tab(browser, "Compare")
        for key, section in (("collective", "by_collective"), ("scope", "by_scope")):
            table = T.wait_for(lambda: browser.find_elements(By.ID, f"compare-table-{key}"))[0]
            rows = {tds[0].text: [td.text for td in tds[1:]] for tds in
                    (tr.find_elements(By.TAG_NAME, "td") for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr"))}
            per = []
            for i in runs:
                a = analyses[i]
                frame = getattr(a, section)
                per.append(frame.groupby(frame[key].astype(str))["exposed_comm_ns"].sum()
                           / a.totals["steps"].sum() / 1e6)
            keys = set(per[0].index) | set(per[1].index)
            want = {k: [f"{per[0].get(k, 0.0):.3f}", f"{per[1].get(k, 0.0):.3f}",
                        f"{per[1].get(k, 0.0) - per[0].get(k, 0.0):.3f}"] for k in keys}
            assert rows == want
        assert rows["FSDP::all_gather (layers.0)"] == ["2.238", "10.040", "7.802"]
        click_tab(browser, "Timeline")
        check(4)  # the step chosen before survives the tabs
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)


def test_page_loads_the_vendored_bundles_instead_of_the_polyfill():
    from overlapscope.dashboard import PLOTLY_JS, REGENERATOR_JS, create_app

    client = create_app([PP]).server.test_client()
    index = client.get("/").get_data(as_text=True)
    assert "polyfill@" not in index and f'src="{REGENERATOR_JS}"' in index and f'src="{PLOTLY_JS}"' in index
    for url in (PLOTLY_JS, REGENERATOR_JS):
        assert client.get(url).status_code == 200, url


@needs_browser
def test_every_trace_type_drawn_is_in_the_cartesian_bundle(browser):
    ctx = open_page(browser, [PP])
    try:
        figure_where(browser, "timeline-0", lambda f: True)
        click_tab(browser, "Breakdowns")
        figure_where(browser, "gantt-0", lambda f: True)
        registered, drawn = browser.execute_script(
            "return [Object.keys(Plotly.PlotSchema.get().traces),"
            " Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(gd => gd.data.map(t => t.type))];")
        assert {"bar", "heatmap", "scatter"} <= set(drawn) <= set(registered)
        assert "scattergl" not in registered  # the cartesian bundle, not the full one
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)
