"""One action of one rollout instance at an iteration boundary (`Instance.run`'s loop turn).

An instance's boundary is processed over one or more scan steps while ``SimState.cur`` points
at it (nothing else runs in between, as in SimPy where the whole turn is synchronous):

1. entry (first step only): rebase the closed form to the boundary (BUSY), or anchor at
   ``now`` for a woken (START) or resumed (RESUME) instance; after an abort rule, the resumed
   running requests are re-prefilled (prompt + kept tokens, or prompt only for a restart);
2. the primary action: finish the lowest-rid request due at this boundary
   (`finish_iteration`, then `on_call_finished` and the group's verdict), else take the
   requested pause; then, when no other request is due here and no pause is requested, admit
   the longest prefix of the waiting queue that fits, up to `state.admit_max` calls (`admit`;
   a longer admission continues in the next step);
3. under ``on_demand`` KV, once admission is over: `Instance.plan`'s preemption loop, one
   preempted request per further step (the newest admitted, written back at the head of the
   waiting queue with the tokens it generated; a batch left empty admits again);
4. close when nothing is left: start the next iteration (new closed form and next event),
   go idle, or stay paused.

KV under ``on_demand`` (`Params.od`): a request holds prompt + generated tokens, so at the anchor
``kv_used = kd + pa`` and after j iterations ``kv_used + j * (nd + na)``; admission needs prompt +
generated (a preempted request's `CallState.qgen`), and `Instance.plan` preempts before the
iteration after boundary j when ``kv + n_decoding > capacity``, first at `preempt_boundary`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast.closed_form import event_of, forks_of
from simrl_fast.costs import rollout_times
from simrl_fast.lowering import RULE_ABORT_RESTART, RULE_ABORT_RESUME, workload_group
from simrl_fast.state import (
    BIG,
    BUSY,
    G_BUFFERED,
    G_DROPPED,
    IDLE,
    KEY_EMPTY,
    PAUSED,
    RESUME,
    START,
    admit_max,
    pack,
    tie,
    unpack_fin,
    unpack_rid,
)
from simrl_fast.trainer import pause_acked, window_buffered


def call_lengths(w, r, n, G):
    """(prompt, completion) of call ``r`` (sample r % n of dispatched group r // n, `workload_group`)."""
    rr = jnp.maximum(r, 0)
    wg, s = workload_group(w, rr // n, G), rr % n
    return w.prompt[wg, s].astype(jnp.int64), w.completion[wg, s].astype(jnp.int64)


def kv_need(p, prompt, length, gen):
    """KV a call needs to be admitted (Instance.try_admit): reserve holds prompt + completion, on_demand
    prompt + the tokens it already generated (a preempted request recomputes them)."""
    return jnp.where(p.od == 1, prompt + gen, prompt + length)


def fits(p, wq_len, running, kv_used, need):
    """Instance.try_admit: a call is waiting, a slot is free and its KV need fits."""
    return (wq_len > 0) & (running < p.max_seqs) & (kv_used + need <= p.kv_cap)


def kv_after(p, kv_used, nd, na, j):
    """Instance.kv_used after j iterations from the anchor: constant under reserve; under on_demand
    every decoding sequence and every prefilling one (its first token) takes one more token each."""
    return jnp.where(p.od == 1, kv_used + jnp.asarray(j).astype(jnp.int64) * (nd + na).astype(jnp.int64), kv_used)


def fits_routed(p, static, ins, j, prompt, length):
    """Whether a call routed now to a busy instance with an empty queue is admitted at its boundary
    ``it + j`` (``j``: `first_after` now, per instance): the instance's KV then, nothing finishing before."""
    kv = kv_after(p, ins.kv_used, ins.nd, ins.na, j) if static.on_demand else ins.kv_used
    return fits(p, 1, ins.running, kv, kv_need(p, prompt, length, 0))


def preempt_boundary(p, it, kv_used, nd, na):
    """The first boundary ``it + j`` (j >= 1) before whose iteration `Instance.plan` preempts under on_demand
    KV if nothing finishes first: kv_used + j * B1 + B1 > capacity with B1 = nd + na decoding then, i.e.
    j = max(1, (capacity - kv_used) // B1). BIG under reserve (nothing is ever preempted)."""
    b1 = jnp.maximum((nd + na).astype(jnp.int64), 1)
    j = jnp.maximum((p.kv_cap - kv_used) // b1, 1)
    at = jnp.minimum(it.astype(jnp.int64) + j, BIG)
    return jnp.where(p.od == 1, at, BIG).astype(jnp.int32)


def instance_action(st, p, w, static, on, i, new_now):
    """Apply one boundary action of instance ``i`` when ``on`` (else return ``st`` unchanged)."""
    n, G, S = static.group_size, static.groups, static.slots
    ins, C, Gs, tr = st.inst, st.calls, st.groups, st.trainer
    cont = st.cur == i
    ph = ins.phase[i]
    clock, it, nd, kd, na, pa = ins.clock[i], ins.it[i], ins.nd[i], ins.kd[i], ins.na[i], ins.pa[i]
    key = ins.slot_key[i]  # [S] int64: (finish iteration, rid) packed; KEY_EMPTY: free
    running, kv_used, pause_it = ins.running[i], ins.kv_used[i], ins.pause_it[i]
    wq_pos, wq_len = ins.wq_pos[i], ins.wq_len[i]
    ser, ser0 = ins.ser[i], ins.ser0[i]
    OD = static.on_demand  # some configuration of the batch has on_demand KV (else none of its code is traced)
    sser = ins.slot_ser[i] if OD else jnp.zeros(S, jnp.int32)  # [S] int32: admission serials
    od = (p.od == 1) & OD
    in_plan = cont & ins.plan[i] & OD  # this step is one turn of Instance.plan's preemption loop

    # -- 1. entry --------------------------------------------------------------------------
    busy_entry = ~cont & (ph == BUSY)
    j = (ins.ev_it[i] - it).astype(jnp.int64)
    b1, k1 = (nd + na).astype(jnp.int64), kd + nd + pa + na
    clock = jnp.where(cont, clock, new_now)
    it = jnp.where(busy_entry, ins.ev_it[i], it)
    nd = jnp.where(busy_entry, (nd + na), nd)
    kd = jnp.where(busy_entry, k1 + (j - 1) * b1, kd)
    na = jnp.where(busy_entry, 0, na)
    pa = jnp.where(busy_entry, 0, pa)
    occ = key < KEY_EMPTY
    res_entry = ~cont & (ph == RESUME)
    ab = res_entry & (p.rule == RULE_ABORT_RESUME)
    rs = res_entry & (p.rule == RULE_ABORT_RESTART)
    sum_prompt = ins.psum[i]
    pa = jnp.where(ab, kd + pa, jnp.where(rs, sum_prompt + pa, pa))
    na = jnp.where(ab | rs, nd + na, na)
    kd = jnp.where(ab | rs, 0, kd)
    nd = jnp.where(ab | rs, 0, nd)
    key = jnp.where(rs & occ, pack(it + ins.slot_len[i], unpack_rid(key)), key)
    # on_demand: every running request holds prompt + generated (a restarted one its prompt only)
    kv_used = jnp.where(od & ~cont, kd + pa, kv_used)
    # running requests admitted after ser0 are prefilling (after an abort every one re-prefills)
    ser0 = jnp.where(cont, ser0, jnp.where(ab | rs, 0, ser))

    # -- 2. primary action -----------------------------------------------------------------
    # The boundary's lowest key is its next finish in heap order (finish iteration, rid); the
    # second lowest tells whether another request finishes here too (two plain min reductions and
    # one for the slot: the row is read, never rewritten, and updated by a few scatters below).
    sidx = jnp.arange(S)
    k1 = jnp.min(key)
    has_fin = unpack_fin(k1) == it
    s_f = jnp.min(jnp.where(key == k1, sidx, S))
    # Instance.plan's victim: the newest admitted running request (max admit_serial)
    if OD:  # one reduction: serials are distinct, so (serial, slot) packed gives both
        top_sv = jnp.max(jnp.where(occ, sser.astype(jnp.int64) * S + sidx, -1))
        top, s_v = (top_sv // S).astype(jnp.int32), jnp.where(top_sv < 0, S, top_sv % S).astype(jnp.int32)
    else:
        top, s_v = jnp.int32(-1), jnp.int32(S)
    do_vic = in_plan & od & (running > 0)
    # the lowest key left once this step's finish or victim is gone (the second lowest after a finish)
    k2 = jnp.min(jnp.where(jnp.where(has_fin, key == k1, do_vic & (sidx == s_v)), KEY_EMPTY, key))
    nfin = jnp.where(has_fin, jnp.where(unpack_fin(k2) == it, 2, 1), 0)  # 2: two or more
    r_f = jnp.where(has_fin, unpack_rid(k1), -1)
    last = jnp.maximum(running - 1, 0)  # the last occupied slot: it moves into s_f (or s_v)
    pr_f, len_f = call_lengths(w, r_f, n, G)
    tok_f = pr_f + len_f
    key_v = key[jnp.minimum(s_v, S - 1)]
    len_v = ins.slot_len[i, jnp.minimum(s_v, S - 1)]
    r_v = jnp.where(do_vic, unpack_rid(key_v), -1)
    pr_v, _ = call_lengths(w, r_v, n, G)
    gen_v = len_v.astype(jnp.int64) - (unpack_fin(key_v) - it).astype(jnp.int64)  # Instance.generated_of
    tok_v = jnp.where(do_vic, pr_v + gen_v, 0)
    pf_v = sser[jnp.minimum(s_v, S - 1)] > ser0  # still prefilling (admitted at this anchor)
    counted = do_vic & (nd > 0)  # a resumed batch over capacity (nd = 0) was never re-admitted in SimPy
    pausing = pause_it <= it
    do_pause = ~has_fin & pausing
    # Admission: the longest prefix of the waiting queue that fits, up to A calls in this step
    # (Instance.try_admit's loop; the rest, if it still fits, in the next step of this boundary).
    # It follows the boundary's last finish in the same step (finishes come first, in rid order).
    run_f = running - has_fin
    kv_f = kv_used - jnp.where(has_fin, tok_f, 0)
    A = admit_max(static)
    # the waiting queue's first A + 1 calls: one contiguous window of this instance's queue row
    heads = jax.lax.dynamic_slice(C.queue, (i, wq_pos), (1, A + 1))[0]
    gens = (jax.lax.dynamic_slice(C.qgen, (i, wq_pos), (1, A + 1))[0].astype(jnp.int64) if OD
            else jnp.zeros(A + 1, jnp.int64))
    hp_v, hl_v = call_lengths(w, heads[:A], n, G)
    need_v = kv_need(p, hp_v, hl_v, gens[:A])
    kk = jnp.arange(A)
    ok = (kk < wq_len) & (run_f + kk < p.max_seqs) & (kv_f + jnp.cumsum(need_v) <= p.kv_cap)
    n_adm = jnp.where((nfin <= 1) & ~pausing & ~in_plan, jnp.min(jnp.where(ok, A, kk)), 0)
    adm_v = kk < n_adm
    adm_p = jnp.sum(jnp.where(adm_v, hp_v, 0))
    adm_pf = jnp.sum(jnp.where(adm_v, hp_v + gens[:A], 0))  # prefill: prompt + tokens to recompute
    adm_kv = jnp.sum(jnp.where(adm_v, need_v, 0))

    running = running - has_fin - do_vic + n_adm
    nd = nd - has_fin - (do_vic & ~pf_v)
    kd = kd - jnp.where(has_fin, tok_f, 0) - jnp.where(~pf_v, tok_v, 0)
    kv_used = kv_used - jnp.where(has_fin, tok_f, 0) - tok_v + adm_kv
    na = na + n_adm - (do_vic & pf_v)
    pa = pa + adm_pf - jnp.where(pf_v, tok_v, 0)
    head2 = heads[n_adm]
    len2 = wq_len - n_adm + do_vic
    pause_it = jnp.where(do_pause, BIG, pause_it)

    # -- 3. close ---------------------------------------------------------------------------
    h2p, h2l = call_lengths(w, head2, n, G)
    need2 = jnp.where(do_vic, tok_v, kv_need(p, h2p, h2l, gens[n_adm]))  # the queue's head after this step
    paused = do_pause | (cont & (ph == PAUSED))
    adm_more = ~paused & ~pausing & ~in_plan & fits(p, len2, running, kv_used, need2)
    # Instance.plan (on_demand): the next tokens of the decoding sequences do not fit -> preempt, one per step
    over = od & (running > 0) & (kv_used + nd > p.kv_cap)
    need_pre = over & ~paused & ~pausing & (nfin <= 1) & ~adm_more
    restart = do_vic & (running == 0)  # plan emptied the batch: admit again (Instance.run's `continue`)
    more = (nfin > 1) | (~paused & pausing & ~do_pause) | adm_more | need_pre | restart
    close = ~more
    start = close & ~paused & (running > 0)
    b1n = nd + na
    k1n = kd + nd + pa + na
    dt0, alpha, beta = rollout_times(p, static, nd, kd, pa, b1n, k1n)  # simrl_fast.costs: the cost model's formula
    t1 = clock + dt0
    adm_keys = jnp.where(adm_v, pack(it + hl_v - gens[:A], heads[:A]), KEY_EMPTY)
    # the batch's own next event: its earliest finish, or the boundary where on_demand KV runs out
    fin_min = unpack_fin(jnp.minimum(k2, jnp.min(adm_keys)))
    adm_it = jnp.int32(BIG)
    if OD:
        fin_min = jnp.minimum(fin_min, preempt_boundary(p, it, kv_used, nd, na))
        # after a preemption the head (the preempted request) may fit at the very next boundary (KV only grows)
        adm_it = jnp.where(start & fits(p, len2, running, kv_after(p, kv_used, nd, na, 1), need2), it + 1, BIG)
    ev_it, ev_t, ev_prev = event_of(clock, it, t1, alpha, beta, fin_min, adm_it, BIG)
    phase = jnp.where(paused, PAUSED, jnp.where(start, BUSY, jnp.where(close, IDLE, BUSY)))
    # A woken or resumed instance begins a new run of iterations: its place in SimPy's heap order.
    new_run = ~cont & ((ph == START) | (ph == RESUME))
    st_seq = jnp.where(new_run, st.seq, ins.st_seq[i])
    # The lockstep fork this boundary hands on to the run it anchors (`forks_of`; gap 0: a new run).
    fk_old, fb_old, _ = forks_of(ins.clock[i], ins.it[i], ins.t1[i], ins.alpha[i], ins.beta[i], ins.ev_it[i],
                                 ins.ev_t[i], ins.ev_prev[i], ins.fk_t[i], ins.fk_back[i], ins.g_prev[i])
    fk_old, fb_old = fk_old[0], fb_old[0]
    fk_t = jnp.where(busy_entry, fk_old, ins.fk_t[i])
    fk_back = jnp.where(busy_entry, fb_old, ins.fk_back[i])
    g_prev = jnp.where(busy_entry, new_now - ins.ev_prev[i], jnp.where(new_run, 0.0, ins.g_prev[i]))
    seq = st.seq + (on & new_run)

    K = static.instances
    sel = on & (jnp.arange(K) == i)

    def put(arr, val):  # an elementwise select over [K]: cheaper than a masked scatter
        return jnp.where(sel, jnp.asarray(val).astype(arr.dtype), arr)

    inst = ins._replace(
        phase=put(ins.phase, phase), clock=put(ins.clock, clock), it=put(ins.it, it), nd=put(ins.nd, nd),
        kd=put(ins.kd, kd), na=put(ins.na, na), pa=put(ins.pa, pa),
        t1=put(ins.t1, jnp.where(start, t1, ins.t1[i])), alpha=put(ins.alpha, jnp.where(start, alpha, ins.alpha[i])),
        beta=put(ins.beta, jnp.where(start, beta, ins.beta[i])),
        st_t=put(ins.st_t, jnp.where(new_run, new_now, ins.st_t[i])), st_seq=put(ins.st_seq, st_seq),
        fk_t=put(ins.fk_t, fk_t), fk_back=put(ins.fk_back, fk_back), g_prev=put(ins.g_prev, g_prev),
        fin_min=put(ins.fin_min, fin_min), adm_it=put(ins.adm_it, adm_it), pause_it=put(ins.pause_it, pause_it),
        ev_it=put(ins.ev_it, jnp.where(start, ev_it, BIG)), ev_t=put(ins.ev_t, jnp.where(start, ev_t, jnp.inf)),
        ev_prev=put(ins.ev_prev, jnp.where(start, ev_prev, jnp.inf)), ev_seq=put(ins.ev_seq, st_seq),
        running=put(ins.running, running), kv_used=put(ins.kv_used, kv_used),
        psum=put(ins.psum, ins.psum[i] - jnp.where(has_fin, pr_f, 0) - jnp.where(do_vic, pr_v, 0) + adm_p),
        wq_pos=put(ins.wq_pos, wq_pos + n_adm - do_vic), wq_len=put(ins.wq_len, len2),
    )
    if OD:
        inst = inst._replace(ser=put(ins.ser, ser + n_adm), ser0=put(ins.ser0, ser0), plan=put(ins.plan, need_pre),
                             preempt=put(ins.preempt, ins.preempt[i] + counted))
    # The [K, S] slot arrays: the finished (or preempted) slot takes the last occupied one (which is
    # freed unless an admission refills it) and the admitted calls fill slots run_f.., as element
    # scatters into the carried arrays (no row copy); abort_restart's new finish iterations rewrite the row.
    key_last, len_last, ser_last = key[last], ins.slot_len[i, last], sser[last]
    s_rm = jnp.where(has_fin, s_f, s_v)
    rem = has_fin | do_vic
    move = on & rem & (s_rm != last)
    clear = on & rem & (n_adm == 0)
    cols = jnp.concatenate([jnp.where(move, s_rm, S)[None], jnp.where(clear, last, S)[None],
                            jnp.where(on & adm_v, run_f + kk, S)])
    reads = (ser_last, key_v.astype(jnp.int32) & 0, len_v, top) if OD else ()
    rows = tie(jnp.full(cols.shape, i, jnp.int32), K, key_last.astype(jnp.int32) & 0, len_last, *reads)
    keys = ins.slot_key.at[jnp.where(on & rs, i, K)].set(key, mode="drop")
    inst = inst._replace(
        slot_key=keys.at[rows, cols].set(
            jnp.concatenate([key_last[None], jnp.full(1, KEY_EMPTY, jnp.int64), adm_keys]), mode="drop"),
        slot_len=ins.slot_len.at[rows, cols].set(
            jnp.concatenate([len_last[None], jnp.zeros(1, jnp.int32), hl_v.astype(jnp.int32)]), mode="drop"),
    )
    calls = C
    if OD:
        inst = inst._replace(slot_ser=ins.slot_ser.at[rows, cols].set(
            jnp.concatenate([ser_last[None], jnp.zeros(1, jnp.int32), (ser + 1 + kk).astype(jnp.int32)]),
            mode="drop"))
        # Instance.preempt: the victim goes back to the head of the waiting queue, keeping its tokens
        qrow = jnp.where(on & do_vic, tie(i, K, heads, gens.astype(jnp.int32)), K)
        calls = C._replace(queue=C.queue.at[qrow, wq_pos - 1].set(r_v, mode="drop"),
                           qgen=C.qgen.at[qrow, wq_pos - 1].set(gen_v.astype(jnp.int32), mode="drop"))

    # -- effects on calls, groups, the buffer and the trainer -------------------------------
    Gm = static.max_groups
    fin_on = on & has_fin
    g_f = jnp.maximum(r_f, 0) // n
    done_f, minv_f = Gs.done[g_f], Gs.minv[g_f]
    complete = fin_on & (done_f + 1 == n)
    stale = st.version - minv_f
    drop = ((p.drop_stale == 1) & (stale > p.stale_bound)) | ((p.drop_zero_var == 1) & w.zero_var[workload_group(w, g_f, G)])
    acc = complete & ~drop
    # batch_order 1: buffer positions are laid out by dispatch window (window k at k*batch ..), in
    # acceptance order within it, so the trainer's FIFO pop takes step k's window in buffer order
    win = (g_f // p.batch) * p.batch
    slot = jnp.where(p.batch_window == 1, win + window_buffered(Gs.status, win, p, static), st.buf_tail)
    g_h = jnp.where(on & adm_v, jnp.maximum(heads[:A], 0) // n, Gm)
    groups = Gs._replace(
        done=Gs.done.at[tie(jnp.where(fin_on, g_f, Gm), Gm, done_f)].add(1, mode="drop"),
        status=Gs.status.at[jnp.where(complete, g_f, Gm)].set(jnp.where(drop, G_DROPPED, G_BUFFERED), mode="drop"),
        minv=Gs.minv.at[tie(g_h, Gm, minv_f)].min(st.version, mode="drop"),
        buf=Gs.buf.at[jnp.where(acc, slot, Gm)].set(g_f, mode="drop"),
    )
    trainer, publish = pause_acked(tr, p, new_now, seq, on & do_pause)
    return st._replace(
        inst=inst, calls=calls, groups=groups, trainer=trainer,
        out=st.out._replace(fin_rid=jnp.where(fin_on, r_f, st.out.fin_rid), fin_group=st.out.fin_group | complete,
                            fin_t=jnp.where(fin_on, new_now, st.out.fin_t)), seq=seq + publish,
        accepted=st.accepted + acc, n_running=st.n_running - complete, buf_tail=st.buf_tail + acc,
        buf_live=st.buf_live + acc,
        buf_minv=st.buf_minv.at[jnp.where(acc, minv_f, st.buf_minv.shape[0])].add(1, mode="drop"), cur=jnp.where(on, jnp.where(more, i, -1), st.cur),
    )
