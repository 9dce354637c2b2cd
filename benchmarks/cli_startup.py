"""How long the CLI takes to start: `--help`, `check --help` and a tiny analyze, against bare Python.

    python benchmarks/cli_startup.py [--repeat 9] [--importtime]

Each command runs as its own process, alternating with `python -c pass` so both see the same machine
load; wall time is measured around the process, CPU time (user + sys) from `wait4`. Prints the
median and the best of the repeats, the same less the bare interpreter, and whether the targets
hold (issue #15: --help and check --help under 0.3 s, analyze traces/ddp under 1 s). --importtime
adds the slowest imports of each command (`python -X importtime`).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("overlapscope")
CLI = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "overlapscope"]
BARE = [sys.executable, "-c", "pass"]
# A user's Python caches bytecode (pip compiles it at install; an editable install writes it on first
# import). Sandboxes and CI often set PYTHONDONTWRITEBYTECODE, which makes every start compile the
# package again (~0.1 s here): the children run without it, so the warm-up run leaves the cache.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
COMMANDS = {  # name: (argv after the CLI, target wall s)
    "overlapscope --help": (["--help"], 0.3),
    "overlapscope check --help": (["check", "--help"], 0.3),
    "overlapscope analyze traces/ddp": (["analyze", "traces/ddp", "--no-cache"], 1.0),
}


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of argv, output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with status {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def slowest_imports(argv: list[str], top: int = 8) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the slowest top-level imports, from `python -X importtime`."""
    cmd = [sys.executable, "-X", "importtime", "-m", "overlapscope", *argv]
    err = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit() and not name.startswith("   "):  # top level and its children
                rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--importtime", action="store_true")
    args = ap.parse_args()
    timed(BARE)
    for argv, _ in COMMANDS.values():
        timed(CLI + argv)  # warm the page cache and bytecode first
    print(f"{'command':34} {'wall s median/best':>19} {'CPU s median/best':>18} {'less bare python':>17}  target")
    bare_wall, bare_cpu = [], []
    missed = 0
    for name, (argv, target) in COMMANDS.items():
        walls, cpus = [], []
        for _ in range(args.repeat):
            w, c = timed(BARE)
            bare_wall.append(w)
            bare_cpu.append(c)
            w, c = timed(CLI + argv)
            walls.append(w)
            cpus.append(c)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        extra = wall - statistics.median(bare_wall)
        ok = wall < target
        missed += not ok
        print(f"{name:34} {wall:9.3f} / {min(walls):6.3f} {cpu:9.3f} / {min(cpus):5.3f} {extra:12.3f} wall  "
              f"< {target} s: {'yes' if ok else 'NO'}")
        if args.importtime:
            for us, module in slowest_imports(argv):
                print(f"    {us / 1e3:8.1f} ms  {module.strip()}")
    print(f"{'python -c pass':34} {statistics.median(bare_wall):9.3f} / {min(bare_wall):6.3f} "
          f"{statistics.median(bare_cpu):9.3f} / {min(bare_cpu):5.3f}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
