"""The CI gate: a baseline from one run, and a noise-aware comparison of a later run against it.

A baseline is plain JSON (schema `overlapscope.baseline/1`, no pickle) holding per rank and step
the overlap numbers, the per-collective/group/scope exposed time, and the run's identity.
`compare()` decides per metric from the per-step samples: a metric regresses only when the
shift is significant (its one-sided lower confidence bound is above 0; Hodges-Lehmann with exact
rank-based bounds, paired by step when both runs have the same steps, see gate_stats) and its
estimate is larger than the thresholds; then it names the ranks, collectives, groups and scopes that
moved most.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from overlapscope.analysis.result import Analysis
from overlapscope.errors import OverlapscopeError
from overlapscope.report import gate_baseline as gb
from overlapscope.report.gate_stats import Shift, paired_shift, shift

_NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    section: str
    """"steps" or a breakdown section (by_collective, by_group, by_scope)."""
    column: str
    worse: int
    """+1 when a larger value is worse (exposed time), -1 when smaller is worse (overlap %)."""
    unit: str
    """"ns" or "pct" (0-100)."""
    attribute: str | None = None
    """Breakdown column that explains a regression of a step metric (exposed_comm_ns, comm_ns)."""


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("exposed_comm", "exposed communication", "steps", "exposed_comm_ns", +1, "ns", "exposed_comm_ns"),
    Metric("exposed_comm_pct", "exposed communication share of the step", "steps", "exposed_comm_pct", +1, "pct",
           "exposed_comm_ns"),
    Metric("overlap", "communication overlapped with compute", "steps", "overlap_pct", -1, "pct", "exposed_comm_ns"),
    Metric("comm", "communication time", "steps", "comm_ns", +1, "ns", "comm_ns"),
    Metric("step_time", "step time", "steps", "window_ns", +1, "ns"),
    Metric("exposed_comm_by_collective", "exposed communication per collective", "by_collective",
           "exposed_comm_ns", +1, "ns"),
    Metric("exposed_comm_by_group", "exposed communication per process group", "by_group", "exposed_comm_ns", +1, "ns"),
    Metric("exposed_comm_by_scope", "exposed communication per scope (layer, FSDP unit)", "by_scope",
           "exposed_comm_ns", +1, "ns"),
)}
DEFAULT_METRICS: tuple[str, ...] = ("exposed_comm", "overlap", "exposed_comm_by_collective", "exposed_comm_by_scope")


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """How large a worsening must be to fail the gate (all must hold, and it must be significant)."""

    max_increase_pct: float = 10.0
    """Worsening allowed, in percent of the baseline median (per step)."""
    min_increase_ms: float = 1.0
    """Worsening allowed for time metrics, in ms per step: below it nothing fails, however significant."""
    min_increase_points: float = 2.0
    """Worsening allowed for percentage metrics (overlap, exposed share), in percentage points."""
    alpha: float = 0.05
    """One-sided significance level: the lower confidence bound of the shift is at 1 - alpha."""

    def __post_init__(self) -> None:
        for name in ("max_increase_pct", "min_increase_ms", "min_increase_points"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise OverlapscopeError(f"{name.replace('_', '-')} must be a finite number >= 0, got {value}")
        if not 0 < self.alpha < 0.5:
            raise OverlapscopeError(f"alpha must be in (0, 0.5), got {self.alpha}")

    def allowed(self, metric: Metric, baseline_median: float) -> float:
        """The largest worsening (metric unit, per step) that still passes."""
        relative = abs(baseline_median) * self.max_increase_pct / 100.0 if math.isfinite(baseline_median) else 0.0
        floor = self.min_increase_ms * _NS_PER_MS if metric.unit == "ns" else self.min_increase_points
        return max(relative, floor)


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


@dataclass(frozen=True)
class Verdict:
    results: tuple[MetricResult, ...]
    thresholds: Thresholds
    baseline_run: dict[str, Any]
    current_run: dict[str, Any]
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def regressions(self) -> tuple[MetricResult, ...]:
        return tuple(r for r in self.results if r.status == "regression")

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def compare(baseline: dict[str, Any], current: Analysis | dict[str, Any], thresholds: Thresholds = Thresholds(),
            metrics: Iterable[str] = DEFAULT_METRICS) -> Verdict:
    """Judge `current` against `baseline`; raises OverlapscopeError when the two cannot be compared."""
    current_doc = gb.build_baseline(current) if isinstance(current, Analysis) else current
    names = list(dict.fromkeys(metrics))
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise OverlapscopeError(f"unknown metric {', '.join(unknown)}; known: {', '.join(METRICS)}")
    warnings = gb.check_compatible(baseline, current_doc)
    results = []
    for name in names:
        metric = METRICS[name]
        if metric.section == "steps":
            results.append(_judge_steps(metric, baseline, current_doc, thresholds))
        else:
            results.append(_judge_breakdown(metric, baseline, current_doc, thresholds))
    return Verdict(tuple(results), thresholds, baseline.get("run", {}), current_doc.get("run", {}), tuple(warnings))


def _worsening(metric: Metric, base: np.ndarray, cur: np.ndarray, alpha: float, paired: bool) -> Shift:
    # Flip the sign of "smaller is worse" metrics so every bound below reads "positive = worse".
    test = paired_shift if paired else shift
    return test(np.asarray(base, np.float64) * metric.worse, np.asarray(cur, np.float64) * metric.worse, alpha)


def _aligned(base: pd.DataFrame, cur: pd.DataFrame, units: list[str]) -> tuple[np.ndarray, np.ndarray, bool]:
    """Values of both runs, matched unit by unit (rank, step) when both have exactly the same units."""
    b, c = base.set_index(units)["value"], cur.set_index(units)["value"]
    if b.index.is_unique and c.index.is_unique and b.index.sort_values().equals(c.index.sort_values()):
        return b.sort_index().to_numpy(), c.reindex(b.sort_index().index).to_numpy(), True
    return b.to_numpy(), c.to_numpy(), False


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


def _judge_steps(metric: Metric, baseline: dict, current: dict, th: Thresholds) -> MetricResult:
    """Pooled over ranks, and per rank: one rank that alone got worse (a straggler) also fails."""
    base = gb.step_samples(baseline, metric.column)
    cur = gb.step_samples(current, metric.column)
    b_med, c_med = _median(base["value"].to_numpy()), _median(cur["value"].to_numpy())
    allowed = th.allowed(metric, b_med)
    b_values, c_values, paired = _aligned(base, cur, ["rank", "step"])
    worse = _worsening(metric, b_values, c_values, th.alpha, paired)
    status = _status(worse, allowed)
    note = "" if worse.decidable else f"too few samples ({worse.n_baseline} vs {worse.n_current}) to decide"
    if base.empty and cur.empty:
        return MetricResult(metric, "undecided", b_med, c_med, worse, allowed,
                            note=f"no {metric.column} values in either run")
    ranks = _rank_findings(metric, base, cur, th)
    rank_regressed = any(f.significant for f in ranks)
    if rank_regressed and status != "regression":
        status = "regression"
        note = "pooled over ranks within the allowance, but " + ", ".join(
            f"rank {f.key}" for f in ranks if f.significant) + " alone regressed"
    findings: tuple[Finding, ...] = ()
    if status == "regression":
        findings = ranks + _key_findings(metric, baseline, current, th)
    return MetricResult(metric, status, b_med, c_med, worse, allowed, findings, note)


def _rank_findings(metric: Metric, base: pd.DataFrame, cur: pd.DataFrame, th: Thresholds) -> tuple[Finding, ...]:
    """Ranks whose own steps regressed (Bonferroni over ranks); else the one that moved most."""
    rows = []
    n_ranks = max(cur["rank"].nunique(), 1)
    for rank, cur_rank in cur.groupby("rank"):
        b, c, paired = _aligned(base[base["rank"] == rank], cur_rank, ["step"])
        worse = _worsening(metric, b, c, th.alpha / n_ranks, paired)
        b_med = _median(b)
        rows.append(Finding("rank", str(rank), b_med, _median(c), worse.estimate,
                            _regressed(worse, th.allowed(metric, b_med))))
    significant = [f for f in rows if f.significant]
    if significant:
        return tuple(sorted(significant, key=lambda f: -f.delta))
    moved = [f for f in rows if math.isfinite(f.delta) and f.delta > 0]
    return (max(moved, key=lambda f: f.delta),) if moved else ()


def _key_findings(metric: Metric, baseline: dict, current: dict, th: Thresholds, top: int = 3) -> tuple[Finding, ...]:
    """The collectives, groups and scopes whose exposed (or total) comm per step grew most."""
    if metric.attribute is None:
        return ()
    found: list[Finding] = []
    for section, kind in gb.BREAKDOWNS.items():
        base, cur = gb.key_matrices(baseline, current, section, metric.attribute)
        if base.empty and cur.empty:
            continue
        paired = base.index.equals(cur.index)
        rows = []
        for key in base.columns:
            b, c = base[key].to_numpy(), cur[key].to_numpy()
            worse = paired_shift(b, c, th.alpha) if paired else shift(b, c, th.alpha)
            b_med = _median(b)
            allowed = th.allowed(METRICS["exposed_comm"], b_med)
            if kind == "group" and not str(key):
                continue  # an unknown process group names nothing
            if math.isfinite(worse.estimate) and float(np.mean(c)) > float(np.mean(b)):
                rows.append(Finding(kind, str(key), b_med, _median(c), float(np.mean(c) - np.mean(b)),
                                    _regressed(worse, allowed)))
        rows.sort(key=lambda f: (-f.significant, -f.delta))
        # Name what explains the change, not every key that moved a hair: significant ones, and
        # the others down to a fifth of the largest increase.
        cut = 0.2 * max((f.delta for f in rows), default=0.0)
        found.extend([f for f in rows if f.significant or f.delta >= cut][:top])
    return tuple(found)


def _judge_breakdown(metric: Metric, baseline: dict, current: dict, th: Thresholds) -> MetricResult:
    """Every key of a breakdown is its own test; Bonferroni keeps the family's false alarms at alpha."""
    base, cur = gb.key_matrices(baseline, current, metric.section, metric.column)
    kind = gb.BREAKDOWNS[metric.section]
    empty = Shift(math.nan, -math.inf, math.inf, "none", len(base), len(cur))
    if base.columns.empty:
        return MetricResult(metric, "undecided", math.nan, math.nan, empty, math.nan,
                            note=f"no {metric.section} data in either run")
    alpha = th.alpha / len(base.columns)
    paired = base.index.equals(cur.index)
    findings, decidable, worst = [], False, None
    for key in base.columns:
        b, c = base[key].to_numpy(), cur[key].to_numpy()
        worse = paired_shift(b, c, alpha) if paired else shift(b, c, alpha)
        b_med = _median(b)
        allowed = th.allowed(metric, b_med)
        decidable |= worse.decidable
        regressed = _regressed(worse, allowed)
        if regressed:
            findings.append(Finding(kind, str(key), b_med, _median(c), worse.estimate, True))
        if worst is None or (math.isfinite(worse.estimate) and worse.estimate > worst[1].estimate):
            worst = (key, worse, b_med, _median(c), allowed)
    key, worse, b_med, c_med, allowed = worst
    if findings:
        status = "regression"
    elif not decidable:
        status = "undecided"
    else:
        status = "pass"
    note = "" if decidable else (f"too few samples ({len(base)} vs {len(cur)} per {kind}) to decide at "
                                 f"alpha {th.alpha:g}/{len(base.columns)} {kind}s")
    findings.sort(key=lambda f: -f.delta)
    return MetricResult(metric, status, b_med, c_med, worse, allowed, tuple(findings), note)
