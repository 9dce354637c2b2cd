"""The per-section summaries the report prints, on the hand-built runs of the analyzer tests."""
from __future__ import annotations

import pytest

from overlapscope.analysis.collectives import analyze_collectives
from overlapscope.analysis.crossrank import bubble_summary, collective_summary
from test_bubbles import ONE_F_ONE_B, run
from test_collectives import three_ranks
from crossrank_tables import US


def test_collective_summary_sums_wait_and_transfer_per_group_and_type():
    rep = analyze_collectives(three_ranks())
    s = collective_summary(rep.collectives, rep.wait_transfer)
    assert s["collective"].tolist() == ["all_reduce", "all_gather"]
    ar = s.iloc[0]
    assert ar["collectives"] == 2 and ar["rows"] == 6
    assert ar["wait_ns"] == (3000 + 2500 + 0 + 3000 + 3000 + 0) * US
    assert ar["transfer_ns"] == (6000 * 3 + 7000 * 3) * US
    assert ar["median_busbw_gbps"] == pytest.approx((1e6 / 6e6 * 4 / 3 + 1e6 / 7e6 * 4 / 3) / 2)


def test_bubble_summary_per_stage():
    s = bubble_summary(run(ONE_F_ONE_B)[0])
    assert s["rank"].tolist() == [0, 1] and s["bubble_pct"].tolist() == [20.0, 20.0]
    assert s["theory_pct"].tolist() == pytest.approx([20.0, 20.0]) and set(s["schedule"]) == {"1f1b"}
