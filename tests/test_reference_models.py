"""Every reference model under `overlapscope profile` (world size 2, fsdp2_tp 4), checked through the
analysis: comm on every rank and step, the steps asked for, the loss falling, the knobs' effects.

Slow by nature (one torchrun per run, ~5-20 s each on 2 cores): each run happens once per session.
"""
from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from overlapscope import analyze, load_run

REPO = Path(__file__).resolve().parents[1]
STEPS, SKIP_FIRST, ITERS = 3, 1, 7
RECORDED = [SKIP_FIRST + 1 + i for i in range(STEPS)]  # one skipped, one warm-up step first
LOSS = re.compile(r"loss first ([\d.]+) last ([\d.]+)")

RUNS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "ddp": ("ddp", 2, ("--layers", "2")),
    "ddp_one_bucket": ("ddp", 2, ("--layers", "2", "--bucket-cap-mb", "25")),
    "fsdp2": ("fsdp2", 2, ("--prefetch", "1")),
    "fsdp2_no_prefetch": ("fsdp2", 2, ("--prefetch", "none")),
    "tp": ("tp", 2, ("--layers", "2")),
    # the label checks need no wide model
    "pp": ("pp", 2, ("--schedule", "1f1b", "--microbatches", "4", "--dim", "128", "--seq", "64", "--batch", "8")),
    "pp_interleaved": ("pp", 2, ("--schedule", "interleaved", "--microbatches", "4", "--dim", "128", "--seq", "64",
                                 "--batch", "8")),
    # bubble knob: enough work per micro-batch that compute, not gloo latency, sets the step time
    "pp_gpipe_m1": ("pp", 2, ("--schedule", "gpipe", "--microbatches", "1", "--layers", "2", "--dim", "256",
                              "--seq", "128", "--batch", "32")),
    "pp_gpipe_m4": ("pp", 2, ("--schedule", "gpipe", "--microbatches", "4", "--layers", "2", "--dim", "256",
                              "--seq", "128", "--batch", "32")),
    "fsdp2_tp": ("fsdp2_tp", 4, ("--layers", "2", "--dp", "2", "--tp", "2")),
    # expert and context parallelism (tests/test_moe_cp_runs.py): imbalance needs 4 ranks (max/mean <= n)
    "moe_skewed": ("moe_ep", 4, ("--layers", "1", "--microbatches", "2", "--batch", "16", "--routing", "skewed")),
    # uniform also covers --overlap microbatch and 4 experts per rank at world size 4 (its checks are on
    # bytes and labels, not timing)
    "moe_uniform": ("moe_ep", 4, ("--layers", "1", "--microbatches", "2", "--batch", "16", "--routing", "uniform",
                                  "--overlap", "microbatch", "--experts-per-rank", "4")),
    "moe_none": ("moe_ep", 2, ("--overlap", "none")),
    "moe_microbatch": ("moe_ep", 2, ("--overlap", "microbatch")),
    "cp_off": ("cp", 2, ("--overlap", "off")),
    "cp_on": ("cp", 2, ("--overlap", "on")),
    # the ring at world size 4: 3 transfers per block and pass; one block, a short sequence
    "cp_on_4": ("cp", 4, ("--overlap", "on", "--layers", "1", "--seq", "128")),
}
# A run that takes longer is hung (measured: 10-30 s each on 2 loaded cores). torchrun starts each rank
# in a session of its own, so a hung run gets SIGTERM first (torchrun then stops its ranks), SIGKILL
# after the grace period.
RUN_TIMEOUT_S, RUN_GRACE_S = 300, 30
EXPECTED_COLLECTIVES = {
    "ddp": {"all_reduce"}, "fsdp2": {"all_gather", "reduce_scatter"}, "tp": {"all_reduce"},
    "pp": {"send", "recv"}, "fsdp2_tp": {"all_gather", "reduce_scatter", "all_reduce"},
}


class Profiled:
    def __init__(self, out: Path, done: subprocess.CompletedProcess) -> None:
        self.out, self.done = out, done
        self.manifest = json.loads((out / "manifest.json").read_text())
        self.run = load_run(out)
        self.analysis = analyze(self.run)


@pytest.fixture(scope="session")
def profiled(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, Profiled] = {}

    def get(key: str, attempt: int = 1) -> Profiled:
        """The profiled run of RUNS[key]; attempt 2 is a fresh run of the same command."""
        if (key, attempt) not in cache:
            model, nproc, args = RUNS[key]
            out = tmp_path_factory.mktemp(f"{key}-{attempt}") / "run"
            cmd = [sys.executable, "-m", "overlapscope.capture.cli", "--out", str(out), "--steps", str(STEPS),
                   "--skip-first", str(SKIP_FIRST), "--", sys.executable, "-m", "torch.distributed.run",
                   "--standalone", "--nproc-per-node", str(nproc), "-m", f"instrumented_models.{model}",
                   "--iters", str(ITERS), *args]
            done = _run_bounded(cmd, f"{key} (attempt {attempt})")
            (out.parent / "stderr.log").write_text(done.stderr)
            assert done.returncode == 0, "\n".join(
                [ln for ln in done.stderr.splitlines() if re.search(r"error|abort|terminate|signal", ln, re.I)][:40])
            cache[key, attempt] = Profiled(out, done)
        return cache[key, attempt]

    return get


def _run_bounded(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """Run cmd in a process group of its own; past RUN_TIMEOUT_S stop it and fail the test."""
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=RUN_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        pytest.fail(f"{what}: no result after {RUN_TIMEOUT_S} s; stopped")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def knob_effect(profiled, keys: tuple[str, str], measure, holds) -> None:
    """Check a knob's effect on timing-based numbers; on a miss, profile both runs once more.

    A 2-core machine shared with other jobs can deschedule a rank for a whole step, so one pair of
    runs may disagree with the knob by chance; the same miss twice in a row is a real failure.
    """
    seen = []
    for attempt in (1, 2):
        values = tuple(measure(profiled(key, attempt)) for key in keys)
        seen.append(values)
        if holds(*values):
            return
    pytest.fail(f"{keys}: effect not seen in two pairs of runs: {seen}")


@pytest.mark.parametrize("key", ["ddp", "fsdp2", "tp", "pp", "fsdp2_tp"])
def test_reference_model_under_profile(profiled, key: str) -> None:
    p = profiled(key)
    model, nproc, _ = RUNS[key]
    m = p.manifest
    assert m["exit_code"] == 0 and m["world_size"] == nproc and m["missing_ranks"] == []
    assert m["backend"] == "gloo" and m["layout"]["parallel"] == model
    assert sorted(m["traces"]) == [str(r) for r in range(nproc)]
    # the training is real: the loss falls
    first, last = map(float, LOSS.search(p.done.stdout).groups())
    assert last < 0.8 * first, p.done.stdout
    steps = p.analysis.steps
    assert sorted(steps["rank"].unique().tolist()) == list(range(nproc))
    for rank, frame in steps.groupby("rank"):
        assert frame["step"].tolist() == RECORDED, f"rank {rank}"
    assert (steps["comm_ns"] > 0).all(), "every rank has comm in every step"
    assert (steps["compute_ns"] > 0).all()
    for rank, frame in p.analysis.by_collective.groupby("rank"):
        assert EXPECTED_COLLECTIVES[model] <= set(frame["collective"]), f"rank {rank}"


def test_layer_and_phase_labels_reach_the_trace(profiled) -> None:
    names = set(profiled("ddp").run.rank(0).events["name"].astype(str))
    assert {"train_step", "forward", "backward", "optimizer", "layer0", "layer1"} <= names


def exposed_all_gather_share(analysis) -> list[float]:
    """Exposed / total all-gather time of every (rank, step): the analyzer's per-step breakdown."""
    rows = analysis.by_key_steps
    ag = rows[(rows["section"] == "by_collective") & (rows["key"] == "all_gather") & (rows["comm_ns"] > 0)]
    missing = set(zip(analysis.steps["rank"], analysis.steps["step"])) - set(zip(ag["rank"], ag["step"]))
    assert not missing, f"no all-gather in (rank, step) {sorted(missing)}"
    return (ag["exposed_comm_ns"] / ag["comm_ns"]).astype(float).tolist()


def test_fsdp2_prefetch_exposes_less_all_gather(profiled) -> None:
    """Without prefetch every all-gather blocks the compute thread (all of it exposed); with async
    prefetch a large part runs under the previous block's compute. Judged on the exposed share, a
    median over ranks and steps: on a shared 2-core machine the absolute all-gather time swings with
    scheduling (an async all-gather competes with compute for the cores), the share does not."""
    # measured here: 0.99-1.0 without, 0.4-0.6 with
    knob_effect(profiled, ("fsdp2", "fsdp2_no_prefetch"),
                lambda p: statistics.median(exposed_all_gather_share(p.analysis)),
                lambda with_prefetch, without: without > 0.9 and with_prefetch < without - 0.2)


def test_ddp_small_buckets_overlap_backward(profiled) -> None:
    """0.25 MB buckets all-reduce while backward still runs; one 25 MB bucket (bigger than the model)
    all-reduces only once backward is done, so nothing overlaps it. Medians over ranks and steps."""
    # measured here: ~0% with one bucket, 30-80% (median ~55%) with small ones
    knob_effect(profiled, ("ddp", "ddp_one_bucket"),
                lambda p: float(np.median(p.analysis.steps["overlap_pct"])),
                lambda small, one: one < 10 and small > one + 20)


def bubble_pct_by_rank(analysis) -> dict[int, float]:
    """Median over steps of each stage's bubble share: the bubble analyzer's when present, else
    |W \\ C| / |W| from the overlap table (the same definition, DESIGN.md "Pipeline bubble")."""
    if len(analysis.bubbles):
        frame = analysis.bubbles
    else:
        frame = analysis.steps.assign(
            bubble_pct=100.0 * (analysis.steps["window_ns"] - analysis.steps["compute_ns"]) / analysis.steps["window_ns"])
    return {int(r): float(np.median(f["bubble_pct"])) for r, f in frame.groupby("rank")}


def test_pp_more_microbatches_smaller_bubble(profiled) -> None:
    # theory (p-1)/(m+p-1): 50% with one micro-batch, 20% with four; measured ~50% and ~22%
    knob_effect(profiled, ("pp_gpipe_m1", "pp_gpipe_m4"), lambda p: bubble_pct_by_rank(p.analysis),
                lambda one, four: all(four[rank] < one[rank] - 10 for rank in (0, 1)))


def test_pp_microbatch_labels(profiled) -> None:
    """Every stage shows one forward and one backward label per micro-batch and step."""
    cases = {"pp_gpipe_m4": lambda stage: [f"Forward {i}" for i in range(4)] + [f"Backward {i}" for i in range(4)],
             "pp": lambda stage: [f"PP:{stage}{a}{i}" for a in "FB" for i in range(4)],
             "pp_interleaved": lambda stage: [f"PP:{s}{a}{i}" for s in (stage, stage + 2) for a in "FB" for i in range(4)]}
    for key, expected in cases.items():
        p = profiled(key)
        for trace in p.run.ranks:
            names = trace.events["name"].astype(str)
            for label in expected(trace.rank):
                # at least one per recorded step (the warm-up step's may be cut off)
                assert (names == label).sum() >= STEPS, (key, trace.rank, label)
    assert profiled("pp").manifest["layout"] == {**profiled("pp").manifest["layout"], "schedule": "1f1b",
                                                  "stages": 2, "virtual_stages": 1, "microbatches": 4}
    assert profiled("pp_interleaved").manifest["layout"]["virtual_stages"] == 2


def test_capture_inside_the_script_at_world_size_2(tmp_path: Path) -> None:
    """`--capture-out` makes the model call overlapscope.capture() itself, under plain torchrun:
    both ranks write a trace and rank 0 merges the manifest after a barrier."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "instrumented_models.ddp", "--iters", "6", "--layers", "2", "--capture-out", str(out)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["missing_ranks"] == [] and manifest["layout"]["parallel"] == "ddp"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "rank0.trace.json.gz", "rank1.trace.json.gz"]
    steps = analyze(load_run(out)).steps
    # capture(steps=3, skip_first=1) from the first iteration: one skipped, one warm-up, then 2, 3, 4
    assert steps.groupby("rank")["step"].apply(list).tolist() == [[2, 3, 4], [2, 3, 4]]
    assert (steps["comm_ns"] > 0).all()
