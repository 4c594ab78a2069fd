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
3. close when nothing is left: start the next iteration (new closed form and next event),
   go idle, or stay paused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast.closed_form import event_of, forks_of
from simrl_fast.costs import rollout_times
from simrl_fast.lowering import RULE_ABORT_RESTART, RULE_ABORT_RESUME
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
    """(prompt, completion) of call ``r`` (sample r % n of dispatched group r // n)."""
    rr = jnp.maximum(r, 0)
    wg, s = (rr // n) % G, rr % n
    return w.prompt[wg, s].astype(jnp.int64), w.completion[wg, s].astype(jnp.int64)


def fits(p, wq_len, running, kv_used, prompt, length):
    """Instance.try_admit under reserve KV: a slot is free and prompt + completion fits."""
    return (wq_len > 0) & (running < p.max_seqs) & (kv_used + prompt + length <= p.kv_cap)


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

    # -- 2. primary action -----------------------------------------------------------------
    # The boundary's lowest key is its next finish in heap order (finish iteration, rid); the
    # second lowest tells whether another request finishes here too (two plain min reductions and
    # one for the slot: the row is read, never rewritten, and updated by a few scatters below).
    sidx = jnp.arange(S)
    k1 = jnp.min(key)
    has_fin = unpack_fin(k1) == it
    k2 = jnp.min(jnp.where(key == k1, KEY_EMPTY, key))
    nfin = jnp.where(has_fin, jnp.where(unpack_fin(k2) == it, 2, 1), 0)  # 2: two or more
    r_f = jnp.where(has_fin, unpack_rid(k1), -1)
    s_f = jnp.min(jnp.where(key == k1, sidx, S))
    last = jnp.maximum(running - 1, 0)  # the last occupied slot: it moves into s_f
    pr_f, len_f = call_lengths(w, r_f, n, G)
    tok_f = pr_f + len_f
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
    hp_v, hl_v = call_lengths(w, heads[:A], n, G)
    tok_v = hp_v + hl_v
    kk = jnp.arange(A)
    ok = (kk < wq_len) & (run_f + kk < p.max_seqs) & (kv_f + jnp.cumsum(tok_v) <= p.kv_cap)
    n_adm = jnp.where((nfin <= 1) & ~pausing, jnp.min(jnp.where(ok, A, kk)), 0)
    adm_v = kk < n_adm
    adm_p = jnp.sum(jnp.where(adm_v, hp_v, 0))
    adm_tok = jnp.sum(jnp.where(adm_v, tok_v, 0))

    running = running - has_fin + n_adm
    nd = nd - has_fin
    kd = kd - jnp.where(has_fin, tok_f, 0)
    kv_used = kv_used - jnp.where(has_fin, tok_f, 0) + adm_tok
    na = na + n_adm
    pa = pa + adm_p
    head2 = heads[n_adm]
    len2 = wq_len - n_adm
    pause_it = jnp.where(do_pause, BIG, pause_it)

    # -- 3. close ---------------------------------------------------------------------------
    h2p, h2l = call_lengths(w, head2, n, G)
    paused = do_pause | (cont & (ph == PAUSED))
    more = (nfin > 1) | (~paused & pausing & ~do_pause) | (~paused & ~pausing & fits(p, len2, running, kv_used, h2p, h2l))
    close = ~more
    start = close & ~paused & (running > 0)
    b1n = nd + na
    k1n = kd + nd + pa + na
    dt0, alpha, beta = rollout_times(p, static, nd, kd, pa, b1n, k1n)  # simrl_fast.costs: the cost model's formula
    t1 = clock + dt0
    adm_keys = jnp.where(adm_v, pack(it + hl_v, heads[:A]), KEY_EMPTY)
    fin_min = unpack_fin(jnp.minimum(jnp.where(has_fin, k2, k1), jnp.min(adm_keys)))
    ev_it, ev_t, ev_prev = event_of(clock, it, t1, alpha, beta, fin_min, BIG, BIG)
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
        fin_min=put(ins.fin_min, fin_min), adm_it=put(ins.adm_it, BIG), pause_it=put(ins.pause_it, pause_it),
        ev_it=put(ins.ev_it, jnp.where(start, ev_it, BIG)), ev_t=put(ins.ev_t, jnp.where(start, ev_t, jnp.inf)),
        ev_prev=put(ins.ev_prev, jnp.where(start, ev_prev, jnp.inf)), ev_seq=put(ins.ev_seq, st_seq),
        running=put(ins.running, running), kv_used=put(ins.kv_used, kv_used),
        psum=put(ins.psum, ins.psum[i] - jnp.where(has_fin, pr_f, 0) + adm_p),
        wq_pos=put(ins.wq_pos, wq_pos + n_adm), wq_len=put(ins.wq_len, len2),
    )
    # The [K, S] slot arrays: the finished slot takes the last occupied one (which is freed unless
    # an admission refills it) and the admitted calls fill slots run_f.., as element scatters into
    # the carried arrays (no row copy); abort_restart's new finish iterations rewrite the row.
    key_last, len_last = key[last], ins.slot_len[i, last]
    move = on & has_fin & (s_f != last)
    clear = on & has_fin & (n_adm == 0)
    cols = jnp.concatenate([jnp.where(move, s_f, S)[None], jnp.where(clear, last, S)[None],
                            jnp.where(on & adm_v, run_f + kk, S)])
    rows = tie(jnp.full(cols.shape, i, jnp.int32), K, key_last.astype(jnp.int32) & 0, len_last)
    keys = ins.slot_key.at[jnp.where(on & rs, i, K)].set(key, mode="drop")
    inst = inst._replace(
        slot_key=keys.at[rows, cols].set(
            jnp.concatenate([key_last[None], jnp.full(1, KEY_EMPTY, jnp.int64), adm_keys]), mode="drop"),
        slot_len=ins.slot_len.at[rows, cols].set(
            jnp.concatenate([len_last[None], jnp.zeros(1, jnp.int32), hl_v.astype(jnp.int32)]), mode="drop"),
    )

    # -- effects on calls, groups, the buffer and the trainer -------------------------------
    Gm = static.max_groups
    fin_on = on & has_fin
    g_f = jnp.maximum(r_f, 0) // n
    done_f, minv_f = Gs.done[g_f], Gs.minv[g_f]
    complete = fin_on & (done_f + 1 == n)
    stale = st.version - minv_f
    drop = ((p.drop_stale == 1) & (stale > p.stale_bound)) | ((p.drop_zero_var == 1) & w.zero_var[g_f % G])
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
        inst=inst, groups=groups, trainer=trainer,
        out=st.out._replace(fin_rid=jnp.where(fin_on, r_f, st.out.fin_rid), fin_group=st.out.fin_group | complete,
                            fin_t=jnp.where(fin_on, new_now, st.out.fin_t)), seq=seq + publish,
        accepted=st.accepted + acc, n_running=st.n_running - complete, buf_tail=st.buf_tail + acc,
        buf_live=st.buf_live + acc,
        buf_minv=st.buf_minv.at[jnp.where(acc, minv_f, st.buf_minv.shape[0])].add(1, mode="drop"), cur=jnp.where(on, jnp.where(more, i, -1), st.cur),
    )
