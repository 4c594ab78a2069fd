"""Self-prediction: snapshot simulated runs mid-way and predict their own next batch.

The truth is the original run continuing (its workload's real lengths); the prediction only
knows the snapshot and draws the rest (`simrl.engine.restore`). Two claims are checked:

* the median error of the p50 on the next-batch time is within the spread the quantiles claim
  (the median half-width of the [p10, p90] band);
* the truth falls inside [p10, p90] about as often as that band promises. With N draws the
  band runs between the order statistics at 0.1 (N-1) and 0.9 (N-1) (numpy's linear
  quantiles), which hold (0.8 (N-1)) / (N+1) of the distribution on average: 65.5 % for
  N = 10, 74.3 % for N = 40. The fast test asks for at least that minus two binomial standard
  deviations over its cases; the slow one for at least 70 % at N = 40.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from predict_helpers import full_run, small_cfg, snapshot_at
from simhelpers import linear_costs

from simrl.predict import predict


def self_predict(seeds, fracs, draws, extra=()):
    errs, half, inside = [], [], []
    for seed in seeds:
        cfg = small_cfg(seed=seed, steps=2, extra=extra)
        costs = linear_costs()
        full = full_run(cfg, costs)
        first = full.steps[0].batch_ready
        for frac in fracs:
            snap, _ = snapshot_at(cfg, first * frac, costs)
            truth = next(s.batch_ready for s in full.steps if s.batch_ready > snap.time_s)
            p10, p50, p90 = predict(snap, draws=draws, costs=costs).batch_quantiles(0)
            errs.append(abs(p50 - truth))
            half.append((p90 - p10) / 2)
            inside.append(p10 <= truth <= p90)
    return np.array(errs), np.array(half), np.array(inside)


def nominal(draws: int) -> float:
    return 0.8 * (draws - 1) / (draws + 1)


def test_band_coverage_formula():
    # N = 10: the band spans order statistics 1.9 .. 9.1 (0-based 0.1*9, 0.9*9): 7.2 / 11.
    assert nominal(10) == pytest.approx(7.2 / 11)


def test_next_batch_self_prediction():
    draws = 10
    errs, half, inside = self_predict(seeds=range(6), fracs=(0.3, 0.7), draws=draws)
    assert np.median(errs) <= np.median(half), (errs, half)
    n, cov = len(inside), nominal(draws)
    assert inside.mean() >= cov - 2 * math.sqrt(cov * (1 - cov) / n), inside


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["psrl", "verl"])
def test_next_batch_self_prediction_many_seeds(policy):
    extra = [] if policy == "psrl" else [f"policy={policy}"]
    errs, half, inside = self_predict(seeds=range(12), fracs=(0.2, 0.5, 0.8), draws=40, extra=extra)
    assert np.median(errs) <= np.median(half)
    assert inside.mean() >= 0.70, inside.mean()
