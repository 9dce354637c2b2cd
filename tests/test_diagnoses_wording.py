"""Diagnoses a user can act on, on the committed reference runs: who is late, what was not aligned and why."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import overlapscope
from overlapscope.report.tables import summary_lines

TRACES = Path(__file__).resolve().parents[1] / "traces"


@lru_cache(maxsize=None)
def analysis(run: str):
    return overlapscope.analyze(overlapscope.load_run(TRACES / run))


def test_the_summary_names_the_straggler():
    # fsdp2_tp: 4 ranks on 2 cores; rank 3 is last at 21 of its 24 two-rank collectives (chance: 12)
    lines = summary_lines(analysis("fsdp2_tp"))
    assert lines[1].startswith("most exposed: rank 1 ") and lines[1].endswith(
        "; straggler: rank 3 (last at 21 of its 24 collectives)")
    assert any(line.startswith("rank 3 arrives last at 21 of its 24 collectives (chance: 12;") for line in lines)


def test_no_straggler_where_last_arrivals_are_chance():
    # ddp: rank 0 last at 11 of 21 two-rank all-reduces, rank 1 at 10
    lines = summary_lines(analysis("ddp"))
    assert "straggler" not in " ".join(lines)


def test_pipeline_runs_say_what_was_not_aligned_and_why():
    [note] = [d for d in analysis("pp").diagnoses if "clock" in d]
    assert note.startswith("clocks not aligned for rank 1: it exchanges only send/recv with the other ranks")
    assert "share no matched collective" not in note and "exact when the ranks share one host's clock" in note
