"""verl's experimental async recipes: ``fully_async_policy`` and ``one_step_off_policy``.

Follows volcengine/verl at ``b178a3cd``: ``verl/experimental/fully_async_policy/{README.md,
fully_async_rollouter.py, message_queue.py, fully_async_trainer.py, param_sync.py,
config/fully_async_ppo_trainer.yaml}`` and ``verl/experimental/one_step_off_policy/
{README.md, ray_trainer.py}``. One verl "sample" is one prompt with ``rollout.n`` responses,
i.e. one group, so no unit conversion is needed.

``fully_async`` (default):

* Admission -- R = ``ppo_mini_batch_size * require_batches``; M = ``int(R * (1 +
  staleness_threshold) * trigger_parameter_sync_step)``. The Rollouter keeps at most
  ``min(concurrent_samples_per_replica * servers, M)`` samples generating and pauses while
  ``staleness_samples >= M`` or the MessageQueue holds ``>= M``; ``staleness_samples`` grows
  by one per new sample and is reset at every version update to active + queued.
* In flight -- with ``partial_rollout`` generation is cancelled at a sync and resumed from the
  partial output, served first (``abort_resume``); without it the Rollouter waits for active
  tasks (``drain``).
* Filtering -- none, except the MessageQueue's drop-oldest on overflow (a bounded FIFO of M).
* Batch -- FIFO from the MessageQueue; surplus produced in a window stays queued and is read
  first after the sync (the "overage" queue, whose head is its stalest sample).

``one_step_off`` -- batch k+1 is generated right after the sync while batch k trains; the sync
waits for that generation (``drain``); every step is a full-batch barrier; staleness exactly 1.

Approximations. The engine publishes after every training step, so one engine step is one
sync window: ``trigger_parameter_sync_step`` local updates of R samples are trained as one
batch of ``trigger_parameter_sync_step * R`` groups, unless ``deployment.training.
trigger_parameter_sync_step`` is set to the same k: then the engine streams as upstream does
(fully_async_trainer.py at 1d85d951: R samples per local step, trained as they arrive, a sync
after every k), overlapping the first updates with the tail of generation. Staleness is therefore
counted in parameter versions, as verl's ``param_version`` does. ``ppo_mini_batch_size``
defaults to 8 here so that a window is the default scenario's 32 groups (upstream's example
uses larger batches). No per-sample version check exists upstream, so no bound is promised in
``fully_async`` (``staleness_bound`` None).
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Staleness, Sync


@attrs.define
class VerlState:
    """Samples counted against the staleness queue, and batches taken by the trainer."""

    staleness_samples: int = 0
    batches_taken: int = 0


@register
@attrs.frozen
class VerlPolicy(Policy):
    """verl fully_async (sample budget per window, FIFO overage queue) or one_step_off."""

    kind = "verl"
    upstream = "volcengine/verl@b178a3cd (verl/experimental/fully_async_policy, one_step_off_policy)"
    State = VerlState

    mode: str = attrs.field(default="fully_async", validator=v.in_(("fully_async", "one_step_off")))
    staleness_threshold: float = attrs.field(default=0.1, validator=v.ge(0.0))
    trigger_parameter_sync_step: int = attrs.field(default=4, validator=v.gt(0))
    require_batches: int = attrs.field(default=1, validator=v.gt(0))
    ppo_mini_batch_size: int = attrs.field(default=8, validator=v.gt(0))  # samples = groups
    partial_rollout: bool = True
    concurrent_samples_per_replica: int = attrs.field(default=16, validator=v.gt(0))
    train_batch_size: int = attrs.field(default=32, validator=v.gt(0))  # one_step_off: groups per step

    @property
    def window_groups(self) -> int:
        """Groups trained per engine step (one sync window)."""
        if self.mode == "one_step_off":
            return self.train_batch_size
        return self.ppo_mini_batch_size * self.require_batches * self.trigger_parameter_sync_step

    @property
    def streams(self) -> bool:
        """Whether the engine's streaming trainer may take this policy's batch in pieces: not in
        one_step_off, whose admission counts whole batches taken by `form_batch`."""
        return self.mode == "fully_async"

    @property
    def queue_size(self) -> int:
        """M: the sample budget per window and the MessageQueue's capacity."""
        r = self.ppo_mini_batch_size * self.require_batches
        return max(int(r * (1 + self.staleness_threshold) * self.trigger_parameter_sync_step), self.window_groups)

    @property
    def sync_spec(self) -> Sync:
        if self.mode == "fully_async" and self.partial_rollout:
            return Sync(InflightRule.ABORT_RESUME)
        return Sync(InflightRule.DRAIN)

    @property
    def staleness_spec(self) -> Staleness:
        return Staleness(1, Enforcement.ADMISSION) if self.mode == "one_step_off" else Staleness()

    def admit(self, st: PipelineState) -> bool:
        if self.mode == "one_step_off":
            # Generation of batch k+1 starts when batch k is taken (the trainer starts step k).
            return st.groups_dispatched < (st.policy_state.batches_taken + 1) * self.train_batch_size
        m = self.queue_size
        conc = min(self.concurrent_samples_per_replica * st.n_instances, m)
        return st.n_running < conc and st.policy_state.staleness_samples < m and len(st.buffer) < m

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        st.policy_state.staleness_samples += 1

    def after_group_done(self, st: PipelineState) -> PublishActions:
        over = len(st.buffer) - self.queue_size
        if self.mode == "fully_async" and over > 0:
            return PublishActions(drop_buffered=tuple(g.gid for g in st.buffer[:over]))  # put_sample drops oldest
        return PublishActions()

    def on_publish(self, st: PipelineState) -> PublishActions:
        st.policy_state.staleness_samples = st.n_running + len(st.buffer)  # active + cancelled + queued
        return PublishActions()

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        w = self.window_groups
        if len(st.buffer) < w:
            return None
        st.policy_state.batches_taken += 1
        return st.buffer[:w]

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        w = self.window_groups
        if self.mode == "one_step_off":
            # dispatched < (batches taken + 1) * W: batch k+1 is generated once batch k is taken
            return attrs.evolve(
                super().lower(ctx),
                admit_budget_base_groups=float(w), admit_budget_per_batch_groups=float(w),
                admit_count_dispatched=1, batch_min_groups=w, batch_max_groups=w, fast_path_exact=1,
            )
        m = self.queue_size
        # running < min(concurrent_samples_per_replica * servers, M); staleness_samples < M, the count
        # of groups dispatched since the last publication plus those then active or queued; queue < M.
        # The MessageQueue's drop-oldest at M is kept (running + queued never exceeds that count, so
        # it cannot fire).
        return attrs.evolve(
            super().lower(ctx),
            admit_concurrency_groups=float(min(self.concurrent_samples_per_replica * ctx.instances, m)),
            admit_budget_base_groups=float(m), admit_count_dispatched=1, admit_count_since_publish=1,
            admit_buffer_cap_groups=float(m),
            buffer_capacity_groups=m,
            batch_min_groups=w,
            batch_max_groups=w,
            fast_path_exact=1,
        )
