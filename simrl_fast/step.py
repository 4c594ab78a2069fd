"""The event-loop step: pick one action (SimPy's event order), apply it, return the new state.

Order of actions (docs/fastpath.md, "Tie rules"): an instance in the middle of its boundary
finishes it first; then every timeout due *now* (instance boundaries, resumes, the trainer's
timer) by heap key (time, scheduling time, insertion order); then the chain those events
triggered in this instant -- the trainer's reaction, the dispatcher (one group per step), the
router (one call per step); then instances woken by the router; only then does time advance
to the earliest pending timeout. Every branch is computed and masked, so the step is one
unified update under `vmap`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast.closed_form import event_of, first_after, tol
from simrl_fast.instance import call_lengths, fits, instance_action
from simrl_fast.state import (
    BIG,
    BUSY,
    G_RUNNING,
    IDLE,
    RESUME,
    START,
    T_DONE,
    T_DRAIN,
    T_PUBLISH,
    T_TRAIN,
    T_WAIT,
    empty_out,
    tie,
)
from simrl_fast.trainer import mark_evicted, timer_action, trainer_react

A_NONE, A_INST, A_TIMER, A_REACT, A_DISPATCH, A_ROUTE = 0, 1, 2, 3, 4, 5


def _lexmin(t, prev, start, seq):
    """Index and time of the smallest (t, prev, start, seq) key (SimPy's heap order, times within
    `TIME_RTOL` counting as equal)."""
    m1 = jnp.min(t)
    c1 = t <= m1 + tol(m1)
    m2 = jnp.min(jnp.where(c1, prev, jnp.inf))
    c2 = c1 & (prev <= m2 + tol(m2))
    m3 = jnp.min(jnp.where(c2, start, jnp.inf))
    c3 = c2 & (start <= m3 + tol(m3))
    m4 = jnp.min(jnp.where(c3, seq, BIG))
    return jnp.argmax(c3 & (seq == m4)), m1


def can_dispatch(st, p):
    """GroupBook.dispatcher's loop condition: the admission rule of PolicyParams (simrl.policy.record.admits)."""
    count = jnp.where(p.count_dispatched == 1, st.dispatched, st.accepted + st.n_running)
    budget = p.budget_base + p.budget_per_version * st.version.astype(jnp.float64)
    return (
        ~st.dispatch_paused & (st.n_running.astype(jnp.float64) < p.conc) & (count.astype(jnp.float64) < budget)
        & ~((p.block_training == 1) & st.training) & (st.trainer.phase != T_DONE) & ~st.overflow
    )


def select(st, p, static):
    """(action, instance index, new now) for this step."""
    ins, tr = st.inst, st.trainer
    K = static.instances
    active = jnp.arange(K) < p.n_inst
    ev_ok = active & ((ins.phase == BUSY) | (ins.phase == RESUME))
    timer_on = (tr.phase == T_TRAIN) | (tr.phase == T_PUBLISH)
    t_all = jnp.concatenate([jnp.where(ev_ok, ins.ev_t, jnp.inf), jnp.where(timer_on, tr.timer_t, jnp.inf)[None]])
    prev_all = jnp.concatenate([ins.ev_prev, tr.timer_prev[None]])
    start_all = jnp.concatenate([jnp.where(ins.phase == BUSY, ins.st_t, ins.ev_prev), tr.timer_prev[None]])
    seq_all = jnp.concatenate([ins.ev_seq, tr.timer_seq[None]])
    bidx, bt = _lexmin(t_all, prev_all, start_all, seq_all)
    gidx, gt = _lexmin(jnp.where(active & (ins.phase == START), ins.ev_t, jnp.inf), ins.ev_prev, ins.ev_prev, ins.ev_seq)
    forming = (tr.phase == T_WAIT) & ((tr.taken > 0) | (st.buf_live >= p.batch))
    react = forming | ((tr.phase == T_DRAIN) & (st.n_running == 0))
    disp = can_dispatch(st, p)
    route = st.routed < st.dispatched * static.group_size
    chain = react | disp | route
    cont = st.cur >= 0
    timed = jnp.where(bidx < K, A_INST, A_TIMER)
    chain_act = jnp.where(react, A_REACT, jnp.where(disp, A_DISPATCH, A_ROUTE))
    later = jnp.where(gt < jnp.inf, A_INST, jnp.where(bt < jnp.inf, timed, A_NONE))
    due = bt <= st.now + tol(st.now)
    # A batch being formed is one synchronous form_batch call: finish it first.
    act = jnp.where(cont, A_INST, jnp.where(tr.taken > 0, A_REACT,
                                            jnp.where(due, timed, jnp.where(chain, chain_act, later))))
    act = jnp.where(tr.phase == T_DONE, A_NONE, act)
    i = jnp.where(cont, st.cur, jnp.where(~due & ~chain & (gt < jnp.inf), gidx, bidx))
    i = jnp.minimum(i, K - 1).astype(jnp.int32)
    timed_now = jnp.where(act == A_TIMER, tr.timer_t, jnp.where(i < K, ins.ev_t[i], jnp.inf))
    new_now = jnp.where(((act == A_INST) & ~cont) | (act == A_TIMER), jnp.maximum(timed_now, st.now), st.now)
    return act, i, new_now


def dispatch_action(st, on, static):
    """Simulation.start_group: the next group enters st.running; its calls join the router queue."""
    gid = st.dispatched
    ok = on & (gid < static.max_groups)
    G = st.groups
    status = G.status.at[jnp.where(ok, gid, static.max_groups)].set(G_RUNNING, mode="drop")
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
    n = static.group_size
    ins = st.inst
    # The boundary at which a busy instance would admit a call routed now: the same for every call
    # of this step (routing changes no instance's clock or closed form), so solved once for all K.
    j_all = first_after(ins.clock, ins.t1, ins.alpha, ins.beta, ins.st_t, ins.st_seq, st.now, st.now, st.now, BIG)

    def body(k, s):
        new = route_action(s, p, w, static, on & (s.routed < s.dispatched * n), k, j_all)
        return jax.tree_util.tree_map(lambda a, b: a.astype(b.dtype), new, s)  # a loop carry keeps its dtypes

    return jax.lax.fori_loop(0, n, body, st)


def route_action(st, p, w, static, on, k=0, j_all=None):
    """Router.route for the queue head: choose an instance, append to its waiting queue, wake it.

    ``k``: the position of this call among the step's routed calls (`StepOut.route_rid`); ``j_all``:
    `first_after` now for every instance, when the caller has solved it."""
    ins, C = st.inst, st.calls
    K, n, G = static.instances, static.group_size, static.groups
    r = st.routed
    active = jnp.arange(K) < p.n_inst
    assigned = jnp.where(active, ins.wq_len + ins.running, BIG)
    i = jnp.where(p.router == 1, st.rr_next, jnp.argmin(assigned)).astype(jnp.int32)
    hp, hl = call_lengths(w, r, n, G)
    was_empty = ins.wq_len[i] == 0
    wake = ins.phase[i] == IDLE
    fit = (ins.phase[i] == BUSY) & was_empty & fits(p, 1, ins.running[i], ins.kv_used[i], hp, hl)
    if j_all is None:
        j = first_after(ins.clock[i], ins.t1[i], ins.alpha[i], ins.beta[i], ins.st_t[i], ins.st_seq[i], st.now, st.now,
                        st.now, BIG)
    else:
        j = j_all[i]
    adm_it = jnp.where(fit, ins.it[i] + j, ins.adm_it[i])
    ev_it, ev_t, ev_prev = event_of(ins.clock[i], ins.it[i], ins.t1[i], ins.alpha[i], ins.beta[i], ins.fin_min[i], adm_it,
                                    ins.pause_it[i])

    def put(arr, val):
        return jnp.where(on, arr.at[i].set(jnp.asarray(val).astype(arr.dtype)), arr)

    inst = ins._replace(
        wq_head=put(ins.wq_head, jnp.where(was_empty, r, ins.wq_head[i])), wq_tail=put(ins.wq_tail, r),
        wq_len=put(ins.wq_len, ins.wq_len[i] + 1), adm_it=put(ins.adm_it, adm_it),
        phase=put(ins.phase, jnp.where(wake, START, ins.phase[i])),
        ev_it=put(ins.ev_it, jnp.where(fit, ev_it, ins.ev_it[i])),
        ev_t=put(ins.ev_t, jnp.where(fit, ev_t, jnp.where(wake, st.now, ins.ev_t[i]))),
        ev_prev=put(ins.ev_prev, jnp.where(fit, ev_prev, jnp.where(wake, st.now, ins.ev_prev[i]))),
        ev_seq=put(ins.ev_seq, jnp.where(wake, st.seq, ins.ev_seq[i])),
    )
    R = static.max_calls
    # tied to the queue heads, which depend on this step's read of C.nxt (instance_action)
    calls = C._replace(nxt=C.nxt.at[tie(jnp.where(on & ~was_empty, ins.wq_tail[i], R), R, ins.wq_head)].set(
        r, mode="drop"))
    out = st.out._replace(route_rid=st.out.route_rid.at[k].set(jnp.where(on, r, st.out.route_rid[k])),
                          route_inst=st.out.route_inst.at[k].set(jnp.where(on, i, st.out.route_inst[k])))
    return st._replace(
        inst=inst, calls=calls, out=out, routed=st.routed + on, seq=st.seq + (on & wake),
        rr_next=jnp.where(on & (p.router == 1), (i + 1) % p.n_inst, st.rr_next),
    )


def make_step(static):
    """The pure step function ``step(state, params, workload) -> state`` for one configuration."""

    def step(st0, p, w):
        st = st0._replace(out=empty_out(static.group_size))
        act, i, new_now = select(st, p, static)
        st = st._replace(now=new_now)
        st = instance_action(st, p, w, static, act == A_INST, i, new_now)
        pub = (act == A_TIMER) & (st.trainer.phase == T_PUBLISH)
        st = timer_action(st, p, static, act == A_TIMER)
        st = trainer_react(st, p, w, static, (act == A_TIMER) | (act == A_REACT), pub)
        st = dispatch_action(st, act == A_DISPATCH, static)
        # A dispatched group's calls are routed in the step that dispatches it (exact: see route_all).
        st = route_all(st, p, w, static, (act == A_ROUTE) | (act == A_DISPATCH))
        st = mark_evicted(st, p, pub)
        done = st.trainer.phase == T_DONE
        st = st._replace(stuck=st.stuck | ((act == A_NONE) & ~done), actions=st.actions + (act != A_NONE))
        # x64 promotes int32 reductions and argmax to int64: keep every leaf's declared dtype.
        return jax.tree_util.tree_map(lambda new, old: new.astype(old.dtype), st, st0)

    return step
