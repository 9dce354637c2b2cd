"""What a gate comparison can detect, and the run-level test for metrics that machine load moves.

Minimum detectable shift (MDS): the smallest true worsening the test finds with probability
`power` (80%) at one-sided level alpha (5%), from the usual normal-theory formula

    MDS = (t[df](1 - alpha) + t[df](power)) * SE

- per-step samples, paired by step (Wilcoxon signed-rank): SE = s_d / sqrt(n), df = n - 1, with s_d
  the spread of the n per-step differences;
- per-step samples, independent (Mann-Whitney): SE = s * sqrt(1/n + 1/m), df = n + m - 2, with s the
  pooled spread of both samples;
- both rank tests need pi/3 times as many samples as the t test on normal noise (asymptotic
  relative efficiency 3/pi, Hodges & Lehmann 1956), so their SE is multiplied by sqrt(pi/3);
- spreads are robust: 1.4826 x the median absolute deviation (the sd of normal noise), the sample sd
  when the MAD is 0 (mostly-tied samples).

Run-level model (the run is the unit; for metrics that machine load moves as a whole run): one new
run's median c against the medians b_1..b_k of k baseline runs,

    shift = c - mean(b),   SE = tau * sqrt(1 + 1/k),   t test with df = prior_df + k - 1,

where tau^2, the variance of a run's median, pools an assumed value with the runs' own:
tau^2 = (prior_df * prior^2 + (k - 1) * var(b)) / (prior_df + k - 1) (a scaled inverse chi-square
prior). The assumed value is prior^2 = load_sd^2 + (pi/2) * s_w^2 / n: how far load moves a run
(measured, see README) plus the sampling variance of a median of n steps of spread s_w.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from overlapscope.report.gate_metrics import POWER
from overlapscope.report.gate_stats import Shift

_RANK_TEST_SE = math.sqrt(math.pi / 3.0)
_MEDIAN_VARIANCE = math.pi / 2.0  # var(median of n) = (pi/2) var / n for normal noise


def _t(df: float, q: float) -> float:
    from scipy.special import stdtrit  # on first use: the CLI imports this module on every start

    return float(stdtrit(df, q))


def robust_sd(values: np.ndarray) -> float:
    """1.4826 x MAD (the sd of normal noise), or the sample sd when the MAD is 0; 0 for < 2 values."""
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    if values.size < 2:
        return 0.0
    mad = 1.4826 * float(np.median(np.abs(values - np.median(values))))
    return mad if mad > 0 else float(values.std(ddof=1))


def step_detectable(baseline: np.ndarray, current: np.ndarray, paired: bool, alpha: float,
                    power: float = POWER) -> float:
    """MDS of the per-step rank test (the module docstring's formula); inf when too few samples."""
    b = np.asarray(baseline, np.float64)
    c = np.asarray(current, np.float64)
    if paired:
        keep = np.isfinite(b) & np.isfinite(c)
        n = int(keep.sum())
        if n < 2:
            return math.inf
        se, df = robust_sd(c[keep] - b[keep]) / math.sqrt(n), n - 1
    else:
        b, c = b[np.isfinite(b)], c[np.isfinite(c)]
        n, m = c.size, b.size
        if n + m < 3 or n == 0 or m == 0:
            return math.inf
        pooled = math.sqrt(((n - 1) * robust_sd(c) ** 2 + (m - 1) * robust_sd(b) ** 2) / (n + m - 2))
        se, df = pooled * math.sqrt(1.0 / n + 1.0 / m), n + m - 2
    return (_t(df, 1 - alpha) + _t(df, power)) * se * _RANK_TEST_SE


@dataclass(frozen=True)
class RunLevel:
    """One run against a baseline of k runs, the run as the unit (module docstring)."""

    shift: Shift
    """current median - mean of the baseline runs' medians, with t bounds; method "run-t"."""
    detectable: float
    """MDS of this test."""
    run_sd: float
    """tau: the pooled sd of one run's median."""
    load_sd: float
    """tau with the within-run sampling taken out: how far load moves a whole run."""
    within_sd: float
    """Pooled robust spread of the runs' per-step values."""
    n_steps: float
    """Steps per run (the mean over the runs)."""
    runs: int
    prior_df: float
    base: float = math.nan
    """log scale: the baseline runs' geometric mean median, which converts log shifts to the metric's unit
    (run_sd, load_sd and within_sd stay in log units, fractions of it); nan on the linear scale."""

    def to_unit(self, log_shift: float) -> float:
        """A shift of the test's scale in the metric's unit (the identity on the linear scale)."""
        return log_shift if math.isnan(self.base) else self.base * math.expm1(log_shift)


def run_level(base_runs: list[np.ndarray], current: np.ndarray, *, load_sd: float, prior_df: float,
              alpha: float, power: float = POWER, log: bool = False) -> RunLevel:
    """Test `current` (per-step values of one run) against `base_runs`, each run's median as one sample.

    log=True tests the logarithms (times, where load multiplies: a run twice as slow and one half as
    slow are equally likely), load_sd then a fraction (the sd of log medians); shift, bounds and MDS
    come back in the metric's unit."""
    runs = [np.asarray(r, np.float64) for r in base_runs]
    runs = [r[np.isfinite(r)] for r in runs]
    cur = np.asarray(current, np.float64)
    cur = cur[np.isfinite(cur)]
    base = math.nan
    if log:
        pooled = np.concatenate(runs) if runs else np.empty(0)
        positive = pooled[pooled > 0]
        floor = 1e-3 * float(np.median(positive)) if positive.size else 1.0  # a 0 ms step: 0.1% of the median
        runs = [np.log(np.maximum(r, floor)) for r in runs]
        cur = np.log(np.maximum(cur, floor))
    k = sum(r.size > 0 for r in runs)
    if k == 0 or cur.size == 0:
        none = Shift(math.nan, -math.inf, math.inf, "none", k, int(cur.size > 0))
        return RunLevel(none, math.inf, math.nan, math.nan, math.nan, 0.0, k, prior_df)
    medians = np.array([np.median(r) for r in runs if r.size])
    sizes = [r.size for r in runs if r.size] + [cur.size]
    n = float(np.mean(sizes))
    within = math.sqrt(float(np.mean([robust_sd(r) ** 2 for r in [*runs, cur] if r.size])))
    sampling = _MEDIAN_VARIANCE * within ** 2 / n
    prior = load_sd ** 2 + sampling
    data_df = k - 1
    var = (prior_df * prior + data_df * (float(medians.var(ddof=1)) if k > 1 else 0.0)) / (prior_df + data_df)
    tau = math.sqrt(var)
    df = prior_df + data_df
    se = tau * math.sqrt(1.0 + 1.0 / k)
    estimate = float(np.median(cur)) - float(medians.mean())
    half = _t(df, 1 - alpha) * se if df > 0 else math.inf
    detectable = (_t(df, 1 - alpha) + _t(df, power)) * se if df > 0 else math.inf
    if log:
        base = math.exp(float(medians.mean()))
        to = (lambda v: base * math.expm1(v) if math.isfinite(v) else v)
        shift = Shift(to(estimate), to(estimate - half), to(estimate + half), "run-t-log", k, 1)
        detectable = to(detectable)
    else:
        shift = Shift(estimate, estimate - half, estimate + half, "run-t", k, 1)
    return RunLevel(shift, detectable, tau, math.sqrt(max(var - sampling, 0.0)), within, n, k, prior_df, base)


def run_level_detectable(r: RunLevel, runs: int, steps: float, alpha: float, power: float = POWER) -> float:
    """MDS of the run-level test had the baseline `runs` runs and every run `steps` steps, the noise as
    measured (load moves a run by r.load_sd; steps spread by r.within_sd)."""
    var = r.load_sd ** 2 + _MEDIAN_VARIANCE * r.within_sd ** 2 / steps
    df = r.prior_df + runs - 1
    return r.to_unit((_t(df, 1 - alpha) + _t(df, power)) * math.sqrt(var * (1.0 + 1.0 / runs)))
