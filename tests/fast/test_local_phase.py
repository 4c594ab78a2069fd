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


def _row_sets(rng, K, S):
    """Random slot rows as the kernel keeps them: running requests in slots 0 .. running-1, distinct
    (finish iteration, rid) keys, KEY_EMPTY after them; finish iterations drawn from a few values so ties
    on the iteration (broken by rid) are common."""
    from simrl_fast.state import KEY_EMPTY

    running = rng.integers(0, S + 1, K)
    running[0], running[1] = 0, S  # an empty row and a full one
    key = np.full((K, S), KEY_EMPTY, np.int64)
    for k in range(K):
        fin = rng.integers(3, 9, running[k])
        rid = rng.choice(10_000, running[k], replace=False)
        key[k, : running[k]] = (fin.astype(np.int64) << 32) | rid
    return key, running


def test_smallest_keys_and_take_head_match_a_sort():
    """`step._smallest_keys` (the rounds' one look at the slot rows per step) gives each row's n smallest keys
    in order and the slots of the first n - 1; `step._take_head` (a round's finish and admission applied to
    those lists) gives the lists of the row the round leaves, i.e. the head's slot filled by the last
    occupied one, the admitted key written at slot running - finished -- compared with a sort of that row."""
    import jax.numpy as jnp

    import simrl_fast.engine  # noqa: F401  (64-bit arrays on)
    from simrl_fast.state import KEY_EMPTY
    from simrl_fast.step import _smallest_keys, _take_head

    rng = np.random.default_rng(3)
    K, S, n = 40, 6, 3
    for _ in range(20):
        key, running = _row_sets(rng, K, S)
        ks, sl = _smallest_keys(jnp.asarray(key), n)
        ks, sl = np.asarray(ks).T, np.asarray(sl).T  # [K, n]
        for k in range(K):
            assert list(ks[k]) == sorted(key[k])[:n]
            for j in range(n):
                assert sl[k, j] == (S if ks[k, j] == KEY_EMPTY else list(key[k]).index(ks[k, j]))
        # one round: finish the head (where the row has one and the draw says so), admit a new key (where drawn
        # and a slot is free after the finish), as local_phase moves the slots
        fin_go = (running > 0) & (rng.random(K) < 0.7)
        last = np.maximum(running - 1, 0)
        run_f = running - fin_go
        adm = (run_f < S) & (rng.random(K) < 0.6)
        a = np.where(adm, (rng.integers(3, 12, K).astype(np.int64) << 32) | rng.integers(10_000, 20_000, K), KEY_EMPTY)
        new = key.copy()
        for k in range(K):
            if fin_go[k]:
                new[k, sl[k, 0]] = new[k, last[k]]
                new[k, last[k]] = KEY_EMPTY
            if adm[k]:
                new[k, run_f[k]] = a[k]
        nk, ns = _take_head([jnp.asarray(ks[:, j]) for j in range(n)], [jnp.asarray(sl[:, j]) for j in range(n)],
                            jnp.asarray(fin_go), jnp.asarray(last, jnp.int32), jnp.asarray(sl[:, 0]),
                            jnp.asarray(a), jnp.asarray(run_f, jnp.int32))
        nk, ns = np.asarray(nk).T, np.asarray(ns).T
        for k in range(K):
            assert list(nk[k]) == sorted(new[k])[: n - 1], (k, key[k], new[k], nk[k])
            for j in range(n - 1):
                if nk[k, j] != KEY_EMPTY:
                    assert new[k, ns[k, j]] == nk[k, j], (k, j, new[k], nk[k], ns[k])
