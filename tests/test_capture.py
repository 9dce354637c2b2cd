"""capture(), the injected start-up hook, the `profile` launcher and the run manifest."""
from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from overlapscope.capture import capture, label
from overlapscope.capture.cli import profile
from overlapscope.capture.launcher import ProfileOptions, hook_env, nsys_command, prepare_out_dir
from overlapscope.capture.manifest import build_manifest, write_fragment
from overlapscope.errors import OverlapscopeError

REPO = Path(__file__).resolve().parents[1]


def profiler_steps(trace: Path) -> list[str]:
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    return sorted((e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")),
                  key=lambda n: int(n.split("#")[1]))


def names(trace: Path) -> set[str]:
    return {e.get("name", "") for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]}


def run_profile_cli(tmp_path: Path, out: Path, script: str, *args: str, env_extra: dict | None = None,
                    timeout: int = 120) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "overlapscope.capture.cli", "--out", str(out), *args,
                           "--", sys.executable, str(path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


TRAIN = """
    import sys, torch
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else {iters}):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    {tail}
"""


def test_capture_writes_the_requested_steps_and_a_manifest(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 4)
    with capture(tmp_path, steps=3, skip_first=2) as cap:
        for _ in range(9):
            with label("forward"):
                model(torch.randn(2, 4)).sum().backward()
            cap.step()
    trace = tmp_path / "rank0.trace.json.gz"
    # skip 2, warm up 1: steps 3, 4, 5 are recorded
    assert profiler_steps(trace) == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    assert "forward" in names(trace)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["schema"] == "overlapscope.manifest/1"
    assert manifest["world_size"] == 1 and manifest["missing_ranks"] == []
    assert manifest["traces"] == {"0": "rank0.trace.json.gz"}
    assert manifest["ranks"]["0"]["steps_recorded"] == 3 and manifest["ranks"]["0"]["complete"] is True
    assert manifest["torch_version"] == torch.__version__
    # no fragments or partial files left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "rank0.trace.json.gz"]


def test_capture_exits_early_with_a_partial_trace(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with capture(tmp_path, steps=5, skip_first=0) as cap:
            for i in range(4):
                torch.ones(3).sum()
                cap.step()
                if i == 2:
                    raise RuntimeError("boom")
    # step 0 warm-up, steps 1 and 2 recorded whole; the step in progress (3) is cut short
    assert profiler_steps(tmp_path / "rank0.trace.json.gz")[:2] == ["ProfilerStep#1", "ProfilerStep#2"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["ranks"]["0"]["steps_recorded"] == 2 and manifest["ranks"]["0"]["complete"] is False


def test_profile_hook_steps_at_every_optimizer_step(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_profile_cli(tmp_path, out, TRAIN.format(iters=9, tail=""), "--steps", "4", "--skip-first", "2")
    assert done.returncode == 0, done.stderr
    # the first optimizer step starts the profiler; skip 2, warm up 1, record 4
    assert profiler_steps(out / "rank0.trace.json.gz") == [f"ProfilerStep#{i}" for i in (3, 4, 5, 6)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["exit_code"] == 0 and manifest["mode"] == "kineto"
    assert manifest["steps"] == 4 and manifest["skip_first"] == 2
    assert manifest["command"] == [sys.executable, str(tmp_path / "script.py")]
    assert f"analyze with: overlapscope analyze {out}" in done.stdout


def test_failing_command_keeps_its_exit_status_and_the_trace_so_far(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_profile_cli(tmp_path, out, TRAIN.format(iters=6, tail="sys.exit(7)"), "--steps", "10",
                           "--skip-first", "0")
    assert done.returncode == 7
    # 6 optimizer steps: profiler started at the 1st, warm-up step 0, steps 1-4 whole, 5 in progress
    assert profiler_steps(out / "rank0.trace.json.gz")[:4] == [f"ProfilerStep#{i}" for i in (1, 2, 3, 4)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["exit_code"] == 7
    assert manifest["ranks"]["0"]["complete"] is False and manifest["ranks"]["0"]["steps_recorded"] == 4


def test_script_with_its_own_capture_makes_the_hook_stand_down(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = """
        import torch
        from overlapscope.capture import capture
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(2):  # the hook's profiler starts here ...
            opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()
        with capture("elsewhere", steps=2, skip_first=0) as cap:  # ... and is dropped here
            for i in range(6):
                opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()
                cap.step()
    """
    done = run_profile_cli(tmp_path, out, script, "--steps", "3", "--skip-first", "0")
    assert done.returncode == 0, done.stderr
    # the script's schedule (2 steps after 1 warm-up), written where `profile --out` says
    assert profiler_steps(out / "rank0.trace.json.gz") == ["ProfilerStep#1", "ProfilerStep#2"]
    assert not (REPO / "elsewhere").exists()


def test_profile_refuses_a_non_empty_out_dir(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(profile, ["--out", str(tmp_path), "--", "true"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "not empty" in result.output and "--force" in result.output
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_force_replaces_only_a_previous_runs_files(tmp_path: Path) -> None:
    for name in ("notes.txt", "rank5.trace.json.gz", "manifest.json", ".overlapscope-rank5.meta"):
        (tmp_path / name).write_text("old")
    prepare_out_dir(tmp_path, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    with pytest.raises(OverlapscopeError, match="not empty"):
        prepare_out_dir(tmp_path, force=False)


def test_nsys_flag_without_nsys_exits_2_with_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(profile, ["--nsys", "--out", str(tmp_path / "o"), "--", "true"],
                                env={"PATH": str(tmp_path)})
    assert result.exit_code == 2
    assert result.output == "overlapscope: error: --nsys needs Nsight Systems: `nsys` is not on PATH\n"
    assert not (tmp_path / "o").exists()


def test_missing_command_is_a_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(profile, ["--out", str(tmp_path / "o"), "--", str(tmp_path / "no-such-program")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "cannot run" in result.output


def test_nsys_command_puts_each_torchrun_rank_under_nsys(tmp_path: Path) -> None:
    cmd = ["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "instrumented_models.ddp", "--iters", "7"]
    nsys = ["nsys", "profile", "-t", "cuda,nvtx,osrt", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--force-overwrite=true", "-o"]
    assert nsys_command(cmd, tmp_path, python="py") == [
        "torchrun", "--standalone", "--nproc-per-node", "2", "--no-python",
        *nsys, str(tmp_path / "nsys" / "rank%q{RANK}"), "py", "-m", "instrumented_models.ddp", "--iters", "7"]
    cmd = ["python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py", "--lr", "1"]
    assert nsys_command(cmd, tmp_path, python="py") == [
        "python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "--no-python",
        *nsys, str(tmp_path / "nsys" / "rank%q{RANK}"), "py", "train.py", "--lr", "1"]
    assert nsys_command(["python", "train.py"], tmp_path) == [
        *nsys, str(tmp_path / "nsys" / "rank0"), "python", "train.py"]


FAKE_NSYS = """#!/bin/sh
# Stand-in for Nsight Systems (not installed here): `profile ... -o NAME CMD...` runs CMD and
# writes NAME.nsys-rep; `export ... -o OUT REP` writes OUT. Enough to test the launcher's plumbing.
mode=$1; shift
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift 2;;
    -t|--type) shift 2;;
    --*) shift;;
    *) break;;
  esac
done
if [ "$mode" = profile ]; then
  out=$(echo "$out" | sed "s/%q{RANK}/${RANK:-}/")
  "$@"; rc=$?
  echo report > "$out.nsys-rep"; exit $rc
fi
echo "sqlite of $1" > "$out"
"""


def test_nsys_mode_exports_sqlite_per_rank_without_kineto(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(FAKE_NSYS)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "run"
    done = run_profile_cli(tmp_path, out, TRAIN.format(iters=8, tail=""), "--nsys", "--steps", "3",
                           env_extra={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "nsys", "rank0.sqlite"]
    assert (out / "rank0.sqlite").read_text() == f"sqlite of {out / 'nsys' / 'rank0.nsys-rep'}\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mode"] == "nsys" and manifest["nsys_reports"] == ["rank0.sqlite"]
    assert manifest["traces"] == {"0": "rank0.sqlite"} and manifest["missing_ranks"] == []
    assert manifest["ranks"]["0"]["steps_recorded"] == 3


def test_hook_env_chains_an_existing_sitecustomize(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    env = hook_env(ProfileOptions(out_dir=tmp_path / "o"), base={**os.environ, "PYTHONPATH": str(user)})
    code = ("import os, torch.optim.optimizer as o; "
            "print(os.environ.get('USER_SITE_RAN'), len(o._global_optimizer_post_hooks))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["1", "1"], done.stderr


def test_manifest_names_missing_ranks(tmp_path: Path) -> None:
    for rank in (0, 2):
        (tmp_path / f"rank{rank}.trace.json.gz").write_bytes(b"")
        write_fragment(tmp_path, {"rank": rank, "host": f"h{rank}", "world_size": 4, "backend": "gloo",
                                  "device_name": "cpu", "layout": {"parallel": "ddp"} if rank == 2 else {}})
    m = build_manifest(tmp_path, command=["x"], start_time="t", start_time_ns=1, steps=3, skip_first=1)
    assert m["world_size"] == 4 and m["missing_ranks"] == [1, 3]
    assert m["hosts"] == ["h0", "h2"] and m["layout"] == {"parallel": "ddp"}
    assert m["traces"] == {"0": "rank0.trace.json.gz", "2": "rank2.trace.json.gz"}


def test_crashed_rank_is_listed_missing_and_the_exit_status_kept(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""
        import os, pathlib, time, torch
        if os.environ["RANK"] == "1":  # dies once rank 0 has written its trace, without one of its own
            while not (pathlib.Path(os.environ["OVERLAPSCOPE_CAPTURE_OUT"]) / "rank0.trace.json.gz").exists():
                time.sleep(0.1)
            os._exit(3)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(7):
            opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()
        time.sleep(120)  # torchrun terminates this rank when rank 1 fails
    """))
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "overlapscope.capture.cli", "--out", str(out), "--steps", "3", "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=180)
    assert done.returncode != 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["exit_code"] == done.returncode
    assert manifest["world_size"] == 2 and manifest["missing_ranks"] == [1]
    assert (out / "rank0.trace.json.gz").exists()
    assert "missing rank(s) [1]" in done.stdout
