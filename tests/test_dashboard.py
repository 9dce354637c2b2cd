"""The dashboard, driven in real headless Chromium (selenium + Debian chromium/chromedriver).

Pages: a real GPU trace (tests/data/real), the committed 2-rank CPU gloo runs (traces/ddp,
traces/fsdp2), two runs compared, a run that fails to load, and a trace whose names are HTML. The exposed lane is checked against analyze() by summing the
segments Plotly actually holds in the browser.
"""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from overlapscope import analyze, load_run
from overlapscope.dashboard import create_app
from overlapscope.dashboard import testing as T
from overlapscope.dashboard.data import ALL_STEPS, Lane, decimate, load_run_data
from data_paths import REAL_TRACES
from overlapscope.dashboard.timeline import rect_widths, timeline_figure, untyped, view_from_relayout

REPO = Path(__file__).resolve().parents[1]
GPU = REAL_TRACES / "kineto-gpu"
CONTROL = GPU / "trace_diff_control/control.json.gz"
NCCL = GPU / "nccl_parser_config/nccl_data.json.gz"

needs_data = pytest.mark.needs_data(CONTROL, NCCL)
needs_browser = pytest.mark.needs_browser

# The committed example runs (CPU + gloo, 2 ranks; see traces/README.md).
DDP = REPO / "traces/ddp"
FSDP2 = REPO / "traces/fsdp2"


@pytest.fixture(scope="session")
def cpu_run() -> Path:
    assert (DDP / "rank0.trace.json.gz").is_file() and (DDP / "rank1.trace.json.gz").is_file(), DDP
    return DDP


@pytest.fixture(scope="module")
def browser():
    with T.chromium() as driver:
        yield driver


def open_page(driver, paths):
    app = create_app([str(p) for p in paths])
    ctx = T.served(app)
    url = ctx.__enter__()
    driver.get_log("browser")  # drop entries of the previous page
    driver.get(url)
    return ctx


def exposed_drawn_ns(fig: dict) -> dict[int, int]:
    """Per rank, the total width of the exposed-lane rectangles Plotly holds (x in ms -> ns)."""
    [tr] = [t for t in fig["traces"] if t["meta"] and t["meta"].get("kind") == "exposed"]
    widths = rect_widths([np.nan if v is None else v for v in tr["x"]])
    y = np.array([np.nan if v is None else v for v in tr["y"]], dtype=float).reshape(-1, 5)[:, :4].mean(axis=1)
    return {int(rank): int(round((widths[np.isclose(y, lane_y)] * 1e6).sum()))
            for rank, lane_y in tr["meta"]["lane_y"].items()}


def figure_where(driver, graph_id, predicate, timeout_s=30):
    return T.wait_for(lambda: (lambda f: f if f and predicate(f) else None)(T.figure(driver, graph_id)), timeout_s)


def choose_step(driver, i: int | str, label: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, f"step-{i}").click()
    option = T.wait_for(lambda: [o for o in driver.find_elements(By.CSS_SELECTOR, "[role=option]")
                                 if o.text.strip() == label])
    option[0].click()


def click_tab(driver, label: str) -> None:
    from selenium.webdriver.common.by import By

    [tab] = [t for t in driver.find_elements(By.CSS_SELECTOR, ".tab") if t.text.strip() == label]
    tab.click()


# ---------- without a browser: decimation, zoom parsing, the exposed lane's numbers ----------

def _lane(starts, ends) -> Lane:
    n = len(starts)
    return Lane(rank=0, kind="compute", label="compute stream:7", starts=np.array(starts, np.int64),
                ends=np.array(ends, np.int64), names=np.array([f"k{i}" for i in range(n)], dtype=object),
                collective=np.full(n, "", dtype=object), nbytes=np.full(n, -1, np.int64),
                wait_ns=np.full(n, -1, np.int64), transfer_ns=np.full(n, -1, np.int64))


def test_decimate_merges_gaps_under_a_pixel_and_keeps_busy_time_exact():
    lane = _lane([0, 12, 100, 130], [10, 20, 110, 131])
    b = decimate(lane, np.arange(4), px_ns=5, max_exact=2)
    assert b.starts.tolist() == [0, 100, 130] and b.ends.tolist() == [20, 110, 131]
    assert b.count.tolist() == [2, 1, 1] and b.busy_ns.tolist() == [18, 10, 1] and b.first.tolist() == [0, 2, 3]
    exact = decimate(lane, np.arange(4), px_ns=5, max_exact=4)
    assert exact.starts.tolist() == [0, 12, 100, 130] and exact.count.tolist() == [1, 1, 1, 1]


def test_visible_finds_nested_ranges_that_start_before_the_view():
    # A long outer range [0, 100) holds [10, 20); [30, 40) follows. View [50, 60) meets only the outer one.
    lane = _lane([0, 10, 30], [100, 20, 40])
    assert lane.visible(50, 60).tolist() == [0]
    assert lane.visible(15, 35).tolist() == [0, 1, 2]
    assert lane.visible(100, 200).tolist() == []


def test_view_from_relayout():
    assert view_from_relayout({"xaxis.range[0]": 2.5, "xaxis.range[1]": 1.0}, 1000) == (1_001_000, 2_501_000)
    assert view_from_relayout({"xaxis.range": [0, 1]}, 0) == (0, 1_000_000)
    assert view_from_relayout({"xaxis.autorange": True}, 0) is None
    assert view_from_relayout({"autosize": True}, 0) is None


@needs_data
def test_exposed_lane_equals_analyzer_every_step_and_zoom():
    data = load_run_data(CONTROL)
    steps = data.analysis.steps
    for step in data.steps:
        fig = timeline_figure(data, step)
        [lane] = [t for t in fig["data"] if t["meta"]["kind"] == "exposed"]
        x = untyped(lane["x"])
        assert x.dtype == np.float64  # the exposed lane is drawn in float64: its widths add up to the ns
        want = int(steps.loc[steps["step"] == step, "exposed_comm_ns"].iloc[0])
        assert int(round((rect_widths(x) * 1e6).sum())) == want == lane["meta"]["exposed_ns"]["3"]
    # The README's reference total for this trace (µs): exposed comm 87,921 over its 6 steps.
    assert data.ranks[0].exposed.total == 87_921_000
    # Zoomed in, fewer intervals are sent but the lane still says the step's exact total.
    t0 = data.span(1009)[0]
    zoomed = timeline_figure(data, 1009, (t0 + 20_000_000, t0 + 30_000_000))
    assert zoomed["layout"]["meta"]["points"] < timeline_figure(data, 1009)["layout"]["meta"]["points"]
    [lane] = [t for t in zoomed["data"] if t["meta"]["kind"] == "exposed"]
    assert lane["meta"]["exposed_ns"] == {"3": 9_704_000}


def test_bad_run_becomes_a_readable_error(tmp_path):
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-6])
    data = load_run_data(bad)
    assert not data.ok and str(bad) in data.error and "gzip" in data.error


# ---------- in Chromium ----------

@needs_browser
@needs_data
def test_gpu_trace_page_summary_timeline_steps_zoom_and_breakdowns(browser):
    from selenium.webdriver.common.by import By

    a = analyze(load_run(CONTROL))
    ctx = open_page(browser, [CONTROL])
    try:
        fig = figure_where(browser, "timeline-0", lambda f: f["meta"]["step"] == 1009)
        assert fig["ticktext"] == ["r3 ranges", "r3 compute stream:20", "r3 compute stream:7", "r3 comm stream:21",
                                   "r3 memcpy/memset", "r3 exposed comm (9.704 ms)"]
        assert exposed_drawn_ns(fig) == {3: 9_704_000}
        # Summary: 87,921 µs exposed of 464,594 µs of windows; overlap 75,614 / 163,535 (README reference).
        text = browser.find_element(By.ID, "summary-0-exposed-comm").text
        assert "14.654 ms" in text or "14.653 ms" in text
        assert "18.9% of step" in text
        assert "46.2%" in browser.find_element(By.ID, "summary-0-overlap").text
        # NCCL runs this trace's all-to-all as SendRecv kernels; the collective is the one torch called
        assert "all_to_all" in browser.find_element(By.ID, "summary-0-worst-collective").text

        choose_step(browser, 0, "step 1012")
        fig = figure_where(browser, "timeline-0", lambda f: f["meta"]["step"] == 1012)
        want = int(a.steps.loc[a.steps["step"] == 1012, "exposed_comm_ns"].iloc[0])
        assert exposed_drawn_ns(fig) == {3: want} and want == 14_588_000

        choose_step(browser, 0, "all steps")
        fig = figure_where(browser, "timeline-0", lambda f: f["meta"]["step"] == ALL_STEPS)
        assert exposed_drawn_ns(fig) == {3: 87_921_000}

        # Zoom the way a drag does: Plotly relayout -> server redraw of just that range.
        browser.execute_script(
            "const gd = document.querySelector('[id=\"timeline-0\"] .js-plotly-plot');"
            "Plotly.relayout(gd, {'xaxis.range[0]': 100, 'xaxis.range[1]': 110});")
        zoomed = figure_where(browser, "timeline-0", lambda f: f["meta"]["view_ms"] == [100, 110])
        assert zoomed["meta"]["points"] > 0 and zoomed["meta"]["step"] == ALL_STEPS
        [lane] = [t for t in zoomed["traces"] if t["meta"] and t["meta"].get("kind") == "exposed"]
        assert lane["meta"]["exposed_ns"] == {"3": 87_921_000}  # the label keeps the whole total
        x = np.array([np.nan if v is None else v for v in lane["x"]], dtype=float).reshape(-1, 5)
        assert ((x[:, 1] > 100) & (x[:, 0] < 110)).all()  # only what meets the view is sent

        click_tab(browser, "Breakdowns")
        T.wait_for(lambda: T.figure(browser, "collective-0"))
        bars = T.figure(browser, "collective-0")["traces"]
        assert [t["y"] for t in bars][0] == ["all_reduce", "all_to_all"]  # largest exposed at the top
        for key in ("group-0", "scope-0", "variation-0"):
            assert T.figure(browser, key) is not None, key
        for key in ("prefetch-0", "bubbles-0", "gantt-0", "waits-0"):
            el = browser.find_element(By.ID, key)
            assert el.text == "no data for this run" or T.figure(browser, key) is not None, key
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)


@needs_browser
def test_cpu_run_page_has_lanes_per_rank_and_exact_exposed(browser, cpu_run):
    run = load_run(cpu_run)
    a = analyze(run)
    first = int(a.steps["step"].min())
    ctx = open_page(browser, [cpu_run])
    try:
        fig = figure_where(browser, "timeline-0", lambda f: f["meta"]["step"] == first)
        for trace in run.ranks:
            main = trace.events.loc[trace.events["kind"] == "compute", "lane"].astype(str).unique()
            workers = sorted(trace.events.loc[trace.events["kind"] == "comm", "lane"].astype(str).unique())
            r = trace.rank
            mine = [t for t in fig["ticktext"] if t.startswith(f"r{r} ")]
            assert mine[:2] == [f"r{r} ranges", f"r{r} compute {main[0]}"]
            assert mine[2:2 + len(workers)] == [f"r{r} comm {w}" for w in workers] and len(workers) == 2
            assert mine[-1].startswith(f"r{r} exposed comm (")
        want = {int(r): int(v) for r, v in a.steps.loc[a.steps["step"] == first, ["rank", "exposed_comm_ns"]].values}
        assert exposed_drawn_ns(fig) == want and all(v > 0 for v in want.values())
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)


@needs_browser
@needs_data
def test_two_runs_side_by_side_and_compare(browser):
    from selenium.webdriver.common.by import By

    ctx = open_page(browser, [NCCL, CONTROL])
    try:
        figure_where(browser, "timeline-0", lambda f: True)
        figure_where(browser, "timeline-1", lambda f: True)
        assert "A: nccl_data.json.gz" in browser.page_source and "B: control.json.gz" in browser.page_source
        click_tab(browser, "Compare")
        table = T.wait_for(lambda: browser.find_elements(By.ID, "compare-table-collective"))[0]
        rows = {tr.find_elements(By.TAG_NAME, "td")[0].text: [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")}
        # ms per step (one rank each): A all_reduce 39,445,134 ns / 3 steps; B all_to_all 83,443,000 ns / 6 steps.
        assert rows["all_reduce"][1] == "13.148" and rows["all_to_all"][2] == "13.907"
        assert rows["all_to_all"][3] == "13.907" and rows["broadcast"][3] == "-0.038"
        assert T.figure(browser, "compare-scope") is not None
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)


@needs_browser
def test_run_that_fails_to_load_shows_its_error(browser, tmp_path, cpu_run):
    from selenium.webdriver.common.by import By

    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": ')
    ctx = open_page(browser, [bad, cpu_run])
    try:
        err = T.wait_for(lambda: browser.find_elements(By.ID, "load-error-0"))[0]
        assert "Could not load run A" in err.text and str(bad) in err.text and "JSON" in err.text
        figure_where(browser, "timeline-1", lambda f: True)  # the good run still renders
    finally:
        ctx.__exit__(None, None, None)
    ctx = open_page(browser, [tmp_path / "missing"])
    try:
        err = T.wait_for(lambda: browser.find_elements(By.ID, "load-error-0"))[0]
        assert "no such file or directory" in err.text
    finally:
        ctx.__exit__(None, None, None)


def test_app_py_binds_localhost_and_serves(cpu_run):
    port = 18000 + os.getpid() % 1000
    proc = subprocess.Popen([sys.executable, str(REPO / "app.py"), str(cpu_run), "--port", str(port)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]  # "reading RUN ...", then the address
        assert lines[1].startswith(f"overlapscope dashboard: http://127.0.0.1:{port}/"), lines
        deadline = time.monotonic() + 60
        while True:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
                time.sleep(0.2)
        assert "overlapscope" in body
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=20)[0]
    # Flask's and Dash's banners only with -v: the address above is the one line a user needs.
    assert "Serving Flask app" not in rest and "Debug mode" not in rest and "Dash is running" not in rest, rest


def test_comm_lanes_carry_wait_and_transfer_of_their_collective():
    data = load_run_data(DDP)
    col = data.analysis.collectives
    for rv in data.ranks:
        comm = [ln for ln in rv.lanes if ln.kind == "comm"]
        got = sorted((int(s), int(w), int(t)) for ln in comm for s, w, t in zip(ln.starts, ln.wait_ns, ln.transfer_ns))
        mine = col[col["rank"] == rv.rank]
        # The frame's times may be on the aligned clock: compare on (wait, transfer) and count.
        assert sorted((w, t) for _, w, t in got) == sorted(zip(mine["wait_ns"].astype(int), mine["transfer_ns"].astype(int)))
        assert all(w >= 0 for _, w, _ in got)
    from overlapscope.dashboard.timeline import _hover_rows
    lane = [ln for ln in data.ranks[0].lanes if ln.kind == "comm"][0]
    rows, kind = _hover_rows(lane, decimate(lane, np.arange(lane.starts.size), 1.0, 100))
    assert kind == "comm" and rows[0, 4] == f"{lane.wait_ns[0] / 1e6:.3f} ms" and rows[0, 2] == "all_reduce"


@needs_browser
def test_fsdp2_breakdowns_show_prefetch_waits_and_diagnoses(browser):
    from selenium.webdriver.common.by import By

    a = analyze(load_run(FSDP2))
    ctx = open_page(browser, [FSDP2])
    try:
        figure_where(browser, "timeline-0", lambda f: True)
        diag = browser.find_element(By.ID, "diagnoses-0").text
        assert a.diagnoses and all(d in diag for d in a.diagnoses)
        click_tab(browser, "Breakdowns")
        prefetch = T.wait_for(lambda: T.figure(browser, "prefetch-0"))
        units = {u for t in prefetch["traces"] for u in t["y"]}
        assert units == set(a.prefetch["unit"].astype(str))
        waits = T.figure(browser, "waits-0")
        assert waits["traces"][0]["y"] == ["r0", "r1"]
        assert browser.find_element(By.ID, "bubbles-0").text == "no data for this run"
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)


@needs_browser
def test_trace_strings_are_escaped(browser, tmp_path):
    """Names from a trace are shown as text: an HTML name neither renders nor runs."""
    from kineto_builder import KinetoTrace
    from selenium.webdriver.common.by import By

    evil = '<img src=x onerror="window.__xss=1">'
    k = KinetoTrace(rank=0, world_size=1)
    k.step(1, 0, 120_000)
    k.annotation(evil, 1_000, 110_000)
    k.kernel("<b>gemm</b>", 2_000, 40_000, launch_ns=1_500)
    k.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30_000, 70_000, stream=21, launch_ns=1_600)
    k.kernel("<b>gemm</b>", 60_000, 100_000, launch_ns=1_700)
    path = k.write(tmp_path / "rank0.json")
    a = analyze(load_run(path))
    assert a.totals["exposed_comm_ns"].tolist() == [20_000]
    ctx = open_page(browser, [path])
    try:
        fig = figure_where(browser, "timeline-0", lambda f: True)
        assert exposed_drawn_ns(fig) == {0: 20_000}
        click_tab(browser, "Breakdowns")
        T.wait_for(lambda: T.figure(browser, "scope-0"))
        labels = browser.execute_script(
            "return Array.from(document.querySelectorAll('[id=\"scope-0\"] .ytick text')).map(t => t.textContent);")
        assert evil in labels
        assert browser.execute_script("return document.querySelectorAll('img').length") == 0
        assert browser.execute_script("return window.__xss === undefined")
    finally:
        ctx.__exit__(None, None, None)


def test_dashboard_command_is_registered_and_takes_at_most_two_runs():
    from click.testing import CliRunner

    from overlapscope.cli import main

    help_text = CliRunner().invoke(main, ["dashboard", "--help"]).output
    assert "--port" in help_text and "--host" in help_text and "127.0.0.1" in help_text
    result = CliRunner().invoke(main, ["dashboard", str(DDP), str(DDP), str(DDP)])
    assert result.exit_code == 2 and "one run, or two" in result.output


def test_bubble_and_heatmap_figures_from_their_frames():
    import pandas as pd

    from overlapscope.dashboard.figures import bubble_figure, wait_heatmap

    bubbles = pd.DataFrame({"rank": [0, 0, 1, 1], "step": [1, 2, 1, 2], "bubble_pct": [40.0, 50.0, 20.0, 30.0],
                            "theory_pct": [42.857, 42.857, 42.857, 42.857], "schedule": "gpipe",
                            "stages": 2, "microbatches": 2})
    fig = bubble_figure(bubbles)
    assert list(fig.data[0].x) == ["stage r0", "stage r1"] and list(fig.data[0].y) == [45.0, 25.0]
    assert list(fig.data[1].y) == [42.857, 42.857]
    assert bubble_figure(bubbles.iloc[:0]) is None
    col = pd.DataFrame({"rank": [0, 1, 0, 1], "collective": ["all_reduce", "all_reduce", "all_gather", "all_gather"],
                        "wait_ns": [3_000, 0, 0, 1_000], "transfer_ns": [1_000, 1_000, 2_000, 1_000]})
    heat = wait_heatmap(col)
    assert list(heat.data[0].x) == ["all_gather", "all_reduce"] and list(heat.data[0].y) == ["r0", "r1"]
    assert heat.data[0].z.tolist() == [[0.0, 75.0], [50.0, 0.0]]
    assert wait_heatmap(pd.DataFrame()) is None


def test_microbatch_gantt_from_forward_backward_ranges(tmp_path):
    from kineto_builder import KinetoTrace

    from overlapscope.dashboard.figures import microbatch_gantt

    k = KinetoTrace(rank=0, world_size=1)
    k.step(1, 0, 100_000)
    for i, (name, s, e) in enumerate([("Forward 0", 1_000, 20_000), ("Forward 1", 20_000, 40_000),
                                      ("Backward 0", 50_000, 70_000), ("Backward 1", 70_000, 95_000)]):
        k.annotation(name, s, e)
        k.kernel(f"gemm{i}", s + 500, e - 500, launch_ns=s + 100)
    data = load_run_data(k.write(tmp_path / "rank0.json"))
    fig = microbatch_gantt(data, 1)
    [bars] = fig.data
    assert list(bars.text) == ["Forward 0", "Forward 1", "Backward 0", "Backward 1"]
    assert np.allclose(bars.base, [0.0, 0.019, 0.049, 0.069]) and np.allclose(bars.x, [0.019, 0.02, 0.02, 0.025])
    assert list(bars.marker.color) == ["#4c78a8", "#4c78a8", "#b279a2", "#b279a2"]


@needs_browser
def test_hover_on_a_collective_names_it_with_wait_and_transfer(browser, cpu_run):
    data = load_run_data(cpu_run)
    waits = {f"wait {ln.wait_ns[i] / 1e6:.3f} ms · transfer {ln.transfer_ns[i] / 1e6:.3f} ms"
             for rv in data.ranks for ln in rv.lanes if ln.kind == "comm" for i in range(ln.starts.size)}
    ctx = open_page(browser, [cpu_run])
    try:
        figure_where(browser, "timeline-0", lambda f: True)
        # A real mouse move over the first comm block (Plotly hovers on mousemove over its drag layer).
        browser.execute_script("""
            const gd = document.querySelector('[id="timeline-0"] .js-plotly-plot');
            const t = gd._fullData.find(t => t.meta && t.meta.template === 'comm');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
            const x = box.left + xa.l2p(t.x[0]), y = box.top + ya.l2p(t.y[0]);
            gd.querySelector('.nsewdrag').dispatchEvent(
                new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));""")
        text = T.wait_for(lambda: browser.execute_script(
            "const h = document.querySelector('.hoverlayer .hovertext'); return h ? h.textContent : null;"), 10)
        assert text and "collective all_reduce" in text and "gloo:all_reduce" in text
        assert any(w in text for w in waits), text
    finally:
        ctx.__exit__(None, None, None)


@needs_browser
def test_rank_table_headers_are_spaced_and_aligned_with_their_numbers(browser):
    from selenium.webdriver.common.by import By

    ctx = open_page(browser, [DDP])
    try:
        table = T.wait_for(lambda: browser.find_elements(By.ID, "ranks-0"))[0]
        # text extents of the header cells and of the first row, as drawn
        boxes = browser.execute_script("""
            const extent = el => { const r = document.createRange(); r.selectNodeContents(el);
                                   const b = r.getBoundingClientRect(); return [b.left, b.right]; };
            const t = arguments[0];
            return [[...t.querySelectorAll('thead th')].map(extent),
                    [...t.querySelector('tbody tr').querySelectorAll('td')].map(extent)];""", table)
        head, first = boxes
        assert len(head) == len(first) == 8
        # no two headers run together ("rankstepsstep ms..."): at least 10 px between their texts
        assert all(b[0] - a[1] >= 10 for a, b in zip(head, head[1:])), head
        # numbers are right-aligned under their header, the rank label left-aligned under "rank"
        assert abs(head[0][0] - first[0][0]) <= 1
        assert all(abs(h[1] - d[1]) <= 1 for h, d in zip(head[1:], first[1:])), (head, first)
        assert "mean per step" in table.text
    finally:
        ctx.__exit__(None, None, None)
