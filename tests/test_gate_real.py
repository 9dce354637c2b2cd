"""The gate on real GPU traces: 30% slower NCCL kernels fail and name the collective; noise passes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from mutate_trace import mutate_file
from data_paths import REAL_TRACES
from overlapscope.cli import main

TRACES = {
    "control": REAL_TRACES / "kineto-gpu/trace_diff_control/control.json.gz",
    "nccl": REAL_TRACES / "kineto-gpu/nccl_parser_config/nccl_data.json.gz",
}
pytestmark = pytest.mark.needs_data(*TRACES.values())
# The collective that carries most of each trace's exposed communication (traces/README.md).
# control.json.gz runs its all-to-alls as SendRecv kernels inside nccl:all_to_all: named as called.
MAIN_COLLECTIVE = {"control": "all_to_all", "nccl": "all_reduce"}


@pytest.fixture(scope="module", params=sorted(TRACES))
def case(request, tmp_path_factory):
    """Baseline of the original trace, and variants written to tmp (the shared trace is only read)."""
    name = request.param
    src = TRACES[name]
    tmp = tmp_path_factory.mktemp(name)
    base = tmp / "base.json"
    out = CliRunner().invoke(main, ["baseline", str(src), "-o", str(base)])
    assert out.exit_code == 0, out.output
    variants = {
        "stretch30": mutate_file(src, tmp / "stretch30.json.gz", stretch_comm_pct=30),
        "jitter2": mutate_file(src, tmp / "jitter2.json.gz", jitter_pct=2, seed=1),
        "stretch30_jitter2": mutate_file(src, tmp / "stretch30_jitter2.json.gz", stretch_comm_pct=30, jitter_pct=2,
                                         seed=2),
    }
    return name, src, base, variants, tmp


def check(run: Path, base: Path, *extra: str):
    return CliRunner().invoke(main, ["check", str(run), "--baseline", str(base), *extra])


def test_baseline_file_holds_per_step_samples(case):
    name, _, base, _, _ = case
    doc = json.loads(base.read_text())
    assert doc["schema"] == "overlapscope.baseline/1"
    assert len(doc["steps"]["step"]) == {"control": 6, "nccl": 3}[name]
    assert doc["run"]["world_size"] == {"control": 8, "nccl": 2}[name]
    # the reference totals of traces/README.md, summed back from the stored steps
    total = {"control": 87_921_000, "nccl": 39_559_468}[name]
    assert abs(sum(doc["steps"]["exposed_comm_ns"]) - total) <= 1_000


def test_same_trace_passes(case):
    _, src, base, _, _ = case
    out = check(src, base)
    assert out.exit_code == 0, out.output
    assert "exposed_comm ok: +0.000 ms per step" in out.output


@pytest.mark.parametrize("variant", ["stretch30", "stretch30_jitter2"])
def test_nccl_kernels_30pct_slower_fail_and_name_the_collective(case, variant):
    name, _, base, variants, tmp = case
    junit = tmp / f"{variant}.xml"
    summary = tmp / f"{variant}.md"
    out = check(variants[variant], base, "--junit", str(junit), "--summary", str(summary))
    assert out.exit_code == 1, out.output
    line = next(l for l in out.output.splitlines() if l.startswith("exposed_comm REGRESSED"))
    assert f"collective {MAIN_COLLECTIVE[name]} +" in line
    # per-step samples of each collective decide it on its own, too
    line = next(l for l in out.output.splitlines() if l.startswith("exposed_comm_by_collective REGRESSED"))
    assert f"(the key that moved most); collective {MAIN_COLLECTIVE[name]} +" in line
    failed = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    # the nccl trace's all-reduces have no launching scope: "(no enclosing range)" regresses with them
    assert failed == ["exposed_comm", "exposed_comm_by_collective"] + (["exposed_comm_by_scope"] if name == "nccl" else [])
    assert f"collective `{MAIN_COLLECTIVE[name]}`" in summary.read_text()


def test_two_percent_jitter_on_every_kernel_passes(case):
    _, _, base, variants, _ = case
    out = check(variants["jitter2"], base)
    assert out.exit_code == 0, out.output


def test_other_world_size_is_unusable(case):
    name, _, base, _, tmp = case
    other = TRACES["nccl" if name == "control" else "control"]
    out = check(other, base)
    assert out.exit_code == 2
    assert "world size" in out.output and "but the baseline has" in out.output
    assert len(out.output.strip().splitlines()) == 1


REPO = Path(__file__).resolve().parents[1]


def profile_fsdp2(out: Path, prefetch: str) -> None:
    """Run the FSDP2 reference model (CPU + gloo, 2 ranks) under `overlapscope profile`: 6 steps."""
    cmd = [sys.executable, "-m", "overlapscope", "profile", "--out", str(out), "--steps", "6", "--skip-first", "1",
           "--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "instrumented_models.fsdp2", "--iters", "10", "--layers", "2", "--prefetch", prefetch]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=out.parent)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_fsdp2_without_prefetch_fails_against_a_prefetch_baseline_and_a_rerun_passes(tmp_path):
    # On CPU, FSDP2 all-gathers without prefetch block: overlap drops to 0%; with one block of
    # async prefetch it stayed within 30-47% over 20 runs on a shared 2-core VM (4 layers, 8 steps),
    # and the default check of CPU-only runs (overlap, beyond the step-to-step spread) passed all 180
    # unchanged pairs there (tests/gate_false_alarm_rate.py).
    profile_fsdp2(tmp_path / "prefetch", "1")
    profile_fsdp2(tmp_path / "prefetch_again", "1")
    profile_fsdp2(tmp_path / "none", "none")
    base = tmp_path / "base.json"
    assert CliRunner().invoke(main, ["baseline", str(tmp_path / "prefetch"), "-o", str(base)]).exit_code == 0
    out = check(tmp_path / "none", base)
    assert out.exit_code == 1, out.output
    assert "overlap REGRESSED" in out.output and "note: CPU-only runs" in out.output
    assert "layout.prefetch differs: baseline '1', this run 'none'" in out.output
    out = check(tmp_path / "prefetch_again", base)
    assert out.exit_code == 0, out.output
