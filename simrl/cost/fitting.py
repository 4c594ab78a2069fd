"""Small numerical fitting tools shared by the cost-model fitters (numpy only, no scipy).

`levenberg_marquardt` minimises a sum of squared residuals with a finite-difference Jacobian;
`nonneg_lstsq` solves a linear least-squares problem with non-negative coefficients
(projected active-set); `ape` / `error_summary` compute absolute percentage errors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def levenberg_marquardt(
    resid: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, iters: int = 200, tol: float = 1e-10
) -> tuple[np.ndarray, float]:
    """Minimise ``sum(resid(x)**2)`` from ``x0``; returns (x, cost)."""
    x = np.asarray(x0, dtype=float).copy()
    r = resid(x)
    cost = float(r @ r)
    lam = 1e-3
    for _ in range(iters):
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            step = 1e-6 * max(1.0, abs(x[j]))
            xp = x.copy()
            xp[j] += step
            jac[:, j] = (resid(xp) - r) / step
        g = jac.T @ r
        h = jac.T @ jac
        improved = False
        for _ in range(20):
            try:
                dx = -np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            xn = x + dx
            rn = resid(xn)
            cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                improved = True
                done = cost - cn < tol * max(cost, 1e-30)
                x, r, cost = xn, rn, cn
                lam = max(lam / 3, 1e-12)
                break
            lam *= 4
        if not improved or done:
            break
    return x, cost


def nonneg_lstsq(a: np.ndarray, b: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Least squares ``a @ x ~ b`` subject to ``x >= 0`` (Lawson-Hanson style active set)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    if weights is not None:
        a = a * weights[:, None]
        b = b * weights
    free = np.ones(a.shape[1], dtype=bool)
    x = np.zeros(a.shape[1])
    for _ in range(a.shape[1] + 1):
        x = np.zeros(a.shape[1])
        if free.any():
            x[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        neg = x < 0
        if not neg.any():
            return x
        free &= ~neg
    x[x < 0] = 0.0
    return x


def ape(pred: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Absolute percentage errors, in percent."""
    pred = np.asarray(pred, float)
    actual = np.asarray(actual, float)
    return 100.0 * np.abs(pred - actual) / np.abs(actual)


def error_summary(pred, actual) -> dict:
    """Median, mean and max absolute percentage error (percent) and the count."""
    e = ape(pred, actual)
    if e.size == 0:
        return {"n": 0, "median_ape": float("nan"), "mean_ape": float("nan"), "max_ape": float("nan")}
    return {"n": int(e.size), "median_ape": float(np.median(e)), "mean_ape": float(np.mean(e)),
            "max_ape": float(np.max(e))}
