"""Golden outputs: `overlapscope analyze` as JSON, markdown and table on three example runs and two real
traces, compared byte for byte with tests/golden/. A change prints its diff; when the change is meant,
`pytest tests/test_golden.py --update-golden` rewrites the files (review the diff before committing)."""
from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from click.testing import CliRunner

from overlapscope.cli import main

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
# Paths as given on the command line (relative to the repository: the JSON names its run by it).
RUNS = {
    "ddp": "traces/ddp",
    "fsdp2": "traces/fsdp2",
    "pp": "traces/pp",
    "kineto_2rank": "tests/data/real/kineto-gpu/trace_filter_2rank",
    "nsys_mock": "tests/data/real/nsys/mock.sqlite",
}
FORMATS = {"json": "json", "markdown": "md", "table": "txt"}
DIFF_LINES = 60


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", sorted(RUNS))
def test_analyze_output_matches_golden(name, fmt, request, monkeypatch):
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(main, ["analyze", RUNS[name], "--format", fmt, "--no-cache"])
    assert result.exit_code == 0, result.output
    golden = GOLDEN / f"{name}.{FORMATS[fmt]}"
    if request.config.getoption("--update-golden"):
        golden.write_text(result.stdout)
        return
    assert golden.is_file(), f"no golden output {golden}: record it with pytest --update-golden"
    expected = golden.read_text()
    if result.stdout != expected:
        diff = list(difflib.unified_diff(expected.splitlines(), result.stdout.splitlines(),
                                         f"golden/{golden.name}", "now", lineterm=""))
        shown = "\n".join(diff[:DIFF_LINES]) + (f"\n... {len(diff) - DIFF_LINES} more lines" if len(diff) > DIFF_LINES else "")
        pytest.fail(f"{golden.name} changed (pytest --update-golden rewrites it if meant):\n{shown}", pytrace=False)


def test_json_step_records_follow_each_rank_in_the_frame_order():
    """to_dict groups the step rows by rank in one pass: each rank gets its own rows in the frame's
    order (ranks interleaved, a rank with no step rows gets none), keys in STEP_RECORD_KEYS order."""
    import numpy as np
    import pandas as pd

    from overlapscope.report.json_report import STEP_RECORD_KEYS, _steps_by_rank

    steps = pd.DataFrame({"rank": np.array([1, 0, 1, 0], np.int32), "step": [7, 3, 5, 4],
                          **{c: np.arange(4, dtype=np.int64) * 10 for c in STEP_RECORD_KEYS if c != "step"}})
    got = _steps_by_rank(steps)
    assert sorted(got) == [0, 1] and 2 not in got
    assert [r["step"] for r in got[1]] == [7, 5] and [r["step"] for r in got[0]] == [3, 4]
    assert list(got[0][0]) == STEP_RECORD_KEYS and got[0][1]["window_ns"] == 30
    assert all(type(v) is int for v in got[1][0].values())  # NumPy scalars cleaned to Python ints
    assert _steps_by_rank(steps.iloc[:0]) == {}
