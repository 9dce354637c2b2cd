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
