"""The CI gate: a baseline from one or more runs, and a noise-aware comparison of a later run against it.

A baseline is plain JSON (schema `overlapscope.baseline/1`, no pickle) holding per rank and step
the overlap numbers, the per-collective/group/scope exposed time, and the run's identity.
`compare()` decides per metric, with three verdicts: regression (the worsening is significant and
larger than the allowance), pass, and inconclusive (the data could not have detected a worsening
of the threshold's size: too few steps, spread larger than the threshold, too few baseline runs).
Where the noise comes from depends on the device (NOISE_RULES): on GPUs the per-step samples
carry it (Hodges-Lehmann with exact rank-based bounds, paired by step when both runs have the same
steps, see gate_stats), plus the run-to-run noise a baseline of several runs shows; on CPU-only
runs machine load moves whole runs, so the run is the unit (gate_power.run_level).
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
from overlapscope.report.gate_metrics import (DEFAULT_METRICS, HOST_DEFAULT_METRICS, HOST_DEFAULT_NOTE, METRICS,  # noqa: F401
                                              Metric, Thresholds)
from overlapscope.report.gate_noise import (NOISE_RULES, NoiseRule, device_kind, is_host_timed,  # noqa: F401
                                            what_to_record)
from overlapscope.report.gate_power import RunLevel, run_level, step_detectable
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
    """"regression", "pass", "improved", or "inconclusive" (the data could not have detected a worsening
    of the threshold's size; see detectable and advice)."""
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
    """"runs": how far the baseline's own runs stray from each other, times noise_factor (steps model);
    "run-to-run": the sd of one run's median (runs model); "" when none."""
    detectable: float = math.inf
    """The smallest worsening this comparison finds with probability `power` (gate_power); inf: none."""
    threshold: float = math.nan
    """The thresholds' allowance alone (without noise): the size of change the gate is asked to find."""
    model: str = "steps"
    """The noise model used (NoiseRule.model)."""
    advice: str = ""
    """For an inconclusive result: what to record instead."""


@dataclass(frozen=True)
class Verdict:
    results: tuple[MetricResult, ...]
    thresholds: Thresholds
    baseline_run: dict[str, Any]
    current_run: dict[str, Any]
    warnings: tuple[str, ...] = field(default_factory=tuple)
    baseline_runs: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)
    """How the gate chose its metrics or noise model, when that depends on the runs."""

    @property
    def regressions(self) -> tuple[MetricResult, ...]:
        return tuple(r for r in self.results if r.status == "regression")

    @property
    def inconclusive(self) -> tuple[MetricResult, ...]:
        return tuple(r for r in self.results if r.status == "inconclusive")

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def outcome(self) -> str:
        """"regression", "inconclusive" (no regression, but some metric could not be decided) or "pass"."""
        return "regression" if self.regressions else ("inconclusive" if self.inconclusive else "pass")

    def exit_status(self, strict: bool = False) -> int:
        """0 pass, 1 regression; inconclusive is 0, or 3 when strict."""
        return {"regression": 1, "inconclusive": 3 if strict else 0, "pass": 0}[self.outcome]

    @property
    def exit_code(self) -> int:
        return self.exit_status()


EXIT_INCONCLUSIVE_STRICT = 3


def default_metrics(baseline: dict[str, Any], current: dict[str, Any]) -> tuple[str, ...]:
    return HOST_DEFAULT_METRICS if device_kind(baseline, current) == "cpu" else DEFAULT_METRICS


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
    rules = NOISE_RULES[device_kind(baseline, current_doc)]
    runs_model = [n for n in names if rules[n].model == "runs"]
    if runs_model:
        assumed = ", ".join(f"{n} {100 * rules[n].load_cv:g}%" for n in runs_model)
        notes.append(f"CPU-only runs: machine load moves whole runs, so each run's median is one sample; "
                     f"{len(base_runs)} baseline run{'s' if len(base_runs) > 1 else ''}; run-to-run noise assumed "
                     f"until measured (sd, % of the median, worth {rules[runs_model[0]].prior_df:g} runs): {assumed}")
    results = []
    for name in names:
        metric = METRICS[name]
        judge = _judge_steps if metric.section == "steps" else _judge_breakdown
        results.append(judge(metric, base_runs, current_doc, thresholds, rules[name]))
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
    detectable: float = math.inf
    threshold: float = math.nan
    run_level: RunLevel | None = None

    @property
    def status(self) -> str:
        w = self.worse
        if not w.decidable:
            return "inconclusive"
        if _regressed(w, self.allowed):
            return "regression"
        if w.upper < 0 and w.estimate < -self.allowed:
            return "improved"
        return "inconclusive" if not self.detectable <= self.threshold else "pass"


def _assess(metric: Metric, base_runs: list[pd.Series], cur: pd.Series, th: Thresholds, alpha: float,
            rule: NoiseRule) -> _Assessment:
    """Shift of `cur` over the baseline in the worse direction, the allowance and what the data could detect.

    steps model: the shift over the baseline's typical value per unit (the median over its runs), the
    allowance the thresholds or, when larger, the run-to-run noise: how far the baseline's own runs stray
    from each other. runs model: gate_power.run_level, the allowance the thresholds.
    """
    worse = metric.worse
    typical = _typical(base_runs)
    b_med = _median(typical.to_numpy())
    threshold = th.allowed(metric, b_med)
    cur_med = _median(cur.to_numpy())
    if rule.model == "runs":
        log = metric.unit == "ns"  # load multiplies times: tested as logarithms, load_cv their sd
        rl = run_level([b.to_numpy(np.float64) * worse for b in base_runs], cur.to_numpy(np.float64) * worse,
                       load_sd=rule.load_cv if log else rule.load_sd(b_med), prior_df=rule.prior_df, alpha=alpha,
                       power=th.power, log=log)
        run_sd = rl.run_sd if math.isnan(rl.base) else rl.base * rl.run_sd  # log scale: sd x the level
        return _Assessment(rl.shift, threshold, run_sd, b_med, cur_med, "run-to-run", rl.detectable, threshold, rl)
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
    paired = shift_.method in ("wilcoxon", "paired-t")
    b_vals, c_vals = typical.to_numpy(np.float64), cur.to_numpy(np.float64)
    if paired:
        c_vals = cur.reindex(typical.index).to_numpy(np.float64)
    detectable = max(step_detectable(b_vals, c_vals, paired, alpha, th.power), noise)
    return _Assessment(shift_, max(threshold, noise), noise, b_med, cur_med, source, detectable, threshold)


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


def _result(metric: Metric, a: _Assessment, status: str, findings: tuple[Finding, ...] = (), note: str = "",
            th: Thresholds | None = None) -> MetricResult:
    advice = ""
    if status == "inconclusive" and th is not None:
        advice = what_to_record(metric, th, threshold=a.threshold, detectable=a.detectable, noise=a.noise,
                                n_current=a.worse.n_current, run_level=a.run_level)
    return MetricResult(metric, status, a.base_median, a.cur_median, a.worse, a.allowed, findings, note, a.noise,
                        a.noise_source, a.detectable, a.threshold, "runs" if a.run_level else "steps", advice)


def _judge_steps(metric: Metric, base_docs: list[dict], current: dict, th: Thresholds, rule: NoiseRule) -> MetricResult:
    """Pooled over ranks, and per rank: one rank that alone got worse (a straggler) also fails."""
    base_runs = [gb.step_series(d, metric.column) for d in base_docs]
    cur = gb.step_series(current, metric.column)
    a = _assess(metric, base_runs, cur, th, th.alpha, rule)
    if not np.isfinite(cur.to_numpy()).any() and not any(np.isfinite(b.to_numpy()).any() for b in base_runs):
        return _result(metric, a, "inconclusive", note=f"no {metric.column} values in either run")
    status = a.status
    note = "" if a.worse.decidable else f"too few samples ({a.worse.n_baseline} vs {a.worse.n_current}) to decide"
    ranks = _rank_findings(metric, base_runs, cur, th, rule)
    if any(f.significant for f in ranks) and status != "regression":
        status = "regression"
        note = "pooled over ranks within the allowance, but " + ", ".join(
            f"rank {f.key}" for f in ranks if f.significant) + " alone regressed"
    findings: tuple[Finding, ...] = ()
    if status == "regression":
        findings = ranks + _key_findings(metric, base_docs, current, th, rule)
    return _result(metric, a, status, findings, note, th)


def _rank_findings(metric: Metric, base_runs: list[pd.Series], cur: pd.Series, th: Thresholds,
                   rule: NoiseRule) -> tuple[Finding, ...]:
    """Ranks whose own steps regressed (Bonferroni over ranks); else the one that moved most."""
    ranks = sorted(set(cur.index.get_level_values("rank")))
    rows = []
    for rank in ranks:
        per_run = [b.xs(rank, level="rank") for b in base_runs if rank in b.index.get_level_values("rank")]
        if not per_run:
            continue
        a = _assess(metric, per_run, cur.xs(rank, level="rank"), th, th.alpha / len(ranks), rule)
        rows.append(Finding("rank", str(rank), a.base_median, a.cur_median, a.worse.estimate,
                            _regressed(a.worse, a.allowed)))
    significant = [f for f in rows if f.significant]
    if significant:
        return tuple(sorted(significant, key=lambda f: -f.delta))
    moved = [f for f in rows if math.isfinite(f.delta) and f.delta > 0]
    return (max(moved, key=lambda f: f.delta),) if moved else ()


def _key_findings(metric: Metric, base_docs: list[dict], current: dict, th: Thresholds, rule: NoiseRule,
                  top: int = 3) -> tuple[Finding, ...]:
    """The collectives, groups and scopes whose exposed (or total) comm per step grew most."""
    if metric.attribute is None:
        return ()
    found: list[Finding] = []
    exposed = METRICS["exposed_comm"]
    for section, kind in gb.BREAKDOWNS.items():
        *base_mats, cur_mat = gb.key_matrices(base_docs + [current], section, metric.attribute)
        rows = []
        for key in cur_mat.columns:
            if kind == "group" and not str(key):
                continue  # an unknown process group names nothing
            a = _assess(exposed, [m[key] for m in base_mats], cur_mat[key], th, th.alpha, rule)
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
                     rule: NoiseRule) -> MetricResult:
    """Every key of a breakdown is its own test; Bonferroni keeps the family's false alarms at alpha.

    Inconclusive when some key could not have shown a worsening of its threshold's size (that key is
    the one reported), else the key that moved most is."""
    *base_mats, cur_mat = gb.key_matrices(base_docs + [current], metric.section, metric.column)
    kind = gb.BREAKDOWNS[metric.section]
    if cur_mat.columns.empty:
        empty = _Assessment(Shift(math.nan, -math.inf, math.inf, "none", 0, 0), math.nan, 0.0, math.nan, math.nan)
        return _result(metric, empty, "inconclusive", note=f"no {metric.section} data in either run", th=th)
    alpha = th.alpha / len(cur_mat.columns)
    findings, worst, blind = [], None, None
    for key in cur_mat.columns:
        a = _assess(metric, [m[key] for m in base_mats], cur_mat[key], th, alpha, rule)
        if _regressed(a.worse, a.allowed):
            findings.append(Finding(kind, str(key), a.base_median, a.cur_median, a.worse.estimate, True))
        elif a.status == "inconclusive" and (blind is None or a.detectable - a.threshold > blind[1].detectable -
                                             blind[1].threshold):
            blind = (key, a)
        if worst is None or (math.isfinite(a.worse.estimate) and a.worse.estimate > worst.worse.estimate):
            worst = a
    findings.sort(key=lambda f: -f.delta)
    if findings:
        return _result(metric, worst, "regression", tuple(findings), th=th)
    if blind is not None:
        key, a = blind
        n = len(cur_mat)
        why = (f"too few samples ({n} per {kind}) to decide at alpha {th.alpha:g}/{len(cur_mat.columns)} {kind}s"
               if not a.worse.decidable else f"{kind} {key} is the least decidable of the {len(cur_mat.columns)} {kind}s")
        return _result(metric, a, "inconclusive", note=why, th=th)
    return _result(metric, worst, "pass", th=th)
