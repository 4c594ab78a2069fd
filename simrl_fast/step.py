"""The event-loop step: pick one action (SimPy's event order), apply it, return the new state.

Order of actions (docs/fastpath.md, "Tie rules"): an instance in the middle of its boundary
finishes it first; then every timeout due *now* (instance boundaries, resumes, the trainer's
timer) by heap key (time, scheduling time, insertion order); then the chain those events
triggered in this instant -- the trainer's reaction, the dispatcher (one group per step), the
router (one call per step); then instances woken by the router; only then does time advance
to the earliest pending timeout. Every branch is computed and masked, so the step is one
unified update under `vmap`; `make_batch_step`, the step the scan runs, computes the trainer's
actions (`rare_action`, about one step in a hundred) only for the configurations of the batch that
take them (docs/fastpath.md, "Speed, session 7").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from simrl.policy.params import ADMIT_WINDOW_EPS_S
from simrl_fast import router as _router
from simrl_fast import state as _state
from simrl_fast.closed_form import N_FORKS, WALK, event_of, first_after, forks_of, walk_back
from simrl_fast.costs import rollout_times
from simrl_fast.crossing import fail_crossed, note_admitted, note_admitted_local, redispatch, with_map
from simrl_fast.instance import call_lengths, fits, fits_routed, instance_action
from simrl_fast.perinst import pull_action, push, routable, takes
from simrl_fast.prefix import call_shared
from simrl_fast.state import (
    BIG,
    BUSY,
    G_RUNNING,
    IDLE,
    KEY_EMPTY,
    RESUME,
    START,
    T_DONE,
    T_DRAIN,
    T_OFFLOAD,
    T_PUBLISH,
    T_TRAIN,
    T_WAIT,
    empty_out,
    materialize,
    pack,
    tie,
    unpack_fin,
    unpack_rid,
    zero_pending,
)
from simrl_fast.trainer import batch_ready, disp_first, mark_evicted, timer_action, trainer_react

A_NONE, A_INST, A_TIMER, A_REACT, A_DISPATCH, A_ROUTE = 0, 1, 2, 3, 4, 5
# the dispatcher's recheck timeout (admit_window_episodes: `RecordPolicy.recheck_in`) fires: it wakes the dispatcher
A_WINDOW = 6


def _lexmin(t, prev, start, seq, forks=None, walk=None):
    """Index and time of the smallest (t, prev, start, seq) key (SimPy's heap order; times compared
    exactly: both engines compute them with the same expressions).

    With ``forks`` ((fork, back, gap) [n, N_FORKS], `forks_of`; an event outside a run of
    iterations has the one record (t, prev, t - prev)), timeouts tied on (t, prev) are ordered as
    SimPy orders them, by where the instances' boundaries last diverged: going back from prev, the
    tied instances share every boundary down to the latest fork L among their records; the
    boundary before L is ``back`` for the instances whose record is at L and L - gap for the others
    (their gap above their next record), and the earliest was scheduled first; ties there go on to
    the next records. When a tied instance has no record left the rest falls through to
    (start, seq).

    Before the records, ``walk`` ([n, WALK], `closed_form.walk_back`: the boundaries at depths 2,
    3, ... before each, NaN where unknown; or a function (start, width) -> its columns start ..
    start + width - 1, evaluated only as deep as a tie stays open: `_walk_ties`) orders timeouts tied on (t, prev) exactly: the earliest
    boundary at the first depth where the tied ones differ was processed first, so its timeouts
    were scheduled first. The walk stops at a depth where a tied one has no known boundary."""
    m1 = jnp.min(t)
    c1 = t == m1
    m2 = jnp.min(jnp.where(c1, prev, jnp.inf))
    c2 = c1 & (prev == m2)
    if walk is not None:
        c2 = _walk_ties(c2, walk)
    if forks is not None:
        ff, fb, fg = forks
        n, R = ff.shape
        pos = jnp.zeros(n, jnp.int32)
        live = jnp.asarray(True)
        for _ in range(R):
            f = jnp.where(pos < R, _pick(ff, pos), -jnp.inf)
            live = live & ~jnp.any(c2 & (f == -jnp.inf)) & (jnp.sum(c2) > 1)
            L = jnp.max(jnp.where(c2, f, -jnp.inf))
            hit = f == L
            bk = jnp.where(hit, _pick(fb, pos), L - _pick(fg, pos))
            mb = jnp.min(jnp.where(c2, bk, jnp.inf))
            keep = c2 & (bk == mb)
            c2 = jnp.where(live & jnp.any(keep), keep, c2)
            pos = pos + (live & hit).astype(jnp.int32)
    m3 = jnp.min(jnp.where(c2, start, jnp.inf))
    c3 = c2 & (start == m3)
    m4 = jnp.min(jnp.where(c3, seq, BIG))
    return jnp.argmax(c3 & (seq == m4)), m1


def _pick(a, at):
    """``a[rows, at]`` of a [n, R] array (``at`` in 0..R-1 per row) as a chain of selects: elementwise,
    so it fuses with its neighbours (a gather with a per-configuration index is a kernel of its own)."""
    out = a[:, -1]
    for r in range(a.shape[1] - 2, -1, -1):
        out = jnp.where(at == r, a[:, r], out)
    return out


#: depths `_walk_ties` examines per turn of its loop after depth 0 (1 + 7 x 9 = WALK)
WALK_BLOCK = 9


def _walk_ties(c2, walk):
    """`_lexmin`'s walk: narrow the tied set ``c2`` at the first depths where the tied ones differ
    (up to three times), stopping at a depth where a tied one has no known boundary.

    Done depth by depth it is: at depth d (0 .. WALK-1) with the tied set c2 -- a tied one unknown
    there: stop; the tied ones differ there: keep the earliest (a decision; stop after three);
    otherwise go one deeper. ``walk(start, width)`` gives the [n, width] boundaries at depths
    start .. start + width - 1 (NaN: unknown). Depth 0 is taken at once (nearly every tie stops
    there: a tied one is the trainer's timer, woken, or one boundary past its anchor); the deeper
    depths, WALK_BLOCK at a time, in a loop that runs only while some tie is open, so under vmap a
    batch pays for the deep walk only in the steps where one of its configurations needs it.
    (A ``walk`` array [n, WALK] is taken as is.)"""
    if not callable(walk):
        arr = walk
        walk = lambda d0, width: jax.lax.dynamic_slice_in_dim(arr, d0, width, axis=1)  # noqa: E731

    def turn(c2, stopped, used, d0, width):
        wv = walk(d0, width)
        unknown = jnp.isnan(wv)
        for _ in range(min(3, width)):  # each turn decides at the first depth (of those left) where they differ
            c = c2[:, None]
            lo = jnp.min(jnp.where(c & ~unknown, wv, jnp.inf), axis=0)
            hi = jnp.max(jnp.where(c & ~unknown, wv, -jnp.inf), axis=0)
            gap = jnp.any(c & unknown, axis=0)
            stop = gap | (lo != hi)
            d = jnp.argmax(stop)
            many = jnp.sum(c2) > 1
            hit = ~stopped & stop[d]
            decide = hit & ~gap[d] & many
            c2 = jnp.where(decide, c2 & (wv[:, d] == lo[d]), c2)
            used = used + decide.astype(jnp.int32)
            stopped = stopped | (hit & ~decide) | (used >= 3)
        return c2, stopped, used

    c2, stopped, used = turn(c2, jnp.asarray(False), jnp.int32(0), 0, 1)

    def body(carry):
        c2, stopped, used, d0 = carry
        c2, stopped, used = turn(c2, stopped, used, d0, WALK_BLOCK)
        return c2, stopped, used, d0 + WALK_BLOCK

    def more(carry):
        c2, stopped, _, d0 = carry
        return ~stopped & (jnp.sum(c2) > 1) & (d0 < WALK)

    return jax.lax.while_loop(more, body, (c2, stopped, used, jnp.int32(1)))[0]


def can_dispatch(st, p):
    """GroupBook.dispatcher's loop condition: the admission rule of PolicyParams (simrl.policy.record.admits).

    Batches taken (``admit_budget_per_batch_groups``) = steps published + the one being trained or
    published; a batch being formed is finished before anything else acts (`select`). Buffered groups
    past ``admit_queue_blocks_groups`` hold a concurrency slot each (max(0, buffered - inf) = 0). The ship
    barrier (``admit_max_ship_lag`` = ``Params.ship_lag`` >= 0): batches taken - version + buffered // batch
    <= the lag (a batch of exactly ``batch`` groups taken leaves the sum as it was, so the trainer's order
    against the dispatcher in an instant does not matter)."""
    since = jnp.where(p.count_since_pub == 1, st.count_off, 0)
    # admit_return_evicted: dispatched - dropped = accepted + running - evicted from the buffer
    back = jnp.where(p.return_evicted == 1, st.evicted_n, 0)
    count = jnp.where(p.count_dispatched == 1, st.dispatched + since, st.accepted + st.n_running - back)
    tr = st.trainer
    taken = tr.step + ((tr.phase != T_WAIT) & (tr.phase != T_DONE)).astype(tr.step.dtype)
    f = lambda v: v.astype(jnp.float64)  # noqa: E731
    budget = p.budget_base + p.budget_per_version * f(st.version) + p.budget_per_batch * f(taken)
    shipped = taken - st.version + st.buf_live // jnp.maximum(p.batch, 1)
    ship_ok = (p.ship_lag < 0) | (shipped <= p.ship_lag)
    return (
        ~st.dispatch_paused & (f(st.n_running) + jnp.maximum(f(st.buf_live) - p.queue_block, 0.0) < p.conc)
        & (f(count) < budget) & (f(st.buf_live) < p.buf_cap) & ship_ok
        & ~((p.block_training == 1) & st.training) & (tr.phase != T_DONE) & ~st.overflow
    )


def episode_permit(st, p, static):
    """The record's ``admit_episode_cap`` (``Params.ep_cap``; always true where it is -1 or not traced): the
    dispatcher is awake (`SimState.wake`: GroupBook.changed was notified since it last ran) and the unfinished
    trajectories of running groups (single-call trajectories: ``group_size`` per running group less their
    finished calls, `GroupState.done`) are fewer than the cap. SimPy's dispatcher reads its condition only when
    it wakes, and a trajectory's finish does not wake it, so a permit freed by a finish waits for the next
    wake-up (a group completion, a batch taken, a publication)."""
    if not static.episode_cap:
        return jnp.asarray(True)
    return (p.ep_cap <= 0) | (st.wake & episode_count_ok(st, p, static))


def episode_count_ok(st, p, static):
    """``admit_episode_cap``'s count alone (unfinished trajectories of running groups < the cap; true where none)."""
    if not static.episode_cap:
        return jnp.asarray(True)
    G = st.groups
    done = jnp.sum(jnp.where(G.status == G_RUNNING, G.done, 0), dtype=jnp.int32)
    unfinished = st.n_running * static.group_size - done
    return (p.ep_cap <= 0) | (unfinished < p.ep_cap)


def window_expired(st, p):
    """The admission window (``admit_window_episodes``) has run its length: now - its start >= its length -
    `ADMIT_WINDOW_EPS_S` (`simrl.policy.record.window_budget`, the same float64 operations)."""
    return (st.now - st.win_start) >= (p.win_s - ADMIT_WINDOW_EPS_S)


def window_open(st, p, static):
    """The record's admission window (``admit_window_episodes`` = ``Params.win_n``; true where it is -1 or not
    traced), read last in SimPy (`simrl.policy.record.admits`) and only when the dispatcher is awake
    (`SimState.wake`): a window that has run its length restarts at this consultation (`dispatch_action`), else
    the episodes dispatched in it must be fewer than ``win_n``."""
    if not static.window:
        return jnp.asarray(True)
    return (p.win_n <= 0) | (st.wake & (window_expired(st, p) | (st.win_adm < p.win_n)))


def sleep_timer(st, p, static):
    """When the dispatcher's recheck timeout fires if it goes to sleep now (`RecordPolicy.recheck_in` then
    SimPy's ``env.timeout``: now + ((start + length) - now), the same float64 operations), inf: it sleeps without
    one. It has one when the admission window alone holds admission: not paused, every other condition admits
    (the episode cap's count read as it is), the window has not run out and its episodes are spent."""
    if not static.window:
        return jnp.asarray(jnp.inf, st.now.dtype)
    others = can_dispatch(st, p) & episode_count_ok(st, p, static)
    hold = (p.win_n > 0) & others & ~window_expired(st, p) & (st.win_adm >= p.win_n)
    return jnp.where(hold, st.now + ((st.win_start + p.win_s) - st.now), jnp.inf)


def window_due(st, p, static):
    """The pending recheck timeout's time: `sleep_timer` while the dispatcher is awake (it has yet to sleep in
    this instant), else the one it set when it last slept (`SimState.win_t`)."""
    if not static.window:
        return jnp.asarray(jnp.inf, st.now.dtype)
    return jnp.where(st.wake, sleep_timer(st, p, static), st.win_t)


def route_held(st, p, static):
    """Calls dispatched after a router pass that woke instances in this instant wait for those instances (SimPy:
    their wake-ups were scheduled before the router's next one): the calls from ``hold_rid`` on are held at
    ``hold_t`` while an instance woken there has not run. Such a pass: the router woken by a finished call or a
    publication (both wake it before notifying GroupBook.changed, so it routes the calls queued before the
    dispatcher acts: `select` routes them first), or, before the first batch, the dispatcher's own first pass
    (`disp_first`)."""
    active = jnp.arange(static.instances) < p.n_inst
    held = (st.now == st.hold_t) & (st.routed >= st.hold_rid) & jnp.any(active & (st.inst.phase == START))
    # a boundary due now after an iteration of zero seconds, which a route or a pause of the calls dispatched before
    # it made an event (`zero_event`): the calls dispatched after it are routed after it (SimPy: their router wake-up
    # is scheduled after its timeout)
    return held | jnp.any(zero_event(st, p, static) & (st.routed >= st.inst.z_rid))


def zero_event(st, p, static):
    """[K] bool: the instances whose pending boundary is due now after an iteration of zero seconds
    (`state.zero_pending`) and is an event (an admission, a pause, a finish or a preemption there). SimPy processes it
    after the events pending at the end of the turn that scheduled it: here after the instant's chain, as a woken
    instance (`select`), the calls dispatched after that turn held until it has run (`route_held`)."""
    ins = st.inst
    active = jnp.arange(static.instances) < p.n_inst
    return active & zero_pending(ins, st.now) & (ins.ev_t == st.now)


def chain_due(st, p, static):
    """(trainer reaction, dispatch, routing) due in this instant, after every timeout due now."""
    tr = st.trainer
    forming = (tr.phase == T_WAIT) & ((tr.taken > 0) | batch_ready(st, p, static))
    react = forming | ((tr.phase == T_DRAIN) & (st.n_running == 0))
    disp = can_dispatch(st, p) & episode_permit(st, p, static) & window_open(st, p, static)
    route = ((st.routed < st.dispatched * static.group_size) & routable(st, p, static) & _router.head_ok(st, p, static)
             & ~route_held(st, p, static))
    return react, disp, route


def _two_smallest(key):
    """(smallest, second smallest (its finish iteration only: rid 0), slot of the smallest) of each
    slot row of packed keys [K, S]
    (distinct but for KEY_EMPTY), as plain int32 reductions (vectorised; a variadic int64
    reduction runs scalar on CPU)."""
    S = key.shape[1]
    fin, rid = unpack_fin(key), unpack_rid(key)
    f1 = jnp.min(fin, axis=1, keepdims=True)
    r1 = jnp.min(jnp.where(fin == f1, rid, BIG), axis=1, keepdims=True)
    at = (fin == f1) & (rid == r1)
    s_f = jnp.min(jnp.where(at, jnp.arange(S, dtype=jnp.int32), S), axis=1)
    f2 = jnp.min(jnp.where(at, BIG, fin), axis=1, keepdims=True)
    m1 = jnp.where(f1[:, 0] >= BIG, KEY_EMPTY, pack(f1[:, 0], r1[:, 0]))
    m2 = jnp.where(f2[:, 0] >= BIG, KEY_EMPTY, pack(f2[:, 0], 0))
    return m1, m2, s_f


#: how the parallel rounds find each instance's next finish (read when traced; `engine` keys its programs on it):
#: "once" (the default): the rounds+1 smallest keys of every slot row and their slots, from rounds+2 passes
#: over the [K, S] rows at the start of the step, carried through the rounds as short sorted lists
#: (`_smallest_keys`, `_take_head`); "each": `_two_smallest` over the rows in every round (4 passes a round;
#: session 7, kept for measurements)
ROUND_ROWS = "once"


def _smallest_keys(key, n):
    """The ``n`` (<= 4) smallest keys of each slot row [K, S] in ascending order (real keys are distinct; a row
    with fewer than ``n`` running requests repeats KEY_EMPTY) and their slots (S for KEY_EMPTY): n min passes
    over the rows and one int64 sum that packs the slots 16 bits apiece (a real key matches one slot; an empty
    one, only after every real one, carries its garbage into the higher fields)."""
    S = key.shape[1]
    assert S < 2**16 and n <= 4
    ks = [jnp.min(key, axis=1)]
    for _ in range(n - 1):
        ks.append(jnp.min(jnp.where(key > ks[-1][:, None], key, KEY_EMPTY), axis=1))
    sidx = jnp.arange(S, dtype=jnp.int64)
    tot = jnp.sum(sum(jnp.where(key == ks[j][:, None], sidx << (16 * j), 0) for j in range(n)), axis=1)
    return ks, [jnp.where(ks[j] == KEY_EMPTY, S, (tot >> (16 * j)) & 0xFFFF).astype(jnp.int32) for j in range(n)]


def _take_head(ks, sl, fin_go, last, s_f, a, s_a):
    """The sorted lists of `_smallest_keys` after a round: the head removed where ``fin_go`` (its slot
    ``s_f`` then holds the key that was at slot ``last``), else the tail dropped (the list stays exact for
    one fewer key); then ``a`` (KEY_EMPTY: nothing) inserted at slot ``s_a`` -- the j-th smallest of a
    sorted list with ``a`` is min(L[j], max(L[j-1], a))."""
    n = len(ks) - 1
    lk = [jnp.where(fin_go, ks[j + 1], ks[j]) for j in range(n)]
    ls = [jnp.where(fin_go, jnp.where(sl[j + 1] == last, s_f, sl[j + 1]), sl[j]) for j in range(n)]
    nk, ns = [], []
    for j in range(n):
        if j == 0:
            cur = lk[0] <= a
            nk.append(jnp.where(cur, lk[0], a))
            ns.append(jnp.where(cur, ls[0], s_a))
        else:
            up = lk[j - 1] > a  # max(L[j-1], a) is L[j-1]
            mx_k, mx_s = jnp.where(up, lk[j - 1], a), jnp.where(up, ls[j - 1], s_a)
            cur = lk[j] <= mx_k
            nk.append(jnp.where(cur, lk[j], mx_k))
            ns.append(jnp.where(cur, ls[j], mx_s))
    return nk, ns


def local_phase(st, p, w, static, rounds):
    """Advance the instances in parallel between global events: ``rounds`` times, every instance's
    next boundary that is *local* and comes before the next global event, all at once.

    A BUSY instance's boundary is local when it finishes at most one request (the lowest key of its
    slot row; no other one finishes there), takes no pause, admits at most one call (the head of its
    waiting queue, when it fits and the next one then does not) and completes no group (counting
    every finish of this round in the same group): it changes nothing but the instance's row, its
    slot row, ``GroupState.done`` and the admitted call's ``GroupState.minv``. Local boundaries of
    different instances touch disjoint state but ``done`` (increments commute) and ``minv`` (minima
    commute), read nothing another writes and make nothing due now, so all those strictly before the
    next global event -- the trainer's timer, a woken or resumed instance, a boundary that is not
    local, any instance's boundary after the one processed in this round (which may be global), or
    now itself when the trainer, dispatcher or router is due -- give the state of processing them one
    by one in SimPy's heap order. Strictly before: a boundary tied in time with another event waits
    for the sequential path and its tie rules (docs/model.md, "Tie-break at equal times").

    This is `instance.instance_action` on that kind of boundary, written over all K rows at once
    (tests/fast/test_local_phase.py holds it to SimPy and to the sequential engine bit for bit); a
    mechanic added to that path there must be added here or make such boundaries non-local.
    Returns (state, whether any boundary was processed)."""
    tr = st.trainer
    K, S, n, G, Gm = static.instances, static.slots, static.group_size, static.groups, static.max_groups
    i32 = jnp.int32
    active = jnp.arange(K) < p.n_inst
    quiet = (st.cur < 0) & (tr.taken == 0) & (tr.phase != T_DONE) & ~st.zstop & ~st.overflow
    react, disp, route = chain_due(st, p, static)
    timer_on = (tr.phase == T_TRAIN) | (tr.phase == T_PUBLISH) | (tr.phase == T_OFFLOAD)
    woken = active & ((st.inst.phase == START) | (st.inst.phase == RESUME))
    if static.perinst:  # a pending pull (simrl_fast.perinst) is a global event
        woken = woken | (active & (st.inst.phase == _state.PULL))
    # (admit_episode_cap: a pending wake-up is due now; the dispatcher reads the count before any later finish)
    woke = (st.wake & (p.ep_cap > 0)) if static.episode_cap else jnp.asarray(False)
    if static.window:  # (admit_window_episodes: likewise a pending wake-up, and the dispatcher's recheck timeout)
        woke = woke | (st.wake & (p.win_n > 0))
        timer_on_t = jnp.minimum(jnp.where(timer_on, tr.timer_t, jnp.inf), window_due(st, p, static))
    else:
        timer_on_t = jnp.where(timer_on, tr.timer_t, jnp.inf)
    fixed_h = jnp.minimum(timer_on_t,
                          jnp.minimum(jnp.where(react | disp | route | woke, st.now, jnp.inf),
                                      jnp.min(jnp.where(woken, st.inst.ev_t, jnp.inf))))
    rows = jnp.arange(K, dtype=i32)
    any_go = jnp.asarray(False)
    par_rid, par_t = st.out.par_rid, st.out.par_t
    once = ROUND_ROWS == "once" and rounds <= 3  # (more rounds: the rows in every round)
    if once:  # the rounds+1 smallest keys of every row, carried through the rounds
        ks, sl = _smallest_keys(st.inst.slot_key, rounds + 1)
    for r in range(rounds):
        ins, Gs = st.inst, st.groups
        # on_demand KV (growth, preemption, slot serials) is not on the rounds' path: those configurations
        # take the sequential step only (docs/fastpath.md, "Instances in parallel between global events")
        cand = quiet & active & (ins.phase == BUSY) & (ins.ev_t < jnp.inf) & (p.od == 0)
        if static.prefix:  # nor is the prefix cache (references, LRU evictions)
            cand = cand & (p.pc == 0)
        now_k = jnp.maximum(ins.ev_t, st.now)
        # entry: rebase the closed form to the boundary
        it = ins.ev_it
        j = (ins.ev_it - ins.it).astype(jnp.int64)
        b1 = (ins.nd + ins.na).astype(jnp.int64)
        k1 = ins.kd + ins.nd + ins.pa + ins.na
        nd = ins.nd + ins.na
        kd = k1 + (j - 1) * b1
        key = ins.slot_key
        if once:
            m1, m2, s_f = ks[0], ks[1], sl[0]
        else:
            m1, m2, s_f = _two_smallest(key)
        has_fin = unpack_fin(m1) == it
        two_fin = has_fin & (unpack_fin(m2) == it)
        r_f = jnp.where(has_fin, unpack_rid(m1), -1)
        pr_f, len_f = call_lengths(w, r_f, n, G)
        pr_f, tok_f = jnp.where(has_fin, pr_f, 0), jnp.where(has_fin, pr_f + len_f, 0)
        run_f = ins.running - has_fin
        kv_f = ins.kv_used - tok_f
        # admission: the queue head if it fits; local only if the next one then does not
        h0 = st.calls.queue[rows, ins.wq_pos]
        h1 = st.calls.queue[rows, ins.wq_pos + 1]
        hp0, hl0 = call_lengths(w, h0, n, G)
        hp1, hl1 = call_lengths(w, h1, n, G)
        adm = fits(p, ins.wq_len, run_f, kv_f, hp0 + hl0)  # reserve KV (on_demand batches take no rounds)
        more = adm & fits(p, ins.wq_len - 1, run_f + 1, kv_f + hp0 + hl0, hp1 + hl1)
        g_f = jnp.maximum(r_f, 0) // n
        same_g = cand[None, :] & has_fin[None, :] & (g_f[None, :] == g_f[:, None])
        cnt = jnp.sum(same_g.astype(i32), axis=1)
        local = (cand & ~two_fin & (ins.pause_it > it) & ~more
                 & (~has_fin | (Gs.done[g_f] + cnt < n)))
        # router.active_cap with calls held in the router queue: a finish may make the head routable
        local = local & ~(has_fin & (p.cap > 0) & (st.routed < st.dispatched * n))
        # close: the next iteration (or idle)
        hp0, tok0 = jnp.where(adm, hp0, 0), jnp.where(adm, hp0 + hl0, 0)
        nd = nd - has_fin
        kd = kd - tok_f
        na = adm.astype(i32)
        running = run_f + na
        adm_key = jnp.where(adm, pack(it + hl0, h0), KEY_EMPTY)
        fin_min = unpack_fin(jnp.minimum(jnp.where(has_fin, m2, m1), adm_key))
        start = running > 0
        dt0, alpha, beta = rollout_times(p, static, nd, kd, hp0, nd + na, kd + nd + hp0 + na)
        t1 = now_k + dt0
        ev_it, ev_t, ev_prev = event_of(now_k, it, t1, alpha, beta, fin_min, BIG, BIG)
        horizon = jnp.minimum(fixed_h, jnp.min(jnp.where(cand & ~local, ins.ev_t, jnp.inf)))
        horizon = jnp.minimum(horizon, jnp.min(jnp.where(cand & local & start, ev_t, jnp.inf)))
        go = local & (ins.ev_t < horizon)  # strictly before: exact float comparison, ties go sequential
        fk, fb, _ = forks_of(ins.clock, ins.it, ins.t1, ins.alpha, ins.beta, ins.ev_it, ins.ev_t, ins.ev_prev,
                             ins.fk_t, ins.fk_back, ins.g_prev)

        def put(old, new, go=go):
            return jnp.where(go, jnp.asarray(new).astype(old.dtype), old)

        # slots: the finished one takes the last occupied one, which is freed unless the admitted
        # call fills it (slot run_f), as in instance_action
        last = jnp.maximum(ins.running - 1, 0)
        key_last = key[rows, last]
        len_last = ins.slot_len[rows, last]
        move = go & has_fin & (s_f != last)
        clear = go & has_fin & ~adm
        cols = jnp.concatenate([jnp.where(move, s_f, S), jnp.where(clear, last, S), jnp.where(go & adm, run_f, S)])
        rr = tie(jnp.concatenate([rows, rows, rows]), K, key_last.astype(i32) & 0, len_last)
        inst = ins._replace(
            phase=put(ins.phase, jnp.where(start, BUSY, IDLE)), clock=put(ins.clock, now_k), it=put(ins.it, it),
            nd=put(ins.nd, nd), kd=put(ins.kd, kd), na=put(ins.na, na), pa=put(ins.pa, hp0),
            t1=put(ins.t1, jnp.where(start, t1, ins.t1)), alpha=put(ins.alpha, jnp.where(start, alpha, ins.alpha)),
            beta=put(ins.beta, jnp.where(start, beta, ins.beta)),
            fk_t=put(ins.fk_t, fk[:, 0]), fk_back=put(ins.fk_back, fb[:, 0]), g_prev=put(ins.g_prev, now_k - ins.ev_prev),
            fin_min=put(ins.fin_min, fin_min), adm_it=put(ins.adm_it, BIG),
            ev_it=put(ins.ev_it, jnp.where(start, ev_it, BIG)), ev_t=put(ins.ev_t, jnp.where(start, ev_t, jnp.inf)),
            ev_prev=put(ins.ev_prev, jnp.where(start, ev_prev, jnp.inf)), ev_seq=put(ins.ev_seq, ins.st_seq),
            running=put(ins.running, running), kv_used=put(ins.kv_used, kv_f + tok0),
            psum=put(ins.psum, ins.psum - pr_f + hp0),
            # the router's scatter into the queue is tied to wq_pos: after this read of the queue
            wq_pos=tie(put(ins.wq_pos, ins.wq_pos + na), 0, h0, h1), wq_len=put(ins.wq_len, ins.wq_len - na),
            slot_key=ins.slot_key.at[rr, cols].set(
                jnp.concatenate([key_last, jnp.full(K, KEY_EMPTY, jnp.int64), adm_key]), mode="drop"),
            slot_len=ins.slot_len.at[rr, cols].set(
                jnp.concatenate([len_last, jnp.zeros(K, i32), hl0.astype(i32)]), mode="drop"),
        )
        g_h = jnp.where(go & adm, jnp.maximum(h0, 0) // n, Gm)
        done = Gs.done.at[tie(jnp.where(go & has_fin, g_f, Gm), Gm, Gs.done[g_f])].add(1, mode="drop")
        minv = Gs.minv.at[g_h].min(st.version, mode="drop")
        st = st._replace(inst=inst, groups=Gs._replace(done=done, minv=minv),
                         now=jnp.maximum(st.now, jnp.max(jnp.where(go, now_k, -jnp.inf))))
        st = note_admitted_local(st, g_h, static)
        # one finish per instance and round: the rounds' finishes go to separate columns
        par_rid = par_rid.at[r * K + rows].set(jnp.where(go & has_fin, r_f, -1))
        par_t = par_t.at[r * K + rows].set(jnp.where(go & has_fin, now_k, jnp.nan))
        any_go = any_go | jnp.any(go)
        if once and r + 1 < rounds:
            ks, sl = _take_head(ks, sl, go & has_fin, last, s_f, jnp.where(go, adm_key, KEY_EMPTY), run_f)
    return st._replace(out=st.out._replace(par_rid=par_rid, par_t=par_t)), any_go


def select(st, p, static):
    """(action, instance index, new now, early) for this step; ``early``: the action is the router's pass
    before the dispatcher's or the trainer's in this instant (a routing while the trainer's reaction or a dispatch
    is due: `chain_due`, computed once per step here; `prepare` and `_dispatch_route` read it)."""
    ins, tr = st.inst, st.trainer
    K = static.instances
    active = jnp.arange(K) < p.n_inst
    zev = zero_event(st, p, static)  # (after the instant's chain, as a woken instance)
    ev_ok = active & ((ins.phase == BUSY) | (ins.phase == RESUME)) & ~zev
    if static.perinst:  # a pull's timeout (simrl_fast.perinst)
        ev_ok = ev_ok | (active & (ins.phase == _state.PULL))
    timer_on = (tr.phase == T_TRAIN) | (tr.phase == T_PUBLISH) | (tr.phase == T_OFFLOAD)
    t_all = jnp.concatenate([jnp.where(ev_ok, ins.ev_t, jnp.inf), jnp.where(timer_on, tr.timer_t, jnp.inf)[None]])
    prev_all = jnp.concatenate([ins.ev_prev, tr.timer_prev[None]])
    start_all = jnp.concatenate([jnp.where(ins.phase == BUSY, ins.st_t, ins.ev_prev), tr.timer_prev[None]])
    seq_all = jnp.concatenate([ins.ev_seq, tr.timer_seq[None]])
    busy = ins.phase == BUSY
    fk, fb, fg = forks_of(ins.clock, ins.it, ins.t1, ins.alpha, ins.beta, ins.ev_it, ins.ev_t, ins.ev_prev,
                          ins.fk_t, ins.fk_back, ins.g_prev)
    one = lambda v: jnp.concatenate([v[:, None], jnp.full((K, N_FORKS - 1), -jnp.inf)], axis=1)  # noqa: E731
    ff = jnp.where(busy[:, None], fk, one(ins.ev_t))
    fb = jnp.where(busy[:, None], fb, ins.ev_prev[:, None])
    fg = jnp.where(busy[:, None], fg, (ins.ev_t - ins.ev_prev)[:, None])
    tmr = lambda v: jnp.concatenate([v[None], jnp.full(N_FORKS - 1, -jnp.inf)])[None]  # noqa: E731
    forks = (jnp.concatenate([ff, tmr(tr.timer_t)]), jnp.concatenate([fb, jnp.broadcast_to(tr.timer_prev, (1, N_FORKS))]),
             jnp.concatenate([fg, jnp.broadcast_to(tr.timer_t - tr.timer_prev, (1, N_FORKS))]))

    def walk(d0, width):  # the busy instances' boundaries at depths d0 .. d0 + width - 1 (the timer's: unknown)
        wk = jnp.where(busy[:, None], walk_back(ins.clock, ins.it, ins.t1, ins.alpha, ins.beta, ins.ev_it, d0, width),
                       jnp.nan)
        return jnp.concatenate([wk, jnp.full((1, width), jnp.nan)])

    bidx, bt = _lexmin(t_all, prev_all, start_all, seq_all, forks, walk)
    gidx, gt = _lexmin(jnp.where((active & (ins.phase == START)) | zev, ins.ev_t, jnp.inf), ins.ev_prev, ins.ev_prev,
                       ins.ev_seq)
    react, disp, route = chain_due(st, p, static)
    chain = react | disp | route
    cont = st.cur >= 0
    timed = jnp.where(bidx < K, A_INST, A_TIMER)
    # (the router woken before GroupBook.changed routes the calls queued before this instant first; before the
    # first batch the dispatcher is notified first: it admits before the trainer takes the batch)
    chain_act = jnp.where(route & (react | disp), A_ROUTE,
                          jnp.where(react & ~(disp & disp_first(st)), A_REACT, jnp.where(disp, A_DISPATCH, A_ROUTE)))
    # admit_window_episodes: the dispatcher's recheck timeout. Its place among the timeouts due at its time does not
    # matter (firing, it only wakes the dispatcher, which runs after all of them: SimPy pushes the condition event
    # it waits on when the timeout is processed); here it goes after them, before the chain, and time advances to
    # it when it is strictly the earliest pending timeout.
    wt = window_due(st, p, static)
    w_due = wt <= st.now
    later = jnp.where(gt < jnp.inf, A_INST, jnp.where(wt < bt, A_WINDOW, jnp.where(bt < jnp.inf, timed, A_NONE)))
    due = bt <= st.now
    # A batch being formed is one synchronous form_batch call: finish it first.
    act = jnp.where(cont, A_INST, jnp.where(tr.taken > 0, A_REACT, jnp.where(
        due, timed, jnp.where(w_due, A_WINDOW, jnp.where(chain, chain_act, later)))))
    # (zero_variance_stop_groups: SimPy stopped; an overflowed configuration stops where it overflowed, so the
    # progress `engine._run_growing` compares between slot doublings is that of a prefix of the true run: with
    # more slots it can only be further, never less because the batch's other configurations ran longer)
    act = jnp.where((tr.phase == T_DONE) | st.zstop | st.overflow, A_NONE, act)
    i = jnp.where(cont, st.cur, jnp.where(~due & ~chain & (gt < jnp.inf), gidx, bidx))
    i = jnp.minimum(i, K - 1).astype(jnp.int32)
    timed_now = jnp.where(act == A_TIMER, tr.timer_t, jnp.where(act == A_WINDOW, wt,
                                                                 jnp.where(i < K, ins.ev_t[i], jnp.inf)))
    new_now = jnp.where(((act == A_INST) & ~cont) | (act == A_TIMER) | (act == A_WINDOW),
                        jnp.maximum(timed_now, st.now), st.now)
    early = (act == A_ROUTE) & (react | disp)
    return act, i, new_now, early


def dispatch_action(st, on, static, p):
    """Simulation.start_group: the next group enters st.running; its calls join the router queue. With an
    admission window (``p.win_n`` > 0) the consultation restarts a window that has run its length (start now,
    count 0), then the group's episodes are counted in it (`RecordPolicy.on_dispatch`)."""
    gid = st.dispatched
    ok = on & (gid < static.max_groups)
    G = st.groups
    status = G.status.at[jnp.where(ok, gid, static.max_groups)].set(G_RUNNING, mode="drop")
    if static.window:
        on_w = ok & (p.win_n > 0)
        exp = window_expired(st, p)
        st = st._replace(win_start=jnp.where(on_w & exp, st.now, st.win_start),
                         win_adm=jnp.where(on_w, jnp.where(exp, 0, st.win_adm) + static.group_size, st.win_adm))
    st = redispatch(st, ok, gid, static)  # fail_on_version_crossing: a failed group's prompt first
    return st._replace(
        groups=G._replace(status=status), dispatched=st.dispatched + ok, n_running=st.n_running + ok,
        overflow=st.overflow | (on & ~ok),
    )


def route_all(st, p, w, static, on):
    """Router.route for up to ``group_size`` queued calls, in order, in one step.

    Exact: once the router runs in an instant nothing else can act until its queue is empty (a
    route changes neither the dispatcher's nor the trainer's condition, makes no timeout due now,
    and the instances it wakes act after it), so the calls it routes back to back are the same
    whether one step routes one or several. The step that dispatches a group routes its calls too:
    a dispatch and a route touch disjoint state (group status and counts vs instance queues, wake
    order and round-robin pointer) and neither's condition reads what the other writes, so routing
    each group right after its dispatch gives the state of dispatching all, then routing all."""
    ins = st.inst
    # The boundary at which a busy instance would admit a call routed now: the same for every call
    # of this step (routing changes no instance's clock or closed form), so solved once for all K.
    j_all = first_after(ins.clock, ins.t1, ins.alpha, ins.beta, ins.st_t, ins.st_seq, st.now, st.now, st.now, BIG)

    return route_group(st, p, w, static, on, j_all)


def route_group(st, p, w, static, on, j_all):
    """Router.route for the next ``group_size`` queued calls at once: the same state as routing them
    one by one (choose an instance, append to its waiting queue, wake it). The choices are made in
    order on the assigned counts (`simrl_fast.router.choose`: least_requests, round_robin, dp_shard; with
    ``router.active_cap`` the first call no instance is eligible for stops the rest), then each instance's share is appended to its queue row (each call
    after the previous one routed there), an idle instance is woken, and a busy one with an empty
    queue gets the admission boundary of its first call if that call fits; woken instances take
    wake-order numbers (SimPy's insertion counter) in the order of their first calls.
    ``j_all``: `first_after` now for every instance. `StepOut.route_rid` / `route_inst` get the calls."""
    ins, C = st.inst, st.calls
    K, n, G = static.instances, static.group_size, static.groups
    i32 = jnp.int32
    kidx = jnp.arange(n, dtype=i32)
    r0 = st.routed
    kk = jnp.arange(K, dtype=i32)
    # the choices, call by call on the assigned counts; a call no instance is eligible for stops the rest
    inst_k, on_k, rr_next = _router.choose(st, p, static, on & (r0 + kidx < st.dispatched * n))
    rids = r0 + kidx
    hot = (inst_k[:, None] == kk[None, :]) & on_k[:, None]  # [n, K]: call k goes to instance j
    cnt = jnp.sum(hot.astype(i32), axis=0)
    got = cnt > 0
    first = jnp.min(jnp.where(hot, kidx[:, None], n), axis=0)
    f_rid = r0 + jnp.minimum(first, n - 1)
    was_empty = ins.wq_len == 0
    wake = got & (ins.phase == IDLE)
    hp, hl = call_lengths(w, f_rid, n, G)
    hit = 0
    if static.prefix:  # the first call's shared prefix, held there by a running request of its group
        sh = call_shared(w, f_rid, n, G)
        hit = jnp.where((p.pc == 1) & (ins.sh_ref[kk, f_rid // n] > 0), sh, 0)
    # an instance whose anchor iteration takes zero seconds (`state.zero_pending`): its next boundary, due now, comes
    # after the router's pass that the turn scheduling it woke, so a call dispatched by then is admitted there
    j_r = jnp.where(zero_pending(ins, st.now) & (f_rid < ins.z_rid), 1, j_all)
    fit = got & (ins.phase == BUSY) & was_empty & fits_routed(p, static, ins, j_r, hp, hl, hit)
    fit = materialize(fit)  # (computed once: else each of the updates below recomputes it)
    adm_it = jnp.where(fit, ins.it + j_r, ins.adm_it)
    ev_it, ev_t, ev_prev = event_of(ins.clock, ins.it, ins.t1, ins.alpha, ins.beta, ins.fin_min, adm_it, ins.pause_it)
    rank = jnp.sum((wake[None, :] & (first[None, :] < first[:, None])).astype(i32), axis=1)
    inst = ins._replace(
        wq_len=ins.wq_len + cnt, adm_it=adm_it, phase=jnp.where(wake, START, ins.phase),
        ev_it=jnp.where(fit, ev_it, ins.ev_it),
        ev_t=jnp.where(fit, ev_t, jnp.where(wake, st.now, ins.ev_t)),
        ev_prev=jnp.where(fit, ev_prev, jnp.where(wake, st.now, ins.ev_prev)),
        ev_seq=jnp.where(wake, st.seq + rank, ins.ev_seq),
    )
    qpos = queue_pos(ins.wq_pos, ins.wq_len, inst_k, on_k)
    # rows tied to the queue positions, which depend on this step's read of the queue (instance_action)
    rows = jnp.where(on_k, tie(inst_k, K, ins.wq_pos), K)
    calls = C._replace(queue=C.queue.at[rows, qpos].set(rids, mode="drop"))
    out = st.out._replace(route_rid=jnp.where(on_k, rids, st.out.route_rid),
                          route_inst=jnp.where(on_k, inst_k, st.out.route_inst))
    n_on = jnp.sum(on_k.astype(i32))
    return st._replace(
        inst=inst, calls=calls, out=out, routed=st.routed + n_on, seq=st.seq + jnp.sum(wake.astype(i32)),
        rr_next=rr_next,
    )


#: actions whose work (`rare_action`: the trainer's timer and reaction, a publication's failures and evictions)
#: a configuration needs in about 1 % of its steps; the batched step computes them for a few at a time
RARE = (A_TIMER, A_REACT)


def _is_rare(act):
    return (act == A_TIMER) | (act == A_REACT)


def prepare(st0, p, w, static):
    """The start of a step: the outputs cleared, the parallel local rounds (if any), the action selected.
    Returns (state, whether a local boundary was processed, action, instance, new now, early (`select`))."""
    rounds = _state.LOCAL_ROUNDS
    # (the parallel rounds' outputs derived from the carried ones, so they stay per-configuration
    # values under shard_map)
    st = st0._replace(out=empty_out(static.group_size, 0)._replace(
        par_rid=st0.out.par_rid * 0 - 1, par_t=st0.out.par_t + jnp.nan))
    # Every instance's local boundaries before the next global event, in parallel; then one action.
    # (not with chunked prefill traced: its slot rows are kept in admission order, which the rounds' moves
    # would break; such batches run the sequential step; with fail_on_version_crossing, `with_map` gives
    # the workload arrays each gid's workload group)
    local = rounds and not static.chunked_prefill
    st, par = local_phase(st, p, with_map(w, st, static), static, rounds) if local else (st, jnp.asarray(False))
    act, i, new_now, early = select(st, p, static)
    if static.episode_cap or static.window:
        # admit_episode_cap, admit_window_episodes: the dispatcher has run in this instant (and, admitting nothing
        # more, slept) once the step takes an action after its place in SimPy's order (tie rules 1-3): anything but
        # an instance's boundary in progress or due now, the trainer's timer due now, its reaction or a dispatch. A
        # wake-up that this step's own action sets (a group completion, a batch taken, a publication, the recheck
        # timeout) is added after it. Going to sleep, the dispatcher sets its recheck timeout (`sleep_timer`, on the
        # state it last read: nothing after its turn in the instant changes what admission reads).
        tr, ins = st.trainer, st.inst
        due = (((act == A_TIMER) & (tr.timer_t <= st.now))
               | ((act == A_INST) & (ins.phase[i] != START) & ~zero_event(st, p, static)[i] & (ins.ev_t[i] <= st.now)))
        before = ((st.cur >= 0) | (tr.taken > 0) | (act == A_REACT) | (act == A_DISPATCH) | due
                  | early)  # (the router's pass before the dispatcher's: `select`)
        if static.window:
            st = st._replace(win_t=jnp.where(st.wake & ~before, sleep_timer(st, p, static), st.win_t))
        st = st._replace(wake=st.wake & before)
    return st, par, act, i, new_now, early


def main_action(st0, p, w, static, prepared=None, defer=None, route=True):
    """The step but its rare actions: select (``prepared``: `prepare`'s result for ``st0``), then an
    instance's boundary, a dispatch or a route.

    Returns (state, act). When ``act`` is rare (`RARE`) nothing but ``now`` changed here, and
    `rare_action` applies it; ``defer`` (the batched step: no room for this configuration's rare
    action in this step) turns a rare action into no action, leaving the state as it was (the next
    step selects it again). Every action of one family is off when the other's is on, and each off
    family is the identity, so `main_action` then `rare_action` is the step SimPy's order gives."""
    st, par, act, i, new_now, early = prepare(st0, p, w, static) if prepared is None else prepared
    held = jnp.asarray(False) if defer is None else defer & _is_rare(act)
    act = jnp.where(held, A_NONE, act)
    # The action and its instance computed once, into buffers: else XLA fuses the selection into every gather
    # by ``i`` and every select over the instances, recomputing it there (docs/fastpath.md, "Speed, session 9").
    act, i, new_now = materialize(act), materialize(i), materialize(new_now)
    st = st._replace(now=jnp.where(held, st.now, new_now))
    if static.window:  # the recheck timeout fires: the dispatcher wakes (admit_window_episodes)
        fire = act == A_WINDOW
        st = st._replace(wake=st.wake | fire, win_t=jnp.where(fire, jnp.inf, st.win_t), disp_late=st.disp_late | fire)
    # (the map changes only when a group is dispatched, so one `wm` serves every action up to the dispatch)
    wm = with_map(w, st, static)
    pos0 = st.inst.wq_pos[i]
    # per-instance sync: a woken lagging instance starts its pull, a pull ends (simrl_fast.perinst)
    begins, ends = takes(st, p, static, act == A_INST, i)
    turn = (act == A_INST) & ~begins & ~ends
    st = instance_action(st, p, wm, static, turn, i, new_now)
    st = note_admitted(st, pos0, static, turn, i)
    st = pull_action(st, p, static, begins, ends, i, new_now)
    if route:  # (else `route_action` does it: the batched step)
        # A dispatched group's calls are routed in the step that dispatches it (exact: see route_all).
        st = _dispatch_route(st, p, w, static, act, early)
    # (a rare action neither leaves a run stuck nor is "no action")
    done = st.trainer.phase == T_DONE
    st = st._replace(stuck=st.stuck | ((act == A_NONE) & ~par & ~done & ~held & ~st.overflow),
                     actions=st.actions + ((act != A_NONE) | par))
    # x64 promotes int32 reductions and argmax to int64: keep every leaf's declared dtype.
    return jax.tree_util.tree_map(lambda new, old: new.astype(old.dtype), st, st0), act.astype(jnp.int32)


def rare_action(st0, p, w, static, act):
    """The trainer's timer (``act`` = A_TIMER) and its reaction in this instant (A_TIMER, A_REACT): the end
    of a training step or a publication, the publication's failed groups, the batch taken, the evictions.
    The identity for any other ``act``."""
    st = st0
    wm = with_map(w, st, static)
    pub = (act == A_TIMER) & (st.trainer.phase == T_PUBLISH)
    st = timer_action(st, p, static, act == A_TIMER)
    st = push(st, p, static, pub)  # Weights._push wakes every instance before the trainer goes on
    st = fail_crossed(st, p, wm, static, pub)  # after_publication, before the trainer takes a batch
    st = trainer_react(st, p, wm, static, _is_rare(act), pub)
    st = mark_evicted(st, p, static, pub)
    return jax.tree_util.tree_map(lambda new, old: new.astype(old.dtype), st, st0)


def queue_pos(wq_pos, wq_len, inst_k, on_k):
    """Where each routed call (``inst_k`` its instance, ``on_k`` routed) goes in its instance's queue row: after
    the waiting queue (``wq_pos``, ``wq_len`` before the routing) and the calls routed there before it."""
    kidx = jnp.arange(inst_k.shape[0])
    same = (inst_k[:, None] == inst_k[None, :]) & on_k[None, :] & (kidx[None, :] < kidx[:, None])
    return wq_pos[inst_k] + wq_len[inst_k] + jnp.sum(same.astype(jnp.int32), axis=1)


def route_action(st0, p, w, static, act, early):
    """A dispatch (``act`` = A_DISPATCH: the group and its calls' routing) or a routing (A_ROUTE; ``early``:
    `select`'s); the identity for any other ``act``."""
    st = _dispatch_route(st0, p, w, static, act, early)
    return jax.tree_util.tree_map(lambda new, old: new.astype(old.dtype), st, st0)


def _dispatch_route(st, p, w, static, act, early):
    """A dispatch (``act`` = A_DISPATCH) and the routing of its calls, or a routing (A_ROUTE); a dispatch's calls
    stay in the router queue while `route_held`, and a routing releases the hold. ``early`` (`select`'s): a routing
    that is the router's pass before the dispatcher's or the trainer's in this instant (`chain_due` on the state
    `select` read: nothing the step did before a routing changes it -- `now` stays, no instance acted, and
    `prepare`'s wake-up reset keeps ``wake`` where the pass is early)."""
    st = dispatch_action(st, act == A_DISPATCH, static, p)
    go = ((act == A_ROUTE) | (act == A_DISPATCH)) & routable(st, p, static) & ~route_held(st, p, static)
    st = route_all(st, p, with_map(w, st, static), static, go)
    # the calls dispatched after a pass that came before the dispatcher's wait for the instances it woke
    return st._replace(hold_t=jnp.where(early, st.now, jnp.where(go, -jnp.inf, st.hold_t)),
                       hold_rid=jnp.where(early, jnp.where(st.hold_t == st.now, jnp.minimum(
                           st.hold_rid, st.dispatched * static.group_size), st.dispatched * static.group_size),
                                          st.hold_rid))


def make_step(static):
    """The pure step function ``step(state, params, workload) -> state`` for one configuration."""

    def step(st0, p, w):
        st, act = main_action(st0, p, w, static)
        return rare_action(st, p, w, static, act)

    return step


def rare_width(m: int) -> int:
    """Configurations of a batch of ``m`` whose rare action one batched step computes (`make_batch_step`):
    about 3 % of the batch (a configuration needs one in about 1 % of its steps), at least 8, at most m."""
    return max(1, min(m, max(8, -(-3 * m // 100))))


def route_width(m: int) -> int:
    """Configurations of a batch of ``m`` whose dispatch one turn of the batched step's routing loop computes:
    about 15 % (a configuration dispatches in about one step in ten; bursts take more turns), at least 8."""
    return max(1, min(m, max(8, -(-15 * m // 100))))


def _rare_reads(static, field: str, leaf) -> bool:
    """Whether `rare_action` reads or writes this leaf of `SimState` (``leaf`` batched): all but the outputs,
    the calls' queues and the instances' per-slot rows, unless `fail_on_version_crossing` is traced (its
    failures rewrite those rows and queues)."""
    if static.crossing:
        return True
    return field not in ("calls", "out") and not (field == "inst" and leaf.ndim > 2)


def _route_reads(static, field: str, leaf) -> bool:
    """Whether `route_action` reads or writes this leaf (the calls' queues: written by the batched step
    itself, `queue_pos`): all but the calls and the instances' per-slot rows (but the prefix cache's
    references, which the router reads)."""
    return field != "calls" and not (field == "inst" and leaf.ndim > 2 and not static.prefix)


def _gather(st, at, width, reads):
    """Rows ``at`` of the leaves ``reads(field, leaf)`` selects; zero-width stand-ins for the others."""
    fields = {}
    for f in st._fields:
        fields[f] = jax.tree_util.tree_map(
            lambda x, f=f: x[at] if reads(f, x) else jnp.zeros((width, *x.shape[1:-1], 0), x.dtype), getattr(st, f))
    return type(st)(**fields)


def _scatter(st, idx, sub, reads):
    """``st`` with rows ``idx`` (out of range: dropped) of the selected leaves set from ``sub``."""
    out = {}
    for f in st._fields:
        out[f] = jax.tree_util.tree_map(lambda x, y, f=f: x.at[idx].set(y, mode="drop") if reads(f, x) else x,
                                        getattr(st, f), getattr(sub, f))
    return type(st)(**out)


def make_batch_step(static, m: int, per_config_workload: bool, width: int | None = None,
                    routes: int | None = None):
    """One event-loop step of a batch of ``m`` configurations: ``step(states, params, workload) -> states``.

    Every configuration takes one action of one family: an instance's boundary (most steps), a dispatch
    or routing (about one in ten), the trainer's timer or reaction (about one in a hundred). Computed
    for the whole batch under `vmap`, each family would cost every configuration in every step; here
    `main_action` (the selection and the boundary) runs for the whole batch, and the other two families
    only for the configurations that take them, gathered into small sub-batches, stepped and scattered
    back. The dispatches: `route_width` at a time, in a loop that runs until every dispatching
    configuration is served (one turn but in bursts); the calls' queue writes are made on the batch's
    queues (`queue_pos`). The trainer: the first ``width`` (`rare_width`) configurations whose action is
    rare; one beyond those is deferred (``main_action``'s ``defer``: it does nothing in this step and
    selects the same action in the next). Every result equals stepping each configuration alone."""
    width = rare_width(m) if width is None else width
    wr = route_width(m)
    wax = 0 if per_config_workload else None
    rare_reads = functools.partial(_rare_reads, static)
    route_reads = functools.partial(_route_reads, static)

    def rows(tree, at):
        return jax.tree_util.tree_map(lambda x: x[at], tree)

    def step(st0, p, w):
        prep = jax.vmap(lambda s, pp, ww: prepare(s, pp, ww, static), in_axes=(0, 0, wax))(st0, p, w)
        act0, early = prep[2], prep[5]
        rare = _is_rare(act0)
        idx = jnp.nonzero(rare, size=width, fill_value=m)[0].astype(jnp.int32)
        served = jnp.zeros(m, bool).at[idx].set(True, mode="drop")
        st, act = jax.vmap(lambda s, pp, ww, pr, d: main_action(s, pp, ww, static, pr, d, route=False),
                           in_axes=(0, 0, wax, 0, 0))(st0, p, w, prep, rare & ~served)
        if routes == 0:  # (the routing computed for the whole batch: measurements)
            st = jax.vmap(lambda s, pp, ww, a, e: route_action(s, pp, ww, static, a, e),
                          in_axes=(0, 0, wax, 0, 0))(st, p, w, act, early)

        # -- dispatches and routings, route_width configurations per turn --
        disp = ((act == A_DISPATCH) | (act == A_ROUTE)) & (routes != 0)

        def turn(carry):
            st, left = carry
            ix = jnp.nonzero(left, size=wr, fill_value=m)[0].astype(jnp.int32)
            at = jnp.minimum(ix, m - 1)
            sub = _gather(st, at, wr, route_reads)
            ws = rows(w, at) if per_config_workload else w
            sub2 = jax.vmap(lambda s, pp, ww, a, e: route_action(s, pp, ww, static, a, e),
                            in_axes=(0, 0, wax, 0, 0))(sub, rows(p, at), ws, jnp.where(ix < m, act[at], A_NONE),
                                                       early[at])
            st = _scatter(st, ix, sub2, route_reads)
            rid, ik = sub2.out.route_rid, sub2.out.route_inst  # [wr, n]
            on_k = (rid >= 0) & (ix < m)[:, None]
            qpos = jax.vmap(queue_pos)(sub.inst.wq_pos, sub.inst.wq_len, jnp.maximum(ik, 0), on_k)
            cfg = jnp.where(on_k, ix[:, None], m)
            C = st.calls
            st = st._replace(calls=C._replace(queue=C.queue.at[cfg, jnp.maximum(ik, 0), qpos].set(rid, mode="drop")))
            return st, left & ~jnp.zeros(m, bool).at[ix].set(True, mode="drop")

        st, _ = jax.lax.while_loop(lambda c: jnp.any(c[1]), turn, (st, disp))

        # -- the trainer's actions: the first `width` configurations whose action is rare --
        at = jnp.minimum(idx, m - 1)
        sub = _gather(st, at, width, rare_reads)
        ws = rows(w, at) if per_config_workload else w
        sub = jax.vmap(lambda s, pp, ww, a: rare_action(s, pp, ww, static, a), in_axes=(0, 0, wax, 0))(
            sub, rows(p, at), ws, jnp.where(idx < m, act[at], A_NONE))
        return _scatter(st, idx, sub, rare_reads)

    return step
