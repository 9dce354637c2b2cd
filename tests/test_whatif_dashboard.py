"""The dashboard's What-if tab: the critical path of the selected step, saved time per key, busbw vs peak."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import test_dashboard as D
from overlapscope.dashboard import testing as T
from overlapscope.dashboard.data import load_run_data
from overlapscope.dashboard.whatif_view import busbw_figure, critical_path_figure, whatif_figure

NO_PREFETCH = Path(__file__).resolve().parents[1] / "traces/fsdp2_no_prefetch"


def test_critical_path_figure_draws_the_steps_segments_exactly():
    data = load_run_data(NO_PREFETCH)
    path = data.analysis.critical_path
    step = int(path["step"].iloc[-1])
    seg = path[path["step"] == step]
    fig = critical_path_figure(data, step)
    bar = fig.data[0]
    assert np.allclose(np.asarray(bar.x), (seg["end_ns"] - seg["start_ns"]).to_numpy() / 1e6)
    assert np.allclose(np.asarray(bar.base), (seg["start_ns"] - seg["start_ns"].min()).to_numpy() / 1e6)
    top = whatif_figure(data).data[0]
    assert top.y[-1].endswith(data.analysis.whatif["key"].iloc[0])  # the biggest saving on top
    # gloo names no size, but its gloo:<op> ranges' recorded shapes give one: CPU runs get a busbw figure
    assert busbw_figure(data) is not None


@D.needs_browser
def test_whatif_tab_in_the_browser(browser):
    ctx = D.open_page(browser, [NO_PREFETCH])
    try:
        D.figure_where(browser, "timeline-0", lambda f: True)
        D.click_tab(browser, "What-if")
        fig = T.wait_for(lambda: T.figure(browser, "critical-path-0"))
        assert fig["traces"][0]["type"] == "bar" and len(fig["traces"][0]["x"]) > 0
        assert T.figure(browser, "whatif-0")["traces"][0]["x"]
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)


@pytest.fixture(scope="module")
def browser():
    with T.chromium() as driver:
        yield driver
