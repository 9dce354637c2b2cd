"""The cross-rank reduce at scale: N ranks x C collectives, per-rank results already computed.

Builds one small event table per rank (C all-reduces on one process group with sequence numbers,
each rank's clock skewed, a compute kernel before each), runs the per-rank map (`analyze_rank`)
once, then times the reduce (`combine`) and, inside it, the cross-rank sections (matching, clock
offsets, wait/transfer, stragglers), the clock solve alone, and the what-if sections. The reduce runs
with the ranks' results frozen (pool.frozen_heap), as the pipeline runs it. Wall and CPU seconds are
printed with the load average, since the machine may be shared.

    python benchmarks/reduce_scale.py --ranks 64 256 1024 --collectives 200

Side by side with another checkout (a `git worktree` of main before a change), as the pipeline runs
the reduce: each checkout computes the per-rank results with its own `analyze_rank` (what workers
send back may differ between them) and pickles them once, as pool workers send them; each round
runs `combine` on them in a fresh process with this checkout's code, then with CHECKOUT's (by
PYTHONPATH), alternating; the first call is timed (the pipeline reduces once). Medians and the
ratio CHECKOUT / this are printed, wall and CPU:

    python benchmarks/reduce_scale.py --ranks 1024 --baseline CHECKOUT --rounds 4
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from overlapscope.analysis import analyze_rank, combine
from overlapscope.core.table import RankMeta, RankTrace, Run, make_table
from overlapscope.pipeline.pool import frozen_heap


def rank_trace(rank: int, collectives: int, rng: np.random.Generator) -> RankTrace:
    skew = int(rng.integers(-5_000_000, 5_000_000))  # clocks apart by up to 5 ms
    i = np.arange(collectives, dtype=np.int64)
    t0 = 1_000_000_000 + skew + i * 1_000_000
    arrive = t0 + 200_000 + rng.integers(0, 50_000, collectives)  # this rank's start of the all-reduce
    end = t0 + 400_000 + rng.integers(0, 2_000, collectives)       # everyone ends together (plus a tail)
    n = 2 * collectives
    kind = np.where(np.arange(n) % 2 == 0, "compute", "comm").astype(object)
    start = np.empty(n, np.int64)
    stop = np.empty(n, np.int64)
    start[0::2], stop[0::2] = t0, t0 + 300_000
    start[1::2], stop[1::2] = arrive, end
    name = np.where(kind == "comm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "void gemm()").astype(object)
    events = make_table(rank, lane=np.where(kind == "comm", "stream:20", "stream:7").astype(object), kind=kind,
                        name=name, start_ns=start, end_ns=stop,
                        collective=np.where(kind == "comm", "all_reduce", "").astype(object),
                        bytes=np.where(kind == "comm", 1 << 20, -1), group=np.where(kind == "comm", "0", "").astype(object),
                        seq=np.where(kind == "comm", np.repeat(i, 2), -1))
    steps = pd.DataFrame({"step": np.array([], np.int32), "start_ns": np.array([], np.int64),
                          "end_ns": np.array([], np.int64)})
    return RankTrace(rank=rank, events=events, steps=steps, device="gpu",
                     meta=RankMeta(source_format="bench", source_file=f"rank{rank}"))


def timed(func):
    w, c = time.perf_counter(), time.process_time()
    value = func()
    return value, time.perf_counter() - w, time.process_time() - c


class Stopwatch:
    """Wraps module functions to add up the wall seconds spent in each."""

    def __init__(self, targets: dict[str, tuple[object, str]]) -> None:
        self.targets, self.spent = targets, {k: 0.0 for k in targets}

    def __enter__(self) -> "Stopwatch":
        self.saved = {k: getattr(mod, attr) for k, (mod, attr) in self.targets.items()}
        for k, (mod, attr) in self.targets.items():
            setattr(mod, attr, self._wrap(k, self.saved[k]))
        return self

    def _wrap(self, key, func):
        def wrapper(*a, **kw):
            value, wall, _ = timed(lambda: func(*a, **kw))
            self.spent[key] += wall
            return value
        return wrapper

    def __exit__(self, *exc) -> None:
        for k, (mod, attr) in self.targets.items():
            setattr(mod, attr, self.saved[k])


SECTIONS = ("cross", "clock", "whatif")


def watched():
    """A Stopwatch over the reduce's cross-rank sections, clock solve and what-if sections."""
    import overlapscope.analysis as analysis
    import overlapscope.analysis.matching as matching
    return Stopwatch({"cross": (analysis, "cross_rank_sections"), "clock": (matching, "estimate_offsets"),
                      "whatif": (analysis, "whatif_sections")})


def reduce_from(path: str) -> None:
    """One timed reduce of pickled (run, sections) with whatever overlapscope is importable: a JSON line."""
    with open(path, "rb") as f:
        run, sections = pickle.load(f)
    with watched() as watch:
        with frozen_heap(collect=True):
            _, wall, cpu = timed(lambda: combine(run, sections))
    import overlapscope
    print(json.dumps({"wall": wall, "cpu": cpu, **watch.spent, "package": overlapscope.__file__}))


def map_to(path: str, n: int, collectives: int) -> None:
    """The per-rank results of the n-rank run, with whatever overlapscope is importable, pickled to path."""
    rng = np.random.default_rng(n)
    traces = [rank_trace(r, collectives, rng) for r in range(n)]
    sections = [analyze_rank(t) for t in traces]
    with open(path, "wb") as f:
        pickle.dump((Run(ranks=traces, manifest={}, path="bench"), sections), f, protocol=5)
    import overlapscope
    print(json.dumps({"package": overlapscope.__file__}))


def _in_tree(tree: Path, tmp: str, what: str, *args: str) -> dict:
    """This script run with `args` and tree's overlapscope (by PYTHONPATH), in a fresh process: the JSON
    line it prints last, less the package it imported; a failure, or a package from elsewhere (PYTHONPATH
    fell through to the installed one), ends the benchmark in one line naming tree."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, *args], env=env, cwd=tmp, capture_output=True, text=True)
    if done.returncode != 0:  # a checkout whose map or combine fails
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"reduce_scale.py: the {what} with {tree}'s code failed: {last}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(got.pop("package")).resolve().is_relative_to(tree):
        raise SystemExit(f"reduce_scale.py: {tree} holds no overlapscope package: "
                         f"the {what} would have timed the installed one")
    return got


def side_by_side(n: int, collectives: int, baseline: Path, rounds: int) -> None:
    trees = {"this": Path(__file__).resolve().parents[1], "baseline": baseline.resolve()}
    got: dict[str, list[dict]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        inputs = {name: os.path.join(tmp, f"{name}.pkl") for name in trees}
        for name, tree in trees.items():
            _in_tree(tree, tmp, "per-rank map", "--map-to", inputs[name], "--ranks", str(n),
                     "--collectives", str(collectives))
        for _ in range(rounds):
            for name, tree in trees.items():
                got[name].append(_in_tree(tree, tmp, "reduce", "--reduce-from", inputs[name]))
    print(f"{n} ranks x {collectives} collectives, {rounds} rounds alternating, first call in a fresh process "
          f"(load average {os.getloadavg()[0]:.2f}); median [min-max] seconds")
    fields = ("wall", "cpu", *SECTIONS)
    print(f"{'':>9} " + " ".join(f"{f:>18}" for f in fields))
    for name in trees:
        cells = [f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"
                 for v in ([r[f] for r in got[name]] for f in fields)]
        print(f"{name:>9} " + " ".join(f"{c:>18}" for c in cells))
    medians = {name: [statistics.median([r[f] for r in got[name]]) for f in fields] for name in trees}
    ratio = [b / t if t > 0 else float("nan") for b, t in zip(medians["baseline"], medians["this"])]
    print(f"{'ratio':>9} " + " ".join(f"{r:>18.2f}" for r in ratio) + "   (baseline / this)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--collectives", type=int, default=200)
    ap.add_argument("--baseline", type=Path, help="another checkout to time side by side (fresh processes, pickled inputs)")
    ap.add_argument("--rounds", type=int, default=4, help="with --baseline: alternating rounds")
    ap.add_argument("--reduce-from", help=argparse.SUPPRESS)
    ap.add_argument("--map-to", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reduce_from:
        return reduce_from(args.reduce_from)
    if args.map_to:
        return map_to(args.map_to, args.ranks[0], args.collectives)
    if args.baseline:
        for n in args.ranks:
            side_by_side(n, args.collectives, args.baseline, args.rounds)
        return

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; seconds")
    print(f"{'ranks':>6} {'collectives':>11} {'map':>8} {'reduce wall':>12} {'reduce cpu':>11} "
          f"{'cross-rank':>11} {'clock solve':>12} {'what-if':>8}")
    for n in args.ranks:
        rng = np.random.default_rng(n)
        traces = [rank_trace(r, args.collectives, rng) for r in range(n)]
        run = Run(ranks=traces, manifest={}, path="bench")
        sections, map_s, _ = timed(lambda: [analyze_rank(t) for t in traces])
        with watched() as watch:
            with frozen_heap(collect=True):  # as pipeline/distributed.py reduces: collections skip the ranks' results
                result, wall, cpu = timed(lambda: combine(run, sections))
        assert len(result.collectives) == n * args.collectives, len(result.collectives)
        print(f"{n:>6} {args.collectives:>11} {map_s:>8.2f} {wall:>12.2f} {cpu:>11.2f} {watch.spent['cross']:>11.2f} "
              f"{watch.spent['clock']:>12.2f} {watch.spent['whatif']:>8.2f}")


if __name__ == "__main__":
    main()
