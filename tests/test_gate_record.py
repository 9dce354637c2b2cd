"""`overlapscope baseline --runs N -- CMD`: the baseline records its own runs through `profile`."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from overlapscope.errors import OverlapscopeError
from overlapscope.report import gate_baseline as gb
from overlapscope.report.gate_record import profile_argv, record_runs

REPO = Path(__file__).resolve().parents[1]
TRAIN = """
    import torch
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for i in range(8):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


def test_baseline_records_n_runs_of_the_command_and_combines_them(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAIN))
    out = tmp_path / "ci" / "base.json"
    done = subprocess.run([sys.executable, "-m", "overlapscope", "baseline", "--runs", "2", "--steps", "3",
                           "-o", str(out), "--", sys.executable, str(script)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"baseline: {out} (2 runs, 1 ranks, 3 steps)" in done.stdout
    runs_dir = tmp_path / "ci" / "base-runs"
    assert sorted(p.name for p in runs_dir.iterdir()) == ["run1", "run2"]
    assert all((runs_dir / r / "rank0.trace.json.gz").is_file() for r in ("run1", "run2"))
    doc = gb.load_baseline(out)
    assert len(doc["runs"]) == 2 and sorted(set(doc["steps"]["run"])) == [0, 1]
    # a second recording never writes into the first one's runs
    again = subprocess.run([sys.executable, "-m", "overlapscope", "baseline", "--runs", "2", "-o", str(out), "--",
                            sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "runs folder exists and is not empty" in again.stderr
    assert again.stderr.count("\n") == 1


def test_record_runs_stops_at_the_first_failing_run(tmp_path):
    calls = []

    def fake(argv):
        calls.append(argv)
        return 0 if len(calls) == 1 else 3

    with pytest.raises(OverlapscopeError, match="run 2 of 3: the profiled command exited with status 3"):
        record_runs(["torchrun", "train.py"], 3, tmp_path / "runs", steps=4, skip_first=1, run=fake)
    assert calls[0] == profile_argv(["torchrun", "train.py"], tmp_path / "runs" / "run1", steps=4, skip_first=1)
    assert calls[0][-3:] == ["--", "torchrun", "train.py"] and len(calls) == 2
    with pytest.raises(OverlapscopeError, match="needs the command to profile after --"):
        record_runs([], 2, tmp_path / "other", steps=4, skip_first=1, run=fake)


def test_baseline_of_runs_on_disk_still_works_and_a_missing_one_is_one_line(tmp_path):
    from click.testing import CliRunner

    from gate_fixtures import BASE6, make_analysis
    from overlapscope.report.gate_cli import baseline
    rec = tmp_path / "r.json"
    gb.save_baseline(gb.build_baseline(make_analysis({0: BASE6})), rec)
    ok = CliRunner().invoke(baseline, [str(rec), str(rec), "-o", str(tmp_path / "b.json")])
    assert ok.exit_code == 0 and "(2 runs, 1 ranks, 6 steps)" in ok.output
    missing = CliRunner().invoke(baseline, [str(tmp_path / "nope"), "-o", str(tmp_path / "c.json")])
    assert missing.exit_code == 2 and "no such run" in missing.output
