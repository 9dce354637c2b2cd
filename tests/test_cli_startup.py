"""The CLI starts fast because it imports only what a command uses (benchmarks/cli_startup.py times it).

Timing on a shared machine is noise; which modules a command imported is not. Each case runs the
CLI in a fresh interpreter and lists the heavy modules loaded by the time it exits.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "numpy", "scipy", "pyarrow", "pyarrow.parquet", "rich", "dask", "dash", "plotly", "torch",
         "concurrent.futures.process")
PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(m for m in {heavy!r} if m in sys.modules))))
from overlapscope.cli import main
main({args!r})
"""


def loaded(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY, args=list(args))], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.rsplit("MODULES ", 1)[1])


@pytest.mark.parametrize("args", [["--help"], ["check", "--help"], ["baseline", "--help"], ["analyze", "--help"],
                                  ["profile", "--help"], ["dashboard", "--help"], ["--version"]])
def test_help_imports_nothing_heavy(args):
    assert loaded(*args) == []


def test_a_small_analyze_imports_only_the_core():
    # pandas/NumPy are the event table; rich draws the table. No SciPy (the gate's statistics), no
    # Parquet (traces under 1 MiB are never cached), no process pool, Dask, dashboard or torch.
    assert loaded("analyze", "traces/ddp") == ["numpy", "pandas", "pyarrow", "rich"]
    assert "rich" not in loaded("analyze", "traces/ddp", "--format", "json")
