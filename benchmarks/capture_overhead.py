"""Step-time cost of `overlapscope profile`: a reference model with and without capture.

    PYTHONPATH=. python benchmarks/capture_overhead.py [--model ddp] [--steps 10] [--nproc 2]

Runs `torchrun -m instrumented_models.MODEL` twice, plain and under `overlapscope profile`, and
compares rank 0's per-iteration times (the `step_ms` it prints) over the recorded iterations. The
iteration that ends with the trace export is reported on its own: export is a one-off cost at
the end of the capture, not a per-step overhead.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^rank 0 iter (\d+) loss [\d.]+ step_ms ([\d.]+)$", re.M)


def iteration_ms(cmd: list[str]) -> dict[int, float]:
    done = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"benchmark run failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return {int(i): float(ms) for i, ms in STEP.findall(done.stdout)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="ddp", choices=["ddp", "fsdp2", "tp", "pp"])
    p.add_argument("--steps", type=int, default=10, help="recorded steps")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--model-args", default="--layers 2", help="extra flags for the model")
    p.add_argument("--repeat", type=int, default=2,
                   help="runs per variant; the fastest median counts (a shared machine only ever adds time)")
    args = p.parse_args()
    skip = 1
    iters = skip + args.steps + 4
    model_cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
                 "-m", f"instrumented_models.{args.model}", "--iters", str(iters), *args.model_args.split()]
    recorded = range(skip + 2, skip + args.steps + 1)
    export_iter = skip + args.steps + 1
    base, with_capture, export_ms = float("inf"), float("inf"), float("inf")
    for _ in range(args.repeat):
        plain = iteration_ms(model_cmd)
        with tempfile.TemporaryDirectory() as tmp:
            profiled = iteration_ms([sys.executable, "-m", "overlapscope.capture.cli", "--out", f"{tmp}/run",
                                     "--steps", str(args.steps), "--skip-first", str(skip), "--", *model_cmd])
            trace_bytes = sum(f.stat().st_size for f in Path(tmp, "run").glob("*.gz"))
        # iteration 0 ends with the first optimizer step (profiler start); iteration i >= 1 is ProfilerStep#(i-1):
        # skipped (1), warm-up (skip + 1), recorded (skip + 2 .. skip + steps + 1); the last one also exports
        run_base = statistics.median(plain[i] for i in recorded)
        base = min(base, run_base)
        with_capture = min(with_capture, statistics.median(profiled[i] for i in recorded))
        export_ms = min(export_ms, profiled[export_iter] - run_base)
    print(f"model {args.model}, world size {args.nproc}, {args.steps} recorded steps")
    print(f"median step ms without capture {base:.1f}, with capture {with_capture:.1f}: "
          f"ratio {with_capture / base:.2f}")
    print(f"trace export (last recorded step) {export_ms:.0f} ms extra, "
          f"{trace_bytes / 1024:.0f} KB of traces")


if __name__ == "__main__":
    main()
