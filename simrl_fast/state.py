"""Typed JAX state of the fast engine, leaf by leaf mirroring the SimPy engine's objects.

Shapes use K = Static.instances, S = Static.slots, Gm = Static.max_groups, R = Gm * n (call
slots; call r is sample r % n of dispatched group r // n), P = Static.steps, B = Static.max_batch.
Every array is one configuration's; `vmap` adds the leading batch axis outside the model.

Times are float64 seconds, counters int32, token sums int64. "Anchor" is an instance's last
processed iteration boundary: between anchors the instance is advanced in closed form (see
docs/fastpath.md); boundaries where nothing observable happens are never visited.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax.numpy as jnp

BIG = 2**30  # "never" for int32 iteration counts and sequence numbers
KEY_EMPTY = (BIG << 32) | (2**32 - 1)  # a free slot's key: after every real key, finish iteration BIG
#: chunked prefill: a request still prefilling has the slot key `pack`(PF_BASE + tokens left to generate, rid),
#: after every decoding request's key and before KEY_EMPTY; the boundary whose iteration completes its
#: prefill subtracts PF_BASE - it (simrl_fast.chunked)
PF_BASE = BIG // 2


def pack(fin, rid):
    """A running request's slot key: its finish iteration in the high 32 bits, its rid in the low
    ones, so the smallest key is the next finish in heap order (finish iteration, then rid)."""
    return (jnp.asarray(fin).astype(jnp.int64) << 32) | jnp.asarray(rid).astype(jnp.int64)


def unpack_fin(key):
    return (key >> 32).astype(jnp.int32)


def unpack_rid(key):
    return (key & (2**32 - 1)).astype(jnp.int32)

def _local_rounds() -> int:
    v = os.environ.get("SIMRL_FAST_LOCAL_ROUNDS", "0").strip() or "0"
    if not v.isdigit():
        raise ValueError(f"SIMRL_FAST_LOCAL_ROUNDS={v!r}: expected a whole number >= 0 (rounds of parallel local "
                         "boundaries per scan step; 0 turns them off)")
    return int(v)


#: rounds of parallel local boundaries per scan step (`step.local_phase`), before the step's one action;
#: read when a program is traced (set it before the first run, or call `jax.clear_caches()` after changing
#: it). 0 (the default): off -- on CPU the rounds cost more than the steps they save (docs/fastpath.md)
LOCAL_ROUNDS = _local_rounds()

# instance phases (Instance.run's position in its loop)
IDLE, BUSY, PAUSED, START, RESUME = 0, 1, 2, 3, 4
# per-instance weight sync (simrl_fast.perinst): Weights.pull's timeout is pending
PULL = 5
# group status (where a GroupRecord lives)
G_FREE, G_RUNNING, G_BUFFERED, G_DROPPED, G_TRAINED, G_EVICTED = 0, 1, 2, 3, 4, 5
# trainer phases (Trainer.run / Weights.publish; T_OFFLOAD: colocated, the timeout of offload_before_s)
T_WAIT, T_TRAIN, T_PUBLISH, T_PAUSING, T_DRAIN, T_DONE, T_OFFLOAD = 0, 1, 2, 3, 4, 5, 6


class InstState(NamedTuple):
    """The K rollout instances (`simrl.engine.instance.Instance`)."""

    phase: jnp.ndarray  # [K] int32: IDLE (waits on wake_ev), BUSY (in an iteration), PAUSED (waits on
    #                     resume_ev), START (wake_ev triggered, not yet run), RESUME (resume_ev triggered)
    clock: jnp.ndarray  # [K] f64: env.now at the anchor boundary
    it: jnp.ndarray  # [K] int32: Instance.it at the anchor (iterations completed)
    nd: jnp.ndarray  # [K] int32: Instance.n_decoding at the anchor
    kd: jnp.ndarray  # [K] int64: Instance.kv_decode_sum at the anchor
    na: jnp.ndarray  # [K] int32: len(Instance.prefilling) admitted at the anchor (chunked prefill: those the
    #                  anchor iteration completes; `nw` are still prefilling after it)
    pa: jnp.ndarray  # [K] int64: their prompt + generated tokens (unchunked: the anchor iteration's prefill_tokens;
    #                  chunked: `pf`)
    t1: jnp.ndarray  # [K] f64: end of the anchor iteration (its env.timeout)
    alpha: jnp.ndarray  # [K] f64: duration of the iteration after it (rollout_cost.iteration_time)
    beta: jnp.ndarray  # [K] f64: growth of the duration per iteration (c * n_decoding)
    st_t: jnp.ndarray  # [K] f64: when this run of iterations began (woken or resumed; kept across boundaries)
    st_seq: jnp.ndarray  # [K] int32: its insertion order then (orders instances whose boundaries coincide)
    fk_t: jnp.ndarray  # [K] f64: lockstep fork inherited at the anchor: the last boundary up to it whose
    #                    gap (time since the boundary before) differs from the gap after it (`forks_of`)
    fk_back: jnp.ndarray  # [K] f64: the boundary before fk_t (when fk_t's timeout was scheduled)
    g_prev: jnp.ndarray  # [K] f64: the anchor's own gap (0: a new run, scheduled when woken)
    fin_min: jnp.ndarray  # [K] int32: the next boundary the batch itself makes observable: min(Instance.finish_heap[0]
    #                       + 1, the boundary whose Instance.plan preempts under on_demand KV); BIG: none
    adm_it: jnp.ndarray  # [K] int32: boundary that admits a request routed mid-iteration (BIG: none)
    pause_it: jnp.ndarray  # [K] int32: boundary that takes the requested pause (pause_ack set; BIG: none)
    ev_it: jnp.ndarray  # [K] int32: next observable boundary = min(fin_min, adm_it, pause_it)
    ev_t: jnp.ndarray  # [K] f64: its time (inf: no event)
    ev_prev: jnp.ndarray  # [K] f64: time its timeout was scheduled (tie-break, SimPy heap order)
    ev_seq: jnp.ndarray  # [K] int32: st_seq (BUSY) or the wake's insertion order (START, RESUME)
    running: jnp.ndarray  # [K] int32: len(Instance.running)
    kv_used: jnp.ndarray  # [K] int64: Instance.kv_used at the anchor (reserve: prompt + completion per request;
    #                       on_demand: prompt + generated, = kd + pa)
    wq_pos: jnp.ndarray  # [K] int32: position in CallState.queue of the head of Instance.waiting
    wq_len: jnp.ndarray  # [K] int32: len(Instance.waiting) (the tail is at wq_pos + wq_len - 1)
    slot_key: jnp.ndarray  # [K, S] int64: Instance.running as finish_heap keys: `pack`(Instance.it at which
    #                        the request finishes (heap key + 1), rid); KEY_EMPTY: free. The occupied slots
    #                        are always 0..running-1 (a finish moves the last one into its slot)
    slot_len: jnp.ndarray  # [K, S] int32: Request.completion_tokens (for abort_restart; stale when free)
    psum: jnp.ndarray  # [K] int64: prompt tokens of the running requests (re-prefilled by abort_restart)
    # -- on_demand KV (Instance.plan's preemptions; simrl_fast.instance) --
    slot_ser: jnp.ndarray  # [K, S] int32: Request.admit_serial of each running request (the newest is preempted)
    ser: jnp.ndarray  # [K] int32: Instance.admit_serial (admissions so far)
    ser0: jnp.ndarray  # [K] int32: admit_serial before the anchor's admissions: running requests above it are
    #                    prefilling (0 after an abort: every resumed request re-prefills)
    plan: jnp.ndarray  # [K] bool: the boundary is in Instance.plan's preemption loop (admission is over)
    preempt: jnp.ndarray  # [K] int32: Instance.preemptions
    # -- chunked prefill (max_num_batched_tokens > 0; simrl_fast.chunked) --
    # Instance.prefilling is a line of prefill tokens in admission order: each admitted request appends its
    # prefill (prompt + tokens to recompute) at pq_tail, and every iteration prefills the next chunk from
    # pq_done (Instance.plan's chunks, in that order); a request is prefilling while its slot key is
    # >= PF_BASE. With the chunked code traced the slots are kept in admission order (a finish shifts the
    # later ones down), so the newest running request is the last slot.
    pq_done: jnp.ndarray  # [K] int64: prefill tokens of the line done before the anchor iteration
    pq_tail: jnp.ndarray  # [K] int64: end of the line (pq_tail - pq_done: Instance.prefilling's prefill_remaining)
    pf: jnp.ndarray  # [K] int64: tokens the anchor iteration prefills (its chunks)
    nw: jnp.ndarray  # [K] int32: requests still prefilling after the anchor iteration (na/pa: those it completes)
    wkv: jnp.ndarray  # [K] int64: their prompt + generated tokens
    slot_pos: jnp.ndarray  # [K, S] int64: end of each running request's prefill on the line (stale once decoding)
    slot_pr: jnp.ndarray  # [K, S] int32: each running request's prompt tokens (an abort re-prefills them)
    # -- prefix cache (Params.pc; simrl_fast.prefix; [K, 1] stubs and zeros when Static.prefix is off) --
    ph: jnp.ndarray  # [K] int64: prefix-hit tokens of the requests admitted at the anchor (their prefill is pa - ph)
    slot_sh: jnp.ndarray  # [K, S] int32: Request.holds_shared of each running request: 0 no, 1 yes (it allocated
    #                       the entry: prefilled the whole prompt), 2 yes, its prompt hit the shared prefix
    sh_ref: jnp.ndarray  # [K, Gm] int32: Instance.shared[gid][1], references to a group's shared prefix
    c_ser: jnp.ndarray  # [K, Gm] int32: LRU serial of the group's entry in Instance.cache (live when >= c_floor)
    c_next: jnp.ndarray  # [K] int32: the next serial (above every live one: the MRU end)
    c_floor: jnp.ndarray  # [K] int32: serials below it were cleared (Instance.clear_cache)
    cache_tok: jnp.ndarray  # [K] int64: Instance.cache_tokens
    zlate: jnp.ndarray  # [K] bool: chunked prefill: the requests still prefilling after the anchor iteration all
    #                     have nothing to prefill (whole prompt hit) and complete in the next one (simrl_fast.prefix)
    z_rid: jnp.ndarray  # [K] int32: calls dispatched (SimState.dispatched * n) when the instance began its current run
    #                     with an iteration of zero seconds (`zero_pending`); read only while that boundary is pending


class CallState(NamedTuple):
    """Per dispatched call (`Request`), indexed by dispatch serial (rid)."""

    queue: jnp.ndarray  # [K, R + admit_max + 1] int32: the calls routed to each instance, in routing order
    #                     (Instance.waiting is entries wq_pos .. wq_pos + wq_len - 1; admission reads one
    #                     window of admit_max + 1 entries, which the padding keeps inside the row); a preempted
    #                     request is written back at wq_pos - 1 (Instance.waiting.appendleft)
    qgen: jnp.ndarray  # [K, R + admit_max + 1] int32: Request.generated of each queue entry (tokens a preempted
    #                    request keeps and re-prefills; 0 for a routed call)


class StepOut(NamedTuple):
    """What one step emits (the scan's ys; the per-call and per-group results are assembled from
    them outside the loop, so no call-sized result array is written inside it)."""

    fin_rid: jnp.ndarray  # int32: call that finished (CallRecord.finish set; -1: none)
    fin_t: jnp.ndarray  # f64: its finish time (env.now)
    fin_group: jnp.ndarray  # bool: it completed its group (GroupRecord.finish_time = fin_t)
    route_rid: jnp.ndarray  # [n] int32: calls routed, in order (Request.instance set; -1: none)
    route_inst: jnp.ndarray  # [n] int32: the instance each was routed to
    par_rid: jnp.ndarray  # [LOCAL_ROUNDS * K] int32: calls finished by the step's parallel local boundaries
    #                       (`step.local_phase`; -1: none; none completes its group), one per round and instance
    par_t: jnp.ndarray  # [LOCAL_ROUNDS * K] f64: their finish times


class GroupState(NamedTuple):
    """Per dispatched group (`GroupRecord`), indexed by gid; plus the FIFO buffer."""

    status: jnp.ndarray  # [Gm] int32: G_* (st.running / st.buffer / dropped / trained)
    done: jnp.ndarray  # [Gm] int32: finished calls (TrajRecord.finish_time set)
    minv: jnp.ndarray  # [Gm] int32: GroupRecord.min_version (BIG until a call is admitted)
    buf: jnp.ndarray  # [Gm] int32: gids in buffer-entry order (PipelineState.buffer, with tombstones)


class TrainerState(NamedTuple):
    """`Trainer.run` and `Weights.publish` (one process) with its pending timeout."""

    phase: jnp.ndarray  # int32: T_* (waiting for a batch, training, publishing, pausing, draining, done)
    step: jnp.ndarray  # int32: st.steps_done
    timer_t: jnp.ndarray  # f64: its pending env.timeout (train end or publish end)
    timer_prev: jnp.ndarray  # f64: when that timeout was scheduled
    timer_seq: jnp.ndarray  # int32: its insertion order
    acks: jnp.ndarray  # int32: pause acknowledgements still awaited (pause_all)
    taken: jnp.ndarray  # int32: groups of the batch being formed taken so far (form_batch, one per step)
    dur: jnp.ndarray  # f64: the formed batch's training step time (colocated: trained after the pause and offload)


class StepLog(NamedTuple):
    """Per training step (`StepRecord`), P rows."""

    wait_start: jnp.ndarray  # [P] f64
    batch_ready: jnp.ndarray  # [P] f64
    train_start: jnp.ndarray  # [P] f64 (= batch_ready, disaggregated; colocated: after the pause and offload_before_s)
    train_end: jnp.ndarray  # [P] f64
    publish_end: jnp.ndarray  # [P] f64
    gids: jnp.ndarray  # [P, B] int32: StepRecord.gids (-1 padding)
    stale: jnp.ndarray  # [P, B] int32: StepRecord.staleness (-1 padding)
    completion_tokens: jnp.ndarray  # [P] int64: trained_completion_tokens
    seq_tokens: jnp.ndarray  # [P] int64: trained prompt + completion tokens
    fwd_sum: jnp.ndarray  # [P] f64: forward FLOPs of the trained samples, summed in batch order (analytical training)
    fwd_max: jnp.ndarray  # [P] f64: the largest of them
    offload_s: jnp.ndarray  # [P] f64: StepRecord.offload_s (Costs.offload_s when colocated, else 0)


class SimState(NamedTuple):
    """Everything the event loop carries (the lax.scan carry)."""

    inst: InstState
    calls: CallState
    out: StepOut
    groups: GroupState
    trainer: TrainerState
    log: StepLog
    now: jnp.ndarray  # f64: env.now
    seq: jnp.ndarray  # int32: SimPy's insertion counter, for scheduled timeouts and triggered wakes
    version: jnp.ndarray  # int32: PipelineState.version
    training: jnp.ndarray  # bool: PipelineState.training
    accepted: jnp.ndarray  # int32: PipelineState.groups_accepted
    n_running: jnp.ndarray  # int32: len(PipelineState.running)
    dispatched: jnp.ndarray  # int32: PipelineState.groups_dispatched
    routed: jnp.ndarray  # int32: calls routed (router queue = calls routed..dispatched*n)
    rr_next: jnp.ndarray  # int32: Router.rr_next
    dispatch_paused: jnp.ndarray  # bool: Simulation.dispatch_paused (drain)
    cur: jnp.ndarray  # int32: instance in the middle of its boundary processing (-1: none)
    buf_head: jnp.ndarray  # int32: first buffer position not yet consumed
    buf_tail: jnp.ndarray  # int32: next buffer position
    buf_live: jnp.ndarray  # int32: len(PipelineState.buffer)
    buf_minv: jnp.ndarray  # [P + 1] int32: buffered groups by GroupRecord.min_version (a publication's eviction
    #                        count without a pass over all group slots)
    overflow: jnp.ndarray  # bool: more groups than Static.max_groups were needed
    stuck: jnp.ndarray  # bool: nothing left to do before the last step (SimPy: diagnosis)
    actions: jnp.ndarray  # int32: non-idle steps taken
    # -- record extensions (simrl.policy.params; RecordState) --
    count_off: jnp.ndarray  # int32: running + buffered - dispatched at the last publication (admit_count_since_publish)
    cross: CrossState  # fail_on_version_crossing's groups and retry queue (stubs unless Static.crossing)
    pi: PerInstState  # per-instance weight sync: each instance's weight version (stubs unless Static.perinst)
    # -- record extensions max_dispatch_age and admit_return_evicted (simrl_fast.trainer.age_cut) --
    evicted_n: jnp.ndarray  # int32: buffered groups dropped at publications so far (accepted, then evicted)
    pub_disp: jnp.ndarray  # [P + 1] int32: groups dispatched when version v was published (v >= 1; 0 at v = 0):
    #                        GroupRecord.dispatch_version < v exactly for gids < pub_disp[v] (gids go in order)
    # -- record extension zero_variance_holds_slot (Params.zslot; simrl_fast.trainer.trainer_react) --
    zs_live: jnp.ndarray  # int32: zero-variance placeholders in the buffer FIFO not yet consumed by a batch
    zs_real: jnp.ndarray  # int32: buffered groups taken so far by the batch being formed (its places: taken)
    zs_wait: jnp.ndarray  # bool: a batch of placeholders alone was consumed (form_batch returned None): the trainer
    #                       waits for the next `changed.notify()`, which while it waits is a group's completion
    # -- record extension admit_episode_cap (Params.ep_cap; simrl_fast.step.chain_due) --
    wake: jnp.ndarray  # bool: GroupBook.changed notified and the dispatcher not yet run since (set at a group
    #                    completion, a batch taken, a publication; the start): admission is read only then
    # -- record extension admit_window_episodes (Params.win_n; simrl_fast.step.window_open, sleep_timer) --
    win_start: jnp.ndarray  # f64: RecordState.window_start, when the admission window began
    win_adm: jnp.ndarray  # int32: RecordState.window_admitted, episodes dispatched in it (less refunds)
    win_t: jnp.ndarray  # f64: the dispatcher's pending recheck timeout (RecordPolicy.recheck_in), inf: none; while
    #                     SimState.wake is set the dispatcher has yet to sleep and `step.sleep_timer` gives it
    disp_late: jnp.ndarray  # bool: the recheck timeout has woken the dispatcher, which then waits on GroupBook.changed's
    #                  pending event again, registered after the trainer: a notify runs the trainer first (`step.disp_first`)
    # -- record extension zero_variance_stop_groups (Params.zv_stop; simrl_fast.instance.instance_action) --
    zrow: jnp.ndarray  # int32: RecordState.zero_in_a_row (zero-variance groups in a row that reached the filter)
    zstop: jnp.ndarray  # bool: the stop fired (SimPy's PolicyError): the configuration takes no further action
    hold_t: jnp.ndarray  # f64: the instant of a router pass that came before the dispatcher's (the router woken by a
    #                    call's finish or a publication before GroupBook.changed was notified), or of the first batch
    #                    taken (-inf: none): there the calls from ``hold_rid`` on are routed only after the instances
    #                    woken before them have run (`step.route_held`)
    hold_rid: jnp.ndarray  # int32: the first call index held (the calls dispatched after that pass or batch)


def serials(static) -> bool:
    """Whether the batch carries admission serials (`InstState.slot_ser`): for on_demand KV (the newest is
    preempted) or the prefix cache (aborted requests are re-queued in admission order), unless chunked
    prefill is traced (its slots are kept in admission order)."""
    return bool((static.on_demand or static.prefix) and not static.chunked_prefill)


def queued_gen(static) -> bool:
    """Whether the batch carries the tokens a queued call keeps (`CallState.qgen`): a preempted request
    (on_demand) or an aborted one re-queued by the prefix cache."""
    return bool(static.on_demand or static.prefix)


def admit_max(static) -> int:
    """Calls one scan step admits at most (the rest of a long admission takes further steps)."""
    return max(1, min(static.slots, 16))


def zero_pending(ins, now):
    """[K] bool: the instance's anchor boundary is now and its anchor iteration takes zero seconds (nothing decodes
    and it prefills nothing: the roofline's idle iteration, e.g. requests whose whole prompt hit the prefix cache),
    so its end, the next boundary, is due now and not processed yet. SimPy schedules that timeout at the end of the
    anchor's turn (`simrl.engine.instance.timeout_at` now): after the events already pending in this instant (the
    router's and the dispatcher's wake-ups the turn triggered: a route or a pause they make is taken at that boundary),
    before those created later (docs/fastpath.md, "Tie rules", 5)."""
    return (ins.phase == BUSY) & (ins.clock == now) & (ins.t1 == ins.clock)


def init_state(static, dtype_t=jnp.float64) -> SimState:
    K, S, Gm, P, B = static.instances, static.slots, static.max_groups, static.steps, static.max_batch
    R = static.max_calls
    i32 = lambda v, shape=(): jnp.full(shape, v, jnp.int32)  # noqa: E731
    f64 = lambda v, shape=(): jnp.full(shape, v, dtype_t)  # noqa: E731
    i64 = lambda v, shape=(): jnp.full(shape, v, jnp.int64)  # noqa: E731
    inst = InstState(
        phase=i32(IDLE, K), clock=f64(0.0, K), it=i32(0, K), nd=i32(0, K), kd=i64(0, K), na=i32(0, K),
        pa=i64(0, K), t1=f64(jnp.inf, K), alpha=f64(0.0, K), beta=f64(0.0, K), st_t=f64(0.0, K), st_seq=i32(0, K),
        fk_t=f64(0.0, K), fk_back=f64(0.0, K), g_prev=f64(0.0, K),
        fin_min=i32(BIG, K), adm_it=i32(BIG, K), pause_it=i32(BIG, K), ev_it=i32(BIG, K), ev_t=f64(jnp.inf, K),
        ev_prev=f64(jnp.inf, K), ev_seq=i32(BIG, K), running=i32(0, K), kv_used=i64(0, K),
        wq_pos=i32(0, K), wq_len=i32(0, K),
        slot_key=i64(KEY_EMPTY, (K, S)), slot_len=i32(0, (K, S)), psum=i64(0, K),
        # (a batch without on_demand KV carries no per-slot serials nor queued tokens: [K, 1] stubs)
        # (the per-slot serials are kept for on_demand's victim and the prefix cache's abort releases, unless the
        # chunked code keeps the slots in admission order; queued tokens for on_demand and the prefix cache)
        slot_ser=i32(0, (K, S if serials(static) else 1)), ser=i32(0, K), ser0=i32(0, K), plan=jnp.zeros(K, bool),
        preempt=i32(0, K),
        pq_done=i64(0, K), pq_tail=i64(0, K), pf=i64(0, K), nw=i32(0, K), wkv=i64(0, K),
        slot_pos=i64(0, (K, S if static.chunked_prefill else 1)), slot_pr=i32(0, (K, S if static.chunked_prefill else 1)),
        ph=i64(0, K), slot_sh=i32(0, (K, S if static.prefix else 1)), sh_ref=i32(0, (K, Gm if static.prefix else 1)),
        c_ser=i32(0, (K, Gm if static.prefix else 1)), c_next=i32(1, K), c_floor=i32(1, K), cache_tok=i64(0, K),
        zlate=jnp.zeros(K, bool), z_rid=i32(0, K),
    )
    Q = R + admit_max(static) + 1
    calls = CallState(queue=i32(-1, (K, Q)), qgen=i32(0, (K, Q if queued_gen(static) else 1)))
    groups = GroupState(status=i32(G_FREE, Gm), done=i32(0, Gm), minv=i32(BIG, Gm), buf=i32(-1, Gm))
    trainer = TrainerState(phase=i32(T_WAIT), step=i32(0), timer_t=f64(jnp.inf), timer_prev=f64(jnp.inf),
                           timer_seq=i32(BIG), acks=i32(0), taken=i32(0), dur=f64(0.0))
    log = StepLog(wait_start=f64(jnp.nan, P).at[0].set(0.0), batch_ready=f64(jnp.nan, P), train_start=f64(jnp.nan, P),
                  train_end=f64(jnp.nan, P), publish_end=f64(jnp.nan, P), gids=i32(-1, (P, B)), stale=i32(-1, (P, B)),
                  completion_tokens=i64(0, P), seq_tokens=i64(0, P), fwd_sum=f64(0.0, P), fwd_max=f64(0.0, P),
                  offload_s=f64(0.0, P))
    return SimState(
        inst=inst, calls=calls, out=empty_out(static.group_size, K * LOCAL_ROUNDS), groups=groups, trainer=trainer, log=log, now=f64(0.0), seq=i32(0), version=i32(0),
        training=jnp.array(False), accepted=i32(0), n_running=i32(0), dispatched=i32(0), routed=i32(0),
        rr_next=i32(0), dispatch_paused=jnp.array(False), cur=i32(-1), buf_head=i32(0), buf_tail=i32(0),
        buf_live=i32(0), buf_minv=i32(0, P + 1), overflow=jnp.array(False), stuck=jnp.array(False), actions=i32(0),
        count_off=i32(0), cross=init_cross(static), pi=init_perinst(static), evicted_n=i32(0), pub_disp=i32(0, P + 1),
        zs_live=i32(0), zs_real=i32(0), zs_wait=jnp.array(False),
        wake=jnp.array(True), win_start=f64(0.0), win_adm=i32(0), win_t=f64(jnp.inf), disp_late=jnp.array(False),
        zrow=i32(0), zstop=jnp.array(False),
        hold_t=f64(-jnp.inf), hold_rid=i32(0),
    )


def empty_out(n: int, k: int) -> StepOut:
    """Nothing emitted; ``n``: calls one step may route (the group size); ``k``: instances."""
    return StepOut(fin_rid=jnp.int32(-1), fin_t=jnp.float64(jnp.nan), fin_group=jnp.array(False),
                   route_rid=jnp.full(n, -1, jnp.int32), route_inst=jnp.full(n, -1, jnp.int32),
                   par_rid=jnp.full(k, -1, jnp.int32), par_t=jnp.full(k, jnp.nan, jnp.float64))



def materialize(x):
    """``x``, computed once into a buffer of its own. XLA on CPU fuses an elementwise computation into each
    of its consumers -- recomputing it per element of a gather that uses it as an index, and per element of
    a select over the instances -- and removes optimization barriers before fusing; a reduction's result
    is never fused into a consumer, so ``x`` goes through one (the max of ``x`` and the type's lowest value:
    ``x`` itself, NaN included)."""
    x = jnp.asarray(x)
    if x.dtype == jnp.bool_:
        return jnp.any(jnp.stack([x, jnp.zeros_like(x)], axis=-1), axis=-1)
    lo = jnp.iinfo(x.dtype).min if jnp.issubdtype(x.dtype, jnp.integer) else -jnp.inf
    return jnp.max(jnp.stack([x, jnp.full_like(x, lo)], axis=-1), axis=-1)


#: XLA on CPU rewrites a reduction over more than this many elements into a reduce-window and a reduce (also
#: one written as a reshape and two reductions: it merges them back), and the reduce-window's operand (a
#: select over a slot row, say) is then written out as an [M, S] array and read back
REDUCE_SPAN = 32


def row_min(x):
    """``jnp.min(x, axis=-1)`` as the elementwise minimum of the row's `REDUCE_SPAN`-wide slices (the last one
    padded with the largest value), then one reduction over `REDUCE_SPAN` elements: one fused pass that
    computes its operand on the fly (docs/fastpath.md, "Speed, session 9"). The same value: min is exact
    and does not depend on the order."""
    n = x.shape[-1]
    if n <= REDUCE_SPAN:
        return jnp.min(x, axis=-1)
    top = jnp.iinfo(x.dtype).max if jnp.issubdtype(x.dtype, jnp.integer) else jnp.inf
    acc = x[..., :REDUCE_SPAN]
    for lo in range(REDUCE_SPAN, n, REDUCE_SPAN):
        part = x[..., lo:lo + REDUCE_SPAN]
        if part.shape[-1] < REDUCE_SPAN:
            part = jnp.concatenate([part, jnp.full((*x.shape[:-1], REDUCE_SPAN - part.shape[-1]), top, x.dtype)],
                                   axis=-1)
        acc = jnp.minimum(acc, part)
    return jnp.min(acc, axis=-1)


def tie(idx, oob, *reads):
    """``idx``, made data-dependent on ``reads`` (int values gathered from the array ``idx`` will
    write into, never INT32_MIN): XLA then orders those gathers before the in-place scatter. Without
    a data dependency it may schedule the scatter first and so copies the whole carried array every
    step (docs/fastpath.md, "In-place updates")."""
    dep = jnp.min(jnp.stack([jnp.min(r).astype(jnp.int32) for r in reads]))
    return jnp.where(dep == jnp.iinfo(jnp.int32).min, oob, idx)


class CrossState(NamedTuple):
    """The record extension ``fail_on_version_crossing`` (`trainer.fail_crossed`): what a publication needs
    to fail running groups, and `GroupBook.retry`. [1] stubs (never read) unless ``Static.crossing``."""

    wg: jnp.ndarray  # [Gm] int32: GroupRecord.wg, the workload group (prompt) of each dispatched group
    retries: jnp.ndarray  # [Gm] int32: GroupRecord.retries
    started: jnp.ndarray  # [Gm] int32: calls of the group admitted at least once (TrajRecord.min_version set)
    seen: jnp.ndarray  # [R] bool: the call was admitted once (on_demand: a preempted call is admitted again)
    rq: jnp.ndarray  # [Gm] int32: GroupBook.retry, gids whose prompts are dispatched again (FIFO)
    rq_head: jnp.ndarray  # int32: the next entry of rq to dispatch
    rq_tail: jnp.ndarray  # int32: the end of rq
    retried: jnp.ndarray  # int32: Tally.groups_retried (fresh dispatches = dispatched - retried)


def init_cross(static) -> CrossState:
    on = getattr(static, "crossing", False)
    Gm = static.max_groups if on else 1
    R = static.max_calls if on and static.on_demand else 1
    z = jnp.zeros((), jnp.int32)
    return CrossState(wg=jnp.zeros(Gm, jnp.int32), retries=jnp.zeros(Gm, jnp.int32), started=jnp.zeros(Gm, jnp.int32),
                      seen=jnp.zeros(R, bool), rq=jnp.full(Gm, -1, jnp.int32), rq_head=z, rq_tail=z, retried=z)


class PerInstState(NamedTuple):
    """Per-instance weight sync (`simrl_fast.perinst`, `Weights.pull`). [1] stubs unless ``Static.perinst``."""

    iv: jnp.ndarray  # [K] int32: Instance.version, the weights each instance holds (st.version: the pushed one)


def init_perinst(static) -> PerInstState:
    K = static.instances if getattr(static, "perinst", False) else 1
    return PerInstState(iv=jnp.zeros(K, jnp.int32))
