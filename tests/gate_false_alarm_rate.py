"""Measure the gate on repeated runs: false alarms among runs of one configuration, detections of a change.

    python tests/gate_false_alarm_rate.py --same runs/pf1_* [--changed runs/none_*] [--metric ...]

Every `--same` run becomes a baseline and every other `--same` run is checked against it (n(n-1)
ordered pairs): each failure is a false alarm. Each `--changed` run is checked against every
`--same` baseline: each pass is a missed regression. Prints one line per pair and the rates.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from overlapscope import analyze, load_run
from overlapscope.report.gate import Thresholds, compare
from overlapscope.report.gate_baseline import build_baseline, combine


def verdict_line(name: str, verdict) -> str:
    parts = [f"{r.metric.name}={r.status}" for r in verdict.results]
    return f"{name}: {'FAIL' if verdict.regressions else 'pass'} " + " ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--same", nargs="+", type=Path, required=True)
    ap.add_argument("--changed", nargs="*", type=Path, default=[])
    ap.add_argument("--metric", action="append", default=None)
    ap.add_argument("--max-increase", type=float, default=Thresholds.max_increase_pct)
    ap.add_argument("--min-increase-ms", type=float, default=Thresholds.min_increase_ms)
    ap.add_argument("--noise-factor", type=float, default=Thresholds.noise_factor)
    ap.add_argument("--baseline-runs", type=int, default=1,
                    help="runs per baseline: disjoint consecutive groups of --same runs")
    a = ap.parse_args()
    metrics = tuple(a.metric) if a.metric else None  # None: the gate's defaults for the runs
    th = Thresholds(max_increase_pct=a.max_increase, min_increase_ms=a.min_increase_ms, noise_factor=a.noise_factor)
    docs = {p.name: build_baseline(analyze(load_run(p))) for p in a.same + a.changed}
    names = [p.name for p in a.same]
    k = a.baseline_runs
    groups = [tuple(names[i:i + k]) for i in range(0, len(names) - k + 1, k)]
    for group in groups:
        docs["+".join(group)] = combine([docs[n] for n in group])
    same = ["+".join(g) for g in groups]
    alarms = pairs = 0
    for base, group in zip(same, groups):
        for cur in names:
            if cur in group:
                continue
            v = compare(docs[base], docs[cur], th, metrics)
            pairs += 1
            alarms += bool(v.regressions)
            print(verdict_line(f"{cur} vs baseline {base}", v))
    print(f"false alarms: {alarms} of {pairs} run-vs-baseline pairs ({100.0 * alarms / max(pairs, 1):.1f}%), "
          f"{k} run(s) per baseline")
    if a.changed:
        caught = total = 0
        for cur in (p.name for p in a.changed):
            for base in same:
                v = compare(docs[base], docs[cur], th, metrics)
                total += 1
                caught += bool(v.regressions)
                print(verdict_line(f"{cur} vs baseline {base}", v))
        print(f"detected: {caught} of {total} changed-vs-baseline pairs ({100.0 * caught / max(total, 1):.1f}%)")


if __name__ == "__main__":
    main()
