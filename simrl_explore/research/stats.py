"""Confidence intervals for paired differences: Student t and a seeded percentile bootstrap.

Both are deterministic: the t quantiles are tabulated (two-sided 90 / 95 / 99 %, df 1..30;
beyond 30 the normal quantile, which is within 2 % of t there), the bootstrap draws from
``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import math

import numpy as np

# Two-sided Student t quantiles t_{1 - alpha/2, df}, df = 1..30 (standard tables).
_T = {
    0.90: [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
           1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697],
    0.95: [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
           2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042],
    0.99: [63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947,
           2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750],
}
_Z = {0.90: 1.645, 0.95: 1.960, 0.99: 2.576}


def t_quantile(confidence: float, df: int) -> float:
    if confidence not in _T:
        raise ValueError(f"confidence must be one of {sorted(_T)}, got {confidence}")
    if df < 1:
        raise ValueError("a t interval needs at least two samples")
    return _T[confidence][df - 1] if df <= 30 else _Z[confidence]


def t_interval(x, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the mean of ``x`` (Student t, n - 1 degrees of freedom)."""
    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, float("nan"), float("nan")
    h = t_quantile(confidence, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - h, m + h


def bootstrap_interval(x, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap of the mean, resampling ``x`` with a seeded generator."""
    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    a = (1 - confidence) / 2
    return m, float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def interval(x, method: str = "t", confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    if method == "t":
        return t_interval(x, confidence)
    if method == "bootstrap":
        return bootstrap_interval(x, confidence, seed=seed)
    raise ValueError(f"unknown interval method {method!r}; expected t or bootstrap")


def verdict(low: float, high: float) -> str:
    """'better' when the whole interval of the improvement is above 0, 'worse' below, else 'inconclusive'."""
    if math.isnan(low):
        return "inconclusive"
    return "better" if low > 0 else ("worse" if high < 0 else "inconclusive")


def sign_flip(xs: list[float], ys: list[float]) -> float | None:
    """The first x where the piecewise-linear ys changes sign (zeros skipped), or None."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True) if y != 0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if (y0 > 0) != (y1 > 0):
            return x0 + (x1 - x0) * y0 / (y0 - y1)
    return None
