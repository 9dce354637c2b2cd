"""`analyze --format csv --table ...`: four shapes, one header, no trailing blank line."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from overlapscope.cli import main

TRACES = Path(__file__).resolve().parents[1] / "traces"


def csv_of(*args: str) -> str:
    result = CliRunner().invoke(main, ["analyze", *args, "--format", "csv"])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(("table", "first", "rows"), [
    ("steps", ["rank", "step"], 6),                 # 2 ranks x 3 steps
    ("totals", ["rank", "source", "steps"], 2),
    ("by-collective", ["rank", "collective", "count", "comm_ns", "exposed_comm_ns"], 2),
    ("collectives", ["instance", "group", "seq", "collective"], 42),  # 21 all-reduces x 2 ranks
])
def test_each_table_is_its_own_csv(table, first, rows):
    text = csv_of(str(TRACES / "ddp"), "--table", table)
    assert text.endswith("\n") and not text.endswith("\n\n")
    parsed = list(csv.reader(io.StringIO(text)))
    assert parsed[0][:len(first)] == first and len(parsed) == 1 + rows


def test_several_runs_share_one_header_with_a_run_column(tmp_path):
    text = csv_of(str(TRACES / "ddp"), str(TRACES / "tp"), "--table", "totals")
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [(r["run"], r["rank"]) for r in parsed] == [(str(TRACES / "ddp"), "0"), (str(TRACES / "ddp"), "1"),
                                                       (str(TRACES / "tp"), "0"), (str(TRACES / "tp"), "1")]
    out = tmp_path / "totals.csv"
    csv_of(str(TRACES / "ddp"), str(TRACES / "tp"), "--table", "totals", "-o", str(out))
    assert out.read_text() == text
