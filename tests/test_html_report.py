"""`overlapscope report` and `check --html`: one self-contained HTML page, opened in headless Chromium from
a file URL: it renders, logs no console error, makes no request, and shows the numbers `analyze` prints."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from overlapscope.cli import main
from overlapscope.pipeline.run import analyze_run
from overlapscope.report import gate_baseline as gb
from overlapscope.report import tables
from overlapscope.report.gate import compare
from overlapscope.report.html_report import CSP, render_html, typical_step

REPO = Path(__file__).resolve().parents[1]
FSDP2 = REPO / "traces/fsdp2"
NO_PREFETCH = REPO / "traces/fsdp2_no_prefetch"
needs_browser = pytest.mark.needs_browser


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def analysis():
    return analyze_run(FSDP2, keep_events=True)


def figures(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S).group(1))


def test_page_is_self_contained_and_holds_analyzes_tables(analysis):
    page = render_html(analysis)
    assert f'content="{CSP}"' in page and "default-src 'none'" in CSP
    # nothing to fetch: no src= or href= outside the inlined plotly.js, no <link> or <img>
    scripts = re.findall(r"<script>.*?</script>", page, re.S)
    assert len(scripts) == 2 and "Plotly.newPlot" in scripts[1] and len(scripts[0]) > 1_000_000
    outside = page.replace(scripts[0], "")
    assert not re.search(r"\b(src|href)\s*=", outside) and not re.search(r"<(link|img|iframe)", outside)
    for title, header, rows in tables.sections(analysis):
        assert f"data-title='{title}'" in page.replace("&#x27;", "'") or f"data-title='{title}'" in page
        for row in rows:
            assert all(f">{c}</td>" in page for c in row if "<" not in c and "&" not in c)
    assert set(figures(page)) == {"timeline", "breakdown"}


def test_timeline_draws_exactly_the_exposed_time_of_its_step(analysis):
    step = typical_step(analysis)
    fig = figures(render_html(analysis))["timeline"]
    [exposed] = [t for t in fig["data"] if t["meta"]["kind"] == "exposed"]
    x = np.array([np.nan if v is None else v for v in exposed["x"]]).reshape(-1, 6)
    y = np.array([np.nan if v is None else v for v in exposed["y"]]).reshape(-1, 6)
    widths_ns = (x[:, 1] - x[:, 0]) * 1e6
    rows = analysis.steps[analysis.steps["step"] == step]
    for rank, expected in zip(rows["rank"], rows["exposed_comm_ns"]):
        lane = -(rank * 4 + 2)
        assert widths_ns[np.isclose(y[:, 0], lane - 0.4)].sum() == pytest.approx(expected, abs=1)  # 6-decimal ms


def test_report_escapes_trace_strings(analysis):
    evil = '<img src=x onerror="window.__xss=1">'
    analysis.run["path"], saved = evil, analysis.run["path"]
    analysis.diagnoses.append(evil)
    try:
        page = render_html(analysis)
    finally:
        analysis.run["path"] = saved
        analysis.diagnoses.pop()
    assert evil not in page and html_escaped(evil) in page


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_report_command_with_a_baseline_or_a_run_to_compare(tmp_path):
    base = tmp_path / "base.json"
    assert invoke("baseline", NO_PREFETCH, "-o", base).exit_code == 0
    out = invoke("report", FSDP2, "--baseline", base, "-o", tmp_path / "r.html")
    assert out.exit_code == 0, out.output
    page = (tmp_path / "r.html").read_text()
    assert "id='verdict-table'" in page and "evidence-0" in figures(page)
    out = invoke("report", FSDP2, "--compare", NO_PREFETCH, "-o", tmp_path / "c.html")
    assert out.exit_code == 0 and "Verdict per metric" in (tmp_path / "c.html").read_text()
    both = invoke("report", FSDP2, "--baseline", base, "--compare", NO_PREFETCH, "-o", tmp_path / "x.html")
    assert both.exit_code == 2 and "not both" in both.output
    clobber = invoke("report", FSDP2, "--baseline", base, "-o", base)
    assert clobber.exit_code == 2 and "would overwrite an input" in clobber.output
    assert gb.load_baseline(base)  # untouched


def test_check_html_writes_the_page_beside_the_junit(tmp_path):
    base = tmp_path / "base.json"
    assert invoke("baseline", FSDP2, "-o", base).exit_code == 0
    out = invoke("check", FSDP2, "--baseline", base, "--junit", tmp_path / "ci/j.xml", "--html", tmp_path / "ci/r.html")
    assert out.exit_code == 0, out.output
    page = (tmp_path / "ci/r.html").read_text()
    verdict = compare(gb.load_baseline(base), analyze_run(FSDP2))
    assert verdict.outcome in page and (tmp_path / "ci/j.xml").is_file()
    record = invoke("check", base, "--baseline", base, "--html", tmp_path / "r2.html")
    assert record.exit_code == 2 and "--html needs the run's traces" in record.output


@needs_browser
def test_page_renders_from_a_file_url_without_errors_or_requests_and_shows_analyzes_numbers(tmp_path):
    from selenium.webdriver.common.by import By

    from overlapscope.dashboard import testing as T
    base = tmp_path / "base.json"
    assert invoke("baseline", FSDP2, "-o", base).exit_code == 0
    page = tmp_path / "report.html"
    assert invoke("report", NO_PREFETCH, "--baseline", base, "-o", page).exit_code == 0
    doc = json.loads(invoke("analyze", NO_PREFETCH, "--format", "json").output)
    with T.chromium() as driver:
        driver.get(page.as_uri())
        T.wait_for(lambda: driver.execute_script(
            "const f = [...document.querySelectorAll('.fig')];"
            "return f.length >= 3 && f.every(e => e.dataset.drawn === '1' && e.querySelector('.main-svg'));"), 60)
        assert T.console_errors(driver) == []
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        # the per-rank table, read as drawn, against analyze's JSON
        rows = driver.find_elements(By.CSS_SELECTOR, "table[data-title^='Exposed communication per rank'] tbody tr")
        shown = {int(r.find_elements(By.TAG_NAME, "td")[0].text): [c.text for c in r.find_elements(By.TAG_NAME, "td")]
                 for r in rows}
        for rank in doc["ranks"]:
            t = rank["total"]
            n = len(rank["steps"])
            cells = shown[rank["rank"]]
            assert cells[3] == f"{t['exposed_comm_ns'] / n / 1e6:,.3f}"
            assert cells[5] == (f"{t['overlap_pct']:.1f}" if t["overlap_pct"] is not None else "-")
        outcome = driver.find_element(By.ID, "outcome").text
        assert outcome.startswith(("FAIL", "INCONCLUSIVE", "PASS"))
        drawn = driver.execute_script(
            "return document.getElementById('timeline-fig')._fullData.map(t => t.meta.kind)")
        assert drawn == ["compute", "comm", "exposed"]
