"""slime (THUDM/slime): Megatron + SGLang, in three modes.

Follows slime at ``624b824a``: ``train.py`` (``sync``: colocated, synchronous),
``train_async.py`` (``train_async``: rollout k+1 generated while training k, weights updated
after waiting for it), ``slime/rollout/sglang_rollout.py`` (the default rollout: over-sampling
chunks, dynamic-sampling filter, abort of the remainder), ``slime/rollout/fully_async_rollout.py``
(``fully_async``), ``slime/rollout/data_source.py``, ``slime/utils/arguments.py`` (knobs).

* Admission (``sync``, ``train_async``) -- chunks of ``over_sampling_batch_size`` groups are
  submitted whenever submitted - filtered < target; ``sync`` starts rollout k once version k is
  loaded, ``train_async`` as soon as batch k-1 is taken (one rollout ahead). A semaphore
  allows ``sglang_server_concurrency`` samples per engine. ``fully_async``: a worker keeps up
  to ``sglang_server_concurrency`` x engines groups running until the output queue holds as
  many.
* In flight -- once the target is kept, every remaining request is aborted (tokens wasted);
  with ``partial_rollout`` they are kept instead and continue in the next rollout (``sync``:
  aborted at the colocated pause and re-prefilled after it), as the head of its first chunk:
  upstream's data source serves recycled groups first inside ``over_sampling_batch_size``
  (``data_source.py`` ``pop_first``), so that chunk adds only chunk - carried new groups. ``train_async`` drains: the
  update waits for the rollout in progress. ``fully_async``: an update waits until the next
  rollout's target is collected (``train_async.py:66-70``, ``ready_to_publish``), then aborts
  the running groups, which restart from scratch (requeued).
* Filtering -- ``dynamic_sampling_filter_path`` (``check_reward_nonzero_std``) drops
  zero-variance groups and more are sampled.
* Batch -- exactly the target in groups per step, in completion order.

Staleness: 0 in ``sync``, 1 in ``train_async``; unbounded in ``fully_async`` (upstream has no
version bound; PR #2278 is still open) and in ``sync`` with ``partial_rollout`` (a recycled
group can be carried over more than one rollout).

Approximations. The engine publishes weights after every training step, so one engine step is
one weight-update window: ``update_weights_interval`` rollouts of ``rollout_batch_size`` groups
are trained as one batch of ``interval * rollout_batch_size`` groups. In ``train_async`` with
``partial_rollout`` the surplus is requeued from scratch (the engine's drain cannot park a
half-finished group across the update); upstream keeps its tokens. The fully-async
concurrency is counted in groups, as the example worker does. ``mask_offpolicy_in_partial_
rollout`` changes the loss, not the timeline. Upstream's ``rollout_batch_size`` has no default;
the default scenario's 32 groups is used. In ``fully_async`` the last step also waits for a
next rollout before its update (upstream skips that wait after the last rollout), and groups
whose calls never started are requeued too (no tokens are lost).
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Placement, Staleness, Sync

_MODES = ("sync", "train_async", "fully_async")
_FILTERS = (None, "check_reward_nonzero_std")


@attrs.define
class SlimeState:
    """Rollout progress: round, groups kept, submitted, filtered, chunk, taken, and n."""

    r: int = 0
    kept: int = 0
    sub: int = 0
    filt: int = 0
    chunk: int = 0
    taken: int = 0
    n: int = 1


@register
@attrs.frozen
class SlimePolicy(Policy):
    """slime: batch-synchronous rollouts that abort the surplus (sync / train_async / fully_async)."""

    kind = "slime"
    upstream = "THUDM/slime@624b824a (train.py, train_async.py, slime/rollout/sglang_rollout.py)"
    State = SlimeState

    mode: str = attrs.field(default="sync", validator=v.in_(_MODES))
    rollout_batch_size: int = attrs.field(default=32, validator=v.gt(0))  # groups per rollout
    over_sampling_batch_size: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    partial_rollout: bool = False
    dynamic_sampling_filter_path: str | None = attrs.field(default=None, validator=v.in_(_FILTERS))
    sglang_server_concurrency: int = attrs.field(default=512, validator=v.gt(0))
    update_weights_interval: int = attrs.field(default=1, validator=v.gt(0))

    @property
    def target(self) -> int:
        """Groups trained per engine step (one weight-update window)."""
        return self.rollout_batch_size * self.update_weights_interval

    @property
    def chunk(self) -> int:
        return self.over_sampling_batch_size or self.rollout_batch_size

    # -- rollout state (SlimeState) ------------------------------------------------------------
    @staticmethod
    def _ro(st: PipelineState) -> SlimeState:
        return st.policy_state

    def _sample_room(self, st: PipelineState, ro: SlimeState) -> bool:
        running = sum(len(g.trajs) for g in st.running.values())
        return running + ro.n <= self.sglang_server_concurrency * st.n_instances

    @property
    def sync_spec(self) -> Sync:
        placement = Placement.COLOCATED if self.mode == "sync" else Placement.DISAGGREGATED
        if self.mode == "train_async":
            return Sync(InflightRule.DRAIN, placement=placement)
        if self.mode == "sync" and self.partial_rollout:
            return Sync(InflightRule.ABORT_RESUME, placement=placement)  # the colocated pause aborts
        return Sync(InflightRule.KEEP_PAUSE, placement=placement)

    @property
    def staleness_spec(self) -> Staleness:
        if self.mode == "fully_async" or (self.mode == "sync" and self.partial_rollout):
            return Staleness()  # a recycled partial group may be carried over more than one rollout
        return Staleness(1 if self.mode == "train_async" else 0, Enforcement.ADMISSION)

    def admit(self, st: PipelineState) -> bool:
        ro = self._ro(st)
        if self.mode == "fully_async":
            cap = self.sglang_server_concurrency * st.n_instances
            return st.n_running < cap and len(st.buffer) < cap
        opened = st.version >= ro.r if self.mode == "sync" else ro.taken >= ro.r
        if not opened or ro.kept >= self.target:
            return False
        wants = ro.chunk > 0 or ro.sub - ro.filt < self.target
        return wants and self._sample_room(st, ro)

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        ro = self._ro(st)
        ro.n = len(group.trajs)
        if self.mode == "fully_async":
            return
        if ro.chunk == 0:
            ro.chunk = self.chunk
        ro.chunk -= 1
        ro.sub += 1

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        if self.dynamic_sampling_filter_path and group.reward_std() == 0.0:
            self._ro(st).filt += 1
            return Verdict.DROP
        self._ro(st).kept += 1
        return Verdict.ACCEPT

    def after_group_done(self, st: PipelineState) -> PublishActions:
        ro = self._ro(st)
        if self.mode == "fully_async" or ro.kept < self.target:
            return PublishActions()
        # The rollout is complete: the next one starts counting; the remainder is cut.
        running = tuple(st.running)
        carry = self.partial_rollout and self.mode == "sync"
        ro.r, ro.kept, ro.filt, ro.chunk, ro.sub = ro.r + 1, 0, 0, 0, 0
        if carry:
            # The carried groups are the head of the next rollout's first chunk: upstream's data
            # source serves recycled groups first inside `over_sampling_batch_size`
            # (data_source.py pop_first), so that chunk adds only chunk - carried new groups.
            ro.sub = len(running)
            ro.chunk = max(self.chunk - len(running), 0)
            return PublishActions()
        if self.partial_rollout:
            return PublishActions(requeue_running=running)
        return PublishActions(abort_running=running)

    def ready_to_publish(self, st: PipelineState) -> bool:
        # train_async.py:66-70: before update_weights the driver waits for the next rollout
        # (`ray.get(rollout_data_next_future)`); in fully_async that call returns once the
        # target of groups is collected from the continuous generation.
        return self.mode != "fully_async" or len(st.buffer) >= self.target

    def on_publish(self, st: PipelineState) -> PublishActions:
        if self.mode == "fully_async":
            return PublishActions(requeue_running=tuple(st.running))
        return PublishActions()

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        if len(st.buffer) < self.target:
            return None
        self._ro(st).taken += 1
        return st.buffer[: self.target]

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        t = self.target
        cap = self.sglang_server_concurrency * ctx.instances  # samples generating at once
        # Without a filter, over-sampling chunks that divide the target and no partial rollout,
        # each rollout dispatches exactly the target and nothing is left to abort: sync opens
        # rollout v at version v (accepted + running < (v + 1) * T), train_async once batch k - 1
        # is taken (< (taken + 1) * T); running samples + n <= cap is running < cap // n groups.
        # Not in the record: chunks that over-sample, the surplus abort, filtered refills, the
        # partial carry-over, fully_async's requeue at each publication.
        # The preset names its staleness bound as what closes admission (enforced by admission), so
        # the record is exact only where the concurrency cap never binds (fewer than T groups run).
        exact = (self.mode != "fully_async" and not self.dynamic_sampling_filter_path and not self.partial_rollout
                 and t % self.chunk == 0 and cap // ctx.group_size >= t)
        per_version, per_batch = (float(t), 0.0) if self.mode == "sync" else (0.0, float(t))
        return attrs.evolve(
            super().lower(ctx),
            admit_concurrency_groups=float(max(1, cap // ctx.group_size)),
            admit_budget_base_groups=float(t),
            admit_budget_per_version_groups=per_version,
            admit_budget_per_batch_groups=per_batch,
            drop_zero_variance=int(self.dynamic_sampling_filter_path is not None),
            batch_min_groups=t,
            batch_max_groups=t,
            fast_path_exact=int(exact),
        )
