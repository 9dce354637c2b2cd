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


def test_a_baseline_without_the_package_is_refused_in_one_line(tmp_path):
    """A --baseline folder holding no overlapscope would silently time the installed package (PYTHONPATH
    falls through): refused, in one line naming the folder, no traceback."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "2", "--collectives", "2", "--baseline", str(tmp_path),
                           "--rounds", "1"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"reduce_scale.py: {tmp_path.resolve()} holds no overlapscope package: "
                                                "the per-rank map would have timed the installed one"]


def test_a_baseline_whose_code_fails_is_named_in_one_line(tmp_path):
    """A checkout whose code cannot run (its per-rank map, the first step, fails): one line naming it
    and its last error line."""
    package = tmp_path / "overlapscope"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('this checkout is broken')\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "2", "--collectives", "2", "--baseline", str(tmp_path),
                           "--rounds", "1"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"reduce_scale.py: the per-rank map with {tmp_path.resolve()}'s code failed: "
                                                "ImportError: this checkout is broken"]


def test_a_baseline_whose_reduce_fails_is_named_in_one_line(tmp_path):
    """A checkout whose per-rank map runs but whose combine cannot: one line naming it and its last
    error line."""
    import shutil

    shutil.copytree(ROOT / "overlapscope", tmp_path / "overlapscope", ignore=shutil.ignore_patterns("__pycache__"))
    init = tmp_path / "overlapscope" / "analysis" / "__init__.py"
    init.write_text(init.read_text() + "\n\ndef combine(*args, **kwargs):\n    raise RuntimeError('this reduce is broken')\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "2", "--collectives", "2", "--baseline", str(tmp_path),
                           "--rounds", "1"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"reduce_scale.py: the reduce with {tmp_path.resolve()}'s code failed: "
                                                "RuntimeError: this reduce is broken"]
