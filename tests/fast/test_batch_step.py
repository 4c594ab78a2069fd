"""The batched scan step (`step.make_batch_step`) at its narrowest: one configuration's trainer action per
step (every other one deferred) and one configuration's dispatch per turn of the routing loop (every burst
takes several turns). Per step and per call the same as SimPy, exactly, on random configurations (reserve
and on_demand KV, prefix caching drawn) sharing one batch, with one workload each."""

import numpy as np
import pytest

pytest.importorskip("jax")

from diffcases import compare, random_case, run_fast  # noqa: E402


def _narrowest(monkeypatch, route_width: int) -> None:
    import simrl_fast.engine as engine

    monkeypatch.setattr(engine, "RARE_WIDTH", 1)
    monkeypatch.setattr(engine, "ROUTE_WIDTH", route_width)
    cases = [random_case(np.random.default_rng([7, i]), 6, 3, 3, kv_policy="any", prefix="any") for i in range(6)]
    for c in cases:
        c.run_simpy()
    res = run_fast(cases)
    assert res.complete.all()
    for m, c in enumerate(cases):
        compare(c, res, m)


def test_narrowest_trainer_width_equals_simpy(monkeypatch):
    """Every trainer action but one per step deferred; routing as by default (ROUTE_WIDTH 0)."""
    _narrowest(monkeypatch, 0)


@pytest.mark.slow
def test_narrowest_batched_step_equals_simpy(monkeypatch):
    """The opt-in routing sub-batch too (ROUTE_WIDTH 1: every burst routed one configuration per turn);
    slow: its while loop doubles the compile."""
    _narrowest(monkeypatch, 1)
