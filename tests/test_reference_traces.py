"""Real Kineto traces from GPU clusters give the reference totals of tests/data/real/README.md (±1 µs)."""
from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from data_paths import REAL_TRACES
from overlapscope.cli import main

KEYS = ("window", "compute", "comm", "overlapped", "exposed_comm", "exposed_memcpy", "idle")


def reference_rows(section_heading: str) -> list[dict]:
    """Rows of the first markdown table under a heading of the traces README."""
    readme = REAL_TRACES / "README.md"
    if not readme.is_file():
        return []
    text = readme.read_text()
    body = text.split(section_heading, 1)[1] if section_heading in text else ""
    lines = [l for l in body.splitlines() if l.startswith("|")]
    if len(lines) < 3:
        return []
    header = [h.strip().lower() for h in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header):
            break
        rows.append(dict(zip(header, cells)))
    return rows


KINETO_ROWS = reference_rows("## Reference numbers (DESIGN.md definitions")


def _us(cell: str) -> float:
    return float(cell.replace(",", ""))


@pytest.mark.needs_data(REAL_TRACES / "README.md")
def test_reference_table_is_found():
    # the parametrized test below has no cases when the table is not found: this one says so
    assert len(KINETO_ROWS) >= 6, KINETO_ROWS


@pytest.mark.needs_data(REAL_TRACES / "README.md")
@pytest.mark.parametrize("row", KINETO_ROWS, ids=[r["trace"] for r in KINETO_ROWS])
def test_kineto_reference_totals(row):
    path = REAL_TRACES / "kineto-gpu" / row["trace"]
    result = CliRunner().invoke(main, ["analyze", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["schema"] == "overlapscope.report/1"
    [rank] = doc["ranks"]
    total = rank["total"]
    assert total["steps"] == int(row["steps"])
    for key in KEYS:
        assert abs(total[f"{key}_ns"] / 1000 - _us(row[key])) <= 1.0, key
    if row["overlap %"] == "n/a":
        assert total["overlap_pct"] is None
    else:
        assert total["overlap_pct"] == pytest.approx(float(row["overlap %"]), abs=0.01)
    identity = total["compute_ns"] + total["exposed_comm_ns"] + total["exposed_memcpy_ns"] + total["idle_ns"]
    assert identity == total["window_ns"]
    for step in rank["steps"]:
        assert step["compute_ns"] + step["exposed_comm_ns"] + step["exposed_memcpy_ns"] + step["idle_ns"] \
            == step["window_ns"]


def test_two_rank_directory(real_traces):
    result = CliRunner().invoke(main, ["analyze", str(real_traces / "kineto-gpu" / "trace_filter_2rank"),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["run"]["rank_from"] == {"0": "distributedInfo", "1": "distributedInfo"}
