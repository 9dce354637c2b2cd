"""benchmarks/reduce_scale.py runs (tiny sizes): its in-process table, and --baseline side by side."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "reduce_scale.py"


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_in_process_table_has_a_row_per_size():
    out = run("--ranks", "2", "3", "--collectives", "4").splitlines()
    rows = [line.split() for line in out[2:]]
    assert [r[:2] for r in rows] == [["2", "4"], ["3", "4"]] and all(len(r) == 8 for r in rows)


def test_side_by_side_with_a_checkout_prints_both_and_their_ratio():
    """This checkout against itself: both rows and a ratio line, every number positive."""
    out = run("--ranks", "3", "--collectives", "4", "--baseline", str(ROOT), "--rounds", "1").splitlines()
    assert out[0].startswith("3 ranks x 4 collectives, 1 rounds alternating")
    this, baseline, ratio = (line.split() for line in out[2:5])
    assert this[0] == "this" and baseline[0] == "baseline" and ratio[0] == "ratio"
    assert all(float(x) > 0 for x in ratio[1:6])
