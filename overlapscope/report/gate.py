"""The CI gate: a baseline from one run, and a noise-aware comparison of a later run against it.

A baseline is plain JSON (schema `overlapscope.baseline/1`, no pickle) holding per rank and step
the overlap numbers, the per-collective/group/scope exposed time, and the run's identity.
`compare()` decides per metric from the per-step samples: a metric regresses only when the
shift is significant (its one-sided lower confidence bound is above 0; Hodges-Lehmann with exact
rank-based bounds, paired by step when both runs have the same steps, see gate_stats) and its
estimate is larger than the allowance; then it names the ranks, collectives, groups and scopes that
moved most. The allowance is the thresholds, or the run-to-run noise when larger: measured by a
baseline of several runs, and for CPU-only runs at least the step-to-step spread of the runs
(machine load moves such runs as a whole).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from overlapscope.analysis.result import Analysis
from overlapscope.errors import OverlapscopeError
from overlapscope.report import gate_baseline as gb
from overlapscope.report.gate_metrics import (DEFAULT_METRICS, HOST_DEFAULT_METRICS, HOST_DEFAULT_NOTE, METRICS,  # noqa: F401
                                              Metric, Thresholds)
from overlapscope.report.gate_stats import Shift, paired_shift, shift


@dataclass(frozen=True)
class Finding:
    """One thing that got worse: a rank, collective, process group or scope."""

    kind: str
    key: str
    baseline: float
    """Baseline median per step (metric unit)."""
    current: float
    delta: float
    """Estimated worsening per step (Hodges-Lehmann shift, positive = worse)."""
    significant: bool
    """Whether this one alone passes the significance and threshold tests."""


@dataclass(frozen=True)
class MetricResult:
    metric: Metric
    status: str
    """"regression", "pass", "improved", or "undecided" (too few samples to ever be significant)."""
    baseline_median: float
    current_median: float
    worsening: Shift
    """Shift in the worse direction (positive = worse), in the metric's unit per step."""
    allowed: float
    findings: tuple[Finding, ...] = ()
    note: str = ""
    noise: float = 0.0
    """The noise allowance (0 when none applies); see noise_source."""
    noise_source: str = ""
    """"runs": how far the baseline's own runs stray from each other, times noise_factor; "spread": the
    step-to-step spread of the runs (CPU-only runs), when larger; "" when none."""


@dataclass(frozen=True)
class Verdict:
    results: tuple[MetricResult, ...]
    thresholds: Thresholds
    baseline_run: dict[str, Any]
    current_run: dict[str, Any]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    baseline_runs: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)
    """How the gate chose its metrics or noise allowance, when that depends on the runs."""

    @property
    def regressions(self) -> tuple[MetricResult, ...]:
        return tuple(r for r in self.results if r.status == "regression")

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def is_host_timed(doc: dict[str, Any]) -> bool:
    """A CPU-only run (gloo on CPU): its communication intervals are host threads, not device kernels."""
    return (doc.get("run") or {}).get("device") == "cpu"


def default_metrics(baseline: dict[str, Any], current: dict[str, Any]) -> tuple[str, ...]:
    return HOST_DEFAULT_METRICS if is_host_timed(baseline) and is_host_timed(current) else DEFAULT_METRICS


def compare(baseline: dict[str, Any], current: Analysis | dict[str, Any], thresholds: Thresholds = Thresholds(),
            metrics: Iterable[str] | None = None) -> Verdict:
    """Judge `current` against `baseline` (one run or several); raises OverlapscopeError when they cannot be compared.

    metrics=None picks `default_metrics` for the two runs.
    """
    current_doc = gb.build_baseline(current) if isinstance(current, Analysis) else current
    notes: list[str] = []
    if metrics is None:
        metrics = default_metrics(baseline, current_doc)
        if metrics == HOST_DEFAULT_METRICS:
            notes.append(HOST_DEFAULT_NOTE)
    names = list(dict.fromkeys(metrics))
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise OverlapscopeError(f"unknown metric {', '.join(unknown)}; known: {', '.join(METRICS)}")
    warnings = gb.check_compatible(baseline, current_doc)
    base_runs = gb.split_runs(baseline)
    # On GPUs the per-step samples carry the noise that matters. On CPU-only runs machine load moves
    # whole runs (a few baseline runs rarely see every load), so a change must also exceed the
    # step-to-step spread of the runs: an unchanged run may drift that far.
    spread = is_host_timed(baseline) and is_host_timed(current_doc)
    if spread:
        notes.append("CPU-only runs: a change must also exceed the step-to-step spread (interquartile range) of the "
                     "runs, as far as machine load moves an unchanged run")
    results = []
    for name in names:
        metric = METRICS[name]
        judge = _judge_steps if metric.section == "steps" else _judge_breakdown
        results.append(judge(metric, base_runs, current_doc, thresholds, spread))
    return Verdict(tuple(results), thresholds, baseline.get("run", {}), current_doc.get("run", {}), tuple(warnings),
                   len(base_runs), tuple(notes))


@dataclass(frozen=True)
class _Assessment:
    worse: Shift
    allowed: float
    noise: float
    base_median: float
    cur_median: float
    noise_source: str = ""

    @property
    def status(self) -> str:
        return _status(self.worse, self.allowed)


def _assess(base_runs: list[pd.Series], cur: pd.Series, worse: int, floor: Callable[[float], float],
            th: Thresholds, alpha: float, spread: bool = False, spread_floor: float = 0.0) -> _Assessment:
    """Shift of `cur` over the baseline's typical value per unit (the median over its runs), and the
    allowance: the thresholds, or the run-to-run noise when larger - how far the baseline's own runs
    stray from each other, and with spread=True at least the step-to-step spread of the runs (and
    spread_floor: a rank's steps may spread less than the whole run's, which drifts as a whole)."""
    typical = _typical(base_runs)
    shift_ = _worsening(typical, cur, worse, alpha)
    noise, source = 0.0, ""
    if len(base_runs) >= 2:
        # each baseline run against the others: how far an unchanged run strays on this machine,
        # in either direction (a run that came out better says as much about the spread)
        for j, run in enumerate(base_runs):
            estimate = _worsening(_typical(base_runs[:j] + base_runs[j + 1:]), run, worse, alpha).estimate
            if math.isfinite(estimate):
                noise = max(noise, abs(estimate))
        noise, source = noise * th.noise_factor, "runs"
    if spread:
        step_spread = max(_step_spread(base_runs + [cur]), spread_floor)
        if step_spread > noise:
            noise, source = step_spread, "spread"
    b_med = _median(typical.to_numpy())
    return _Assessment(shift_, max(floor(b_med), noise), noise, b_med, _median(cur.to_numpy()), source)


def _step_spread(runs: list[pd.Series]) -> float:
    """Root mean square of the runs' interquartile ranges of per-step values."""
    iqrs = []
    for run in runs:
        values = run.to_numpy(np.float64)
        values = values[np.isfinite(values)]
        q1, q3 = np.percentile(values, [25, 75]) if values.size >= 2 else (0.0, 0.0)
        iqrs.append(float(q3 - q1))
    return math.sqrt(sum(v * v for v in iqrs) / len(iqrs))


def _typical(runs: list[pd.Series]) -> pd.Series:
    if len(runs) == 1:
        return runs[0]
    return pd.concat(runs, axis=1).median(axis=1, skipna=True)


def _worsening(base: pd.Series, cur: pd.Series, worse: int, alpha: float) -> Shift:
    """Shift in the worse direction (positive = worse); paired unit by unit when both have the same units."""
    if base.index.is_unique and cur.index.is_unique and base.index.sort_values().equals(cur.index.sort_values()):
        return paired_shift(base.to_numpy(np.float64) * worse, cur.reindex(base.index).to_numpy(np.float64) * worse,
                            alpha)
    return shift(base.to_numpy(np.float64) * worse, cur.to_numpy(np.float64) * worse, alpha)


def _median(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else math.nan


def _regressed(worse: Shift, allowed: float) -> bool:
    """Both significant (lower bound above 0) and larger than the allowance (the estimate above it)."""
    return worse.decidable and worse.lower > 0 and worse.estimate > allowed


def _status(worse: Shift, allowed: float) -> str:
    if not worse.decidable:
        return "undecided"
    if _regressed(worse, allowed):
        return "regression"
    if worse.upper < 0 and worse.estimate < -allowed:
        return "improved"
    return "pass"


def _result(metric: Metric, a: _Assessment, status: str, findings: tuple[Finding, ...] = (),
            note: str = "") -> MetricResult:
    return MetricResult(metric, status, a.base_median, a.cur_median, a.worse, a.allowed, findings, note, a.noise,
                        a.noise_source)


def _judge_steps(metric: Metric, base_docs: list[dict], current: dict, th: Thresholds,
                 spread: bool = False) -> MetricResult:
    """Pooled over ranks, and per rank: one rank that alone got worse (a straggler) also fails."""
    base_runs = [gb.step_series(d, metric.column) for d in base_docs]
    cur = gb.step_series(current, metric.column)
    a = _assess(base_runs, cur, metric.worse, partial(th.allowed, metric), th, th.alpha, spread)
    if not np.isfinite(cur.to_numpy()).any() and not any(np.isfinite(b.to_numpy()).any() for b in base_runs):
        return _result(metric, a, "undecided", note=f"no {metric.column} values in either run")
    status = a.status
    note = "" if a.worse.decidable else f"too few samples ({a.worse.n_baseline} vs {a.worse.n_current}) to decide"
    ranks = _rank_findings(metric, base_runs, cur, th, spread, a.noise if a.noise_source == "spread" else 0.0)
    if any(f.significant for f in ranks) and status != "regression":
        status = "regression"
        note = "pooled over ranks within the allowance, but " + ", ".join(
            f"rank {f.key}" for f in ranks if f.significant) + " alone regressed"
    findings: tuple[Finding, ...] = ()
    if status == "regression":
        findings = ranks + _key_findings(metric, base_docs, current, th, spread)
    return _result(metric, a, status, findings, note)


def _rank_findings(metric: Metric, base_runs: list[pd.Series], cur: pd.Series,
                   th: Thresholds, spread: bool = False, spread_floor: float = 0.0) -> tuple[Finding, ...]:
    """Ranks whose own steps regressed (Bonferroni over ranks); else the one that moved most."""
    ranks = sorted(set(cur.index.get_level_values("rank")))
    rows = []
    for rank in ranks:
        per_run = [b.xs(rank, level="rank") for b in base_runs if rank in b.index.get_level_values("rank")]
        if not per_run:
            continue
        a = _assess(per_run, cur.xs(rank, level="rank"), metric.worse, partial(th.allowed, metric), th,
                    th.alpha / len(ranks), spread, spread_floor)
        rows.append(Finding("rank", str(rank), a.base_median, a.cur_median, a.worse.estimate,
                            _regressed(a.worse, a.allowed)))
    significant = [f for f in rows if f.significant]
    if significant:
        return tuple(sorted(significant, key=lambda f: -f.delta))
    moved = [f for f in rows if math.isfinite(f.delta) and f.delta > 0]
    return (max(moved, key=lambda f: f.delta),) if moved else ()


def _key_findings(metric: Metric, base_docs: list[dict], current: dict, th: Thresholds,
                  spread: bool = False, top: int = 3) -> tuple[Finding, ...]:
    """The collectives, groups and scopes whose exposed (or total) comm per step grew most."""
    if metric.attribute is None:
        return ()
    found: list[Finding] = []
    floor = partial(th.allowed, METRICS["exposed_comm"])
    for section, kind in gb.BREAKDOWNS.items():
        *base_mats, cur_mat = gb.key_matrices(base_docs + [current], section, metric.attribute)
        rows = []
        for key in cur_mat.columns:
            if kind == "group" and not str(key):
                continue  # an unknown process group names nothing
            a = _assess([m[key] for m in base_mats], cur_mat[key], +1, floor, th, th.alpha, spread)
            delta = float(np.mean(cur_mat[key])) - float(np.mean(_typical([m[key] for m in base_mats])))
            if math.isfinite(a.worse.estimate) and delta > 0:
                rows.append(Finding(kind, str(key), a.base_median, a.cur_median, delta, _regressed(a.worse, a.allowed)))
        rows.sort(key=lambda f: (-f.significant, -f.delta))
        # Name what explains the change, not every key that moved a hair: significant ones, and
        # the others down to a fifth of the largest increase.
        cut = 0.2 * max((f.delta for f in rows), default=0.0)
        found.extend([f for f in rows if f.significant or f.delta >= cut][:top])
    return tuple(found)


def _judge_breakdown(metric: Metric, base_docs: list[dict], current: dict, th: Thresholds,
                     spread: bool = False) -> MetricResult:
    """Every key of a breakdown is its own test; Bonferroni keeps the family's false alarms at alpha."""
    *base_mats, cur_mat = gb.key_matrices(base_docs + [current], metric.section, metric.column)
    kind = gb.BREAKDOWNS[metric.section]
    if cur_mat.columns.empty:
        empty = _Assessment(Shift(math.nan, -math.inf, math.inf, "none", 0, 0), math.nan, 0.0, math.nan, math.nan)
        return _result(metric, empty, "undecided", note=f"no {metric.section} data in either run")
    alpha = th.alpha / len(cur_mat.columns)
    findings, decidable, worst = [], False, None
    for key in cur_mat.columns:
        a = _assess([m[key] for m in base_mats], cur_mat[key], metric.worse, partial(th.allowed, metric), th, alpha,
                    spread)
        decidable |= a.worse.decidable
        if _regressed(a.worse, a.allowed):
            findings.append(Finding(kind, str(key), a.base_median, a.cur_median, a.worse.estimate, True))
        if worst is None or (math.isfinite(a.worse.estimate) and a.worse.estimate > worst.worse.estimate):
            worst = a
    status = "regression" if findings else ("pass" if decidable else "undecided")
    n = len(cur_mat)
    note = "" if decidable else (f"too few samples ({n} per {kind}) to decide at alpha {th.alpha:g}/"
                                 f"{len(cur_mat.columns)} {kind}s")
    findings.sort(key=lambda f: -f.delta)
    return _result(metric, worst, status, tuple(findings), note)
