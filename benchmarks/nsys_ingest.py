"""Speed and memory of the nsys reader on a large export made by replicating a real one.

    PYTHONPATH=. python benchmarks/nsys_ingest.py [--scale 50] [--source ../shared/traces/nsys/mfu_2gpu_before.sqlite]

Copies the source export into a temporary directory (the original is only read), appends
`scale - 1` shifted copies of every activity and NVTX row (times moved past the previous copy,
correlation ids made unique per copy, so joins stay one-to-one), then, each in a fresh process:
- `read_nsys` on it: rows/s and peak RSS;
- a reference: plain `pandas.read_sql_query` of the same tables with names joined in SQL, the
  least any reader must do; the ratio says what the reader costs on top.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "traces" / "nsys" / "mfu_2gpu_before.sqlite"
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def scale_up(source: Path, out: Path, scale: int) -> dict[str, int]:
    shutil.copyfile(source, out)
    out.chmod(0o644)
    conn = sqlite3.connect(out)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    present = [t for t in TABLES if t in tables]
    bounds = conn.execute(" UNION ALL ".join(f"SELECT min(start), max(end) FROM {t}" for t in present)).fetchall()
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    span = int(hi) - int(lo) + 1
    corr_span = 1 + max(int(conn.execute(f"SELECT COALESCE(max(correlationId), 0) FROM {t}").fetchone()[0])
                        for t in present if t != "NVTX_EVENTS")
    counts = {}
    for table in present:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        n = int(conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0)
        for k in range(1, scale):
            exprs = [f"{c} + {k * span}" if c in ("start", "end") else
                     f"{c} + {k * corr_span}" if c == "correlationId" else c for c in cols]
            conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM {table} "
                         f"WHERE rowid <= {n}")
        counts[table] = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    conn.commit()
    conn.close()
    return counts


MEASURE = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
import numpy as np, pandas as pd, sqlite3
path, mode = {path!r}, {mode!r}
t0 = time.perf_counter()
if mode == "baseline":
    from overlapscope.ingest.nsys import read_nsys
    rows = 0
elif mode == "reader":
    from overlapscope.ingest.nsys import read_nsys
    traces = read_nsys(path)
    rows = sum(len(t.events) for t in traces)
else:
    conn = sqlite3.connect(f"file:{{path}}?mode=ro", uri=True)
    frames = [pd.read_sql_query(
        "SELECT k.*, s.value AS name FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName", conn)]
    for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
              "CUPTI_ACTIVITY_KIND_RUNTIME"):
        frames.append(pd.read_sql_query(f"SELECT * FROM {{t}}", conn))
    frames.append(pd.read_sql_query("SELECT n.*, COALESCE(n.text, s.value) AS name FROM NVTX_EVENTS n "
                                    "LEFT JOIN StringIds s ON s.id = n.textId", conn))
    rows = sum(len(f) for f in frames)
seconds = time.perf_counter() - t0
print(json.dumps({{"seconds": seconds, "rows": rows,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def measure(path: Path, mode: str) -> dict[str, float]:
    code = MEASURE.format(repo=str(REPO), path=str(path), mode=mode)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--scale", type=int, default=50, help="copies of every row (default 50)")
    args = parser.parse_args()
    if not args.source.is_file():
        sys.exit(f"no source export at {args.source}")
    with tempfile.TemporaryDirectory(prefix="nsys-bench-") as tmp:
        big = Path(tmp) / "scaled.sqlite"
        t0 = time.perf_counter()
        counts = scale_up(args.source, big, args.scale)
        size_mib = big.stat().st_size / 2**20
        print(f"scaled export: x{args.scale}, {size_mib:.0f} MiB, built in {time.perf_counter() - t0:.1f} s")
        print("  " + ", ".join(f"{t.replace('CUPTI_ACTIVITY_KIND_', '')}={n:,}" for t, n in counts.items()))
        source_rows = sum(n for t, n in counts.items() if t != "CUPTI_ACTIVITY_KIND_RUNTIME")
        baseline = measure(big, "baseline")
        reader = measure(big, "reader")
        reference = measure(big, "reference")
        print(f"read_nsys:   {reader['seconds']:.2f} s, {source_rows / reader['seconds']:,.0f} rows/s "
              f"({reader['rows']:,} event rows out), peak RSS {reader['peak_rss_mib']:.0f} MiB")
        print(f"reference:   {reference['seconds']:.2f} s, {source_rows / reference['seconds']:,.0f} rows/s "
              f"(pandas.read_sql_query of the same tables), peak RSS {reference['peak_rss_mib']:.0f} MiB")
        print(f"(an interpreter with numpy, pandas and overlapscope imported peaks at "
              f"{baseline['peak_rss_mib']:.0f} MiB)")
        print(f"ratio reader/reference: time {reader['seconds'] / reference['seconds']:.2f}, "
              f"peak memory {reader['peak_rss_mib'] / reference['peak_rss_mib']:.2f}")


if __name__ == "__main__":
    main()
