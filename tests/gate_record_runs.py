"""Record the runs `gate_false_alarm_rate.py` measures: unchanged FSDP2 runs and runs without prefetch, one at a time.

    python tests/gate_record_runs.py --out runs/gate --runs 10 --steps 4 8 --changed-runs 3

Runs `overlapscope profile` on `instrumented_models.fsdp2` (2 ranks, gloo) sequentially, interleaving
the configurations (4 and 8 steps, prefetch 1 and none) so that a change of the machine's load over
the session spreads over all of them instead of biasing one. Before each run, when the one-minute load
average is below --min-load, a CPU burner (one busy process, ended by its pid after the run) keeps the
machine loaded: the gate must hold on a busy CI runner, not only on a quiet one. Writes
`OUT/<config>_<i>/` and `OUT/runs.csv` (name, config, steps, load before, wall s, burner).
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = {"pf1": ["--prefetch", "1"], "none": ["--prefetch", "none"]}


def burner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def record(out: Path, name: str, steps: int, model_args: list[str]) -> float:
    iters = steps + 4  # profiler start, one skipped, one warm-up, `steps` recorded, one to flush
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd = [sys.executable, "-m", "overlapscope", "profile", "--out", str(out / name), "--steps", str(steps),
           "--skip-first", "1", "--", *torchrun, "-m", "instrumented_models.fsdp2", "--iters", str(iters), *model_args]
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=10, help="unchanged (prefetch 1) runs per step count")
    ap.add_argument("--changed-runs", type=int, default=3, help="prefetch-off runs per step count")
    ap.add_argument("--steps", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--min-load", type=float, default=2.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    plan = []
    for i in range(max(a.runs, a.changed_runs)):
        for steps in a.steps:
            if i < a.runs:
                plan.append(("pf1", steps, i))
            if i < a.changed_runs:
                plan.append(("none", steps, i))
    with (a.out / "runs.csv").open("a", newline="") as fh:
        log = csv.writer(fh)
        for config, steps, i in plan:
            name = f"{config}_s{steps}_{i:02d}"
            if (a.out / name / "manifest.json").exists():
                continue  # resumable: a killed session keeps what it recorded
            load = os.getloadavg()[0]
            burn = burner() if load < a.min_load else None
            try:
                wall = record(a.out, name, steps, CONFIGS[config])
            finally:
                if burn is not None:
                    burn.terminate()
                    burn.wait()
            log.writerow([name, config, steps, f"{load:.2f}", f"{wall:.1f}", int(burn is not None)])
            fh.flush()
            print(f"{name}: load {load:.2f}{' +burner' if burn else ''}, {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()
