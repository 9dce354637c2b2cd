"""Shift between two samples: Hodges-Lehmann estimate and one-sided confidence bounds.

Why rank-based: per-step samples are few (3-50), skewed and carry outliers (a step that caught a
GC pause or a late rank). The Hodges-Lehmann shift ignores a few wild steps, and its bounds come
from the exact null distribution of a rank statistic, valid at 6 steps as at 300 without assuming
normality. Paired when both runs have the same steps (step N of rank r in both): the step-to-step
variation they share (data-dependent step lengths, a slow first step) then cancels. When the
samples are too few for any rank test to reach alpha (paired n <= 4, or 2 vs 3 steps), the bounds
fall back to Student's t (paired or Welch), which assumes roughly normal step noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# Above this many pairs (or Walsh averages) the exact distribution gives way to the normal one.
_EXACT_MAX = 4_096
_EPS = 1e-12


@dataclass(frozen=True)
class Shift:
    """How much larger `current` is than `baseline` (current - baseline, in the samples' unit)."""

    estimate: float
    """Hodges-Lehmann shift (median of pairwise differences, or of Walsh averages when paired)."""
    lower: float
    """One-sided (1 - alpha) lower confidence bound of the shift; -inf when it cannot be bounded."""
    upper: float
    """One-sided (1 - alpha) upper confidence bound; +inf when it cannot be bounded."""
    method: str
    """"wilcoxon" (paired), "mann-whitney", "paired-t", "welch-t", or "none" (too few samples)."""
    n_baseline: int
    n_current: int

    @property
    def decidable(self) -> bool:
        return math.isfinite(self.lower)

    @property
    def significant(self) -> bool:
        """current is larger than baseline at the chosen alpha."""
        return self.lower > 0


@lru_cache(maxsize=256)
def _mann_whitney_cdf(n: int, m: int) -> tuple[float, ...]:
    """Exact P(U <= u), u = 0..n*m: coefficients of the Gaussian binomial [n+m choose n]_q
    = prod_{i=1..n} (1 - q^(m+i)) / (1 - q^i), in exact integers."""
    size = n * m + 1
    coef = [1] + [0] * (size - 1)
    for i in range(1, n + 1):
        step = m + i
        for k in range(size - 1, step - 1, -1):  # times (1 - q^(m+i)), high to low
            coef[k] -= coef[k - step]
        for k in range(i, size):  # divided by (1 - q^i): a running sum with stride i
            coef[k] += coef[k - i]
    return _cdf(coef, math.comb(n + m, n))


@lru_cache(maxsize=256)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """Exact P(T+ <= t), t = 0..n(n+1)/2: subset sums of the ranks 1..n."""
    size = n * (n + 1) // 2 + 1
    coef = [1] + [0] * (size - 1)
    for r in range(1, n + 1):
        for k in range(size - 1, r - 1, -1):
            coef[k] += coef[k - r]
    return _cdf(coef, 2 ** n)


def _cdf(coef: list[int], total: int) -> tuple[float, ...]:
    running, out = 0, []
    for c in coef:
        running += c
        out.append(running / total)
    return tuple(out)


def _bound_rank(cdf: tuple[float, ...] | None, count: int, mean: float, sd: float, alpha: float) -> int:
    """k such that the k-th smallest difference is the (1 - alpha) lower bound (0: none): the largest
    k with P(stat <= k - 1) <= alpha."""
    if cdf is not None:
        return int(np.searchsorted(np.asarray(cdf), alpha + _EPS, side="right"))
    # scipy.special (normal and Student t quantiles; scipy.stats costs 1 s to import) loads here, not
    # at import: the CLI imports this module to register its commands on every start.
    from scipy.special import ndtri

    k = math.floor(mean + float(ndtri(alpha)) * sd + 0.5)  # continuity-corrected alpha quantile
    return min(max(k, 0), count)


def _from_sorted(sorted_diffs: np.ndarray, k: int) -> tuple[float, float]:
    if k < 1:
        return -math.inf, math.inf
    return float(sorted_diffs[k - 1]), float(sorted_diffs[sorted_diffs.size - k])


def _t_bounds(mean: float, se: float, df: float, alpha: float) -> tuple[float, float]:
    if not (df > 0 and math.isfinite(se)):
        return -math.inf, math.inf
    from scipy.special import stdtrit  # on first use, as ndtri above

    half = float(stdtrit(df, 1 - alpha)) * se
    return mean - half, mean + half


def paired_shift(baseline: np.ndarray, current: np.ndarray, alpha: float) -> Shift:
    """Shift of matched samples (current[i] pairs with baseline[i]): Wilcoxon signed-rank bounds."""
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(current, dtype=np.float64)
    keep = np.isfinite(b) & np.isfinite(c)
    d = c[keep] - b[keep]
    n = d.size
    if n == 0:
        return Shift(math.nan, -math.inf, math.inf, "none", 0, 0)
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2.0)
    estimate = float(np.median(walsh))
    count = walsh.size
    cdf = _signed_rank_cdf(n) if count <= _EXACT_MAX else None
    k = _bound_rank(cdf, count, count / 2.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0), alpha)
    if k >= 1:
        lower, upper = _from_sorted(walsh, k)
        return Shift(estimate, lower, upper, "wilcoxon", n, n)
    if n < 2:
        return Shift(estimate, -math.inf, math.inf, "none", n, n)
    lower, upper = _t_bounds(float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n), n - 1, alpha)
    return Shift(estimate, lower, upper, "paired-t", n, n)


def shift(baseline: np.ndarray, current: np.ndarray, alpha: float) -> Shift:
    """Shift of independent samples: Mann-Whitney (Hodges-Lehmann) bounds."""
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(current, dtype=np.float64)
    b, c = b[np.isfinite(b)], c[np.isfinite(c)]
    n, m = c.size, b.size
    if n == 0 or m == 0:
        return Shift(math.nan, -math.inf, math.inf, "none", m, n)
    diffs = np.sort((c[:, None] - b[None, :]).ravel())
    estimate = float(np.median(diffs))
    cdf = _mann_whitney_cdf(min(n, m), max(n, m)) if n * m <= _EXACT_MAX else None
    k = _bound_rank(cdf, n * m, n * m / 2.0, math.sqrt(n * m * (n + m + 1) / 12.0), alpha)
    if k >= 1:
        lower, upper = _from_sorted(diffs, k)
        return Shift(estimate, lower, upper, "mann-whitney", m, n)
    if n < 2 or m < 2:
        return Shift(estimate, -math.inf, math.inf, "none", m, n)
    vc, vb = c.var(ddof=1) / n, b.var(ddof=1) / m
    se = math.sqrt(vc + vb)
    df = (vc + vb) ** 2 / (vc ** 2 / (n - 1) + vb ** 2 / (m - 1)) if se > 0 else float(n + m - 2)
    lower, upper = _t_bounds(float(c.mean() - b.mean()), se, df, alpha)
    return Shift(estimate, lower, upper, "welch-t", m, n)
