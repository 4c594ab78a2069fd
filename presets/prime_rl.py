"""prime-rl: adaptive in-flight permits (AIMD with KV soft/hard trims), a one-step ship barrier, drop-after staleness.

System: PrimeIntellect prime-rl (github.com/PrimeIntellect-ai/prime-rl). Checked against
``559b4477`` (HEAD of 21 Aug 2026): ``src/prime_rl/orchestrator/concurrency.py`` (the AIMD
``ConcurrencyController`` of #3285 ``0630b7bf`` and #3307 ``c2a25f06``, "soft and hard kv cap"),
``src/prime_rl/orchestrator/dispatcher.py`` (permits, admission window, ``cancel_inflight``,
``on_version_pending``), ``src/prime_rl/orchestrator/inference_metrics.py`` (``POLL_INTERVAL`` 5 s,
the per-engine load sample), ``src/prime_rl/orchestrator/orchestrator.py`` (``TARGET_LAG``) and
``packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py`` (``ConcurrencyConfig``,
``max_off_policy_steps``, ``batch_size``, ``seq_len``).

Admission (``concurrency_control="aimd"``, upstream's current law). One permit per episode
(trajectory); a group is admitted while episodes in flight < the cap and the dispatcher's
admission window has budget. The cap starts at ``initial_inflight``, else, at the first load
poll, at the pessimistic ``KV capacity / max_model_len`` (``seq_len`` when the engine reports no
max length), clamped to [``min_inflight``, ``max_inflight``] throughout. Engine load is polled
every 5 s (``poll_interval_s``); per poll (``ConcurrencyController.observe``):

* HARD: a preemption since the last poll, or capacity-queued requests > 0.5 x running for 6
  polls in a row: cut the cap to 0.8 x in flight (queue: 0.9; 0.5 if the overload repeats
  within 6 polls after a drain), cancel the excess youngest groups first, and freeze cuts until
  the pool drains below the cap;
* SOFT: a queue on the same engine on two polls in a row, or KV usage > 0.6 (no growth);
* KV trims: usage > 0.8 lowers the cap to in flight x 0.7 / usage and lets completions drain
  the pool (soft trim); > 0.9 also cancels the excess, youngest first (hard trim); 6 polls of
  cooldown between trims.

Growth is paced by the pipeline itself: every completed episode advances the turnover by
1/in-flight and, while the last poll was clear (no queue, usage <= 0.6, not draining, within
15 s of it) and the cap binds (in flight >= 0.9 x cap), multiplies the cap by 1.25^(1/in-flight):
x1.25 per full turnover. The dispatcher lets the pool grow by at most max(group size, cap // 10)
episodes per 5 s window; a natural completion refunds its admission.

``concurrency_control="kappa_ewma"`` keeps the law the preset followed before, from
``concurrency.py`` at ``014aa9d0`` (17 Aug 2026, superseded two days later by #3285): cap =
clamp(kappa x C / G) with G an EWMA (alpha 0.1) of episode context bootstrapped at ``seq_len``,
a preemption cuts to 0.75 x in flight (0.5 if overload survives the drain), a queue on two polls
is SOFT, and kappa grows x1.02 per shipped step while clear and binding. Its admission window
has no refund (``dispatcher.py@014aa9d0``), and its ``max_inflight`` default was none (set
``policy.max_inflight=null``).

Ship barrier: dispatch pauses while shipped batches - version > ``TARGET_LAG`` = 1 (shipped: batches
handed to the trainer plus the complete batches waiting in the buffer).

Runtime: ``WeightWatcher`` cancels in-flight groups already past the bound, then keep-pauses the
engines and loads the new weights; episodes continue and may span versions. The prefix cache is
salted per version (cleared on sync here).

Filtering: a group whose age (trained version minus the oldest version of any of its tokens,
queue time included) exceeds ``max_off_policy_steps`` is dropped, at completion and at every
publication, so the bound is enforced. ``filter_zero_advantages`` removes zero-advantage
samples after the batch is formed, with no backfill: here a zero-variance group still takes
its slot in the batch but is dropped (its tokens count as filtered).

Units: ``batch_size`` is samples per step (256 = the default scenario's 32 groups of 8); the
engine takes whole groups, ceil(batch_size / group size) of them, in completion order.

Fast path: the record of `lower` holds the batch size, the ship barrier (``admit_max_ship_lag`` =
``TARGET_LAG``) and ``max_off_policy_steps`` (drop at completion, eviction and ``abort_stale_on_publish``
at publications), the slot-holding zero-advantage drops (``zero_variance_holds_slot``) and the episode
permits read when the dispatcher wakes (``admit_episode_cap``, at the cap the controller starts from), the
admission window at that cap (``admit_window_episodes``, ``admit_window_s``, ``admit_window_refund``), the
zero-advantage threshold (std <= 1e-12: ``zero_variance_std_max``) and stop (10 x batch in a row:
``zero_variance_stop_groups``); the controller has no record fields (`fast_path_gaps` names it), so simrl_fast
refuses the preset (``fast_path_exact=0``) rather than approximate it.

Approximations: the engine dispatches a group's episodes together (upstream schedules them one
permit at a time, so a group may straddle the cap by up to group size - 1 episodes here) and
learns of a finished episode when its group finishes (its permit, refund and growth step are
counted then, in finish order). Polls run when the policy is consulted; polls that fell due
since the last one are replayed on the current load (at most 12; every counter has saturated
by then). ``tasks_per_minute``, ``token_batch_size``, curriculum admission gates, eval
episodes and P/D prefill roles are not modelled.
"""

from __future__ import annotations

import math

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, InstanceLoad, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.errors import PolicyError
from simrl.policy.params import ADMIT_WINDOW_EPS_S, LoweringContext, PolicyParams
from simrl.policy.record import zero_stop_message
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Staleness, Sync, code

TARGET_LAG = 1  # orchestrator.py:104
CONTROLS = ("aimd", "kappa_ewma")

# AIMD constants, concurrency.py@559b4477:41-90
TURNOVER_GROWTH = 1.25
BINDING_FRACTION = 0.9
KV_USAGE_GROW, KV_USAGE_SOFT_CAP, KV_USAGE_HARD_CAP, KV_USAGE_TARGET = 0.6, 0.8, 0.9, 0.7
KV_TRIM_COOLDOWN_POLLS = 6
QUEUE_RATIO, QUEUE_PERSISTENCE_POLLS, QUEUE_CUT_FRACTION = 0.5, 6, 0.9
PREEMPTION_CUT_FRACTION, ESCALATED_CUT_FRACTION, ESCALATION_GRACE_POLLS = 0.8, 0.5, 6
GROWTH_GATE_TTL_S = 15.0
# dispatcher.py@559b4477:194-197: the pool grows by at most max(group size, cap // 10) per window
ADMISSION_WINDOW_S = 5.0
# filter_zero_advantages: a group's advantages are all zero at reward std <= this, and the run stops after this many
# batches' worth of such groups in a row (the record's zero_variance_std_max and zero_variance_stop_groups)
ZERO_ADVANTAGE_STD, ZERO_STOP_BATCHES = 1e-12, 10
REPLAY_POLLS = 12  # polls replayed at most on one consultation (all counters saturate by then)

# The earlier law, concurrency.py@014aa9d0:66-215
EWMA_ALPHA = 0.1
BACKOFF, ESCALATED_BACKOFF, GROWTH, BINDING = 0.75, 0.5, 1.02, 0.9
KAPPA_MIN, KAPPA_MAX = 0.25, 16.0
SEVERITY = {"clear": 0, "soft": 1, "hard": 2}


@attrs.define
class PrimeRLState:
    """The concurrency controller and the dispatcher's counters for one run."""

    cap: int  # the applied in-flight limit (upstream ``max_inflight`` of the controller)
    cap_f: float = 0.0  # AIMD: the unrounded cap
    bootstrapped: bool = False
    turnover: float = 0.0
    signal: str = "clear"
    can_grow: bool = False
    can_grow_until: float = -math.inf
    queue_overload_polls: int = 0
    trim_cooldown: int = 0
    escalation_grace: int = 0
    escalated: bool = False
    pending_cancel: int = 0  # episodes to shed at the next hook that can abort
    trims: list[tuple[float, str, int]] = attrs.field(factory=list)  # (t, reason, target)
    # admission window (dispatcher.py)
    window_start: float = 0.0
    admissions_in_window: int = 0
    # kappa_ewma
    kappa: float | None = None
    cost: float | None = None
    frozen: bool = True
    clear: bool = True
    backoff: float = BACKOFF
    # shared
    draining: bool = False
    last_poll: float = -math.inf
    preemptions: list[int] | None = None
    prev_waiting: list = attrs.field(factory=list)
    shipped: int = 0
    zero_pending: list = attrs.field(factory=list)
    seq: int = 0
    cap_history: list[tuple[float, int]] = attrs.field(factory=list)
    zero_in_a_row: int = 0
    group_size: int = 0


def _in_flight(st: PipelineState) -> int:
    """Episodes holding a permit: unfinished trajectories of running groups."""
    return sum(1 for g in st.running.values() for t in g.trajs if t.finish_time is None)


@register
@attrs.frozen
class PrimeRLPolicy(Policy):
    kind = "prime_rl"
    group_tags = {"seq": (int, ("buffer",))}
    upstream = ("PrimeIntellect-ai/prime-rl@559b4477 (orchestrator/concurrency.py, dispatcher.py, "
                "inference_metrics.py, orchestrator.py); kappa_ewma: @014aa9d0 concurrency.py")
    State = PrimeRLState

    max_off_policy_steps: int = attrs.field(default=8, validator=v.ge(0))
    batch_size: int = attrs.field(default=256, validator=v.gt(0))  # samples per step
    filter_zero_advantages: bool = True
    seq_len: int = attrs.field(default=8192, validator=v.gt(0))  # ours (upstream 2048): fallback episode cost
    max_model_len: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))  # the server's; None: seq_len
    concurrency_control: str = attrs.field(default="aimd", validator=v.in_(CONTROLS))
    initial_inflight: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    min_inflight: int = attrs.field(default=1, validator=v.gt(0))  # episodes
    max_inflight: int | None = attrs.field(default=1024, validator=v.optional(v.gt(0)))
    poll_interval_s: float = attrs.field(default=5.0, validator=v.gt(0))  # inference_metrics.POLL_INTERVAL

    def __attrs_post_init__(self):
        # ConcurrencyConfig.validate_bounds (configs/orchestrator.py@559b4477:437-444)
        if self.max_inflight is not None:
            if self.initial_inflight is not None and self.initial_inflight > self.max_inflight:
                raise ValueError("initial_inflight must not exceed max_inflight "
                                 f"(got {self.initial_inflight} > {self.max_inflight})")
            if self.min_inflight > self.max_inflight:
                raise ValueError(f"min_inflight must not exceed max_inflight "
                                 f"(got {self.min_inflight} > {self.max_inflight})")

    def init_state(self) -> PrimeRLState:
        cap = self.initial_inflight or self.min_inflight
        return PrimeRLState(cap=int(self._clamp(cap)), cap_f=float(self._clamp(cap)),
                            bootstrapped=self.initial_inflight is not None)

    @property
    def aimd(self) -> bool:
        return self.concurrency_control == "aimd"

    # -- shared helpers ----------------------------------------------------------------------
    def _ctl(self, st: PipelineState) -> PrimeRLState:
        return st.policy_state

    def _clamp(self, x: float) -> float:
        return min(max(x, float(self.min_inflight)), float(self.max_inflight or math.inf))

    def _set_cap(self, c: PrimeRLState, cap: int, now: float) -> None:
        if cap != c.cap:
            c.cap = cap
            c.cap_history.append((now, cap))

    def _catch_up(self, st: PipelineState) -> None:
        """Run the load polls that fell due since the last one (every ``poll_interval_s``)."""
        c = self._ctl(st)
        loads = st.instance_loads()
        if not loads:
            return
        if c.preemptions is None:  # first consultation: the collector polls at start-up
            times = [st.now]
            c.last_poll = st.now
        else:
            due = int((st.now - c.last_poll) / self.poll_interval_s + 1e-9)
            if due <= 0:
                return
            times = [c.last_poll + i * self.poll_interval_s for i in range(1, due + 1)][-REPLAY_POLLS:]
            c.last_poll += due * self.poll_interval_s
        pre = [x.preemptions for x in loads]
        delta = [p - q for p, q in zip(pre, c.preemptions or pre, strict=True)]
        c.preemptions = pre
        for i, t in enumerate(times):
            d = delta if i == 0 else [0] * len(loads)  # a replayed poll sees no new preemption
            if self.aimd:
                self._observe(st, c, loads, d, t)
            else:
                self._kappa_poll(st, c, loads, d)

    # -- AIMD (concurrency.py@559b4477) ------------------------------------------------------
    def _observe(self, st: PipelineState, c: PrimeRLState, loads: list[InstanceLoad],
                 delta: list[int], t: float) -> None:
        """``ConcurrencyController.observe`` (concurrency.py:189-290) for one poll at time t."""
        worst = "clear"
        max_usage, total_running, total_queued, preempted = 0.0, 0, 0, False
        for x, d in zip(loads, delta, strict=True):
            if d > 0:
                preempted, worst = True, "hard"
            if x.waiting > 0 and x.index < len(c.prev_waiting) and c.prev_waiting[x.index] > 0:
                worst = max(worst, "soft", key=SEVERITY.__getitem__)
            max_usage = max(max_usage, x.kv_used_tokens / x.kv_capacity_tokens if x.kv_capacity_tokens else 0.0)
            total_running += x.running
            total_queued += x.waiting  # vLLM's by-reason capacity count is not separated here
        c.prev_waiting = [x.waiting for x in loads]
        if total_running > 0 and total_queued > QUEUE_RATIO * total_running:
            c.queue_overload_polls += 1
        else:
            c.queue_overload_polls = 0
        queue_overload = c.queue_overload_polls >= QUEUE_PERSISTENCE_POLLS
        if queue_overload or max_usage > KV_USAGE_GROW:
            worst = max(worst, "hard" if queue_overload else "soft", key=SEVERITY.__getitem__)
        c.signal = worst
        inflight = _in_flight(st)
        if c.draining and inflight <= c.cap and not preempted and not queue_overload:
            c.draining = False
            c.escalation_grace = ESCALATION_GRACE_POLLS
        if not c.draining and c.escalated:
            c.escalation_grace -= 1
            if c.escalation_grace <= 0:
                c.escalated = False
        c.trim_cooldown = max(0, c.trim_cooldown - 1)
        c.can_grow = worst == "clear" and total_queued == 0 and not c.draining
        c.can_grow_until = t + GROWTH_GATE_TTL_S
        if not c.bootstrapped:  # the pessimistic start: KV capacity / max context
            c.bootstrapped = True
            capacity = sum(x.kv_capacity_tokens for x in loads)
            c.cap_f = self._clamp(capacity / float(self.max_model_len or self.seq_len))
            self._set_cap(c, int(c.cap_f), st.now)
        if c.draining:
            return
        if preempted or queue_overload:
            fraction = ESCALATED_CUT_FRACTION if c.escalated else None
            if queue_overload:
                c.queue_overload_polls = 0
                target, reason = int(self._clamp(inflight * (fraction or QUEUE_CUT_FRACTION))), "queue overload"
            else:
                target, reason = int(self._clamp(inflight * (fraction or PREEMPTION_CUT_FRACTION))), "preemptions"
            self._resize_down(st, c, target, inflight, reason, cancel=True)
            c.draining = c.escalated = True
            return
        if max_usage > KV_USAGE_SOFT_CAP and inflight > 0 and c.trim_cooldown == 0:
            hard = max_usage > KV_USAGE_HARD_CAP
            target = int(self._clamp(inflight * KV_USAGE_TARGET / max_usage))
            self._resize_down(st, c, target, inflight, "hard trim" if hard else "soft trim", cancel=hard)
            c.trim_cooldown = KV_TRIM_COOLDOWN_POLLS

    def _resize_down(self, st: PipelineState, c: PrimeRLState, target: int, inflight: int,
                     reason: str, cancel: bool) -> None:
        """``resize_down`` (concurrency.py:294-302): lower the cap, shed the excess if asked."""
        target = min(target, c.cap)
        c.cap_f = float(target)
        self._set_cap(c, target, st.now)
        c.trims.append((st.now, reason, target))
        if cancel and inflight > target:
            c.pending_cancel += inflight - target

    def _record_episodes(self, group: GroupRecord, st: PipelineState, c: PrimeRLState) -> None:
        """``record_episode`` (concurrency.py:166-187) for each episode of a finished group, in finish order."""
        others = _in_flight(st)
        trajs = sorted(group.trajs, key=lambda t: (t.finish_time if t.finish_time is not None else st.now, t.tid))
        n = len(trajs)
        for i, tr in enumerate(trajs):
            inflight = others + (n - 1 - i) + 1  # this episode and its group-mates still running then
            frac = 1.0 / inflight
            c.turnover += frac
            if tr.prompt_tokens + tr.completion_tokens <= 0:
                continue
            t = tr.finish_time if tr.finish_time is not None else st.now
            if c.can_grow and t < c.can_grow_until and inflight >= BINDING_FRACTION * c.cap:
                c.cap_f = self._clamp(c.cap_f * TURNOVER_GROWTH ** frac)
                self._set_cap(c, int(c.cap_f), st.now)

    def _shed(self, st: PipelineState, c: PrimeRLState) -> tuple[int, ...]:
        """``Dispatcher._cancel_inflight`` (dispatcher.py:258-278): youngest groups first."""
        n, c.pending_cancel = c.pending_cancel, 0
        shed, out = 0, []
        for g in sorted(st.running.values(), key=lambda g: (-g.dispatch_time, -g.gid)):
            if shed >= n:
                break
            out.append(g.gid)
            shed += sum(1 for t in g.trajs if t.finish_time is None)
        return tuple(out)

    # -- kappa_ewma (concurrency.py@014aa9d0) ------------------------------------------------
    def _kappa_poll(self, st: PipelineState, c: PrimeRLState, loads: list[InstanceLoad], delta: list[int]) -> None:
        in_flight = _in_flight(st)
        capacity = sum(x.kv_capacity_tokens for x in loads)
        hard = any(d > 0 for d in delta)
        soft = any(x.waiting > 0 and i < len(c.prev_waiting) and c.prev_waiting[i] > 0
                   for i, x in enumerate(loads))
        c.prev_waiting = [x.waiting for x in loads]
        if hard or soft:
            c.clear = False
        if c.draining and in_flight <= c.cap:
            c.draining = False
        cost = c.cost or self.seq_len
        if hard and not c.draining:  # multiplicative cut relative to what actually runs
            target = int(self._clamp(c.backoff * max(in_flight, self.min_inflight)))
            c.kappa = max(KAPPA_MIN, target * cost / capacity)
            c.draining, c.backoff = True, ESCALATED_BACKOFF
            self._set_cap(c, target, st.now)
        elif c.frozen and c.kappa is None and self.initial_inflight is None:
            self._set_cap(c, int(self._clamp(capacity / cost)), st.now)  # bootstrap from KV capacity

    def _kappa_step(self, st: PipelineState, c: PrimeRLState) -> None:
        loads = st.instance_loads()
        if not loads:
            return
        in_flight = _in_flight(st)
        capacity = sum(x.kv_capacity_tokens for x in loads)
        cost = c.cost or self.seq_len
        if c.frozen:
            c.frozen = False
            if c.kappa is None:
                c.kappa = max(1.0, c.cap * cost / capacity)
        elif c.clear:
            c.backoff = BACKOFF
            if in_flight >= BINDING * c.cap:
                c.kappa = min(KAPPA_MAX, c.kappa * GROWTH)
        self._set_cap(c, int(self._clamp(c.kappa * capacity / cost)), st.now)
        c.clear = True

    # -- admission ---------------------------------------------------------------------------
    def _batch_groups(self, st: PipelineState) -> int:
        return max(1, math.ceil(self.batch_size / max(1, st.policy_state.group_size)))

    @property
    def sync_spec(self) -> Sync:
        return Sync(InflightRule.KEEP_PAUSE)

    @property
    def staleness_spec(self) -> Staleness:
        # Dropped in its own completion hook, after the controller has counted the group.
        return Staleness(self.max_off_policy_steps, Enforcement.POLICY)

    def _budget(self, st: PipelineState, c: PrimeRLState) -> int:
        """``Dispatcher.admission_budget`` (dispatcher.py:280-287)."""
        if st.now - c.window_start >= ADMISSION_WINDOW_S - ADMIT_WINDOW_EPS_S:  # (the record's rule)
            c.window_start, c.admissions_in_window = st.now, 0
        return max(c.group_size or 1, c.cap // 10) - c.admissions_in_window

    def _barrier(self, st: PipelineState, c: PrimeRLState) -> bool:
        shipped = c.shipped + len(st.buffer) // self._batch_groups(st)
        return shipped - st.version > TARGET_LAG

    def admit(self, st: PipelineState) -> bool:
        c = self._ctl(st)
        self._catch_up(st)
        if self._barrier(st, c) or _in_flight(st) >= c.cap:
            return False
        return self._budget(st, c) > 0

    def recheck_in(self, st: PipelineState) -> float | None:
        # Only the admission window opens with time alone; the cap and the barrier open on events.
        c = self._ctl(st)
        if self._barrier(st, c) or _in_flight(st) >= c.cap or self._budget(st, c) > 0:
            return None
        return c.window_start + ADMISSION_WINDOW_S - st.now

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        c = st.policy_state
        c.group_size = len(group.trajs)
        c.admissions_in_window += len(group.trajs)  # one admission per episode

    # -- filtering ---------------------------------------------------------------------------
    def _too_old(self, g: GroupRecord, st: PipelineState) -> bool:
        return g.staleness(st.version) > self.max_off_policy_steps

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        c = self._ctl(st)
        self._catch_up(st)
        if self.aimd:  # natural completions refund their admission (dispatcher.py:555-561)
            c.admissions_in_window = max(0, c.admissions_in_window - len(group.trajs))
            self._record_episodes(group, st, c)
        c.seq += 1
        group.tag["seq"] = c.seq
        if not self.aimd:
            for tr in group.trajs:  # episode cost estimate: final context tokens
                tokens = tr.prompt_tokens + tr.completion_tokens
                if tokens > 0:
                    c.cost = tokens if c.cost is None else (1 - EWMA_ALPHA) * c.cost + EWMA_ALPHA * tokens
        if self._too_old(group, st):
            return Verdict.DROP
        if self.filter_zero_advantages and group.reward_std() <= ZERO_ADVANTAGE_STD:
            c.zero_pending.append(c.seq)  # keeps its batch slot; no backfill
            c.zero_in_a_row += 1
            if c.zero_in_a_row >= ZERO_STOP_BATCHES * self._batch_groups(st):
                # Every batch would be empty forever; stop with the cause instead of hanging (the record's
                # zero_variance_stop_groups, with its message: the same diagnosis on both engines)
                raise PolicyError(zero_stop_message(c.zero_in_a_row, ZERO_ADVANTAGE_STD))
            return Verdict.DROP
        c.zero_in_a_row = 0
        return Verdict.ACCEPT

    def after_group_done(self, st: PipelineState) -> PublishActions:
        c = self._ctl(st)
        return PublishActions(abort_running=self._shed(st, c)) if c.pending_cancel else PublishActions()

    def on_publish(self, st: PipelineState) -> PublishActions:
        c = self._ctl(st)
        self._catch_up(st)
        stale = tuple(g.gid for g in st.running.values() if self._too_old(g, st))
        shed = tuple(gid for gid in self._shed(st, c) if gid not in stale) if c.pending_cancel else ()
        return PublishActions(
            abort_running=stale + shed,
            drop_buffered=tuple(g.gid for g in st.buffer if self._too_old(g, st)),
        )

    # -- batch -------------------------------------------------------------------------------
    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        c = self._ctl(st)
        b = self._batch_groups(st)
        slots = sorted([(g.tag["seq"], g) for g in st.buffer] + [(s, None) for s in c.zero_pending],
                       key=lambda x: x[0])
        if len(slots) < b:
            return None
        chosen = slots[:b]
        batch = [g for _, g in chosen if g is not None]
        used = {s for s, g in chosen if g is None}
        c.zero_pending = [s for s in c.zero_pending if s not in used]
        if not batch:  # every sample of this batch had zero advantage: nothing to train on
            return None
        c.shipped += 1
        if not self.aimd:
            self._kappa_step(st, c)
        return batch

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        b = max(1, math.ceil(self.batch_size / ctx.group_size))
        return attrs.evolve(
            super().lower(ctx), batch_min_groups=b, batch_max_groups=b,
            drop_zero_variance=1 if self.filter_zero_advantages else 0,
            admit_max_ship_lag=TARGET_LAG,  # the ship barrier (a record extension)
            # max_off_policy_steps: a finished group past it is dropped (before the zero-advantage filter, as
            # `on_group_done` checks it first), buffered ones are evicted and running ones aborted at every
            # publication (`on_publish`: abort_running, drop_buffered)
            staleness_enforcement=code(Enforcement.DROP_AT_COMPLETION), evict_stale_on_publish=1,
            abort_stale_on_publish=1,
            # filter_zero_advantages: a zero-advantage group keeps its place in the batch (`form_batch`)
            zero_variance_holds_slot=1 if self.filter_zero_advantages else 0,
            # the episode permits, read when the dispatcher wakes, at the cap the controller starts from
            # (`init_state`); the controller that moves it has no field
            admit_episode_cap=int(self._clamp(self.initial_inflight or self.min_inflight)),
            # the dispatcher's admission window (`_budget`, `recheck_in`) at that cap: max(group size, cap // 10)
            # episodes per ADMISSION_WINDOW_S, natural completions refunded under AIMD (`on_group_done`)
            admit_window_episodes=max(ctx.group_size, int(self._clamp(self.initial_inflight or self.min_inflight))
                                      // 10),
            admit_window_s=ADMISSION_WINDOW_S, admit_window_refund=1 if self.aimd else 0,
            # filter_zero_advantages: zero advantage at reward std <= 1e-12, and the stop after 10 x batch of them in
            # a row (a group dropped as too old leaves the count, as `on_group_done` checks the age first)
            zero_variance_std_max=ZERO_ADVANTAGE_STD if self.filter_zero_advantages else 0.0,
            zero_variance_stop_groups=ZERO_STOP_BATCHES * b if self.filter_zero_advantages else 0,
            fast_path_exact=0,  # the rules of `fast_path_gaps` have no fields
        )

    @property
    def fast_path_gaps(self) -> tuple[str, ...]:
        """What the record of `lower` cannot hold, each named with its knob (simrl_fast names them when it
        refuses this policy). The ship barrier is in the record (``admit_max_ship_lag``), and so are
        ``max_off_policy_steps`` (dropped at completion, evicted and aborted at publications:
        ``abort_stale_on_publish``), the episode permits read when the dispatcher wakes
        (``admit_episode_cap``, the controller's starting cap: the controller is the gap) and the admission window
        (``admit_window_episodes`` at that cap, ``admit_window_s``, ``admit_window_refund``)."""
        # (the admission window is in the record too: admit_window_episodes; its size follows the controller's cap)
        if self.aimd:
            control = ("AIMD permits from instance-load polls (policy.concurrency_control=aimd, every "
                       "policy.poll_interval_s; cuts cancel the youngest groups; the admission window's size "
                       "follows the cap)")
        else:
            control = ("kappa-EWMA permits from instance-load polls (policy.concurrency_control=kappa_ewma; the "
                       "admission window's size follows the cap)")
        gaps = [control]
        # filter_zero_advantages is in the record: the slots (zero_variance_holds_slot), the threshold
        # (zero_variance_std_max) and the stop (zero_variance_stop_groups)
        return tuple(gaps)
