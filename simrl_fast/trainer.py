"""The trainer process (`Trainer.run`, `Weights.publish`, `Weights.pause_all`) as two masked state updates.

`timer_action` fires the trainer's pending timeout: the end of a training step (then the
in-flight rule: schedule the publication, request a pause at every instance's next boundary,
or stop dispatch and drain), the end of a publication (version + 1, resume paused
instances, evict stale buffered groups, open the next step), or, colocated, the end of
``offload_before_s`` (training starts). `trainer_react` is what the trainer does when woken in the
same instant: start the drained publication once no group is in flight, and take the first
``batch`` buffered groups (FIFO, or the step's dispatch window laid out in the buffer by
`instance.buffer_slot`) as the next training batch; a FIFO batch with ``batch_max`` > ``batch``
takes every buffered group up to ``batch_max``; an oldest-dispatch-first batch (``batch_oldest``)
takes those of lowest gid. A publication evicts the buffered groups staler than the bound or
past the record's dispatch age (`age_cut`).

Colocated placement (`Trainer.run`'s colocated branch, `Weights.colocated_rule` /
`colocated_publish`): taking a batch requests a pause at every instance (`request_pause`, under
``Params.rule``, which lowering sets to the colocated rule); once all have acknowledged
(`pause_acked`) the trainer waits ``off_before`` (T_OFFLOAD), trains (the step time computed when
the batch was taken, ``TrainerState.dur``), then waits ``off_after`` (T_PUBLISH, no further pause)
and publishes: version + 1 and every paused instance resumes, as a pausing rule's publication.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast.closed_form import event_of, first_after
from simrl_fast.costs import sample_fwd_flops, train_time
from simrl_fast.lowering import (
    RULE_ABORT_RESTART,
    RULE_ABORT_RESUME,
    RULE_CONTINUE,
    RULE_DRAIN,
    RULE_KEEP_PAUSE,
    workload_group,
)
from simrl_fast.state import (
    BIG,
    BUSY,
    G_BUFFERED,
    G_DROPPED,
    G_EVICTED,
    G_TRAINED,
    IDLE,
    PAUSED,
    RESUME,
    START,
    T_DONE,
    T_DRAIN,
    T_OFFLOAD,
    T_PAUSING,
    T_PUBLISH,
    T_TRAIN,
    T_WAIT,
    zero_pending,
)


def _set(arr, idx, val, on):
    return jnp.where(on, arr.at[idx].set(val, mode="drop"), arr)


def age_cut(st, p):
    """The record's ``max_dispatch_age`` = A at ``st.version`` = v: a group is past it (v - dispatch
    version > A) exactly when its gid < ``pub_disp[v - A]`` (gids are dispatched in order, so the groups
    with a dispatch version below v - A are those dispatched before version v - A was published; none
    when v - A <= 0, ``pub_disp[0]`` = 0). 0 (no gid) when the record has no age (``Params.age`` = 0)."""
    v = st.version - (p.age - 1)
    return jnp.where((p.age > 0) & (v > 0), st.pub_disp[jnp.clip(v, 0, st.pub_disp.shape[0] - 1)], 0)


def evicted(status, minv, p, version, pub, gid=None, cut=None):
    """Buffered groups a publication (``pub``, new ``version``) evicts: staler than the bound (bounded_async's
    eviction) or, given the gids ``gid`` and the publication's `age_cut` ``cut``, past the record's dispatch
    age (`RecordPolicy.on_publish`'s ``drop_buffered``; verl V1's span check)."""
    stale = (p.evict_stale == 1) & (version - minv > p.stale_bound)
    if gid is not None:
        stale = stale | (gid < cut)
    return pub & (status == G_BUFFERED) & stale


def mark_evicted(st, p, static, pub):
    """Set the status of the groups the publication of this step evicted (counted in `timer_action`).

    Done last in the step, as one elementwise select after the step's scatters into ``status``, so
    XLA updates the carried array in place (a select first would make every later scatter copy it)."""
    G = st.groups
    gid, cut = _ages(st, p, static, G.status.shape[0])
    return st._replace(groups=G._replace(status=jnp.where(evicted(G.status, G.minv, p, st.version, pub, gid, cut),
                                                          G_EVICTED, G.status)))


def _ages(st, p, static, size):
    """(gids 0 .. size - 1, `age_cut`) when the batch drops by dispatch age, else (None, None)."""
    if not static.dispatch_age:
        return None, None
    return jnp.arange(size, dtype=jnp.int32), age_cut(st, p)


def window_buffered(status, start, p, static):
    """Buffered groups among gids ``start .. start + batch - 1`` (a dispatch window, batch_order 1)."""
    B = static.max_batch
    seg = jax.lax.dynamic_slice(status, (jnp.clip(start, 0, static.max_groups - B),), (B,))
    shift = start - jnp.clip(start, 0, static.max_groups - B)  # > 0 only for a window past the last slots
    k = jnp.arange(B)
    return jnp.sum(((seg == G_BUFFERED) & (k >= shift) & (k < shift + p.batch)).astype(jnp.int32))


def batch_ready(st, p, static):
    """A batch can be taken: ``batch`` groups buffered (FIFO), or every group of the step's dispatch
    window (gids step*batch .. step*batch + batch - 1) buffered (batch_order 1)."""
    # zero_variance_holds_slot: placeholders are places too, and after a batch of placeholders alone the trainer
    # waits for the next group completion (`SimState.zs_wait`)
    fifo = (st.buf_live + st.zs_live >= p.batch) & ~st.zs_wait
    window = window_buffered(st.groups.status, st.trainer.step * p.batch, p, static) == p.batch
    return jnp.where(p.batch_window == 1, window, fifo)


def request_pause(ins, p, static, pause, now, prev, seq):
    """`Weights.pause_all`'s requests (`Instance.request_pause`) at every active instance when
    ``pause``, during an event with heap key (now, prev, prev, seq): a busy instance pauses at its
    first boundary processed after that event; an idle, woken or resumed one (its process runs
    later in this instant, and pauses at the top of its loop) is paused at once. Returns the
    instances and the acknowledgements still awaited (the busy ones)."""
    active = jnp.arange(static.instances) < p.n_inst
    busy = active & (ins.phase == BUSY) & pause
    quiet = active & ((ins.phase == IDLE) | (ins.phase == START) | (ins.phase == RESUME)) & pause
    j = first_after(ins.clock, ins.t1, ins.alpha, ins.beta, ins.st_t, ins.st_seq, now, prev, prev, seq)
    # a boundary due now after an iteration of zero seconds comes after the trainer's timer and reaction in this
    # instant (`state.zero_pending`; docs/fastpath.md, "Tie rules", 5)
    j = jnp.where(zero_pending(ins, now), 1, j)
    pause_it = jnp.where(busy, ins.it + j, ins.pause_it)
    ev_it, ev_t, ev_prev = event_of(ins.clock, ins.it, ins.t1, ins.alpha, ins.beta, ins.fin_min, ins.adm_it, pause_it)
    inst = ins._replace(
        phase=jnp.where(quiet, PAUSED, ins.phase), pause_it=pause_it, ev_it=jnp.where(busy, ev_it, ins.ev_it),
        ev_t=jnp.where(busy, ev_t, jnp.where(quiet, jnp.inf, ins.ev_t)), ev_prev=jnp.where(busy, ev_prev, ins.ev_prev),
    )
    return inst, jnp.sum(busy.astype(jnp.int32))


def pause_acked(tr, p, now, seq, ack):
    """An instance took its requested pause (``ack``): the last acknowledgement (`pause_all`'s
    ``all_of``) schedules the publication (now + ``sync_s``), or colocated the offload before
    training (now + ``off_before``), with insertion order ``seq``. Returns (trainer, scheduled)."""
    acks = tr.acks - ack
    go = ack & (acks == 0) & (tr.phase == T_PAUSING)
    col = p.colocated == 1
    return tr._replace(
        acks=acks, phase=jnp.where(go, jnp.where(col, T_OFFLOAD, T_PUBLISH), tr.phase),
        timer_t=jnp.where(go, now + jnp.where(col, p.off_before, p.sync_s), tr.timer_t),
        timer_prev=jnp.where(go, now, tr.timer_prev), timer_seq=jnp.where(go, seq, tr.timer_seq),
    ), go


def timer_action(st, p, static, on):
    tr, ins, log = st.trainer, st.inst, st.log
    now, step = st.now, tr.step
    te = on & (tr.phase == T_TRAIN)
    pub = on & (tr.phase == T_PUBLISH)
    off = on & (tr.phase == T_OFFLOAD)  # colocated: offload_before_s is over, training starts
    col = p.colocated == 1
    active = jnp.arange(static.instances) < p.n_inst

    # -- end of a training step: the in-flight rule (colocated: rollout is paused already) -----
    pausing_rule = (p.rule == RULE_KEEP_PAUSE) | (p.rule == RULE_ABORT_RESUME) | (p.rule == RULE_ABORT_RESTART)
    pause = te & pausing_rule & ~col
    ins, n_busy = request_pause(ins, p, static, pause, now, tr.timer_prev, tr.timer_seq)
    to_publish = (te & ((p.rule == RULE_CONTINUE) | col)) | (pause & (n_busy == 0))
    phase = jnp.where(to_publish, T_PUBLISH, tr.phase)
    phase = jnp.where(pause & (n_busy > 0), T_PAUSING, phase)
    phase = jnp.where(te & (p.rule == RULE_DRAIN) & ~col, T_DRAIN, phase)
    phase = jnp.where(off, T_TRAIN, phase)

    # -- end of a publication ----------------------------------------------------------------
    version = st.version + pub
    resume = pub & pausing_rule & active & (ins.phase == PAUSED)
    rank = jnp.cumsum(resume.astype(jnp.int32)) - 1
    seq0 = st.seq + to_publish + off
    new_step = step + pub
    done = new_step >= p.steps
    phase = jnp.where(pub, jnp.where(done, T_DONE, T_WAIT), phase)
    # the groups `evicted` marks (buffered, version - min_version > bound), counted by min_version
    ev_v = pub & (p.evict_stale == 1) & (jnp.arange(st.buf_minv.shape[0]) < version - p.stale_bound)
    n_evict = jnp.sum(jnp.where(ev_v, st.buf_minv, 0), dtype=jnp.int32)
    # the version's publication: gids below pub_disp[version] were dispatched under an older one
    pub_disp = _set(st.pub_disp, version, st.dispatched, pub)
    if static.dispatch_age:  # past the dispatch age or the bound: counted over the group slots (the two overlap)
        G = st.groups
        gid, cut = _ages(st._replace(version=version, pub_disp=pub_disp), p, static, G.status.shape[0])
        n_evict = jnp.sum(evicted(G.status, G.minv, p, version, pub, gid, cut), dtype=jnp.int32)

    inst = ins._replace(
        phase=jnp.where(resume, RESUME, ins.phase),
        ev_t=jnp.where(resume, now, ins.ev_t),
        ev_prev=jnp.where(resume, now, ins.ev_prev),
        ev_seq=jnp.where(resume, seq0 + rank, ins.ev_seq),
    )
    if static.prefix:  # Instance.clear_cache at the publication (swap_in_place, drain: simrl_fast.prefix)
        clr = pub & (p.pc == 1) & (p.pc_clear == 2) & active
        inst = inst._replace(c_floor=jnp.where(clr, inst.c_next, inst.c_floor),
                             cache_tok=jnp.where(clr, 0, inst.cache_tok))
    timed = to_publish | off
    trainer = tr._replace(
        phase=phase, step=new_step, acks=jnp.where(pause, n_busy, tr.acks),
        timer_t=jnp.where(to_publish, now + jnp.where(col, p.off_after, p.sync_s), jnp.where(off, now + tr.dur, tr.timer_t)),
        timer_prev=jnp.where(timed, now, tr.timer_prev), timer_seq=jnp.where(timed, st.seq, tr.timer_seq),
    )
    log = log._replace(
        train_start=_set(log.train_start, step, now, off),
        train_end=_set(log.train_end, step, now, te),
        publish_end=_set(log.publish_end, step, now, pub),
        wait_start=_set(log.wait_start, new_step, now, pub & ~done),
    )
    return st._replace(
        inst=inst, trainer=trainer, log=log, version=version, training=st.training & ~te,
        # Weights._drain and _pause hold dispatch from the end of training until the resume (not colocated:
        # the colocated pause is the trainer's own, dispatch goes on)
        dispatch_paused=jnp.where(te & ~col & ((p.rule == RULE_DRAIN) | pausing_rule), True,
                                  jnp.where(pub, False, st.dispatch_paused)),
        seq=seq0 + jnp.sum(resume.astype(jnp.int32)),
        buf_live=st.buf_live - n_evict,  # their status is set by `mark_evicted` at the end of the step
        # the count of admit_count_since_publish restarts from the groups running or buffered now
        count_off=jnp.where(pub, st.n_running + st.buf_live - n_evict - st.dispatched, st.count_off),
        buf_minv=jnp.where(ev_v, 0, st.buf_minv), evicted_n=st.evicted_n + n_evict, pub_disp=pub_disp,
        wake=st.wake | pub,  # Weights.resume_all and Trainer.finish_step notify (admit_episode_cap)
    )


def disp_first(st):
    """Whether the dispatcher is registered on GroupBook.changed before the trainer, so that a notify runs it first:
    while the trainer waits for its first batch (both processes started at t = 0, the dispatcher first). After a
    step the trainer notifies, then waits on a fresh event before the dispatcher wakes, and goes first from then on
    (`Trainer.run`, `finish_step`). Then, in an instant where both act, the dispatcher admits what the state before
    the batch allows, the trainer takes the batch and notifies, and the dispatcher wakes again after the router has
    routed its first groups (`trainer_react` sets ``hold_t``; `step.route_held`). A dispatcher that last slept with a
    recheck timeout (``admit_window_episodes``: `SimState.win_t` finite) waits on the condition "changed or the
    timeout", whose own event SimPy schedules when the notify runs the condition's check: it then resumes after the
    trainer, so the trainer goes first. Once that timeout has woken it (`SimState.disp_late`), the dispatcher waits on
    ``changed.wait()`` again: the same pending event, its callback now registered after the trainer's, so the trainer
    goes first from then on (diffscan seed 19021). (The one rule for both sides: `step.select`'s order of the
    dispatch and the reaction, and the hold `trainer_react` sets when the first batch forms.)"""
    tr = st.trainer
    return (tr.step == 0) & (tr.phase == T_WAIT) & (st.win_t == jnp.inf) & ~st.disp_late


def trainer_react(st, p, w, static, on, pub):
    """The trainer woken in this instant: start a drained publication, or form the training batch.

    ``pub``: this step ended a publication (a group it evicts is skipped, see `mark_evicted`).

    Batch formation (form_batch, synchronous in SimPy) takes the first ``batch`` live buffered
    groups in FIFO order from a window of ``Static.max_batch`` buffer entries at ``buf_head``
    (tombstones of evicted groups are skipped): one step forms the whole batch unless tombstones
    push it past the window, then the next step continues (``taken``). Training starts at its
    ``batch``-th group.
    """
    tr, G, log = st.trainer, st.groups, st.log
    now, step = st.now, tr.step
    drain_go = on & (tr.phase == T_DRAIN) & (st.n_running == 0)
    forming = on & (tr.phase == T_WAIT) & ((tr.taken > 0) | batch_ready(st, p, static))
    Gm, ng = static.max_groups, static.groups
    W = min(static.max_batch, Gm)
    i32 = jnp.int32
    start = jnp.maximum(jnp.minimum(st.buf_head, Gm - W), 0)  # the window stays inside the buffer array
    pos = start + jnp.arange(W, dtype=i32)
    gid = jax.lax.dynamic_slice(G.buf, (start,), (W,))
    g0 = jnp.maximum(gid, 0)
    cut = age_cut(st, p) if static.dispatch_age else None
    if static.oldest_first:
        # batch_order 2 (verl V1's sorted(buffer, key=gid)[:max]): the live buffered groups of lowest gid, in gid
        # order, found over the group slots (one step forms the whole batch: W >= batch_max)
        gall = jnp.arange(Gm, dtype=i32)
        cand = (G.status == G_BUFFERED) & ~evicted(G.status, G.minv, p, st.version, pub,
                                                   *((gall, cut) if static.dispatch_age else ()))
        first = jnp.nonzero(cand & (jnp.cumsum(cand.astype(i32)) <= W), size=W, fill_value=Gm)[0].astype(i32)
        oldest = p.batch_oldest == 1
        gid = jnp.where(oldest, jnp.where(first < Gm, first, -1), gid)
        g0 = jnp.maximum(gid, 0)
    status, minv = G.status[g0], G.minv[g0]
    live = (forming & (pos >= st.buf_head) & (pos < st.buf_tail) & (status == G_BUFFERED)
            & ~evicted(status, minv, p, st.version, pub, *((g0, cut) if static.dispatch_age else ())))
    if static.oldest_first:
        live = jnp.where(oldest, forming & (gid >= 0), live)
    k = tr.taken
    # zero_variance_holds_slot (fixed-size FIFO batches): a placeholder (a zero-variance drop in the buffer, status
    # G_DROPPED) takes a place of the batch and is consumed with it, untrained; ``taken`` counts places, zs_real the
    # buffered groups among them
    zslot = p.zslot == 1
    zs = zslot & forming & (pos >= st.buf_head) & (pos < st.buf_tail) & (status == G_DROPPED)
    place = live | zs
    # FIFO takes every buffered group up to batch_max (batch_min = batch were buffered): buf_live + taken
    # is the buffer when forming began (nothing else acts until the batch is formed)
    target = jnp.where((p.batch_window == 1) | zslot, p.batch, jnp.minimum(st.buf_live + k, p.batch_max))
    prank = k + jnp.cumsum(place.astype(i32), dtype=i32) - 1  # batch place of each entry
    inb = place & (prank < target)
    take = live & inb
    n_take = jnp.sum(take.astype(i32), dtype=i32)
    n_place = jnp.sum(inb.astype(i32), dtype=i32)
    real0 = jnp.where(zslot, st.zs_real, k)  # buffered groups taken before this step
    rank = real0 + jnp.cumsum(take.astype(i32), dtype=i32) - 1  # batch position of each taken group
    n_real = real0 + n_take
    full = forming & (k + n_place == target)
    empty = full & (n_real == 0)  # placeholders alone: consumed, no batch (PrimeRLPolicy.form_batch returns None)
    n_zs = n_place - n_take
    # the next entry: after the batch's last place when it is complete, else after the window
    head = jnp.where(full, jnp.max(jnp.where(inb, pos, -1)) + 1, start + W)
    wg = workload_group(w, g0, ng)
    comp = log.completion_tokens[step] + jnp.sum(jnp.where(take, w.completion_sum[wg], 0), dtype=jnp.int64)
    seqtok = log.seq_tokens[step] + jnp.sum(jnp.where(take, w.seq_tokens[wg], 0), dtype=jnp.int64)
    fwd_sum, fwd_max = log.fwd_sum[step], log.fwd_max[step]
    if static.formulas & 2:
        # the taken groups' samples' forward FLOPs, added one by one in batch order (window position =
        # batch rank), samples in order, as Python's sum over the batch; an entry not taken adds 0.0
        fwd = sample_fwd_flops(p, static, w.prompt[wg].astype(jnp.int64) + w.completion[wg])  # [W, group size]
        fwd = jnp.where(take[:, None], fwd, 0.0)
        fwd_sum = jax.lax.scan(lambda c, x: (c + x, None), fwd_sum, fwd.reshape(-1))[0]
        fwd_max = jnp.maximum(fwd_max, jnp.max(fwd))
    dur = train_time(p, static, n_real * static.group_size, seqtok, fwd_sum, fwd_max)
    # colocated: the batch taken, every instance pauses (the trainer was woken after every event of
    # this instant, so a busy instance pauses at its first boundary after now); training waits for
    # the acknowledgements, then offload_before_s (at once when no instance is busy)
    col = p.colocated == 1
    formed = full & ~empty
    first_batch = formed & disp_first(st)  # (formed: the trainer waits, tr is st's trainer)
    colo = formed & col
    inst, n_busy = request_pause(st.inst, p, static, colo, now, now, BIG)
    train = formed & ~col
    offload = colo & (n_busy == 0)
    go = drain_go | train | offload
    trainer = tr._replace(
        phase=jnp.where(train, T_TRAIN, jnp.where(drain_go, T_PUBLISH, jnp.where(
            offload, T_OFFLOAD, jnp.where(colo, T_PAUSING, tr.phase)))),
        timer_t=jnp.where(train, now + dur, jnp.where(drain_go, now + p.sync_s,
                                                      jnp.where(offload, now + p.off_before, tr.timer_t))),
        timer_prev=jnp.where(go, now, tr.timer_prev), timer_seq=jnp.where(go, st.seq, tr.timer_seq),
        taken=jnp.where(full, 0, k + n_place), acks=jnp.where(colo, n_busy, tr.acks), dur=jnp.where(formed, dur, tr.dur),
    )
    P, B = static.steps, static.max_batch
    row = jnp.where(take, step, P)
    col = jnp.where(take, rank, B)
    any_take = n_take > 0
    log = log._replace(
        batch_ready=_set(log.batch_ready, step, now, formed), train_start=_set(log.train_start, step, now, train),
        offload_s=_set(log.offload_s, step, p.offload_s, colo),
        gids=log.gids.at[row, col].set(gid, mode="drop"),
        stale=log.stale.at[row, col].set(st.version - minv, mode="drop"),
        completion_tokens=_set(log.completion_tokens, step, comp, any_take),
        seq_tokens=_set(log.seq_tokens, step, seqtok, any_take),
        fwd_sum=_set(log.fwd_sum, step, fwd_sum, any_take), fwd_max=_set(log.fwd_max, step, fwd_max, any_take),
    )
    status = G.status.at[jnp.where(take, g0, Gm)].set(G_TRAINED, mode="drop")
    return st._replace(
        inst=inst, trainer=trainer, log=log, groups=G._replace(status=status), seq=st.seq + go,
        training=st.training | formed, buf_head=jnp.where(forming & (p.batch_oldest == 0), head, st.buf_head),
        buf_live=st.buf_live - n_take,
        buf_minv=st.buf_minv.at[jnp.where(take, minv, st.buf_minv.shape[0])].add(-1, mode="drop"),
        zs_live=st.zs_live - n_zs, zs_real=jnp.where(full, 0, n_real), zs_wait=st.zs_wait | empty,
        wake=st.wake | formed,  # Trainer.run: a batch taken notifies (admit_episode_cap)
        # the first batch: the dispatcher, registered on GroupBook.changed before the trainer, has run in this instant
        # (`disp_first`); the groups it admits after this notify are routed after the instances it woke
        hold_t=jnp.where(first_batch, now, st.hold_t),
        hold_rid=jnp.where(first_batch, jnp.where(st.hold_t == now, jnp.minimum(st.hold_rid, st.dispatched * static.group_size), st.dispatched * static.group_size), st.hold_rid),
    )
