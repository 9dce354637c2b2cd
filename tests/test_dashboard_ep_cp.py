"""The dashboard's EP / CP tab on the committed MoE and ring-attention runs: the traffic heatmap of the
selected step is the analysis' matrix, and the tab follows the step selector."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from overlapscope.dashboard import testing as T
from overlapscope.dashboard.data import load_run_data
from overlapscope.dashboard.ep_cp_view import moe_figure, ring_figure, traffic_figure
from test_dashboard import browser, choose_step, click_tab, figure_where, open_page  # noqa: F401 - browser: fixture

REPO = Path(__file__).resolve().parents[1]
SKEWED = REPO / "traces/moe_ep_skewed"
CP = REPO / "traces/cp"


def test_traffic_heatmap_is_the_steps_matrix():
    data = load_run_data(SKEWED)
    a = data.analysis
    for step in sorted(set(a.all_to_all_traffic["step"])):
        fig = traffic_figure(data, step)
        sub = a.all_to_all_traffic[a.all_to_all_traffic["step"] == step]
        want = sub.pivot_table(index="src", columns="dst", values="bytes", aggfunc="sum").to_numpy() / 2**20
        assert np.allclose(np.asarray(fig.data[0].z), want, rtol=0, atol=0)
        assert "hot rank r1" in fig.layout.title.text and "3.40x" in fig.layout.title.text
    moe = moe_figure(data, None)
    exposed = sum(np.asarray(t.x).sum() for t in moe.data if t.name == "exposed")
    first = int(a.moe_layers["step"].min())
    assert exposed == pytest.approx(a.moe_layers.loc[a.moe_layers["step"] == first, "exposed_comm_ns"].sum() / 1e6)
    assert ring_figure(data, None) is None  # no ring steps in an MoE run


def test_ring_steps_figure_splits_the_p2p():
    data = load_run_data(CP)
    r = data.analysis.ring_steps
    step = int(r["step"].min())
    fig = ring_figure(data, step)
    total = sum(np.asarray(t.x).sum() for t in fig.data)
    assert total == pytest.approx(r.loc[r["step"] == step, "comm_ns"].sum() / 1e6)
    assert traffic_figure(data, step) is None


@pytest.mark.needs_browser
def test_ep_cp_tab_follows_the_step_selector(browser):  # noqa: F811
    a = load_run_data(SKEWED).analysis
    steps = sorted(set(a.all_to_all_traffic["step"]))
    ctx = open_page(browser, [SKEWED])
    try:
        assert figure_where(browser, "timeline-0", lambda f: True)  # the page is drawn
        click_tab(browser, "EP / CP")
        assert figure_where(browser, "a2a-traffic-0", lambda f: f["meta"]["step"] == steps[0])
        assert T.figure(browser, "moe-layers-0") is not None
        choose_step(browser, 0, f"step {steps[-1]}")
        assert figure_where(browser, "a2a-traffic-0", lambda f: f["meta"]["step"] == steps[-1])
        assert T.console_errors(browser) == []
    finally:
        ctx.__exit__(None, None, None)
