"""Pipeline bubbles on hand-built GPipe and 1F1B stage timelines (2 stages, 4 micro-batches, F=100, B=200 µs)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from crossrank_tables import US, ev, table, windows
from overlapscope.analysis.bubbles import (BUBBLE_COLUMNS, SPAN_COLUMNS, microbatch_spans, normalize_schedule,
                                           pipeline_bubbles, theory_fraction)

F, B = 100, 200


def stage(rank: int, plan: list[tuple[str, int, int]], step: int = 5) -> pd.DataFrame:
    """plan: (action "F"/"B", micro-batch, compute start µs). Each label opens at the previous compute's
    end and first waits in a gloo recv for the neighbour (comm, so bubble), then computes."""
    rows, free = [], 0
    for action, mb, start in plan:
        dur = F if action == "F" else B
        label = f"{'Forward' if action == 'F' else 'Backward'} {mb}"
        rows.append(ev("thread:1", "annotation", label, free * US, (start + dur) * US, step=step))
        if start > free:
            rows.append(ev("thread:1", "comm", "gloo:recv", free * US, start * US, collective="recv", step=step))
        rows.append(ev("thread:1", "compute", "aten::addmm", start * US, (start + dur) * US, step=step))
        free = start + dur
    return table(rank, rows)


GPIPE = {
    0: [("F", i, 100 * i) for i in range(4)] + [("B", i, 700 + 200 * i) for i in range(4)],
    1: [("F", i, 100 + 100 * i) for i in range(4)] + [("B", i, 500 + 200 * i) for i in range(4)],
}
ONE_F_ONE_B = {
    0: [("F", 0, 0), ("F", 1, 100), ("B", 0, 400), ("F", 2, 600), ("B", 1, 700), ("F", 3, 900), ("B", 2, 1000),
        ("B", 3, 1300)],
    1: [("F", 0, 100), ("B", 0, 200), ("F", 1, 400), ("B", 1, 500), ("F", 2, 700), ("B", 2, 800), ("F", 3, 1000),
        ("B", 3, 1100)],
}


def run(plan: dict, manifest: dict | None = None):
    tables = {r: stage(r, p) for r, p in plan.items()}
    wins = {r: windows((5, 0, 1500 * US)) for r in plan}
    return pipeline_bubbles(tables, wins, manifest)


@pytest.mark.parametrize("plan, schedule", [(GPIPE, "gpipe"), (ONE_F_ONE_B, "1f1b")])
def test_bubble_equals_theory_for_uniform_stages(plan, schedule):
    bubbles, spans, notes = run(plan)
    assert list(bubbles.columns) == list(BUBBLE_COLUMNS)
    assert bubbles["rank"].tolist() == [0, 1] and bubbles["step"].tolist() == [5, 5]
    # each stage computes 4 x 100 + 4 x 200 = 1200 of 1500 µs; receive waits are bubble
    assert bubbles["bubble_ns"].tolist() == [300 * US, 300 * US]
    assert bubbles["bubble_pct"].tolist() == [20.0, 20.0]
    assert bubbles["theory_pct"].tolist() == pytest.approx([20.0, 20.0])  # (p-1)/(m+p-1) = 1/5
    assert set(bubbles["schedule"]) == {schedule}
    assert set(bubbles["stages"]) == {2} and set(bubbles["microbatches"]) == {4} and set(bubbles["chunks"]) == {1}
    assert notes == [f"pipeline bubble 20.0% of step time ({schedule}, p=2, m=4); the schedule's theory is 20.0%"]


def test_microbatch_spans_are_compute_extents_not_receive_waits():
    spans = microbatch_spans(stage(1, ONE_F_ONE_B[1]))
    assert list(spans.columns) == list(SPAN_COLUMNS)
    assert spans[["action", "microbatch"]].values.tolist()[:3] == [["F", 0], ["B", 0], ["F", 1]]
    assert spans["start_ns"].tolist()[:3] == [100 * US, 200 * US, 400 * US]
    assert spans["end_ns"].tolist()[:3] == [200 * US, 400 * US, 500 * US]
    assert set(spans["stage"]) == {-1} and set(spans["step"]) == {5}


def test_manifest_layout_wins_over_labels():
    manifest = {"layout": {"parallel": "pp", "schedule": "interleaved", "stages": 4,
                           "microbatches": 8, "virtual_stages": 2}}
    bubbles, _, _ = run(GPIPE, manifest)
    assert set(bubbles["schedule"]) == {"interleaved"}
    assert bubbles["theory_pct"].tolist() == pytest.approx([100 * 3 / 19] * 2)


def test_multi_stage_labels_give_schedule_stages_and_chunks():
    # torch's PP:<stage><action><mb> labels, two stages per rank, split backward (I/W): zero bubble family
    rows = []
    for k, (lab, s) in enumerate([("PP:0F0", 0), ("PP:2F0", 100), ("PP:2I0", 200), ("PP:2W0", 300), ("PP:0I0", 400),
                                  ("PP:0W0", 500), ("PP:0F1", 600)]):
        rows.append(ev("thread:1", "annotation", lab, s * US, (s + 100) * US))
        rows.append(ev("thread:1", "compute", "mm", s * US, (s + 90) * US))
    t0 = table(0, rows)
    t1 = table(1, [ev("thread:1", "annotation", "PP:1F0", 0, 100 * US), ev("thread:1", "compute", "mm", 0, 100 * US),
                   ev("thread:1", "annotation", "PP:3F0", 100 * US, 200 * US)])
    bubbles, spans, _ = pipeline_bubbles({0: t0, 1: t1}, {0: windows((0, 0, 700 * US)), 1: windows((0, 0, 200 * US))})
    assert set(bubbles["schedule"]) == {"interleavedzerobubble"}
    # p = 2 ranks holding stages {0, 2} and {1, 3}
    assert set(bubbles["stages"]) == {2} and set(bubbles["chunks"]) == {2} and set(bubbles["microbatches"]) == {2}
    assert bubbles["theory_pct"].tolist() == pytest.approx([100 / 13] * 2)
    assert bubbles["bubble_ns"].tolist() == [70 * US, 100 * US]
    assert spans[spans["rank"] == 0]["stage"].tolist() == [0, 2, 2, 2, 0, 0, 0]
    # a label that launched no compute spans its own range
    assert spans[spans["rank"] == 1]["end_ns"].tolist() == [100 * US, 200 * US]


def test_not_a_pipeline_gives_no_bubbles():
    t = table(0, [ev("stream:7", "compute", "gemm", 0, 10)])
    bubbles, spans, notes = pipeline_bubbles({0: t}, {0: windows((0, 0, 10))}, {"layout": {"parallel": "ddp"}})
    assert bubbles.empty and spans.empty and notes == []
    assert list(bubbles.columns) == list(BUBBLE_COLUMNS)


def test_theory_fractions():
    assert theory_fraction("ScheduleGPipe", 4, 8) == 3 / 11
    assert theory_fraction("1F1B", 4, 8) == 3 / 11
    assert theory_fraction("Interleaved1F1B", 4, 8, 2) == 3 / 19
    assert theory_fraction("ScheduleLoopedBFS", 4, 8, 2) == 3 / 19
    assert theory_fraction("ScheduleInterleavedZeroBubble", 4, 8, 2) == 3 / 51
    assert theory_fraction("ScheduleZBVZeroBubble", 4, 8, 2) == 0.0
    assert math.isnan(theory_fraction("ScheduleDualPipeV", 4, 8, 2))
    assert math.isnan(theory_fraction("gpipe", 4, 0))
    assert normalize_schedule("Schedule1F1B") == "1f1b"
