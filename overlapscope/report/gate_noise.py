"""Where the gate's noise comes from (per device kind and metric), and what to record when the data
cannot decide: the rules README's "Where the noise comes from" documents, with their measurements."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from overlapscope.report.gate_metrics import METRICS, Metric, Thresholds
from overlapscope.report.gate_power import RunLevel, run_level_detectable

_NS_PER_MS = 1_000_000


@dataclass(frozen=True, kw_only=True)
class NoiseRule:
    """Where a metric's noise comes from on one device kind (README, "Where the noise comes from")."""

    model: str
    """"steps": the per-step samples carry the noise (device-timed kernels: a step's time does not depend
    on the host's load), plus the run-to-run noise of a baseline of several runs; "runs": the run is the
    unit (host-timed runs: load moves a whole run, so its steps are not independent samples)."""
    load_cv: float = 0.0
    """"runs" model: how far machine load moves one run's median, as a fraction of the baseline median
    (sd / median; load stretches compute and communication alike, so it scales times and their ratios),
    assumed until the baseline has runs enough to measure it."""
    prior_df: float = 0.0
    """"runs" model: the weight of that assumption, in runs' worth of degrees of freedom (a baseline of
    k runs adds k - 1 of its own)."""

    def load_sd(self, baseline_median: float) -> float:
        return self.load_cv * abs(baseline_median) if math.isfinite(baseline_median) else 0.0


_STEPS = NoiseRule(model="steps")
# CPU-only: measured with tests/gate_false_alarm_rate.py on FSDP2 (gloo, 2 ranks) on a 2-core VM at load 8-13
# (README, "Where the noise comes from"): the cv of ten runs' overlap medians was 0.16 (4 steps) and 0.18
# (8 steps), 0.24 in the issue's four runs at load 4-8; the sd of ten runs' log exposed-comm medians 0.33
# (4 steps) and 0.12 (8 steps). Metrics not measured take the largest measured value.
_CPU_MEASURED = {"overlap": 0.25, "exposed_comm": 0.35}
_CPU_DEFAULT = max(_CPU_MEASURED.values())
NOISE_RULES: dict[str, dict[str, NoiseRule]] = {
    "gpu": {name: _STEPS for name in METRICS},
    "cpu": {name: NoiseRule(model="runs", load_cv=_CPU_MEASURED.get(name, _CPU_DEFAULT), prior_df=4.0)
            for name in METRICS},
}


def device_kind(baseline: dict[str, Any], current: dict[str, Any]) -> str:
    """"cpu" when both runs are CPU-only (host-timed communication), else "gpu"."""
    return "cpu" if is_host_timed(baseline) and is_host_timed(current) else "gpu"


def is_host_timed(doc: dict[str, Any]) -> bool:
    """A CPU-only run (gloo on CPU): its communication intervals are host threads, not device kernels."""
    return (doc.get("run") or {}).get("device") == "cpu"


_ADVICE_RUNS = (2, 3, 5, 10)
_ADVICE_STEPS = (4, 8, 16, 32)


def what_to_record(metric: Metric, th: Thresholds, *, threshold: float, detectable: float, noise: float,
                   n_current: int, run_level: RunLevel | None) -> str:
    """For an inconclusive result: what to record so that a worsening of the threshold's size becomes detectable."""
    option = "--min-increase-points" if metric.unit == "pct" else "--max-increase/--min-increase-ms"
    if not (math.isfinite(threshold) and threshold > 0):
        return "record more steps and baseline runs"
    rl = run_level
    if rl is not None:
        if not math.isfinite(rl.n_steps):
            return "no samples to judge: record steps where this metric is defined"
        steps = [s for s in _ADVICE_STEPS if s >= rl.n_steps] or [int(rl.n_steps)]
        plans = sorted(((k * s, k, s) for k in _ADVICE_RUNS for s in steps if k >= rl.runs),
                       key=lambda p: (p[0], p[1]))
        for _, k, s in plans:
            if run_level_detectable(rl, k, s, th.alpha, th.power) <= threshold:
                return (f"record a baseline of {k} runs of {s} steps (overlapscope baseline --runs {k} --steps {s} "
                        f"-o BASELINE.json -- CMD), or allow more ({option})")
        best = run_level_detectable(rl, _ADVICE_RUNS[-1], _ADVICE_STEPS[-1], th.alpha, th.power)
        moved = _fmt(rl.load_sd, metric) if math.isnan(rl.base) else f"{100 * rl.load_sd:.0f}%"
        return (f"machine load moves whole runs by about {moved} here: even {_ADVICE_RUNS[-1]} "
                f"baseline runs of {_ADVICE_STEPS[-1]} steps could detect only {_fmt(best, metric)}; allow at least "
                f"that ({option}) or run on a quieter machine")
    if noise >= threshold:
        return (f"the baseline's own runs stray by {_fmt(noise / th.noise_factor if th.noise_factor else noise, metric)}"
                f" from each other: allow more ({option}) or find the load that moves them")
    n = max(n_current, 1)
    if math.isfinite(detectable):
        need = math.ceil(n * (detectable / threshold) ** 2)
        return f"profile at least {max(need, n + 1)} steps per rank (--steps), or allow more ({option})"
    return f"profile at least {max(6, n + 2)} steps per rank (--steps) in both runs"


def _fmt(value: float, metric: Metric) -> str:
    return f"{value:.1f} pp" if metric.unit == "pct" else f"{value / _NS_PER_MS:.3f} ms"
