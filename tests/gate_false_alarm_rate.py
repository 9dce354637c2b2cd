"""Measure the gate on repeated runs: false alarms among runs of one configuration, detections of a change.

    python tests/gate_false_alarm_rate.py --same runs/gate/pf1_s4_* --changed runs/gate/none_s4_* \
        [--baseline-runs 1 3] [--metric ...] [--json out.json]

(record the runs first with tests/gate_record_runs.py). For each baseline size k, every `--same` run
is checked against baselines of k other `--same` runs (k = 1: every other run, n(n-1) ordered pairs;
k > 1: every cyclic window of k consecutive runs that leaves the checked run out): each failure is a
false alarm, each inconclusive verdict an honest "cannot tell". Each `--changed` run is checked
against every baseline of k `--same` runs: each pass is a missed regression. Prints one line per
check, the shares of pass / inconclusive / fail, and the run-to-run spread of each judged metric
(the measurement behind the gate's CPU-only noise rule, gate.NOISE_RULES).
"""
from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from overlapscope.pipeline.run import analyze_run
from overlapscope.report import gate_baseline as gb
from overlapscope.report.gate import METRICS, Thresholds, compare
from overlapscope.report.gate_power import robust_sd


def verdict_line(name: str, verdict) -> str:
    parts = [f"{r.metric.name}={r.status}" for r in verdict.results]
    return f"{name}: {verdict.outcome} " + " ".join(parts)


def windows(n: int, k: int, leave_out: int | None = None) -> list[tuple[int, ...]]:
    """Baselines of k of n runs: each run alone (k = 1), else the n cyclic windows of k consecutive runs;
    those holding `leave_out` dropped."""
    groups = [(i,) for i in range(n)] if k == 1 else [tuple((i + j) % n for j in range(k)) for i in range(n)]
    return [g for g in groups if leave_out is None or leave_out not in g]


def spread(docs: list[dict], metric: str) -> dict[str, float]:
    """Run-to-run spread of one metric: sd of the run medians, the within-run step spread, and the load part."""
    column = METRICS[metric].column
    values = [gb.step_series(d, column).to_numpy(np.float64) for d in docs]
    values = [v[np.isfinite(v)] for v in values]
    medians = np.array([np.median(v) for v in values if v.size])
    within = math.sqrt(float(np.mean([robust_sd(v) ** 2 for v in values if v.size])))
    steps = float(np.mean([v.size for v in values]))
    run_sd = float(medians.std(ddof=1)) if medians.size > 1 else math.nan
    load = math.sqrt(max(run_sd ** 2 - math.pi / 2 * within ** 2 / steps, 0.0)) if medians.size > 1 else math.nan
    return {"median_of_medians": float(np.median(medians)), "min": float(medians.min()), "max": float(medians.max()),
            "run_sd": run_sd, "within_sd": within, "load_sd": load, "samples_per_run": steps,
            "cv_of_medians": run_sd / abs(float(np.mean(medians))) if medians.size > 1 else math.nan}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--same", nargs="+", type=Path, required=True)
    ap.add_argument("--changed", nargs="*", type=Path, default=[])
    ap.add_argument("--metric", action="append", default=None)
    ap.add_argument("--max-increase", type=float, default=Thresholds.max_increase_pct)
    ap.add_argument("--min-increase-ms", type=float, default=Thresholds.min_increase_ms)
    ap.add_argument("--min-increase-points", type=float, default=Thresholds.min_increase_points)
    ap.add_argument("--noise-factor", type=float, default=Thresholds.noise_factor)
    ap.add_argument("--baseline-runs", type=int, nargs="+", default=[1, 3], help="runs per baseline (one or more k)")
    ap.add_argument("--quiet", action="store_true", help="only the summary lines")
    ap.add_argument("--json", type=Path, help="write the counts and spreads here")
    a = ap.parse_args()
    metrics = tuple(a.metric) if a.metric else None  # None: the gate's defaults for the runs
    th = Thresholds(max_increase_pct=a.max_increase, min_increase_ms=a.min_increase_ms,
                    min_increase_points=a.min_increase_points, noise_factor=a.noise_factor)
    same = [gb.build_baseline(analyze_run(p)) for p in a.same]
    changed = [gb.build_baseline(analyze_run(p)) for p in a.changed]
    names = [p.name for p in a.same]
    judged = [r.metric.name for r in compare(same[0], same[1 % len(same)], th, metrics).results]
    report: dict = {"runs": len(same), "changed_runs": len(changed), "metrics": judged, "checks": {},
                    "spread": {m: spread(same, m) for m in judged}}
    for k in a.baseline_runs:
        for label, currents, pool in (("same", same, True), ("changed", changed, False)):
            counts: Counter = Counter()
            for i, cur in enumerate(currents):
                for group in windows(len(same), k, i if pool else None):
                    v = compare(gb.combine([same[j] for j in group]), cur, th, metrics)
                    counts[v.outcome] += 1
                    if not a.quiet:
                        who = names[i] if pool else a.changed[i].name
                        print(verdict_line(f"{who} vs baseline {'+'.join(names[j] for j in group)}", v))
            total = sum(counts.values())
            share = ", ".join(f"{o} {counts[o]} ({100.0 * counts[o] / max(total, 1):.0f}%)"
                              for o in ("regression", "inconclusive", "pass"))
            print(f"{label} runs vs {k}-run baselines: {total} checks: {share}")
            report["checks"][f"{label}_k{k}"] = dict(counts, total=total)
    for m, s in report["spread"].items():
        print(f"{m}: run medians {s['min']:.4g}..{s['max']:.4g} (median {s['median_of_medians']:.4g}), sd of run "
              f"medians {s['run_sd']:.3g}, within-run spread {s['within_sd']:.3g} over {s['samples_per_run']:.0f} "
              f"samples, load part {s['load_sd']:.3g}, cv {s['cv_of_medians']:.3g}")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
