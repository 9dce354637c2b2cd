#!/usr/bin/env python3
"""Time and memory of reading a run: HTA vs overlapscope vs the bare JSON parse floors.

    python benchmarks/ingest_vs_hta.py RUN_DIR                    # an existing run directory
    python benchmarks/ingest_vs_hta.py --shape v4x56 a8x54        # the issue's workload shapes, tiled
    python benchmarks/ingest_vs_hta.py --tile 2 --ranks 8         # tile ../shared's control trace
    python benchmarks/ingest_vs_hta.py --tile 1 --ranks 8 64 --skip-hta   # growth with rank count
    python benchmarks/ingest_vs_hta.py RUN --hta 0.5.0=/tmp/hta05/bin/python --hta 0.6.1=/tmp/hta061/bin/python

HTA 0.5.0 (PyPI HolisticTraceAnalysis) and HTA 0.6.1 (PyPI traceinsight) install the same `hta`
package, so they cannot share a venv: --hta LABEL=PYTHON runs HTA's child under that interpreter
(its venv needs only HTA; the child imports nothing of overlapscope). Without --hta the current
interpreter's HTA is used when it has one (the optional [hta] extra: 0.5.0).

Each contender runs in its own child process, measured from outside: wall time of the whole
process (interpreter start and imports included, the same for all), CPU time (user+sys of the
process and its pool workers), peak RSS of the largest single process (ru_maxrss from wait4) and
peak memory of the whole process tree (sum of PSS, shared pages counted once, sampled every 50 ms:
what the machine must hold).

(a) HTA: TraceAnalysis(trace_dir=RUN) then get_comm_comp_overlap(), one row per --hta version.
(b) overlapscope analyze RUN --format json, cold cache (cache directory emptied first); also warm.
(c) the floors, for each file one after another, with the cyclic GC off:
    inflate     ISA-L gzip inflate alone (isal_zlib, one pass, trailer checked; zlib without isal)
    simdjson    inflate + pysimdjson Parser.parse: simdjson's tape of the whole document, no
                Python object per value (what a native extractor could at best approach)
    orjson      inflate + orjson.loads: the fastest full parse into Python objects we know
The median of --repeat runs of each is shown (cold cache every time for (b)).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout (/work/main), or /work/shared beside a worktree folder (/work/wt/NAME).
SHARED = next((d for d in (REPO.parent / "shared", REPO.parents[1] / "shared") if d.is_dir()), REPO.parent / "shared")
TILE = SHARED / "tools" / "tile_trace.py"
# How often the process tree's PSS is sampled: reading smaps costs the parent ~1/3 of a core at 10 ms.
SAMPLE_S = 0.05


def traces(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if p.name.endswith((".json", ".json.gz")))


def json_bytes(run: Path) -> int:
    sys.path.insert(0, str(REPO))
    from overlapscope.pipeline.pool import json_bytes as size_of

    return sum(size_of(p) for p in traces(run))


# The workload shapes (#19): (trace, tile_trace --repeat, --ranks).
REAL = REPO / "tests" / "data" / "real" / "kineto-gpu"
DEFAULT_TRACE = REAL / "trace_diff_control" / "control.json.gz"
SHAPES = {
    "v4x56": (REAL / "trace_diff_control" / "control.json.gz", 2, 4),   # 218k events/rank, many CPU ops per kernel
    "a8x54": (REAL / "nccl_parser_config" / "nccl_data.json.gz", 6, 8),  # 243k events/rank, NCCL-heavy
    "r128x28": (REAL / "trace_diff_control" / "control.json.gz", 1, 128),
    "one1g": (REAL / "trace_diff_control" / "control.json.gz", 36, 1),  # one rank, ~1 GB of JSON
}
FLOORS = ("inflate", "simdjson", "orjson")


# ---- the children -------------------------------------------------------------------------------
def child_floor(run: Path, what: str) -> None:
    try:
        from isal import isal_zlib as inflate
    except ImportError:
        import zlib as inflate
    parse = None
    if what == "orjson":
        import orjson

        parse = orjson.loads
    elif what == "simdjson":
        import simdjson

        parse = simdjson.Parser().parse
    gc.disable()
    for p in traces(run):
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = inflate.decompressobj(31).decompress(raw)
        doc = parse(raw) if parse else None
        del raw, doc


def child_hta(run: Path, out: Path) -> None:
    from hta.trace_analysis import TraceAnalysis

    overlap = TraceAnalysis(trace_dir=str(run)).get_comm_comp_overlap()
    out.write_text(overlap.to_json(orient="records"))


# ---- the parent ---------------------------------------------------------------------------------
def measure(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, float]:
    """Run cmd (in cwd); wall s, cpu s, peak RSS of the largest process and of the process tree (bytes)."""
    import psutil

    t0 = time.perf_counter()
    # stderr to a file, not a pipe: thousands of ranks' warnings would fill a pipe read only at the end
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err_file)
    ps = psutil.Process(proc.pid)
    tree_peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            tree_peak = max(tree_peak, sum(_resident(p) for p in [ps, *ps.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(SAMPLE_S)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err_file.seek(0)
    err = err_file.read().decode(errors="replace")
    err_file.close()
    if proc.returncode != 0:
        raise SystemExit(f"benchmark: {' '.join(cmd[:4])}... failed ({proc.returncode}):\n{err[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss": usage.ru_maxrss * 1024, "tree_rss": tree_peak or usage.ru_maxrss * 1024}


def _resident(proc) -> int:
    """PSS where the OS has it: pages a forked worker shares with its parent count once in the
    sum, not once per process as RSS would."""
    try:
        return proc.memory_full_info().pss
    except (AttributeError, OSError):
        return proc.memory_info().rss


def have_hta(python: str = sys.executable) -> bool:
    return subprocess.run([python, "-c", "import hta"], capture_output=True).returncode == 0


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def bench_run(run: Path, *, htas: dict[str, str], warm: bool = True, repeat: int = 1,
              hta_repeat: int = 1, no_cache: bool = False, baseline: Path | None = None) -> dict:
    """Every contender on one run directory; htas: HTA label -> the Python that has it."""
    me = [str(Path(__file__).resolve())]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cache_home = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    cache_dir = cache_home / "cache"  # entries are files in it: emptied before every cold run
    env["OVERLAPSCOPE_CACHE_DIR"] = str(cache_dir)
    report = cache_home / "report.json"
    analyze = [sys.executable, "-m", "overlapscope", "analyze", str(run), "--format", "json", "-o", str(report)]
    out: dict = {"run": str(run), "ranks": len(traces(run)), "json_bytes": json_bytes(run), "repeat": repeat}

    def cold(env: dict[str, str] = env, cwd: Path | None = None) -> dict[str, float]:
        shutil.rmtree(run / ".overlapscope-cache", ignore_errors=True)
        shutil.rmtree(cache_dir, ignore_errors=True)
        return measure(analyze, env, cwd)

    try:
        for what in FLOORS:
            out[f"floor_{what}"] = median_of([measure([sys.executable, *me, "--child", "floor", str(run), what])
                                              for _ in range(repeat)])
        out["b_overlapscope_cold"] = median_of([cold() for _ in range(repeat)])
        doc = json.loads(report.read_text())
        if baseline is not None:  # the same command on another checkout, in this run (before/after)
            before = {**env, "PYTHONPATH": str(baseline) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            # run in the checkout: `python -m` puts the working directory before PYTHONPATH
            out["b_baseline_cold"] = median_of([cold(before, baseline) for _ in range(repeat)])
            out["baseline"] = str(baseline)
        out["overlap_pct"] = {r["rank"]: r["total"]["overlap_pct"] for r in doc["ranks"]}
        if warm:
            out["b_overlapscope_warm"] = median_of([measure(analyze, env) for _ in range(repeat)])
        if no_cache:
            out["b_overlapscope_nocache"] = median_of([measure(analyze + ["--no-cache"], env) for _ in range(repeat)])
        for label, python in htas.items():
            hta_out = cache_home / "hta.json"
            out[f"a_hta_{label}"] = median_of([measure([python, *me, "--child", "hta", str(run), str(hta_out)])
                                               for _ in range(hta_repeat)])
            out[f"hta_overlap_pct_{label}"] = {r["rank"]: r["comp_comm_overlap_pctg"]
                                               for r in json.loads(hta_out.read_text())}
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)
        shutil.rmtree(run / ".overlapscope-cache", ignore_errors=True)
    return out


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def print_run(r: dict) -> None:
    raw = r["json_bytes"]
    htas = [k[len("a_hta_"):] for k in r if k.startswith("a_hta_")]
    print(f"\n{r['ranks']} ranks, {mb(raw)} of JSON ({mb(raw / r['ranks'])} per rank), median of {r['repeat']}: "
          f"{r['run']}")
    print(f"  {'':36} {'wall s':>8} {'cpu s':>8} {'peak PSS tree':>14} {'largest proc':>13} {'tree / JSON':>11}")
    rows = [*((f"(a) HTA {v}", f"a_hta_{v}") for v in htas),
            ("(b) overlapscope analyze, cold", "b_overlapscope_cold"),
            ("    --baseline checkout, cold", "b_baseline_cold"),
            ("    overlapscope analyze, warm", "b_overlapscope_warm"),
            ("    overlapscope analyze, --no-cache", "b_overlapscope_nocache"),
            ("(c) floor: ISA-L inflate", "floor_inflate"), ("(c) floor: inflate + simdjson parse", "floor_simdjson"),
            ("(c) floor: inflate + orjson", "floor_orjson")]
    for label, key in rows:
        m = r.get(key)
        if m:
            print(f"  {label:36} {m['wall_s']:8.2f} {m['cpu_s']:8.2f} {mb(m['tree_rss']):>14} {mb(m['max_rss']):>13}"
                  f" {m['tree_rss'] / raw:10.2f}x")
    b = r["b_overlapscope_cold"]
    for v in htas:
        a = r[f"a_hta_{v}"]
        print(f"  HTA {v} / b: cpu {a['cpu_s'] / b['cpu_s']:.1f}x (target >= 20 for 0.6.1), "
              f"wall {a['wall_s'] / b['wall_s']:.1f}x")
    if not htas:
        print("  (a) HTA: not run (--skip-hta, or not installed: --hta LABEL=PYTHON, or pip install 'overlapscope[hta]')")
    print("  b / floor:  " + "   ".join(
        f"{what}: cpu {b['cpu_s'] / r[f'floor_{what}']['cpu_s']:.2f} wall {b['wall_s'] / r[f'floor_{what}']['wall_s']:.2f}"
        for what in FLOORS) + "   (target: cpu b/simdjson <= 2)")
    print(f"  b peak tree / JSON {b['tree_rss'] / raw:.2f} (target <= 1.5 for the 1 GB trace)")
    for v in htas:
        ours, theirs = r["overlap_pct"], r[f"hta_overlap_pct_{v}"]
        print(f"  overlap % per rank, overlapscope vs HTA {v} (they differ by design, see traces/README):",
              ", ".join(f"{k}: {ours[int(k)]:.2f}/{x:.2f}" for k, x in sorted(theirs.items(), key=lambda kv: int(kv[0]))))


def tile(k: int, ranks: int, trace: Path, into: Path, name: str | None = None) -> Path:
    run = into / (name or f"tiled-k{k}-r{ranks}")
    subprocess.run([sys.executable, str(TILE), str(trace), str(run), "--repeat", str(k), "--ranks", str(ranks)],
                   check=True, stdout=subprocess.DEVNULL)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", type=Path, help="run directory (else --shape or --tile)")
    ap.add_argument("--shape", nargs="+", choices=sorted(SHAPES), help="the issue's workload shapes, tiled in --workdir")
    ap.add_argument("--tile", type=int, metavar="K", help="tile --trace K times per rank (tile_trace.py)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[8], help="rank counts to tile (default 8)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()), help="where tiled runs go")
    ap.add_argument("--hta", action="append", default=[], metavar="LABEL=PYTHON",
                    help="time HTA under this interpreter (repeatable: one per HTA version)")
    ap.add_argument("--hta-shapes", nargs="*", help="with --shape: run HTA only on these (default: all)")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="runs of (b) and (c) per run directory (median shown)")
    ap.add_argument("--hta-repeat", type=int, default=1, help="runs of each HTA (median shown)")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm-cache run of (b)")
    ap.add_argument("--warm", action="store_true", help="with --tile: the warm re-run at every rank count, not the first only")
    ap.add_argument("--no-cache", action="store_true", help="also time `analyze --no-cache` (no Parquet reads or writes)")
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    ap.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                    help="also time (b) cold with this checkout of overlapscope first on PYTHONPATH (before/after)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, run, *rest = args.child
        child_floor(Path(run), rest[0]) if mode == "floor" else child_hta(Path(run), Path(rest[0]))
        return 0
    htas: dict[str, str] = {}
    if not args.skip_hta:
        htas = dict(h.split("=", 1) for h in args.hta) if args.hta else {"0.5.0": sys.executable}
        missing = [label for label, python in htas.items() if not have_hta(python)]
        for label in missing:
            print(f"benchmark: HTA {label} is not importable by {htas.pop(label)}; not timed")
    results = []
    if args.run:
        results.append(bench_run(args.run, htas=htas, warm=not args.no_warm, repeat=args.repeat,
                                 hta_repeat=args.hta_repeat, no_cache=args.no_cache, baseline=args.baseline))
    elif args.shape or args.tile:
        if not TILE.is_file():
            raise SystemExit(f"benchmark: tiling needs {TILE}")
        if args.workdir:
            Path(args.workdir).mkdir(parents=True, exist_ok=True)  # a --workdir not made yet is made
        work = Path(tempfile.mkdtemp(prefix="overlapscope-bench-", dir=args.workdir))
        jobs = ([(name, *SHAPES[name]) for name in args.shape] if args.shape
                else [(None, args.trace, args.tile, n) for n in args.ranks])
        try:
            for i, (name, trace, k, n) in enumerate(jobs):
                run = tile(k, n, trace, work, name)
                with_hta = htas if (args.hta_shapes is None or name in args.hta_shapes) and (args.shape or i == 0) else {}
                results.append(bench_run(run, htas=with_hta,
                                         warm=not args.no_warm and bool(args.shape or args.warm or i == 0),
                                         repeat=args.repeat, hta_repeat=args.hta_repeat, no_cache=args.no_cache,
                                         baseline=args.baseline))
                results[-1]["shape"] = name
                shutil.rmtree(run)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    else:
        ap.error("give a RUN directory, --shape or --tile K")
    print(f"\nmachine: {os.cpu_count()} CPUs (affinity {len(os.sched_getaffinity(0))}), load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}, python {sys.version.split()[0]}")
    for r in results:
        print_run(r)
    if len(results) > 1 and not args.shape:
        first = results[0]
        print(f"\ngrowth with rank count (x: against {first['ranks']} ranks, measured in this run; b/c: against "
              "the simdjson parse floor of the same files):")
        for key, label in (("b_overlapscope_cold", "cold cache"), ("b_overlapscope_warm", "warm cache"),
                           ("b_overlapscope_nocache", "--no-cache"), ("floor_simdjson", "floor: inflate + simdjson")):
            if not all(key in r for r in results):
                continue
            print(f"  {label}:")
            for r in results:
                b, c, b0 = r[key], r["floor_simdjson"], first[key]
                print(f"    {r['ranks']:5d} ranks {mb(r['json_bytes']):>9} JSON: {b['wall_s']:7.2f} s wall "
                      f"({b['wall_s'] / b0['wall_s']:6.1f}x), {b['cpu_s']:7.2f} s cpu ({b['cpu_s'] / b0['cpu_s']:6.1f}x, "
                      f"{1000 * b['cpu_s'] / r['ranks']:5.1f} ms/rank), peak tree {mb(b['tree_rss'])} "
                      f"({b['tree_rss'] / b0['tree_rss']:4.1f}x), largest proc {mb(b['max_rss'])}; "
                      f"b/c wall {b['wall_s'] / c['wall_s']:.2f} cpu {b['cpu_s'] / c['cpu_s']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
