"""`closed_form.forks_of` and `step._lexmin`: SimPy's order of simultaneous iteration boundaries
that were also scheduled at the same instant (instances in lockstep)."""

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import simrl_fast.engine  # noqa: E402, F401  (turns on float64, as every fast-path run does)
from simrl_fast.closed_form import N_FORKS, forks_of  # noqa: E402
from simrl_fast.step import _lexmin  # noqa: E402

INF = float("inf")


def _forks(clock, t1, alpha, j, fk=(0.5, 0.125), g_prev=0.25, beta=0.0):
    """Present records (fork, back, gap) of boundary j >= 1 (at t1 + (j - 1) * alpha) of the run
    anchored at ``clock``."""
    ev_t = t1 + (j - 1) * alpha
    ev_prev = clock if j == 1 else t1 + (j - 2) * alpha
    d = jnp.float64
    f, b, g = forks_of(d(clock), jnp.int32(0), d(t1), d(alpha), d(beta), jnp.int32(j), d(ev_t), d(ev_prev),
                       d(fk[0]), d(fk[1]), d(g_prev))
    return [(float(x), float(y), float(z)) for x, y, z in zip(f, b, g, strict=True) if x > -INF]


def test_forks_of_a_run_after_a_longer_prefill_iteration():
    # anchor 1.0 (itself after a 0.25 gap), prefill iteration 0.5 (t1 1.5), then gaps of 0.25:
    # boundary j=3 (2.0). Going back: 1.5 (gap 0.5 vs 0.25 after it; back 1.0), the anchor 1.0
    # (gap 0.25 vs 0.5 after it; back 0.75), then the inherited (0.5, 0.125) with gap 0.25 above it
    assert _forks(1.0, 1.5, 0.25, 3) == [(1.5, 1.0, 0.25), (1.0, 0.75, 0.5), (0.5, 0.125, 0.25)]


def test_forks_of_a_run_with_the_same_gap_inherit():
    # every gap 0.25 (anchor's own, anchor iteration, after): only the inherited record
    assert _forks(1.0, 1.25, 0.25, 3) == [(0.5, 0.125, 0.25)]
    # the anchor ended a 0.5 gap: the anchor is the latest fork, back 0.5
    assert _forks(1.0, 1.25, 0.25, 3, g_prev=0.5) == [(1.0, 0.5, 0.25), (0.5, 0.125, 0.5)]
    # a new run (gap 0: scheduled when woken): only the wake instant, nothing inherited
    assert _forks(1.0, 1.25, 0.25, 3, g_prev=0.0) == [(1.0, 1.0, 0.25)]
    assert N_FORKS == 3


def _lex(forks):
    f = lambda v: jnp.asarray(v, jnp.float64)  # noqa: E731
    t, prev = f([2.0, 2.0]), f([1.75, 1.75])
    start, seq = f([0.0, 0.5]), jnp.asarray([0, 1], jnp.int32)
    if forks is None:
        return int(_lexmin(t, prev, start, seq)[0])
    pad = lambda rows: [r + [(-INF, 0.0, 0.0)] * (N_FORKS - len(r)) for r in rows]  # noqa: E731
    rows = pad(forks)
    return int(_lexmin(t, prev, start, seq, tuple(f([[r[k] for r in row] for row in rows]) for k in range(3)))[0])


def test_lexmin_orders_lockstep_instances_by_their_last_fork():
    # two boundaries at 2.0, both scheduled at 1.75 (gap 0.25). Instance 0 last diverged at 1.0 (back
    # 0.75); instance 1 at 1.5 (back 1.0: a 0.5 prefill iteration). Going back they share every
    # boundary down to L = 1.5; before it instance 1 was at 1.0, instance 0 at 1.5 - 0.25 = 1.25:
    # instance 1's timeout was scheduled first, although its run started later (start key).
    assert _lex([[(1.0, 0.75, 0.25)], [(1.5, 1.0, 0.25)]]) == 1
    assert _lex(None) == 0  # the (start, seq) keys alone
    # both diverged at 1.5 from 1.0 (the same prefill on both): the next records decide. Instance 1
    # ran on 0.5 gaps since 0.5, so its boundary at 1.0 was scheduled at 0.5; instance 0 diverged at
    # 1.0 itself, from 0.75 (a 0.25 gap): instance 1 first
    assert _lex([[(1.5, 1.0, 0.25), (1.0, 0.75, 0.5)], [(1.5, 1.0, 0.25), (0.5, 0.25, 0.5)]]) == 1
    # instance 0's boundary at 1.0 was scheduled at 0.25 (a 0.75 gap), before 0.5: instance 0 first
    assert _lex([[(1.5, 1.0, 0.25), (1.0, 0.25, 0.5)], [(1.5, 1.0, 0.25), (0.5, 0.25, 0.5)]]) == 0
    # no record left on a tie: (start, seq)
    assert _lex([[(1.5, 1.0, 0.25)], [(1.5, 1.0, 0.25)]]) == 0


def _lex_walk(rows):
    from simrl_fast.closed_form import WALK

    f = lambda v: jnp.asarray(v, jnp.float64)  # noqa: E731
    t, prev = f([2.0, 2.0]), f([1.75, 1.75])
    start, seq = f([0.0, 0.5]), jnp.asarray([0, 1], jnp.int32)
    walk = f([r + [float("nan")] * (WALK - len(r)) for r in rows])
    return int(_lexmin(t, prev, start, seq, None, walk)[0])


def test_lexmin_walks_back_to_the_first_boundary_where_the_tied_ones_differ():
    # Tied at 2.0, both scheduled at 1.75. Two boundaries back both were at 1.5; three back instance 0
    # was at 1.25 and instance 1 at 1.2499999999999998 (its run's closed form rounded differently):
    # instance 1 was processed first there, so first at 1.5, 1.75 and 2.0 -- not the (start, seq) pick.
    assert _lex_walk([[1.5, 1.25], [1.5, 1.2499999999999998]]) == 1
    assert _lex_walk([[1.5, 1.2499999999999998], [1.5, 1.25]]) == 0
    # equal as far as both are known, then one reaches its anchor (NaN): (start, seq) decides
    assert _lex_walk([[1.5, 1.25], [1.5]]) == 0
    assert _lex_walk([[1.5, 1.0, 0.5], [1.5]]) == 0


def _walk_reference(c2, walk):
    """The walk as one pass over all WALK depths, three rounds (the formulation `step._walk_ties`
    replaced, which evaluates the depths block by block only while a tie is open)."""
    import numpy as np

    c2 = np.asarray(c2).copy()
    unknown = np.isnan(walk)
    for _ in range(3):
        c = c2[:, None]
        lo = np.min(np.where(c & ~unknown, walk, np.inf), axis=0)
        hi = np.max(np.where(c & ~unknown, walk, -np.inf), axis=0)
        gap = np.any(c & unknown, axis=0)
        stop = gap | (lo != hi)
        d = int(np.argmax(stop))
        if stop[d] and not gap[d] and c2.sum() > 1:
            c2 = c2 & (walk[:, d] == lo[d])
    return c2


def test_walk_block_by_block_is_the_one_pass_walk():
    # random tied sets over walks that agree down to random depths (across the block edges at
    # depths 1, 10, 19, ...), then differ by one ulp or stop (NaN): the block-by-block walk (array
    # or function form) keeps the same tied set as one pass over all depths
    import numpy as np
    from jax.lax import dynamic_slice_in_dim

    from simrl_fast.closed_form import WALK
    from simrl_fast.step import _walk_ties

    # jitted once per tied-set size (2..5): eager, every call dispatched each of the walk's ops one by one
    # (about eight minutes of a loaded CI worker for the 600 calls)
    arr_form = jax.jit(_walk_ties)
    fn_form = jax.jit(lambda c2, arr: _walk_ties(c2, lambda d0, w: dynamic_slice_in_dim(arr, d0, w, 1)))
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(2, 6))
        base = np.cumsum(rng.uniform(0.1, 1.0, WALK))[::-1].copy()
        walk = np.tile(base, (n, 1))
        for r in range(n):
            for _ in range(int(rng.integers(0, 4))):
                d = int(rng.choice([0, 1, 8, 9, 10, 18, 19, 40, 63, int(rng.integers(0, WALK))]))
                if rng.random() < 0.3:
                    walk[r, d:] = np.nan
                else:
                    walk[r, d] = np.nextafter(walk[r, d], np.inf if rng.random() < 0.5 else -np.inf)
        c2 = rng.random(n) < 0.8
        want = _walk_reference(c2, walk)
        got = np.asarray(arr_form(jnp.asarray(c2), jnp.asarray(walk)))
        got_fn = np.asarray(fn_form(jnp.asarray(c2), jnp.asarray(walk)))
        assert got.tolist() == want.tolist() == got_fn.tolist(), (c2, walk)


def test_forks_of_orders_records_as_a_stable_argsort():
    # forks_of's compare-exchanges give argsort(-f, stable)'s order, also on equal, absent (-inf),
    # signed-zero and NaN records (jax's sort order: NaN last, -0.0 == 0.0)
    import numpy as np

    from simrl_fast import closed_form as cf

    vals = np.array([-np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0, 2.5, np.nan])
    rng = np.random.default_rng(3)
    f = rng.choice(vals, (400, 3))
    b, g = rng.uniform(0, 1, (400, 3)), rng.uniform(0, 1, (400, 3))
    want = np.asarray(jnp.argsort(-jnp.asarray(f), axis=-1, stable=True))
    got_f, got_b, got_g = cf.latest_first(*([jnp.asarray(a[:, k]) for k in range(3)] for a in (f, b, g)))
    assert np.array_equal(np.asarray(got_b), np.take_along_axis(b, want, axis=1))
    assert np.array_equal(np.asarray(got_g), np.take_along_axis(g, want, axis=1))
    assert np.array_equal(np.asarray(got_f), np.take_along_axis(f, want, axis=1), equal_nan=True)
