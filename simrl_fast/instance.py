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

Chunked prefill (`Params.token_budget`, `simrl_fast.chunked`): the anchor iteration prefills the next
chunk of the instance's prefill line, ``na``/``pa`` are the requests it completes, and a boundary whose
iteration prefills is always visited; with the chunked code traced the slot rows are kept in admission
order and rewritten once per step.

KV under ``on_demand`` (`Params.od`): a request holds prompt + generated tokens, so at the anchor
``kv_used = kd + pa`` and after j iterations ``kv_used + j * (nd + na)``; admission needs prompt +
generated (a preempted request's `CallState.qgen`), and `Instance.plan` preempts before the
iteration after boundary j when ``kv + n_decoding > capacity``, first at `preempt_boundary`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast import chunked as ch
from simrl_fast.closed_form import event_of, forks_of
from simrl_fast.costs import rollout_times
from simrl_fast.lowering import RULE_ABORT_RESTART, RULE_ABORT_RESUME, workload_group
from simrl_fast.prefix import SH_HIT, SH_NONE, call_shared, classify, entry_tokens, evict_lru
from simrl_fast.state import (
    BIG,
    BUSY,
    G_BUFFERED,
    G_DROPPED,
    IDLE,
    KEY_EMPTY,
    PAUSED,
    PF_BASE,
    RESUME,
    START,
    admit_max,
    materialize,
    pack,
    queued_gen,
    row_min,
    serials,
    tie,
    unpack_fin,
    unpack_rid,
)
from simrl_fast.trainer import age_cut, pause_acked, window_buffered


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


def fits_routed(p, static, ins, j, prompt, length, hit=0):
    """Whether a call routed now to a busy instance with an empty queue is admitted at its boundary
    ``it + j`` (``j``: `first_after` now, per instance): the instance's KV then, nothing finishing before.
    ``hit``: its shared prefix tokens when a running request of its group holds them there (the prefix
    cache: whatever the cache holds, the call fits when KV + its need does, evicting the rest)."""
    kv = kv_after(p, ins.kv_used, ins.nd, ins.na, j) if static.on_demand else ins.kv_used
    return fits(p, 1, ins.running, kv, kv_need(p, prompt, length, 0) - hit)


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
    PX = static.prefix  # some configuration of the batch shares prompt prefixes (simrl_fast.prefix)
    CH = static.chunked_prefill  # some configuration has a token budget (simrl_fast.chunked; else not traced)
    SER = serials(static)
    # [S] int32: admission serials (with the chunked code the slots are in admission order: their index)
    sser = ins.slot_ser[i] if SER else (jnp.arange(S, dtype=jnp.int32) if CH else jnp.zeros(S, jnp.int32))
    od = (p.od == 1) & OD
    in_plan = cont & ins.plan[i] & OD  # this step is one turn of Instance.plan's preemption loop
    if CH:
        pq_done, pq_tail, spos, pr_s = ins.pq_done[i], ins.pq_tail[i], ins.slot_pos[i], ins.slot_pr[i]
    pcx = (p.pc == 1) & PX
    Gm, K = static.max_groups, static.instances
    if PX:
        r_row, c_row = ins.sh_ref[i], ins.c_ser[i]  # [Gm]: Instance.shared's references, the cache's LRU serials
        c_next, c_floor, cache = ins.c_next[i], ins.c_floor[i], ins.cache_tok[i]
        phit, ssh = ins.ph[i], ins.slot_sh[i]
        tokg = entry_tokens(w, static)

    # -- 1. entry --------------------------------------------------------------------------
    busy_entry = ~cont & (ph == BUSY)
    j = (ins.ev_it[i] - it).astype(jnp.int64)
    b1, k1 = (nd + na).astype(jnp.int64), kd + nd + pa + na
    clock = jnp.where(cont, clock, new_now)
    it = jnp.where(busy_entry, ins.ev_it[i], it)
    nd = jnp.where(busy_entry, (nd + na), nd)
    kd = jnp.where(busy_entry, k1 + (j - 1) * b1, kd)
    # chunked prefill: those the anchor iteration did not complete are still prefilling, the line advanced
    na = jnp.where(busy_entry, ins.nw[i] if CH else 0, na)
    pa = jnp.where(busy_entry, ins.wkv[i] if CH else 0, pa)
    if CH:
        pq_done = jnp.where(busy_entry, pq_done + ins.pf[i], pq_done)
    late_n = jnp.int32(0)
    if CH and PX:
        # the anchor iteration left only requests with nothing to prefill, and the one after it (not visited:
        # it prefills nothing, SimPy continues its run there) completed them: they decode from this boundary,
        # the first one SimPy anchors after them (its decoding batch changed)
        late = busy_entry & ins.zlate[i] & (j == 2)
        late_n = jnp.where(late, ins.nw[i], 0)
        nd = nd + late_n
        kd = kd + jnp.where(late, ins.wkv[i] + late_n, 0)
        na = jnp.where(late, 0, na)
        pa = jnp.where(late, 0, pa)
        key = jnp.where(late & ch.prefilling(key), key - ((PF_BASE - (it - 1).astype(jnp.int64)) << 32), key)
    occ = key < KEY_EMPTY
    res_entry = ~cont & (ph == RESUME)
    # the prefix cache re-admits aborted requests through the queue (`Instance.abort_all` then `admit`): a
    # request that kept tokens no longer shares its prefix, so the KV and the prefill change (below)
    requeue = res_entry & pcx & ((p.rule == RULE_ABORT_RESUME) | (p.rule == RULE_ABORT_RESTART))
    ab = res_entry & (p.rule == RULE_ABORT_RESUME) & ~requeue
    rs = res_entry & (p.rule == RULE_ABORT_RESTART) & ~requeue
    sum_prompt = ins.psum[i]
    pa = jnp.where(ab, kd + pa, jnp.where(rs, sum_prompt + pa, pa))
    na = jnp.where(ab | rs, nd + na, na)
    kd = jnp.where(ab | rs, 0, kd)
    nd = jnp.where(ab | rs, 0, nd)
    if CH:  # every running request re-prefills, in admission (= slot) order, on a new line
        key_ab, pos_ab, line = ch.reprefill_row(key, ins.slot_len[i], pr_s, it, rs, occ)
        key = jnp.where(ab | rs, key_ab, key)
        spos = jnp.where(ab | rs, pos_ab, spos)
        pa = jnp.where(ab | rs, line, pa)
        pq_done = jnp.where(ab | rs, 0, pq_done)
        pq_tail = jnp.where(ab | rs, line, pq_tail)
    else:
        key = jnp.where(rs & occ, pack(it + ins.slot_len[i], unpack_rid(key)), key)
    # on_demand: every running request holds prompt + generated (a restarted one its prompt only)
    if PX:  # a shared prefix is held once: the KV grows by B1 per iteration from the anchor's
        kv_pc = kv_used + jnp.where(busy_entry & od, j * b1 + late_n, 0)
        kv_used = jnp.where(od & ~cont & ~pcx, kd + pa, jnp.where(pcx, kv_pc, kv_used))
        phit = jnp.where(busy_entry, 0, phit)
    else:
        kv_used = jnp.where(od & ~cont, kd + pa, kv_used)
    # running requests admitted after ser0 are prefilling (after an abort every one re-prefills)
    ser0 = jnp.where(cont, ser0, jnp.where(ab | rs, 0, ser))
    rq_n = jnp.int32(0)
    if PX:
        # Instance.abort_all, then Weights.abort_instance's appendleft: every running request released in
        # admission order (each group's entry goes to the cache at its last holder's release) and written back
        # at the head of the waiting queue with the tokens it keeps (none for abort_restart); this step does
        # only that (the admission follows in the next one, as SimPy's resumed loop admits from the queue)
        rq = requeue & (running > 0)
        rq_n = jnp.where(rq, running, 0)
        if CH:
            gen_s = ch.generated_of(key, ins.slot_len[i], it).astype(jnp.int32)
        else:
            gen_s = ins.slot_len[i].astype(jnp.int32) - (unpack_fin(key) - it)  # Instance.generated_of
        gen_s = jnp.where(p.rule == RULE_ABORT_RESTART, 0, gen_s)
        if CH:  # the slots are in admission order already
            q_rid, q_gen = unpack_rid(key), gen_s
        else:  # one sort of packed (serial, slot) keys (a sort carrying several arrays is far slower on CPU)
            order = (jnp.sort(jnp.where(occ, sser, BIG).astype(jnp.int64) * S + jnp.arange(S)) % S).astype(jnp.int32)
            q_rid, q_gen = unpack_rid(key)[order], gen_s[order]
        g_s = unpack_rid(key) // n
        rel = rq & occ & (ssh != SH_NONE)
        c_row = jnp.where(rq, c_row.at[jnp.where(rel, g_s, Gm)].max(c_next + sser, mode="drop"), c_row)
        cache = cache + jnp.where(rq, jnp.sum(jnp.where(r_row > 0, tokg, 0)), 0)
        r_row = jnp.where(rq, 0, r_row)
        c_next = c_next + jnp.where(rq, ser + 1, 0)
        # Instance.clear_cache after pause_all's aborts (every pausing rule, colocated steps)
        clr = res_entry & pcx & (p.pc_clear == 1)
        if static.crossing:  # crossing.fail_crossed clears it at the publication, before failed groups' entries join
            clr = clr & ~(((p.cross > 0) | (p.stale_abort > 0)) & (p.rule != RULE_ABORT_RESUME)
                          & (p.rule != RULE_ABORT_RESTART))
        c_floor = jnp.where(clr, c_next, c_floor)
        cache = jnp.where(clr, 0, cache)
        running = running - rq_n
        nd, na = jnp.where(rq, 0, nd), jnp.where(rq, 0, na)
        kd, pa, phit = jnp.where(rq, 0, kd), jnp.where(rq, 0, pa), jnp.where(rq, 0, phit)
        kv_used = jnp.where(rq, 0, kv_used)
        if CH:
            pq_done, pq_tail = jnp.where(rq, 0, pq_done), jnp.where(rq, 0, pq_tail)
        ser0 = jnp.where(rq, ser, ser0)
        key = jnp.where(rq, KEY_EMPTY, key)
        occ = key < KEY_EMPTY

    # -- 2. primary action -----------------------------------------------------------------
    # The boundary's lowest key is its next finish in heap order (finish iteration, rid); the
    # second lowest tells whether another request finishes here too (two plain min reductions and
    # one for the slot: the row is read, never rewritten, and updated by a few scatters below).
    sidx = jnp.arange(S)
    k1 = row_min(key)
    has_fin = unpack_fin(k1) == it
    s_f = row_min(jnp.where(key == k1, sidx, S))
    # Instance.plan's victim: the newest admitted running request (max admit_serial)
    if CH:  # the slots are in admission order: the newest is the last occupied one
        top, s_v = jnp.int32(-1), jnp.where(running > 0, running - 1, S).astype(jnp.int32)
    elif OD:  # one reduction: serials are distinct, so (serial, slot) packed gives both
        top_sv = jnp.max(jnp.where(occ, sser.astype(jnp.int64) * S + sidx, -1))
        top, s_v = (top_sv // S).astype(jnp.int32), jnp.where(top_sv < 0, S, top_sv % S).astype(jnp.int32)
    else:
        top, s_v = jnp.int32(-1), jnp.int32(S)
    do_vic = in_plan & od & (running > 0)
    if PX:  # the plan evicts the whole cache before it preempts
        do_vic = do_vic & (~pcx | (kv_used + nd > p.kv_cap))
    # the lowest key left once this step's finish or victim is gone (the second lowest after a finish)
    k2 = row_min(jnp.where(jnp.where(has_fin, key == k1, do_vic & (sidx == s_v)), KEY_EMPTY, key))
    nfin = jnp.where(has_fin, jnp.where(unpack_fin(k2) == it, 2, 1), 0)  # 2: two or more
    r_f = jnp.where(has_fin, unpack_rid(k1), -1)
    last = jnp.maximum(running - 1, 0)  # the last occupied slot: it moves into s_f (or s_v)
    pr_f, len_f = call_lengths(w, r_f, n, G)
    tok_f = pr_f + len_f
    key_v = key[jnp.minimum(s_v, S - 1)]
    len_v = ins.slot_len[i, jnp.minimum(s_v, S - 1)]
    r_v = jnp.where(do_vic, unpack_rid(key_v), -1)
    pr_v, _ = call_lengths(w, r_v, n, G)
    if CH:
        gen_v = ch.generated_of(key_v, len_v, it)
        pf_v = ch.prefilling(key_v)  # still prefilling: the last stretch of the line
    else:
        gen_v = len_v.astype(jnp.int64) - (unpack_fin(key_v) - it).astype(jnp.int64)  # Instance.generated_of
        pf_v = sser[jnp.minimum(s_v, S - 1)] > ser0  # still prefilling (admitted at this anchor)
    tok_v = jnp.where(do_vic, pr_v + gen_v, 0)
    counted = do_vic & (nd > 0)  # a resumed batch over capacity (nd = 0) was never re-admitted in SimPy
    pausing = pause_it <= it
    do_pause = ~has_fin & pausing
    # KV a finish and a preemption free (Instance.release): the private KV, and the shared prefix with the
    # last reference (its entry then goes to the cache's MRU end)
    rel_f, rel_v = jnp.where(has_fin, tok_f, 0), tok_v
    if PX:
        sh_f, g_f0 = call_shared(w, r_f, n, G), jnp.maximum(r_f, 0) // n
        sh_v, g_v0 = call_shared(w, r_v, n, G), jnp.maximum(r_v, 0) // n
        hold_f = has_fin & (ssh[jnp.minimum(s_f, S - 1)] != SH_NONE)
        hold_v = do_vic & (ssh[jnp.minimum(s_v, S - 1)] != SH_NONE)
        hit_v = do_vic & (ssh[jnp.minimum(s_v, S - 1)] == SH_HIT)
        ref_f, ref_v = r_row[g_f0] - hold_f, r_row[g_v0] - hold_v
        free_f, free_v = hold_f & (ref_f == 0), hold_v & (ref_v == 0)
        rel_f = rel_f - jnp.where(hold_f & ~free_f, sh_f, 0)
        rel_v = rel_v - jnp.where(hold_v & ~free_v, sh_v, 0)
        # Instance.plan's evictions (a plan step) or those of the plans run since the anchor (entry, on_demand):
        # the LRU entries until the decoding tokens fit, at most the whole cache
        d1 = jnp.where(in_plan, kv_used + nd + cache - p.kv_cap,
                       jnp.where(busy_entry & (j >= 2), kv_used - late_n + cache - p.kv_cap, 0))
        d1 = jnp.where(pcx & od, jnp.minimum(d1, cache), 0)
        r_row = r_row.at[jnp.where(hold_f, g_f0, Gm)].add(-1, mode="drop").at[
            jnp.where(hold_v, g_v0, Gm)].add(-1, mode="drop")
        c_row = c_row.at[jnp.where(free_f, g_f0, Gm)].set(c_next, mode="drop").at[
            jnp.where(free_v, g_v0, Gm)].set(c_next + free_f, mode="drop")
        new_g = jnp.where(free_f, g_f0, jnp.where(free_v, g_v0, -1))
        c_next = c_next + free_f + free_v
        cache = cache + jnp.where(free_f, sh_f, 0) + jnp.where(free_v, sh_v, 0)
        gidx = jnp.arange(Gm, dtype=jnp.int32)
        live = c_row >= c_floor
        gone1, e1 = evict_lru(c_row, c_floor, c_next, tokg, gidx == new_g, d1)
        cache = cache - e1
    # Admission: the longest prefix of the waiting queue that fits, up to A calls in this step
    # (Instance.try_admit's loop; the rest, if it still fits, in the next step of this boundary).
    # It follows the boundary's last finish in the same step (finishes come first, in rid order).
    run_f = running - has_fin
    kv_f = kv_used - rel_f
    A = admit_max(static)
    # the waiting queue's first A + 1 calls: one contiguous window of this instance's queue row
    heads = jax.lax.dynamic_slice(C.queue, (i, wq_pos), (1, A + 1))[0]
    gens = (jax.lax.dynamic_slice(C.qgen, (i, wq_pos), (1, A + 1))[0].astype(jnp.int64) if queued_gen(static)
            else jnp.zeros(A + 1, jnp.int64))
    hp_v, hl_v = call_lengths(w, heads[:A], n, G)
    need_v = kv_need(p, hp_v, hl_v, gens[:A])
    kk = jnp.arange(A)
    if PX:
        # with the prefix cache: the calls that fit without evicting (KV + cache), or the head alone, evicting
        # (it fits when KV + its need with the shared prefix, unless referenced, does: make_room keeps its entry)
        h_sh, h_g, share, insh, inca = classify(pcx, heads, gens, n, G, w, r_row, live & ~gone1)
        hp_a, hl_a = call_lengths(w, heads, n, G)
        kv_add = kv_need(p, hp_a, hl_a, gens) - jnp.where(insh, h_sh, 0)  # Instance.kv_used grows by this
        need_free = kv_add - jnp.where(inca, h_sh, 0)  # ... and KV + cache by this
        fit_kv = ((kv_f + cache + jnp.cumsum(need_free[:A]) <= p.kv_cap)
                  | ((kk == 0) & (kv_f + kv_add[0] <= p.kv_cap)))
        need_v = kv_add[:A]
    else:
        fit_kv = kv_f + jnp.cumsum(need_v) <= p.kv_cap
    ok = (kk < wq_len) & (run_f + kk < p.max_seqs) & fit_kv
    adm_go = (nfin <= 1) & ~pausing & ~in_plan
    if PX:
        adm_go = adm_go & (rq_n == 0)
    n_adm = materialize(jnp.where(adm_go, jnp.min(jnp.where(ok, A, kk)), 0))
    adm_v = kk < n_adm
    adm_p = jnp.sum(jnp.where(adm_v, hp_v, 0))
    adm_pf = jnp.sum(jnp.where(adm_v, hp_v + gens[:A], 0))  # prefill: prompt + tokens to recompute
    adm_kv = jnp.sum(jnp.where(adm_v, need_v, 0))
    if PX:
        # make_room for the head when it did not fit as it was: LRU entries but its own
        d2 = jnp.where(n_adm >= 1, kv_f + cache + need_free[0] - p.kv_cap, 0)
        keep = jnp.where(inca[0], h_g[0], -1)
        gone2, e2 = evict_lru(c_row, c_floor, c_next, tokg, gone1 | (gidx == keep), d2)
        gone = gone1 | gone2
        adm_sh, adm_ca = adm_v & share[:A], adm_v & inca[:A]
        cache = cache - e2 - jnp.sum(jnp.where(adm_ca, h_sh[:A], 0))
        phit = phit + jnp.sum(jnp.where(adm_v & (insh[:A] | inca[:A]), h_sh[:A], 0)) - jnp.where(
            pf_v & hit_v, sh_v, 0)
        r_row = r_row.at[jnp.where(adm_sh, h_g[:A], Gm)].add(1, mode="drop")
        c_row = jnp.where(gone, 0, c_row).at[jnp.where(adm_ca, h_g[:A], Gm)].set(0, mode="drop")
        adm_shv = jnp.where(adm_sh, jnp.where(insh[:A] | inca[:A], SH_HIT, SH_NONE + 1), SH_NONE)
        adm_hit = jnp.where(adm_v & (insh[:A] | inca[:A]), h_sh[:A], 0)  # [A]: prompt tokens not prefilled

    running = running - has_fin - do_vic + n_adm
    nd = nd - has_fin - (do_vic & ~pf_v)
    kd = kd - jnp.where(has_fin, tok_f, 0) - jnp.where(~pf_v, tok_v, 0)
    kv_used = kv_used - rel_f - rel_v + adm_kv
    na = na + n_adm - (do_vic & pf_v)
    pa = pa + adm_pf - jnp.where(pf_v, tok_v, 0)
    if CH:  # a preempted prefilling request is the line's last stretch; the admitted calls extend it
        # (with the prefix cache a stretch is the prefill: prompt + tokens to recompute - the hit shared prefix)
        pq_tail = pq_tail - jnp.where(do_vic & pf_v, tok_v - (jnp.where(hit_v, sh_v, 0) if PX else 0), 0)
        pq_done = jnp.minimum(pq_done, pq_tail)
        adm_pf_k = jnp.where(adm_v, hp_v + gens[:A] - (adm_hit if PX else 0), 0)
        adm_pos = pq_tail + jnp.cumsum(adm_pf_k)
        pq_tail = pq_tail + jnp.sum(adm_pf_k)
    head2 = heads[n_adm]
    len2 = wq_len - n_adm + do_vic + rq_n
    pause_it = jnp.where(do_pause, BIG, pause_it)

    # -- 3. close ---------------------------------------------------------------------------
    h2p, h2l = call_lengths(w, head2, n, G)
    need2 = jnp.where(do_vic, tok_v, kv_need(p, h2p, h2l, gens[n_adm]))  # the queue's head after this step
    if PX:  # the head's need with its shared prefix (the victim's: it shares again if it kept no token)
        share_v = pcx & (sh_v > 0) & (gen_v == 0)
        need2 = jnp.where(do_vic, tok_v - jnp.where(share_v & (ref_v > 0), sh_v, 0), kv_add[n_adm])
    paused = do_pause | (cont & (ph == PAUSED))
    adm_more = ~paused & ~pausing & ~in_plan & fits(p, len2, running, kv_used, need2)
    # Instance.plan (on_demand): the next tokens of the decoding sequences do not fit -> preempt, one per step
    over = od & (running > 0) & (kv_used + nd + (cache if PX else 0) > p.kv_cap)  # (it evicts the cache first)
    need_pre = over & ~paused & ~pausing & (nfin <= 1) & ~adm_more
    restart = do_vic & (running == 0)  # plan emptied the batch: admit again (Instance.run's `continue`)
    more = (nfin > 1) | (~paused & pausing & ~do_pause) | adm_more | need_pre | restart | (rq_n > 0)
    close = ~more
    start = close & ~paused & (running > 0)
    s_rm = jnp.where(has_fin, s_f, s_v)
    rem = has_fin | do_vic
    if CH:
        # the slot rows in admission order: the finished (or preempted) slot removed, the admitted calls
        # appended (prefilling); then the anchor iteration's chunks (`Instance.plan`) complete a front part of
        # the line, whose requests decode from here (the split is kept only when the iteration starts)
        row_k = ch.append(ch.remove_shift(key, s_rm, rem, KEY_EMPTY), run_f, n_adm,
                          ch.prefill_key(hl_v - gens[:A], heads[:A]))
        row_l = ch.append(ch.remove_shift(ins.slot_len[i], s_rm, rem, 0), run_f, n_adm, hl_v)
        row_p = ch.append(ch.remove_shift(spos, s_rm, rem, 0), run_f, n_adm, adm_pos)
        row_pr = ch.append(ch.remove_shift(pr_s, s_rm, rem, 0), run_f, n_adm, hp_v)
        if PX:  # each running request's hit shared prefix (on the KV side of a request, not on the line)
            row_sh = ch.append(ch.remove_shift(ssh, s_rm, rem, 0), run_f, n_adm, adm_shv)
            row_rid = jnp.where(row_k < KEY_EMPTY, unpack_rid(row_k), -1)
            hits = jnp.where(row_sh == SH_HIT, call_shared(w, row_rid, n, G), 0)
            zero = (hits > 0) & (hits == row_pr)  # nothing to prefill
            pf, na_c, pa_c, nw, wkv, row_c, again, zl = ch.plan_chunks(p, it, nd, kd, na, pa, pq_done, pq_tail,
                                                                       row_k, row_p, hits, zero)
            zl = start & zl
        else:
            pf, na_c, pa_c, nw, wkv, row_c, again = ch.plan_chunks(p, it, nd, kd, na, pa, pq_done, pq_tail, row_k,
                                                                   row_p)
        na, pa = jnp.where(start, na_c, na), jnp.where(start, pa_c, pa)
        nw, wkv, pf = jnp.where(start, nw, 0), jnp.where(start, wkv, 0), jnp.where(start, pf, 0)
        row_k = jnp.where(start, row_c, row_k)
    else:  # unchunked: the anchor iteration prefills every admitted request (but a prompt's hit shared prefix)
        pf = pa - phit if PX else pa
    b1n = nd + na
    k1n = kd + nd + pa + na
    dt0, alpha, beta = rollout_times(p, static, nd, kd, pf, b1n, k1n)  # simrl_fast.costs: the cost model's formula
    t1 = clock + dt0
    adm_keys = jnp.where(adm_v, pack(it + hl_v - gens[:A], heads[:A]), KEY_EMPTY)
    # the batch's own next event: its earliest finish, or the boundary where on_demand KV runs out
    if CH:  # or the next boundary, when its iteration prefills too (a prefill iteration anchors a run)
        fin_min = jnp.minimum(ch.next_finish(row_k), jnp.where(start & again, it + 1, BIG))
        if PX:  # ... or the boundary after the next, when the next iteration completes only prefills of nothing
            fin_min = jnp.minimum(fin_min, jnp.where(zl, it + 2, BIG))
    else:
        fin_min = unpack_fin(jnp.minimum(k2, jnp.min(adm_keys)))
    fin_min = materialize(fin_min)
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

    def put(arr, val):  # an elementwise select over [K]: cheaper than a masked scatter (the value computed once)
        return jnp.where(sel, materialize(jnp.asarray(val).astype(arr.dtype)), arr)

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
        psum=put(ins.psum, jnp.where(rq_n > 0, 0, ins.psum[i] - jnp.where(has_fin, pr_f, 0)
                                     - jnp.where(do_vic, pr_v, 0) + adm_p)),
        wq_pos=put(ins.wq_pos, wq_pos + n_adm - do_vic - rq_n), wq_len=put(ins.wq_len, len2),
        # an anchor iteration of zero seconds (`state.zero_pending`): the calls dispatched by the end of this turn
        z_rid=put(ins.z_rid, jnp.where(start & (t1 == clock), st.dispatched * n, ins.z_rid[i])),
    )
    if OD or PX:
        inst = inst._replace(ser=put(ins.ser, ser + n_adm), ser0=put(ins.ser0, ser0))
    if OD:
        inst = inst._replace(plan=put(ins.plan, need_pre), preempt=put(ins.preempt, ins.preempt[i] + counted))
    if PX:
        inst = inst._replace(ph=put(ins.ph, phit), c_next=put(ins.c_next, c_next), c_floor=put(ins.c_floor, c_floor),
                             cache_tok=put(ins.cache_tok, cache),
                             sh_ref=ins.sh_ref.at[jnp.where(on, i, K)].set(r_row, mode="drop"),
                             c_ser=ins.c_ser.at[jnp.where(on, i, K)].set(c_row, mode="drop"))
    if CH:  # the rows built above, one row write each (their values depend on the rows read: in place)
        row_i = jnp.where(on, i, K)
        inst = inst._replace(
            pq_done=put(ins.pq_done, pq_done), pq_tail=put(ins.pq_tail, pq_tail), pf=put(ins.pf, pf),
            nw=put(ins.nw, nw), wkv=put(ins.wkv, wkv),
            slot_key=ins.slot_key.at[row_i].set(row_k, mode="drop"),
            slot_len=ins.slot_len.at[row_i].set(row_l.astype(jnp.int32), mode="drop"),
            slot_pos=ins.slot_pos.at[row_i].set(row_p, mode="drop"),
            slot_pr=ins.slot_pr.at[row_i].set(row_pr.astype(jnp.int32), mode="drop"))
        if PX:
            inst = inst._replace(slot_sh=ins.slot_sh.at[row_i].set(row_sh.astype(jnp.int32), mode="drop"),
                                 zlate=put(ins.zlate, zl))
    else:
        # The [K, S] slot arrays: the finished (or preempted) slot takes the last occupied one (which is
        # freed unless an admission refills it) and the admitted calls fill slots run_f.., as element
        # scatters into the carried arrays (no row copy); abort_restart's new finish iterations rewrite the row.
        key_last, len_last, ser_last = key[last], ins.slot_len[i, last], sser[last]
        move = on & rem & (s_rm != last)
        clear = on & rem & (n_adm == 0)
        cols = jnp.concatenate([jnp.where(move, s_rm, S)[None], jnp.where(clear, last, S)[None],
                                jnp.where(on & adm_v, run_f + kk, S)])
        reads = (ser_last, key_v.astype(jnp.int32) & 0, len_v, top) if OD else ()
        if PX:
            sh_last = ssh[last]
            reads = (*reads, sh_last, ssh[jnp.minimum(s_f, S - 1)], ssh[jnp.minimum(s_v, S - 1)])
        rows = tie(jnp.full(cols.shape, i, jnp.int32), K, key_last.astype(jnp.int32) & 0, len_last, *reads)
        keys = ins.slot_key.at[jnp.where(on & (rs | (rq_n > 0)), i, K)].set(key, mode="drop")
        inst = inst._replace(
            slot_key=keys.at[rows, cols].set(
                jnp.concatenate([key_last[None], jnp.full(1, KEY_EMPTY, jnp.int64), adm_keys]), mode="drop"),
            slot_len=ins.slot_len.at[rows, cols].set(
                jnp.concatenate([len_last[None], jnp.zeros(1, jnp.int32), hl_v.astype(jnp.int32)]), mode="drop"),
        )
        if PX:
            inst = inst._replace(slot_sh=ins.slot_sh.at[rows, cols].set(
                jnp.concatenate([sh_last[None], jnp.zeros(1, jnp.int32), adm_shv.astype(jnp.int32)]), mode="drop"))
    calls = C
    if SER:  # (with chunked prefill traced the slots are in admission order: no serials kept)
        inst = inst._replace(slot_ser=ins.slot_ser.at[rows, cols].set(
            jnp.concatenate([ser_last[None], jnp.zeros(1, jnp.int32), (ser + 1 + kk).astype(jnp.int32)]),
            mode="drop"))
    if PX:
        # the aborted requests re-queued in admission order at wq_pos - running .. wq_pos - 1 (their slots are free)
        sidx32 = jnp.arange(S, dtype=jnp.int32)
        qrows = jnp.where(on & (sidx32 < rq_n), tie(jnp.full(S, i, jnp.int32), K, heads, gens.astype(jnp.int32)), K)
        calls = calls._replace(queue=calls.queue.at[qrows, wq_pos - rq_n + sidx32].set(q_rid, mode="drop"),
                               qgen=calls.qgen.at[qrows, wq_pos - rq_n + sidx32].set(q_gen, mode="drop"))
    if OD:
        # Instance.preempt: the victim goes back to the head of the waiting queue, keeping its tokens
        qrow = jnp.where(on & do_vic, tie(i, K, heads, gens.astype(jnp.int32)), K)
        calls = calls._replace(queue=calls.queue.at[qrow, wq_pos - 1].set(r_v, mode="drop"),
                               qgen=calls.qgen.at[qrow, wq_pos - 1].set(gen_v.astype(jnp.int32), mode="drop"))

    # -- effects on calls, groups, the buffer and the trainer -------------------------------
    Gm = static.max_groups
    fin_on = on & has_fin
    g_f = jnp.maximum(r_f, 0) // n
    done_f, minv_f = Gs.done[g_f], Gs.minv[g_f]
    complete = fin_on & (done_f + 1 == n)
    stale = st.version - minv_f
    stale_drop = (p.drop_stale == 1) & (stale > p.stale_bound)
    zero = (p.drop_zero_var == 1) & (w.reward_std[workload_group(w, g_f, G)] <= p.zv_tol)
    drop = stale_drop | zero
    if static.dispatch_age:  # past the record's max_dispatch_age (traced only when a configuration has one)
        drop = drop | (g_f < age_cut(st, p))
    acc = complete & ~drop
    # zero_variance_holds_slot: a zero-variance drop (the engine's staleness drop comes first) keeps its place in
    # the FIFO as a placeholder (status G_DROPPED in the buffer: `trainer.trainer_react`)
    zs = complete & (p.zslot == 1) & zero & ~stale_drop
    put = acc | zs
    # zero_variance_stop_groups: zero-variance groups in a row among those reaching the record's filter (after the
    # engine's staleness drop); an accepted group restarts the count, a drop by dispatch age leaves it
    seen_zero = complete & zero & ~stale_drop
    zrow = jnp.where(seen_zero, st.zrow + 1, jnp.where(acc, 0, st.zrow))
    # batch_order 1: buffer positions are laid out by dispatch window (window k at k*batch ..), in
    # acceptance order within it, so the trainer's FIFO pop takes step k's window in buffer order
    win = (g_f // p.batch) * p.batch
    wbuf = window_buffered(Gs.status, win, p, static)
    slot = jnp.where(p.batch_window == 1, win + wbuf, st.buf_tail)
    g_h = jnp.where(on & adm_v, jnp.maximum(heads[:A], 0) // n, Gm)
    groups = Gs._replace(
        done=Gs.done.at[tie(jnp.where(fin_on, g_f, Gm), Gm, done_f)].add(1, mode="drop"),
        status=Gs.status.at[tie(jnp.where(complete, g_f, Gm), Gm, wbuf)].set(jnp.where(drop, G_DROPPED, G_BUFFERED), mode="drop"),
        minv=Gs.minv.at[tie(g_h, Gm, minv_f)].min(st.version, mode="drop"),
        buf=Gs.buf.at[jnp.where(put, slot, Gm)].set(g_f, mode="drop"),
    )
    trainer, publish = pause_acked(tr, p, new_now, seq, on & do_pause)
    if static.window:  # admit_window_refund: a completion takes its episodes back off the window's count
        st = st._replace(win_adm=jnp.where(complete & (p.win_refund == 1), jnp.maximum(st.win_adm - n, 0),
                                           st.win_adm))
    return st._replace(
        inst=inst, calls=calls, groups=groups, trainer=trainer,
        out=st.out._replace(fin_rid=jnp.where(fin_on, r_f, st.out.fin_rid), fin_group=st.out.fin_group | complete,
                            fin_t=jnp.where(fin_on, new_now, st.out.fin_t)), seq=seq + publish,
        accepted=st.accepted + acc, n_running=st.n_running - complete, buf_tail=st.buf_tail + put,
        zs_live=st.zs_live + zs, zs_wait=st.zs_wait & ~complete,  # a completion notifies the waiting trainer
        wake=st.wake | complete,  # GroupBook.finish_group: changed.notify() (admit_episode_cap)
        zrow=zrow, zstop=st.zstop | (seen_zero & (p.zv_stop > 0) & (zrow >= p.zv_stop)),
        buf_live=st.buf_live + acc,
        buf_minv=st.buf_minv.at[jnp.where(acc, minv_f, st.buf_minv.shape[0])].add(1, mode="drop"), cur=jnp.where(on, jnp.where(more, i, -1), st.cur),
    )
