"""The pytest plugin end to end: inner pytest runs that profile a real step, record, pass and fail."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

STEP_TEST = '''
import os
import torch

torch.set_num_threads(1)
REPEATS = int(os.environ.get("STEP_REPEATS", "1"))
X = torch.randn(256, 256)


def step():
    for _ in range(4 * REPEATS):
        X @ X


def test_step(overlapscope):
    # 100%: the same step twice never differs that much, 8x the work always does
    overlapscope.profile_step(step, steps=6, metrics=["exposed_comm", "step_time"], max_increase_pct=100)
'''


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("STEP_REPEATS", raising=False)
    # inner sessions load only this plugin (-p): dash, hypothesis... would cost seconds each
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_train=STEP_TEST)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "overlapscope.pytest_plugin", "-p", "no:cacheprovider", *args)


def test_record_then_pass_then_catch_a_slower_step(inner, monkeypatch):
    baseline = inner.path / "overlapscope_baselines" / "test_step.json"
    first = run(inner, "--overlapscope-update-baseline")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*overlapscope*", f"*test_step: baseline written to {baseline} (1 run)"])
    doc = json.loads(baseline.read_text())
    assert doc["schema"] == "overlapscope.baseline/1" and len(doc["steps"]["step"]) == 6
    assert doc["run"]["device"] == "cpu"

    # steps of ~5 ms on a loaded 2-core runner: one descheduled half can double them, so each
    # verdict gets one more profile before it counts (the plugin itself is deterministic)
    again = run(inner)
    if again.ret != 0:
        again = run(inner)
    again.assert_outcomes(passed=1)

    monkeypatch.setenv("STEP_REPEATS", "8")
    slow = run(inner)
    if slow.ret == 0:
        slow = run(inner)
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(["*step_time REGRESSED: +*", "*refresh with pytest --overlapscope-update-baseline*"])
    assert "exposed_comm REGRESSED" not in slow.stdout.str()


def test_baseline_of_several_runs(inner):
    baseline = inner.path / "overlapscope_baselines" / "test_step.json"
    out = run(inner, "--overlapscope-baseline-runs", "2")
    out.assert_outcomes(passed=1)
    out.stdout.fnmatch_lines([f"*test_step: baseline written to {baseline} (2 runs)"])
    doc = json.loads(baseline.read_text())
    assert len(doc["runs"]) == 2 and doc["steps"]["run"] == [0] * 6 + [1] * 6
    again = run(inner)  # pass or inconclusive: an unchanged step never fails
    if again.ret != 0:
        again = run(inner)
    again.assert_outcomes(passed=1)
    again.stdout.re_match_lines([r".*test_step: overlapscope check: (PASS|INCONCLUSIVE).*"])


def test_missing_baseline_fails_and_says_how_to_record(inner):
    out = run(inner)
    out.assert_outcomes(failed=1)
    out.stdout.fnmatch_lines(["*no baseline at *test_step.json; record one with pytest --overlapscope-update-baseline*"])


def test_baseline_dir_from_ini_and_an_incompatible_baseline(inner):
    inner.makeini("[pytest]\noverlapscope_baseline_dir = perf/baselines\n")
    run(inner, "--overlapscope-update-baseline").assert_outcomes(passed=1)
    path = inner.path / "perf" / "baselines" / "test_step.json"
    doc = json.loads(path.read_text())
    doc["run"]["world_size"] = 4
    path.write_text(json.dumps(doc))
    out = run(inner)
    out.assert_outcomes(failed=1)
    out.stdout.fnmatch_lines(["*overlapscope: *world size 1, but the baseline has 4: different runs*"])


def test_profile_command_with_torchrun(inner):
    # the FSDP2 reference model, 2 ranks on CPU + gloo, 7 optimizer steps: 1 skipped, 1 warm-up, 3 recorded
    inner.makepyfile(test_train='''
import sys

def test_fsdp2(overlapscope):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "instrumented_models.fsdp2", "--iters", "7", "--layers", "2"]
    overlapscope.profile_command(cmd, steps=3, skip_first=1, metrics=["exposed_comm"], max_increase_pct=300,
                                 min_increase_ms=500)
''')
    run(inner, "--overlapscope-update-baseline").assert_outcomes(passed=1)
    doc = json.loads((inner.path / "overlapscope_baselines" / "test_fsdp2.json").read_text())
    assert sorted(set(doc["steps"]["rank"])) == [0, 1] and doc["run"]["world_size"] == 2
    assert doc["run"]["manifest"]["layout"]["parallel"] == "fsdp2"
    run(inner).assert_outcomes(passed=1)
