"""Record the runs of a baseline: the same command profiled N times, one after the other.

Through `overlapscope profile` in a child process (the CLI's own capture path, no other), so each
run starts fresh, as a CI job would, and a crash in one is that run's exit status, not ours.
Sequential: runs recorded side by side would load the machine for each other and measure that.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from overlapscope.errors import OverlapscopeError


def profile_argv(cmd: Sequence[str], out_dir: Path, *, steps: int, skip_first: int) -> list[str]:
    """The `overlapscope profile` command line that records `cmd` into out_dir."""
    return [sys.executable, "-m", "overlapscope", "profile", "--out", str(out_dir), "--steps", str(steps),
            "--skip-first", str(skip_first), "--", *cmd]


def record_runs(cmd: Sequence[str], runs: int, runs_dir: Path, *, steps: int, skip_first: int,
                run: Callable[[list[str]], int] | None = None) -> list[Path]:
    """Profile `cmd` `runs` times into runs_dir/run1..runN; raises OverlapscopeError when one fails.

    run(argv) -> exit status runs one profile (default: a child process sharing our stdout/stderr).
    """
    if runs < 1:
        raise OverlapscopeError(f"--runs must be at least 1, got {runs}")
    if not cmd:
        raise OverlapscopeError("--runs needs the command to profile after --, e.g. "
                                "overlapscope baseline --runs 3 -o base.json -- torchrun ... train.py")
    if runs_dir.exists() and (not runs_dir.is_dir() or any(runs_dir.iterdir())):
        raise OverlapscopeError("the runs folder exists and is not empty: name another with --runs-dir", runs_dir)
    run = run or (lambda argv: subprocess.run(argv, check=False).returncode)
    out = []
    for i in range(1, runs + 1):
        out_dir = runs_dir / f"run{i}"
        rc = run(profile_argv(cmd, out_dir, steps=steps, skip_first=skip_first))
        if rc != 0:
            raise OverlapscopeError(f"run {i} of {runs}: the profiled command exited with status {rc}", out_dir)
        out.append(out_dir)
    return out
