#!/usr/bin/env python3
"""Time and memory of reading a run: HTA vs overlapscope vs the bare JSON parse floor.

    python benchmarks/ingest_vs_hta.py RUN_DIR                    # an existing run directory
    python benchmarks/ingest_vs_hta.py --tile 2 --ranks 8         # tile ../shared's control trace
    python benchmarks/ingest_vs_hta.py --tile 1 --ranks 8 64 --skip-hta   # growth with rank count

Each contender runs in its own child process, measured from outside: wall time of the whole
process (interpreter start and imports included, the same for all), CPU time (user+sys of the
process and its pool workers), peak RSS of the largest single process (ru_maxrss from wait4) and
peak memory of the whole process tree (sum of PSS, shared pages counted once, sampled every 50 ms:
what the machine must hold).

(a) HTA 0.5.0: TraceAnalysis(trace_dir=RUN) then get_comm_comp_overlap() (the optional [hta] extra).
(b) overlapscope analyze RUN --format json, cold cache (cache directory emptied first); also warm.
(c) the floor: for each file, gzip inflate + orjson.loads, with the cyclic GC off (the fastest full
    parse we know in Python; with the GC on it is 3-5x slower), one file after another.
"""
from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout (the main one), or two levels up (a worktree under wt/)
SHARED = next((p for p in (REPO.parent / "shared", REPO.parent.parent / "shared") if p.is_dir()), REPO.parent / "shared")
DEFAULT_TRACE = SHARED / "traces" / "kineto-gpu" / "trace_diff_control" / "control.json.gz"
TILE = SHARED / "tools" / "tile_trace.py"
# How often the process tree's PSS is sampled: reading smaps costs the parent ~1/3 of a core at 10 ms.
SAMPLE_S = 0.05


def traces(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if p.name.endswith((".json", ".json.gz")))


def json_bytes(run: Path) -> int:
    sys.path.insert(0, str(REPO))
    from overlapscope.pipeline.pool import json_bytes as size_of

    return sum(size_of(p) for p in traces(run))


# ---- the children -------------------------------------------------------------------------------
def child_floor(run: Path) -> None:
    import orjson

    gc.disable()
    for p in traces(run):
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = orjson.loads(raw)
        del raw, doc


def child_hta(run: Path, out: Path) -> None:
    from hta.trace_analysis import TraceAnalysis

    overlap = TraceAnalysis(trace_dir=str(run)).get_comm_comp_overlap()
    out.write_text(overlap.to_json(orient="records"))


# ---- the parent ---------------------------------------------------------------------------------
def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run cmd; wall s, cpu s, peak RSS of the largest process and of the process tree (bytes)."""
    import psutil

    t0 = time.perf_counter()
    # stderr to a file, not a pipe: thousands of ranks' warnings would fill a pipe read only at the end
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err_file)
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


def have_hta() -> bool:
    try:
        import hta  # noqa: F401
    except ImportError:
        return False
    return True


def bench_run(run: Path, *, hta: bool, warm: bool = True, no_cache: bool = False) -> dict:
    me = [sys.executable, str(Path(__file__).resolve())]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cache_home = Path(tempfile.mkdtemp(prefix="overlapscope-bench-cache-"))
    env["OVERLAPSCOPE_CACHE_DIR"] = str(cache_home)
    report = cache_home / "report.json"
    analyze = [sys.executable, "-m", "overlapscope", "analyze", str(run), "--format", "json", "-o", str(report)]
    out: dict = {"run": str(run), "ranks": len(traces(run)), "json_bytes": json_bytes(run)}
    try:
        out["c_floor"] = measure(me + ["--child", "floor", str(run)])
        shutil.rmtree(run / ".overlapscope-cache", ignore_errors=True)
        out["b_overlapscope_cold"] = measure(analyze, env)
        doc = json.loads(report.read_text())
        out["overlap_pct"] = {r["rank"]: r["total"]["overlap_pct"] for r in doc["ranks"]}
        if warm:
            out["b_overlapscope_warm"] = measure(analyze, env)
        if no_cache:
            out["b_overlapscope_nocache"] = measure(analyze + ["--no-cache"], env)
        if hta:
            hta_out = cache_home / "hta.json"
            out["a_hta"] = measure(me + ["--child", "hta", str(run), str(hta_out)])
            out["hta_overlap_pct"] = {r["rank"]: r["comp_comm_overlap_pctg"] for r in json.loads(hta_out.read_text())}
    finally:
        shutil.rmtree(cache_home, ignore_errors=True)
        shutil.rmtree(run / ".overlapscope-cache", ignore_errors=True)
    return out


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def print_run(r: dict) -> None:
    raw = r["json_bytes"]
    print(f"\n{r['ranks']} ranks, {mb(raw)} of JSON ({mb(raw / r['ranks'])} per rank): {r['run']}")
    print(f"  {'':34} {'wall s':>8} {'cpu s':>8} {'peak PSS tree':>14} {'largest proc':>13} {'tree / JSON':>11}")
    rows = [("(a) HTA 0.5.0", "a_hta"), ("(b) overlapscope analyze, cold", "b_overlapscope_cold"),
            ("    overlapscope analyze, warm", "b_overlapscope_warm"),
            ("    overlapscope analyze, --no-cache", "b_overlapscope_nocache"), ("(c) floor: inflate + orjson", "c_floor")]
    for label, key in rows:
        m = r.get(key)
        if m:
            print(f"  {label:34} {m['wall_s']:8.2f} {m['cpu_s']:8.2f} {mb(m['tree_rss']):>14} {mb(m['max_rss']):>13}"
                  f" {m['tree_rss'] / raw:10.2f}x")
    b, c = r["b_overlapscope_cold"], r["c_floor"]
    a = r.get("a_hta")
    if a:
        print(f"  b/a wall {b['wall_s'] / a['wall_s']:.3f} (HTA is {a['wall_s'] / b['wall_s']:.1f}x slower; "
              f"target b/a <= 0.1)   b/a cpu {b['cpu_s'] / a['cpu_s']:.3f}")
    else:
        print("  (a) HTA: not run (--skip-hta, or not installed: pip install 'overlapscope[hta]', "
              "HolisticTraceAnalysis==0.5.0)")
    print(f"  b/c wall {b['wall_s'] / c['wall_s']:.2f} (target <= 2)   b/c cpu {b['cpu_s'] / c['cpu_s']:.2f}   "
          f"b peak tree RSS / JSON {b['tree_rss'] / raw:.2f} (target <= 2)")
    if r.get("hta_overlap_pct"):
        ours = r["overlap_pct"]
        print("  overlap % per rank, overlapscope vs HTA (they differ by design, see traces/README):",
              ", ".join(f"{k}: {ours[int(k)]:.2f}/{v:.2f}" for k, v in sorted(r["hta_overlap_pct"].items(),
                                                                            key=lambda kv: int(kv[0]))))


def tile(k: int, ranks: int, trace: Path, into: Path) -> Path:
    run = into / f"tiled-k{k}-r{ranks}"
    subprocess.run([sys.executable, str(TILE), str(trace), str(run), "--repeat", str(k), "--ranks", str(ranks)],
                   check=True, stdout=subprocess.DEVNULL)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", type=Path, help="run directory (else --tile)")
    ap.add_argument("--tile", type=int, metavar="K", help="tile --trace K times per rank (tile_trace.py)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[8], help="rank counts to tile (default 8)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()), help="where tiled runs go")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--warm", action="store_true", help="time the warm re-run at every rank count, not the first only")
    ap.add_argument("--no-cache", action="store_true", help="also time `analyze --no-cache` (no Parquet reads or writes)")
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, run, *rest = args.child
        child_floor(Path(run)) if mode == "floor" else child_hta(Path(run), Path(rest[0]))
        return 0
    hta = not args.skip_hta and have_hta()
    if not args.skip_hta and not hta:
        print("benchmark: HTA is not installed (optional: pip install 'overlapscope[hta]'); timing (b) and (c) only")
    results = []
    if args.run:
        results.append(bench_run(args.run, hta=hta, no_cache=args.no_cache))
    elif args.tile:
        if not TILE.is_file() or not args.trace.is_file():
            raise SystemExit(f"benchmark: --tile needs {TILE} and {args.trace}")
        work = Path(tempfile.mkdtemp(prefix="overlapscope-bench-", dir=args.workdir))
        try:
            for n in args.ranks:
                run = tile(args.tile, n, args.trace, work)
                results.append(bench_run(run, hta=hta and n == args.ranks[0], warm=args.warm or n == args.ranks[0],
                                         no_cache=args.no_cache))
                shutil.rmtree(run)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    else:
        ap.error("give a RUN directory or --tile K")
    print(f"\nmachine: {os.cpu_count()} CPUs (affinity {len(os.sched_getaffinity(0))}), load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}, python {sys.version.split()[0]}")
    for r in results:
        print_run(r)
    if len(results) > 1:
        first = results[0]
        print(f"\ngrowth with rank count (x: against {first['ranks']} ranks, measured in this run; b/c: against "
              "the parse floor of the same files):")
        for key, label in (("b_overlapscope_cold", "cold cache"), ("b_overlapscope_warm", "warm cache"),
                           ("b_overlapscope_nocache", "--no-cache"), ("c_floor", "floor: inflate + orjson")):
            if not all(key in r for r in results):
                continue
            print(f"  {label}:")
            for r in results:
                b, c, b0 = r[key], r["c_floor"], first[key]
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
