"""The record extension ``fail_on_version_crossing`` (`simrl.policy.params`) in the kernel.

SimPy (`RecordPolicy.on_publish`, `GroupBook.apply`): at each publication every running group with an
unfinished trajectory that already generated under an older version (`simrl.policy.record.crossed`)
fails: it is aborted (`GroupBook.abort_group`: its requests leave the instances' batches and waiting
queues, its tokens are wasted) and, while its retries are below k, its prompt joins the retry queue
(`GroupBook.retry`), which the dispatcher serves before new prompts: a new group (the next gid) with the
same workload group and ``retries + 1``. Dressage without partial rollout (k = ``rollout_max_retries``).

The record extension ``abort_stale_on_publish`` (``Params.stale_abort``) takes the same path: at each
publication the running groups staler than the bound (`stale_running`) are aborted, with no retry (a group
both stale and crossed is aborted: `RecordPolicy.on_publish` lists every aborted group in gid order, then the
re-queued ones, as `_release_entries` orders them). prime-rl's ``max_off_policy_steps`` check of in-flight groups.

Here (``Params.cross`` = k + 1, traced when ``Static.crossing``):

- `note_admitted`: a call's first admission counts for its group (`CrossState.started`); a group is
  crossed at a publication when it is running and ``started > done`` (a call admitted, so its
  trajectory has a ``min_version`` below the new version, and not finished). Under on_demand KV a
  preempted call is admitted again: `CrossState.seen` keeps it from counting twice.
- `fail_crossed`, in the publication's step, after the version advanced and the instances were set to
  resume, before the trainer forms the next batch (SimPy's ``after_publication`` runs in the trainer
  process right after `resume_all`, before any resumed instance runs): the crossed groups are dropped,
  the ones with retries left appended to `CrossState.rq` in gid order (``st.running``'s order), and
  their calls removed from the instances. Lowering takes the rule only where every active instance is
  paused at a publication (a pausing in-flight rule, or colocated placement; under drain nothing runs
  then), so each instance's state is that of its pause boundary, where nothing was admitted: every
  running request decodes (``na = pa = 0``). A removed request leaves ``nd``, ``kd`` (prompt + the
  tokens it generated), ``kv_used`` (prompt + completion reserved, or prompt + generated on demand),
  ``psum`` and ``running``, and its slot (the rows are compacted, the kept requests in slot order);
  removed queued calls leave the waiting queues (compacted in order). The resume entry
  (`instance.instance_action`) then re-anchors each instance from that state, as SimPy's resumed
  process continues from the batch `Instance.remove_group` left.
- `redispatch`: the dispatcher's `start_group` -- a retry takes the head of the queue (its workload
  group, retries + 1), a fresh dispatch prompt ``(dispatched - retried) % G``; ``CrossState.wg`` maps
  every gid to its workload group (`lowering.workload_group`, attached to the workload arrays by
  `with_map`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast import chunked as ch
from simrl_fast.instance import call_lengths, kv_need
from simrl_fast.lowering import RULE_ABORT_RESTART, RULE_ABORT_RESUME, with_group_map
from simrl_fast.prefix import SH_NONE, call_shared, entry_tokens
from simrl_fast.state import (
    BIG,
    G_DROPPED,
    G_RUNNING,
    KEY_EMPTY,
    RESUME,
    admit_max,
    serials,
    unpack_fin,
    unpack_rid,
)


def with_map(w, st, static):
    """The workload arrays with the gid -> workload group map (only when groups can be re-dispatched)."""
    return with_group_map(w, st.cross.wg) if static.crossing else w


def note_admitted(st, pos0, static, on, i):
    """Count the first admissions of instance ``i``'s boundary step (``pos0``: its ``wq_pos`` before the step):
    the calls its waiting queue's head moved past (`Instance.admit` pops them; a preemption moves the head back
    by one and admits nothing in that step)."""
    if not static.crossing:
        return st
    X, n, Gm, A = st.cross, static.group_size, static.max_groups, admit_max(static)
    k = jnp.where(on, st.inst.wq_pos[i] - pos0, 0)
    heads = jax.lax.dynamic_slice(st.calls.queue, (i, pos0), (1, A))[0]
    adm = jnp.arange(A) < k
    first = adm
    seen = X.seen
    if static.on_demand:  # a preempted call comes back through the queue: it counted at its first admission
        first = adm & ~seen[jnp.maximum(heads, 0)]
        seen = seen.at[jnp.where(adm, heads, seen.shape[0])].set(True, mode="drop")
    started = X.started.at[jnp.where(first, jnp.maximum(heads, 0) // n, Gm)].add(1, mode="drop")
    return st._replace(cross=X._replace(started=started, seen=seen))


def note_admitted_local(st, g_h, static):
    """`note_admitted` for the parallel local boundaries (one admission per instance and round, ``g_h`` its group
    or Gm; their configurations have no on_demand KV, so every admission is a first one)."""
    if not static.crossing:
        return st
    X = st.cross
    return st._replace(cross=X._replace(started=X.started.at[g_h].add(1, mode="drop")))


def redispatch(st, ok, gid, static):
    """`GroupBook.start_group` for group ``gid`` (dispatched when ``ok``): the retry queue's head first (its
    workload group, retries + 1), else the next fresh prompt."""
    if not static.crossing:
        return st
    X, Gm = st.cross, static.max_groups
    retry = ok & (X.rq_head < X.rq_tail)
    old = jnp.maximum(X.rq[jnp.minimum(X.rq_head, Gm - 1)], 0)
    wg = jnp.where(retry, X.wg[old], (gid - X.retried) % static.groups)
    tries = jnp.where(retry, X.retries[old] + 1, 0)
    at = jnp.where(ok, gid, Gm)
    return st._replace(cross=X._replace(
        wg=X.wg.at[at].set(wg, mode="drop"), retries=X.retries.at[at].set(tries, mode="drop"),
        rq_head=X.rq_head + retry, retried=X.retried + retry))


def fail_crossed(st, p, w, static, pub):
    """The publication of this step (``pub``) fails the crossed running groups (module doc)."""
    if not static.crossing:
        return st
    G, X, ins, C = st.groups, st.cross, st.inst, st.calls
    Gm, n, K, S, NG = static.max_groups, static.group_size, static.instances, static.slots, static.groups
    i32, i64 = jnp.int32, jnp.int64
    running = G.status == G_RUNNING
    stale = pub & (p.stale_abort > 0) & running & stale_running(G.minv, st, p, Gm)
    vcross = pub & (p.cross > 0) & running & (X.started > G.done)
    crossed = stale | vcross  # every group leaving: RecordPolicy.on_publish's abort_running + requeue_running
    requeue = vcross & ~stale & (X.retries < p.cross - 1)
    at = X.rq_tail + jnp.cumsum(requeue.astype(i32)) - 1
    rq = X.rq.at[jnp.where(requeue, at, Gm)].set(jnp.arange(Gm, dtype=i32), mode="drop")
    n_fail = jnp.sum(crossed.astype(i32))

    # -- running requests of failed groups leave their slots (Instance.release at the pause boundary) --
    CH, PX = static.chunked_prefill, static.prefix
    rows = jnp.arange(K)[:, None]
    key = ins.slot_key
    occ = key < KEY_EMPTY
    rid = jnp.where(occ, unpack_rid(key), 0)
    g_s = rid // n
    gone = occ & crossed[g_s]
    prompt = call_lengths(w, rid, n, NG)[0]
    length = ins.slot_len.astype(i64)
    if CH:  # a request still prefilling keeps what it had when admitted
        gen = ch.generated_of(key, length, ins.it[:, None])
        pfl = ch.prefilling(key)
    else:  # every running request decodes at the pause boundary
        gen = length - (unpack_fin(key) - ins.it[:, None]).astype(i64)  # Instance.generated_of
        pfl = jnp.zeros_like(occ)
    held = kv_need(p, prompt, length, gen)  # private KV (reserve: the whole completion)
    if PX:  # a holder of its group's shared prefix holds it by reference, not privately
        held = held - jnp.where(ins.slot_sh != SH_NONE, call_shared(w, rid, n, NG), 0)
    dec, pre = gone & ~pfl, gone & pfl
    cnt = jnp.sum(gone.astype(i32), axis=1)
    keep = occ & ~gone
    to = jnp.where(keep, jnp.cumsum(keep.astype(i32), axis=1) - 1, S)  # compacted, in slot order

    def compact(row, empty):
        return jnp.where(pub, jnp.full(row.shape, empty, row.dtype).at[rows, to].set(row, mode="drop"), row)

    inst = ins._replace(
        nd=ins.nd - jnp.sum(dec.astype(i32), axis=1), kd=ins.kd - jnp.sum(jnp.where(dec, prompt + gen, 0), axis=1),
        kv_used=ins.kv_used - jnp.sum(jnp.where(gone, held, 0), axis=1),
        psum=ins.psum - jnp.sum(jnp.where(gone, prompt, 0), axis=1), running=ins.running - cnt,
        slot_key=compact(key, KEY_EMPTY), slot_len=compact(ins.slot_len, 0),
    )
    if ins.slot_ser.shape[1] == S:  # admission serials (Instance.plan's victim is the newest)
        inst = inst._replace(slot_ser=compact(ins.slot_ser, 0))
    if CH:
        # still prefilling requests (na, their prompt + generated tokens pa) leave the prefill line: each owns
        # the stretch from the previous one's end (or pq_done) to its own (slot_pos); the kept stretches close up
        pos = ins.slot_pos
        prev = jax.lax.cummax(jnp.where(pfl, pos, -1), axis=1)
        prev = jnp.concatenate([jnp.full((K, 1), -1, prev.dtype), prev[:, :-1]], axis=1)
        # (only in a row that loses one: elsewhere, e.g. a busy instance under continue, the line stays as it is)
        cut = jnp.any(pre, axis=1)
        rem = jnp.where(pfl & keep, pos - jnp.maximum(prev, ins.pq_done[:, None]), 0)
        new_pos = jnp.where(cut[:, None] & pfl & keep, ins.pq_done[:, None] + jnp.cumsum(rem, axis=1), pos)
        inst = inst._replace(
            na=ins.na - jnp.sum(pre.astype(i32), axis=1), pa=ins.pa - jnp.sum(jnp.where(pre, prompt + gen, 0), axis=1),
            pq_tail=jnp.where(cut, ins.pq_done + jnp.sum(rem, axis=1), ins.pq_tail),
            slot_pos=compact(new_pos, 0), slot_pr=compact(ins.slot_pr, 0))
    if PX:
        fields, freed, ssh = _release_entries(ins, p, w, static, pub, crossed, requeue, occ, g_s)
        inst = inst._replace(slot_sh=compact(ssh, 0), kv_used=inst.kv_used - freed, **fields)

    # -- queued calls of failed groups leave the waiting queues (in order; Static.cross_window >= any length) --
    W, Q = static.cross_window, C.queue.shape[1]
    qpos = ins.wq_pos[:, None] + jnp.arange(W)[None, :]
    q_at = jnp.minimum(qpos, Q - 1)
    ent = C.queue[rows, q_at]
    inq = jnp.arange(W)[None, :] < ins.wq_len[:, None]
    keepq = inq & ~crossed[jnp.where(inq, jnp.maximum(ent, 0) // n, 0)]
    toq = jnp.where(keepq, jnp.cumsum(keepq.astype(i32), axis=1) - 1, W)
    wrows = jnp.where(pub, rows, K)

    def compact_q(arr, empty):
        win = jnp.full((K, W), empty, arr.dtype).at[rows, toq].set(arr[rows, q_at], mode="drop")
        return arr.at[wrows, qpos].set(win, mode="drop")

    calls = C._replace(queue=compact_q(C.queue, -1))
    if C.qgen.shape[1] == Q:  # a preempted call's kept tokens move with it
        calls = calls._replace(qgen=compact_q(C.qgen, 0))
    # (a configuration that fails nothing may hold longer queues than the window: only removals count)
    inst = inst._replace(wq_len=ins.wq_len - jnp.sum((inq & ~keepq).astype(i32), axis=1))

    return st._replace(
        inst=inst, calls=calls, groups=G._replace(status=jnp.where(crossed, G_DROPPED, G.status)),
        n_running=st.n_running - n_fail,
        overflow=st.overflow | (pub & ((p.cross > 0) | (p.stale_abort > 0)) & jnp.any(ins.wq_len > W)),  # never, by the bound (a safety net)
        cross=X._replace(rq=rq, rq_tail=X.rq_tail + jnp.sum(requeue.astype(i32))),
    )


def stale_running(minv, st, p, Gm):
    """[Gm] the groups whose staleness at the new version ``st.version`` exceeds the bound (`GroupRecord.staleness`):
    version - min_version > bound for a group with an admitted call, else its dispatch version is below
    version - bound, i.e. its gid below ``pub_disp[version - bound]`` (none when version - bound <= 0; gids go in
    dispatch order, `trainer.age_cut`). ``abort_stale_on_publish`` (prime-rl's ``max_off_policy_steps``)."""
    v = st.version - p.stale_bound
    cut = jnp.where(v > 0, st.pub_disp[jnp.clip(v, 0, st.pub_disp.shape[0] - 1)], 0)
    admitted = minv < BIG
    return jnp.where(admitted, st.version - minv > p.stale_bound, jnp.arange(Gm, dtype=jnp.int32) < cut)


def clears_at_publication(p):
    """Whether a publication's `Instance.clear_cache` is applied by `fail_crossed` (at the publication) rather
    than at each instance's resume entry: under a pausing rule that aborts nothing (keep_pause, colocated
    without an abort rule), where SimPy clears the caches in `pause_all`, before the failed groups' entries
    join them. (Under abort_resume/abort_restart the resume entry releases the aborted requests first.)"""
    return ((p.cross > 0) | (p.stale_abort > 0)) & (p.pc_clear == 1) & (p.rule != RULE_ABORT_RESUME) & (p.rule != RULE_ABORT_RESTART)


def _release_entries(ins, p, w, static, pub, crossed, requeue, occ, g_s):
    """The shared prefixes at a publication that fails groups (``Instance.release``'s last reference).

    Under keep_pause (and colocated without an abort rule) every reference of a failed group on an instance
    leaves with it, so its entry leaves the KV and joins the cache at its MRU end. SimPy releases group by
    group, the aborted ones first (`PublishActions.abort_running`), then the re-queued ones, each in gid order
    (``st.running``'s), one entry per instance and group: the LRU serials follow that order. The cache was
    cleared at the pause before (`clears_at_publication`: done here, before they join).

    Under abort_resume/abort_restart SimPy released every running request at the pause (`Instance.abort_all`,
    in admission order: an entry joins the cache at its last holder's release) and the failed groups then
    leave the waiting queues. The resume entry (`instance.instance_action`) would release the requests still
    running then; here every holder is released at once instead, with the serials the resume entry gives
    (``c_next`` + admission serial; with chunked prefill the slot index, before the failed ones leave), so the
    failed groups' entries sit among the others in that order; the resume entry then finds nothing held (and
    clears the cache when the sync rule says so).

    Returns (the InstState fields, [K] the KV the entries free, [K, S] the slots' holds_shared after it)."""
    i32, Gm, S = jnp.int32, static.max_groups, static.slots
    tokg = entry_tokens(w, static)
    ref = ins.sh_ref > 0  # [K, Gm]: Instance.shared holds the group's entry
    ent = ref & crossed[None, :]  # a failed group's entry on the instance
    freed = jnp.sum(jnp.where(ent, tokg[None, :], 0), axis=1)
    abort_rule = (p.rule == RULE_ABORT_RESUME) | (p.rule == RULE_ABORT_RESTART)
    on = pub & (p.pc == 1) & ((p.cross > 0) | (p.stale_abort > 0))
    put, ab_on = on & ~abort_rule, on & abort_rule
    clr = pub & clears_at_publication(p) & (ins.phase == RESUME)
    c_floor = jnp.where(clr, ins.c_next, ins.c_floor)
    cache = jnp.where(clr, 0, ins.cache_tok)
    ab = crossed & ~requeue
    order = jnp.where(ab, jnp.cumsum(ab.astype(i32)) - 1, jnp.sum(ab.astype(i32)) + jnp.cumsum(requeue.astype(i32)) - 1)
    c_ser = jnp.where(put & ent, ins.c_next[:, None] + order[None, :], ins.c_ser)
    c_next = ins.c_next + jnp.where(put, jnp.sum(crossed.astype(i32)), 0)
    # abort rules: every holder released, in admission order
    sser = ins.slot_ser if serials(static) else jnp.broadcast_to(jnp.arange(S, dtype=i32), occ.shape)
    hold = occ & (ins.slot_sh != SH_NONE)
    rows = jnp.arange(ins.c_ser.shape[0])[:, None]
    c_ab = ins.c_ser.at[rows, jnp.where(hold, g_s, Gm)].max(ins.c_next[:, None] + sser, mode="drop")
    c_ser = jnp.where(ab_on, c_ab, c_ser)
    all_tok = jnp.sum(jnp.where(ref, tokg[None, :], 0), axis=1)
    cache = cache + jnp.where(put, freed, jnp.where(ab_on, all_tok, 0))
    c_next = jnp.where(ab_on, ins.c_next + ins.ser + 1, c_next)
    fields = dict(sh_ref=jnp.where(ab_on | ent, 0, ins.sh_ref), c_ser=c_ser, c_floor=c_floor, c_next=c_next,
                  cache_tok=cache)
    return fields, jnp.where(ab_on, all_tok, freed), jnp.where(ab_on, SH_NONE, ins.slot_sh)
