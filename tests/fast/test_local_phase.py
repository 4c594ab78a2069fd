"""Parallel local boundaries (`simrl_fast.step.local_phase`, `SIMRL_FAST_LOCAL_ROUNDS`) against SimPy.

With rounds > 0 a scan step first processes, for every instance at once, its next boundary that
is local (one finish or none, no pause, at most one admission, no group completed) and strictly
before the next global event, up to ``rounds`` times, then takes its one action as before. The
results must be those of SimPy, per step and per call, and identical (bit for bit) to the
sequential engine's (rounds = 0).
"""

import numpy as np
import pytest

pytest.importorskip("jax")

from diffcases import compare, random_case, run_fast  # noqa: E402
from test_differential import GROUPS, STEPS, N, edge_cases  # noqa: E402


def _run(cases, rounds: int):
    import jax

    from simrl_fast import state

    old = state.LOCAL_ROUNDS
    state.LOCAL_ROUNDS = rounds
    jax.clear_caches()  # the rounds are read when the step is traced
    try:
        return run_fast(cases)
    finally:
        state.LOCAL_ROUNDS = old
        jax.clear_caches()


def _cases(seed: int, count: int, edges: bool):
    rng = np.random.default_rng(seed)
    # unchunked prefill: a batch with a token budget takes no local rounds (docs/fastpath.md, "Chunked prefill")
    cases = [random_case(rng, GROUPS, N, STEPS, chunked=False) for _ in range(count)]
    if edges:
        cases += edge_cases(rng)
    for c in cases:
        c.run_simpy()
    return cases


def test_local_rounds_match_simpy():
    cases = _cases(seed=77, count=6, edges=True)
    res = _run(cases, 2)
    for m, c in enumerate(cases):
        compare(c, res, m)
    # the rounds did take boundaries: the sequential engine finishes at most one call per scan
    # step, so a run with fewer steps than finished calls finished some of them in parallel
    finished = np.sum(np.isfinite(res.call_finish), axis=1)
    assert np.any(res.actions < finished), (res.actions, finished)


def test_local_rounds_reject_bad_setting(monkeypatch):
    from simrl_fast import state

    monkeypatch.setenv("SIMRL_FAST_LOCAL_ROUNDS", "two")
    with pytest.raises(ValueError, match="SIMRL_FAST_LOCAL_ROUNDS='two'"):
        state._local_rounds()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [5, 6])
def test_local_rounds_identical_to_sequential(seed):
    cases = _cases(seed=seed, count=120, edges=seed == 5)
    par = _run(cases, 2)
    seq = _run(cases, 0)
    for m, c in enumerate(cases):
        compare(c, par, m)
    for f in ("call_finish", "call_inst", "group_finish", "gids", "stale", "batch_ready", "train_end", "publish_end"):
        a, b = np.asarray(getattr(par, f)), np.asarray(getattr(seq, f))
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f
    assert par.actions.mean() < 0.8 * seq.actions.mean()
