"""Rank-based shift between two samples: Hodges-Lehmann estimate, exact confidence bounds, p-value.

Why rank-based: per-step samples are few (3-50), skewed and carry outliers (a step that caught a
GC pause or a late rank). The Hodges-Lehmann shift (median of all pairwise differences) ignores a
few wild steps, and its confidence bounds come from the exact null distribution of the
Mann-Whitney U statistic, so they are valid at 3 steps as at 300 without assuming normality.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

# Above this many pairs the exact U distribution gives way to the normal approximation.
_EXACT_MAX_PAIRS = 4_096
_EPS = 1e-12


@dataclass(frozen=True)
class Shift:
    """How much larger `current` is than `baseline` (current - baseline, in the samples' unit)."""

    estimate: float
    """Hodges-Lehmann shift: median of all pairwise differences current_i - baseline_j."""
    lower: float
    """One-sided (1 - alpha) lower confidence bound of the shift; -inf when the samples are too few."""
    upper: float
    """One-sided (1 - alpha) upper confidence bound; +inf when the samples are too few."""
    p_value: float
    """One-sided Mann-Whitney p-value of 'current is larger' (1.0 when a side is empty)."""
    n_baseline: int
    n_current: int

    @property
    def decidable(self) -> bool:
        """Whether any data could have made the shift significant at this alpha."""
        return math.isfinite(self.lower)


@lru_cache(maxsize=256)
def _u_cdf(n: int, m: int) -> tuple[float, ...]:
    """Exact P(U <= u) for u = 0..n*m under H0 (no ties).

    The count of arrangements with U = u is the coefficient of q^u in the Gaussian binomial
    [n+m choose n]_q = prod_{i=1..n} (1 - q^(m+i)) / (1 - q^i); exact Python ints, no overflow.
    """
    size = n * m + 1
    coef = [0] * size
    coef[0] = 1
    for i in range(1, n + 1):
        step = m + i
        for k in range(size - 1, step - 1, -1):  # multiply by (1 - q^(m+i)), high to low
            coef[k] -= coef[k - step]
        for k in range(i, size):  # divide by (1 - q^i): a running sum with stride i
            coef[k] += coef[k - i]
    total = math.comb(n + m, n)
    running = 0
    cdf = []
    for c in coef:
        running += c
        cdf.append(running / total)
    return tuple(cdf)


def _rank_of_bound(n: int, m: int, alpha: float) -> int:
    """k such that the k-th smallest pairwise difference is the (1 - alpha) lower bound; 0: none.

    k is the largest integer with P(U <= k - 1) <= alpha.
    """
    if n * m <= _EXACT_MAX_PAIRS:
        cdf = np.asarray(_u_cdf(min(n, m), max(n, m)))
        return int(np.searchsorted(cdf, alpha + _EPS, side="right"))
    mean = n * m / 2.0
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    k = math.floor(mean + stats.norm.ppf(alpha) * sd + 0.5)  # continuity-corrected alpha quantile
    return max(k, 0)


def shift(baseline: np.ndarray, current: np.ndarray, alpha: float) -> Shift:
    """Hodges-Lehmann shift of `current` over `baseline` with exact one-sided bounds at `alpha`."""
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(current, dtype=np.float64)
    b, c = b[np.isfinite(b)], c[np.isfinite(c)]
    n, m = c.size, b.size
    if n == 0 or m == 0:
        return Shift(math.nan, -math.inf, math.inf, 1.0, m, n)
    diffs = np.sort((c[:, None] - b[None, :]).ravel())
    k = _rank_of_bound(n, m, alpha)
    lower = float(diffs[k - 1]) if k >= 1 else -math.inf
    upper = float(diffs[diffs.size - k]) if k >= 1 else math.inf
    if np.ptp(np.concatenate([b, c])) == 0:
        p_value = 1.0  # every sample equal: nothing moved
    else:
        p_value = float(stats.mannwhitneyu(c, b, alternative="greater").pvalue)
    return Shift(float(np.median(diffs)), lower, upper, p_value, m, n)
