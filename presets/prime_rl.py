"""prime-rl: KV-driven adaptive in-flight permits, a one-step ship barrier, and a drop-after staleness bound.

System: PrimeIntellect prime-rl (github.com/PrimeIntellect-ai/prime-rl), behaviour as of mid-2026
(after e792f9cf8 / PR #2631, which removed ``max_async_level``); the concurrency control law
follows ``src/prime_rl/orchestrator/concurrency.py`` at 014aa9d0. Sources: that file,
``src/prime_rl/orchestrator/{orchestrator,dispatcher,watcher,train_sink}.py``,
``packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py``, ``docs/{training,algorithms}.md``.

Admission. One permit per episode (trajectory), under an adaptive cap n_max = clamp(kappa * C /
G, ``min_inflight``, ``max_inflight``), where C is the KV capacity summed over instances and G
the expected episode cost: an EWMA (alpha 0.1) of final context tokens, bootstrapped at
``seq_len``. Before the first step the cap is ``initial_inflight`` or C / ``seq_len``. Engine
load is polled every ``poll_interval_s`` from ``st.instance_loads()``: any new preemption is a
HARD signal that cuts the cap to 0.75 x max(in flight, floor) (0.5 if overload survives the
drain) and holds further cuts until in-flight work falls below it; an instance with waiting
requests on two polls in a row is SOFT (it only blocks growth). At every shipped step kappa
grows by 1.02 if no signal fired since the last step and the cap was binding (in flight >= 90%).
Ship barrier: dispatch pauses while shipped batches - version > ``TARGET_LAG`` = 1.

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

Approximations: polls happen when the dispatcher re-evaluates admission (an event), not on a
wall-clock timer; the soft trim that cancels the youngest episodes, ``tasks_per_minute``,
``token_batch_size``, curriculum admission gates and eval episodes are not modelled.
"""

from __future__ import annotations

import math

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.errors import PolicyError
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Staleness, Sync

TARGET_LAG = 1
EWMA_ALPHA = 0.1
BACKOFF, ESCALATED_BACKOFF, GROWTH, BINDING = 0.75, 0.5, 1.02, 0.9
KAPPA_MIN, KAPPA_MAX = 0.25, 16.0


@attrs.define
class PrimeRLState:
    """The concurrency controller: permits (cap), cost estimates, phase flags, and the group size seen."""

    cap: int
    kappa: float | None = None
    cost: float | None = None
    frozen: bool = True
    clear: bool = True
    draining: bool = False
    backoff: float = BACKOFF
    last_poll: float = -math.inf
    preemptions: list[int] | None = None
    prev_waiting: list = attrs.field(factory=list)
    shipped: int = 0
    zero_pending: list = attrs.field(factory=list)
    seq: int = 0
    cap_history: list[tuple[float, int]] = attrs.field(factory=list)
    zero_in_a_row: int = 0
    group_size: int = 1


@register
@attrs.frozen
class PrimeRLPolicy(Policy):
    kind = "prime_rl"
    upstream = "PrimeIntellect-ai/prime-rl@014aa9d0 (orchestrator/concurrency.py, dispatcher.py, train_sink.py)"
    State = PrimeRLState

    def init_state(self) -> PrimeRLState:
        return PrimeRLState(cap=self.initial_inflight or self.min_inflight)


    max_off_policy_steps: int = attrs.field(default=8, validator=v.ge(0))
    batch_size: int = attrs.field(default=256, validator=v.gt(0))  # samples per step
    filter_zero_advantages: bool = True
    seq_len: int = attrs.field(default=8192, validator=v.gt(0))  # bootstrap episode cost, tokens
    initial_inflight: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    min_inflight: int = attrs.field(default=1, validator=v.gt(0))  # episodes
    max_inflight: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    poll_interval_s: float = attrs.field(default=1.0, validator=v.gt(0))

    # -- concurrency controller state (PrimeRLState) -------------------------------------------
    def _ctl(self, st: PipelineState) -> PrimeRLState:
        return st.policy_state

    def _clamp(self, x: float) -> int:
        return int(min(max(x, self.min_inflight), self.max_inflight or math.inf))

    def _set_cap(self, c: PrimeRLState, cap: int, now: float) -> None:
        if cap != c.cap:
            c.cap = cap
            c.cap_history.append((now, cap))

    def _poll(self, st: PipelineState, c: PrimeRLState, in_flight: int) -> None:
        loads = st.instance_loads()
        if not loads:
            return
        capacity = sum(x.kv_capacity_tokens for x in loads)
        pre = sum(x.preemptions for x in loads)
        hard = c.preemptions is not None and pre > c.preemptions
        soft = any(x.waiting > 0 and i < len(c.prev_waiting) and c.prev_waiting[i] > 0
                   for i, x in enumerate(loads))
        c.preemptions, c.prev_waiting = pre, [x.waiting for x in loads]
        if hard or soft:
            c.clear = False
        if c.draining and in_flight <= c.cap:
            c.draining = False
        cost = c.cost or self.seq_len
        if hard and not c.draining:  # multiplicative cut relative to what actually runs
            target = self._clamp(c.backoff * max(in_flight, self.min_inflight))
            c.kappa = max(KAPPA_MIN, target * cost / capacity)
            c.draining, c.backoff = True, ESCALATED_BACKOFF
            self._set_cap(c, target, st.now)
        elif c.frozen and c.kappa is None and self.initial_inflight is None:
            self._set_cap(c, self._clamp(capacity / cost), st.now)  # bootstrap from KV capacity

    def _on_step(self, st: PipelineState, c: PrimeRLState, in_flight: int) -> None:
        loads = st.instance_loads()
        if not loads:
            return
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
        self._set_cap(c, self._clamp(c.kappa * capacity / cost), st.now)
        c.clear = True

    # -- admission ---------------------------------------------------------------------------
    def _batch_groups(self, st: PipelineState) -> int:
        return max(1, math.ceil(self.batch_size / st.policy_state.group_size))

    @property
    def sync_spec(self) -> Sync:
        return Sync(InflightRule.KEEP_PAUSE)

    @property
    def staleness_spec(self) -> Staleness:
        # Dropped in its own completion hook, after the controller has counted the group.
        return Staleness(self.max_off_policy_steps, Enforcement.POLICY)

    def admit(self, st: PipelineState) -> bool:
        c = self._ctl(st)
        in_flight = sum(len(g.trajs) for g in st.running.values())
        if st.now - c.last_poll >= self.poll_interval_s or c.preemptions is None:
            c.last_poll = st.now
            self._poll(st, c, in_flight)
        shipped = c.shipped + len(st.buffer) // self._batch_groups(st)
        if shipped - st.version > TARGET_LAG:
            return False
        return in_flight < c.cap

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        st.policy_state.group_size = len(group.trajs)

    # -- filtering ---------------------------------------------------------------------------
    def _too_old(self, g: GroupRecord, st: PipelineState) -> bool:
        return g.staleness(st.version) > self.max_off_policy_steps

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        c = self._ctl(st)
        c.seq += 1
        group.tag["seq"] = c.seq
        for tr in group.trajs:  # episode cost estimate: final context tokens
            tokens = tr.prompt_tokens + tr.completion_tokens
            if tokens > 0:
                c.cost = tokens if c.cost is None else (1 - EWMA_ALPHA) * c.cost + EWMA_ALPHA * tokens
        if self._too_old(group, st):
            return Verdict.DROP
        if self.filter_zero_advantages and group.reward_std() <= 1e-12:
            c.zero_pending.append(c.seq)  # keeps its batch slot; no backfill
            c.zero_in_a_row += 1
            if c.zero_in_a_row >= 10 * self._batch_groups(st):
                # Every batch would be empty forever; stop with the cause instead of hanging.
                raise PolicyError(
                    f"prime_rl: {c.zero_in_a_row} groups in a row had zero advantage and "
                    "filter_zero_advantages removes them all (group size 1, or all rewards equal?)"
                )
            return Verdict.DROP
        c.zero_in_a_row = 0
        return Verdict.ACCEPT

    def on_publish(self, st: PipelineState) -> PublishActions:
        return PublishActions(
            abort_running=tuple(g.gid for g in st.running.values() if self._too_old(g, st)),
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
        self._on_step(st, c, sum(len(g.trajs) for g in st.running.values()))
        return batch

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        b = max(1, math.ceil(self.batch_size / ctx.group_size))
        return attrs.evolve(
            super().lower(ctx), batch_min_groups=b, batch_max_groups=b,
            drop_zero_variance=1 if self.filter_zero_advantages else 0,
            fast_path_exact=0,  # adaptive KV-driven permits and the ship barrier have no fields
        )
