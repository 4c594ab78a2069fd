"""Closed-form advance of one instance between observable iteration boundaries.

From an anchor boundary (time ``clock``, ``it`` iterations done) the anchor iteration ends at
``t1 = clock + a + b*nd + c*kd + p*pa`` (its prefilling requests do not decode yet), and the
j-th boundary after the anchor (j >= 1) is

    T(j) = t1 + (j-1)*alpha + beta*(j-1)*(j-2)/2,   alpha = a + b*B1 + c*K1,  beta = c*B1,

with B1 = nd + na decoding sequences and K1 = kd + nd + pa + na their KV after the anchor
iteration (each emits one token per iteration). T(0) = clock. Functions broadcast over any
leading shape (one instance or all K).

The SimPy instance computes its iteration ends from the same anchor with the same expression
(`simrl.engine.instance.boundary_time`, which `boundary_time` here calls) and schedules them at
those absolute times, so both engines hold identical floats: times are compared exactly
(docs/model.md, "Tie-break at equal times").
"""

from __future__ import annotations

import jax.numpy as jnp

from simrl.engine.instance import boundary_time as _run_boundary
from simrl_fast.state import BIG, materialize


def key_after(t, prev, start, seq, t2, prev2, start2, seq2):
    """Whether heap key (t, prev, start, seq) comes after (t2, prev2, start2, seq2) (exact comparisons)."""
    return (t > t2) | ((t == t2) & ((prev > prev2) | ((prev == prev2) & (
        (start > start2) | ((start == start2) & (seq > seq2))))))


def boundary_time(clock, t1, alpha, beta, j):
    """Time of relative boundary ``j`` (int array; 0 is the anchor itself)."""
    t = _run_boundary(t1, alpha, beta, (j - 1).astype(jnp.float64))
    return jnp.where(j <= 0, clock, t)


def first_after(clock, t1, alpha, beta, start, sseq, t, prev, start2, seq):
    """Smallest relative boundary j >= 1 processed after an event with heap key (t, prev, start2, seq).

    A boundary's key is (T(j), T(j-1), start, sseq): its time, when its timeout was scheduled,
    and when (and in which order) the instance's run of iterations began (docs/fastpath.md,
    "Tie rules"). Solved with the stable root of the quadratic, then fixed up against
    `boundary_time` itself.
    """
    y = t - t1
    h = alpha - 0.5 * beta
    disc = jnp.sqrt(jnp.maximum(h * h + 2.0 * beta * y, 0.0))
    kstar = jnp.where(y > 0, 2.0 * y / jnp.maximum(h + disc, 1e-300), 0.0)
    k0 = jnp.clip(jnp.floor(kstar), 0, BIG // 4).astype(jnp.int32)
    off = jnp.arange(-2, 4, dtype=jnp.int32)
    j = jnp.maximum(k0[..., None] + off, 0) + 1
    ex = lambda v: jnp.asarray(v)[..., None]  # noqa: E731
    tj = boundary_time(ex(clock), ex(t1), ex(alpha), ex(beta), j)
    tp = boundary_time(ex(clock), ex(t1), ex(alpha), ex(beta), j - 1)
    after = key_after(tj, tp, ex(start), ex(sseq), ex(t), ex(prev), ex(start2), ex(seq))
    best = jnp.min(jnp.where(after, j, BIG), axis=-1)
    return jnp.where(best >= BIG, j[..., -1] + 1, best)


def event_of(clock, it, t1, alpha, beta, fin_min, adm_it, pause_it):
    """(ev_it, ev_t, ev_prev) of a busy instance: its next observable boundary."""
    ev_it = jnp.minimum(jnp.minimum(fin_min, adm_it), pause_it)
    j = ev_it - it
    has = ev_it < BIG
    ev_t = jnp.where(has, boundary_time(clock, t1, alpha, beta, j), jnp.inf)
    ev_prev = jnp.where(has, boundary_time(clock, t1, alpha, beta, j - 1), jnp.inf)
    return ev_it, ev_t, ev_prev


#: boundaries before the scheduling one that `walk_back` gives (depths 2 .. WALK + 1)
WALK = 64


def walk_back(clock, it, t1, alpha, beta, ev_it, start=0, width=WALK):
    """[..., width]: a busy instance's boundaries at depths 2 + start .. 1 + start + width before its
    pending one (depth 0 is the pending boundary ``ev_t``, depth 1 ``ev_prev``; all WALK of them by
    default), exact from its closed form, down to its anchor (``clock``); NaN beyond the anchor
    (unknown here: `forks_of` takes over). ``start`` may be traced: `step._lexmin` evaluates the
    depths block by block, only while a tie is still open.

    SimPy orders two timeouts due at the same instant and scheduled at the same instant by the
    order in which their schedulers (the boundaries one deeper) were processed: by time, and on
    a tie again one deeper. Two instances whose runs began at different anchors compute their
    boundaries from different closed forms, so near-lockstep runs may coincide at some
    boundaries and not at others; `step._lexmin` walks these depths first."""
    j = (ev_it - it)[..., None]
    d = start + jnp.arange(2, width + 2, dtype=j.dtype)
    jj = j - d
    ex = lambda v: jnp.asarray(v)[..., None]  # noqa: E731
    t = boundary_time(ex(clock), ex(t1), ex(alpha), ex(beta), jj)
    return jnp.where(jj >= 0, t, jnp.nan)


#: fork records per boundary in `forks_of` (inside the run, at the anchor, inherited)
N_FORKS = 3


def forks_of(clock, it, t1, alpha, beta, ev_it, ev_t, ev_prev, fk_t, fk_back, g_prev):
    """Fork records (fork, back, gap) [..., N_FORKS] of a busy instance's pending boundary, latest
    first (absent: fork = -inf): the boundaries up to the pending one whose gap (time since the
    boundary before) differs from the gap of the boundary after them, with the boundary before
    each (when its timeout was scheduled) and the gap of the boundaries after it.

    SimPy orders two iteration timeouts due at the same instant and scheduled at the same instant
    by the order in which their instances' previous boundaries were processed, recursively: two
    instances in lockstep keep the order they had at the last boundary where their gaps differed,
    and there the one whose timeout was scheduled earlier goes first (`step._lexmin`). Inside one
    anchor's run the gaps are t1 - clock, alpha, alpha, ...; the anchor's own gap is ``g_prev``
    (0 for a new run: its first timeout was scheduled when it was woken, after every timeout due
    then, and nothing before it counts), and before it the instance inherits (fk_t, fk_back), the
    anchor's own latest record, taken when the anchor was processed. With beta != 0 every gap
    differs from the one before: the pending boundary itself is the only record.
    """
    j = ev_it - it
    dt0 = t1 - clock
    gap = jnp.where(j >= 2, alpha, dt0)  # the pending boundary's gap (beta == 0)
    quad = (beta != 0.0) & (j >= 2)
    r1 = ~quad & (j >= 2) & (alpha != dt0)
    r2 = ~quad & (g_prev != dt0)
    r3 = ~quad & (g_prev > 0.0)
    ninf = jnp.full_like(clock, -jnp.inf)
    f = [jnp.where(quad, ev_t, jnp.where(r1, t1, ninf)), jnp.where(r2, clock, ninf), jnp.where(r3, fk_t, ninf)]
    b = [jnp.where(quad, ev_prev, clock), clock - g_prev, fk_back]
    g = [jnp.where(quad, ev_t - ev_prev, gap), dt0, g_prev]
    # latest first, absent ones last (present forks strictly decrease: t1 > clock > fk_t): the order
    # of a stable argsort of -f, as three compare-exchanges (a stable bubble sort) of elementwise
    # selects -- an XLA sort of [..., 3] rows cost more than the rest of the step's tie logic
    return latest_first(f, b, g)


def latest_first(f, b, g):
    """Records (lists of N_FORKS arrays: fork, back, gap) in the order of ``argsort(-fork, stable)``,
    stacked on a last axis: three compare-exchanges (a stable bubble sort)."""
    f, b, g = list(f), list(b), list(g)
    for x, y in ((0, 1), (1, 2), (0, 1)):
        sw = materialize(_after(f[x], f[y]))  # (once: else every output element recomputes the network)
        for a in (f, b, g):
            a[x], a[y] = jnp.where(sw, a[y], a[x]), jnp.where(sw, a[x], a[y])
    return jnp.stack(f, axis=-1), jnp.stack(b, axis=-1), jnp.stack(g, axis=-1)


def _after(fx, fy):
    """Whether a stable ascending sort of -f puts fork ``fy`` before ``fx``: jax's sort order on floats
    (NaN after everything, -0.0 equal to 0.0), on the negated keys."""
    return (jnp.isnan(fx) & ~jnp.isnan(fy)) | (fy > fx)
