"""A command whose optional dependency is missing names the extra in one line and exits 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The CLI with one module hidden, as on an install without that extra (None in sys.modules makes
# every import of it, and importlib.util.find_spec, say it is not there).
HIDDEN = "import sys; sys.modules[{module!r}] = None; from overlapscope.cli import main; main()"


def run_without(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDDEN.format(module=module), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("module", "args", "extra"), [
    ("torch", ["profile", "--out", "never-written", "--", "python", "-c", "pass"], "torch"),
    ("plotly", ["dashboard", "traces/ddp"], "dash"),
    ("dash", ["dashboard", "traces/ddp"], "dash"),
])
def test_missing_extra_is_one_line_naming_it(module, args, extra):
    result = run_without(module, *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("overlapscope: error: ") and f"pip install 'overlapscope[{extra}]'" in lines[-1]
    assert module in lines[-1] and "Traceback" not in result.stderr
    assert not (REPO / "never-written").exists()


def test_app_py_names_the_extra_too():
    code = "import sys, runpy; sys.modules['plotly'] = None; sys.argv = ['app.py', 'traces/ddp']; " \
           "runpy.run_path('app.py', run_name='__main__')"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "pip install 'overlapscope[dash]'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
