"""`closed_form.fork_of` and `step._lexmin`: SimPy's order of simultaneous iteration boundaries
that were also scheduled at the same instant (instances in lockstep)."""

import pytest

jnp = pytest.importorskip("jax.numpy")

import simrl_fast.engine  # noqa: E402, F401  (turns on float64, as every fast-path run does)
from simrl_fast.closed_form import fork_of  # noqa: E402
from simrl_fast.step import _lexmin  # noqa: E402


def _fork(clock, t1, alpha, j, fk=(-1.0, -2.0), g_prev=0.25, beta=0.0):
    # ev_t / ev_prev of boundary j (j >= 1): t1 + (j - 1) * alpha and the one before
    ev_t = t1 + (j - 1) * alpha
    ev_prev = clock if j == 1 else t1 + (j - 2) * alpha
    f, b = fork_of(jnp.float64(clock), jnp.int32(0), jnp.float64(t1), jnp.float64(alpha), jnp.float64(beta),
                   jnp.int32(j), jnp.float64(ev_t), jnp.float64(ev_prev), jnp.float64(fk[0]), jnp.float64(fk[1]),
                   jnp.float64(g_prev))
    return float(f), float(b)


def test_fork_is_the_end_of_a_longer_anchor_iteration():
    # clock 1.0, prefill iteration 0.5 long (t1 1.5), then gaps of 0.25: boundary j=3 at 2.0 last
    # diverged at 1.5, scheduled at 1.0
    assert _fork(1.0, 1.5, 0.25, 3) == (1.5, 1.0)


def test_fork_is_the_anchor_when_only_its_own_gap_differs():
    # anchor iteration as long as the rest (0.25) but the anchor itself ended a 0.5 gap: fork 1.0,
    # back 1.0 - 0.5
    assert _fork(1.0, 1.25, 0.25, 3, g_prev=0.5) == (1.0, 0.5)
    # a new run (gap 0: scheduled when woken): the wake instant itself, after every earlier timeout
    assert _fork(1.0, 1.25, 0.25, 3, g_prev=0.0) == (1.0, 1.0)


def test_fork_is_inherited_through_a_run_with_the_same_gap():
    # the anchor ended a 0.25 gap and every gap since is 0.25: what the anchor inherited
    assert _fork(1.0, 1.25, 0.25, 3, fk=(0.5, 0.125)) == (0.5, 0.125)
    # pending boundary is the anchor iteration's end (j = 1): its gap 0.25 equals the anchor's
    assert _fork(1.0, 1.25, 0.25, 1, fk=(0.5, 0.125)) == (0.5, 0.125)


def test_lexmin_orders_lockstep_instances_by_their_last_fork():
    # two boundaries at 2.0, both scheduled at 1.75 (gap 0.25). Instance 0's last fork: 1.0 (back
    # 0.75); instance 1's: 1.5 (back 1.0, a 0.5 prefill iteration). Going back from 1.75 they share
    # every boundary down to L = 1.5; before it instance 1 was at 1.0, instance 0 at 1.5 - 0.25 =
    # 1.25: instance 1's timeout was scheduled first, although it started its run later (start key).
    f = lambda v: jnp.asarray(v, jnp.float64)  # noqa: E731
    t, prev = f([2.0, 2.0]), f([1.75, 1.75])
    start, seq = f([0.0, 0.5]), jnp.asarray([0, 1], jnp.int32)
    idx, _ = _lexmin(t, prev, start, seq, f([1.0, 1.5]), f([0.75, 1.0]))
    assert int(idx) == 1
    # without the fork keys the start key decides (instance 0)
    assert int(_lexmin(t, prev, start, seq)[0]) == 0
    # equal backs at the fork fall through to (start, seq)
    idx, _ = _lexmin(t, prev, start, seq, f([1.5, 1.5]), f([1.25, 1.25]))
    assert int(idx) == 0
