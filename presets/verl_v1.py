"""verl's V1 trainer (``verl/trainer/ppo/v1/``, ``trainer.use_v1``): sync, colocate_async, separate_async.

Follows verl-project/verl at ``1dda039b``: ``docs/advance/v1_async_trainer.md``,
``verl/trainer/ppo/v1/{replay_buffer,trainer_base,trainer_separate_async,
trainer_colocate_async}.py``, ``verl/checkpoint_engine/base.py`` and the generated config
``verl/trainer/config/_generated_ppo_trainer.yaml``.

* Admission -- constant pipeline depth: ``num_warmup_batches`` batches at train start (async
  modes), then one full batch per step in ``prepare_step``; every evicted group is refilled with
  exactly one new prompt, so ``dispatched - evicted < (warmup + step) * train_batch_size``. In
  ``sync`` mode a DAPO eviction of k groups grants 2k refill credits.
* In flight -- ``separate_async``: at the end of a step the checkpoint engine aborts every
  request (tokens and log-probs kept), transfers weights and resumes them (``abort_resume``,
  global). ``colocate_async``: rollout is aborted and put to sleep for the step, then updated and
  resumed (colocated placement, ``abort_resume``). ``sync``: colocated and synchronous.
* Filtering, at sampling time -- a finished group is evicted (and refilled) when its span
  ``global_steps - dispatch_step + 1`` exceeds ``max_off_policy_threshold`` (strategy
  ``drop``) or, with ``filter_groups_metric``, when that metric is identical across the group
  (DAPO). Strategy ``wait`` evicts nothing and instead holds sampling while an in-flight group
  has reached the threshold.
* Batch -- ``train_batch_size`` groups, oldest dispatch first (in ``separate_async`` that is
  ``parameter_sync_step`` mini-batches of ``ppo_mini_batch_size``).

With ``drop`` every trained group has ``version - dispatch_version <= threshold - 1``, hence
staleness ``<= max_off_policy_threshold - 1``.

Approximations. One engine step is one global step: the mini-batches of ``separate_async`` are
trained as one batch (upstream samples and trains each as soon as it is available, overlapping
the step with generation). Eviction at sampling time is carried out when a group finishes
already over the span and, for buffered groups, right after each weight update (the instant
the next step starts sampling). "Failed" groups do not occur in the simulation. The hybrid
rollout switch (lending trainer GPUs) is not modelled. ``ppo_mini_batch_size`` defaults to 8 so
that a step is the default scenario's 32 groups. How ``prepare_step`` interleaves with the
warm-up batches is our reading of the docs (depth = warmup + 1 batches during step 1).
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Placement, Staleness, Sync

_MODES = ("sync", "colocate_async", "separate_async")


@attrs.define
class VerlV1State:
    """Refill credits earned by evictions (2k refills for k evictions)."""

    refill_credits: int = 0


@register
@attrs.frozen
class VerlV1Policy(Policy):
    """verl V1: fixed pipeline depth, evict-and-refill of over-span groups at sampling time."""

    kind = "verl_v1"
    upstream = "verl-project/verl@1dda039b (verl/trainer/ppo/v1/replay_buffer.py, trainer_*.py)"
    State = VerlV1State

    trainer_mode: str = attrs.field(default="sync", validator=v.in_(_MODES))
    num_warmup_batches: int = attrs.field(default=1, validator=v.ge(0))
    parameter_sync_step: int = attrs.field(default=4, validator=v.gt(0))
    ppo_mini_batch_size: int = attrs.field(default=8, validator=v.gt(0))  # groups
    max_off_policy_threshold: int = attrs.field(default=8, validator=v.ge(1))
    max_off_policy_strategy: str = attrs.field(default="drop", validator=v.in_(("drop", "wait")))
    filter_groups_metric: str | None = attrs.field(default=None, validator=v.in_((None, "acc")))

    @property
    def train_batch_size(self) -> int:
        return self.parameter_sync_step * self.ppo_mini_batch_size

    def _depth(self) -> int:
        return 0 if self.trainer_mode == "sync" else self.num_warmup_batches

    @property
    def sync_spec(self) -> Sync:
        placement = Placement.DISAGGREGATED if self.trainer_mode == "separate_async" else Placement.COLOCATED
        rule = InflightRule.KEEP_PAUSE if self.trainer_mode == "sync" else InflightRule.ABORT_RESUME
        return Sync(rule, placement=placement)

    @property
    def staleness_spec(self) -> Staleness:
        drop = self.max_off_policy_strategy == "drop"
        return Staleness(self.max_off_policy_threshold - 1,
                         Enforcement.DROP_AT_CONSUMPTION if drop else Enforcement.COUNTED)

    def admit(self, st: PipelineState) -> bool:
        live = st.groups_dispatched - st.groups_dropped
        room = (self._depth() + st.version + 1) * self.train_batch_size + st.policy_state.refill_credits
        return live < room

    def _over_span(self, g: GroupRecord, st: PipelineState) -> bool:
        # span = global_steps - dispatch_step + 1, both 1-based, so version - dispatch_version + 1
        return st.version - g.dispatch_version + 1 > self.max_off_policy_threshold

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        if self.filter_groups_metric and group.reward_std() == 0.0:
            if self.trainer_mode == "sync":
                st.policy_state.refill_credits += 1  # 2k refills for k evictions
            return Verdict.DROP
        if self.max_off_policy_strategy == "drop" and self._over_span(group, st):
            return Verdict.DROP
        return Verdict.ACCEPT

    def on_publish(self, st: PipelineState) -> PublishActions:
        if self.max_off_policy_strategy != "drop":
            return PublishActions()
        return PublishActions(drop_buffered=tuple(g.gid for g in st.buffer if self._over_span(g, st)))

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        b = self.train_batch_size
        if len(st.buffer) < b:
            return None
        if self.max_off_policy_strategy == "wait" and any(
            st.version - g.dispatch_version + 1 >= self.max_off_policy_threshold for g in st.running.values()
        ):
            return None
        return sorted(st.buffer, key=lambda g: g.gid)[:b]

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        b = self.train_batch_size
        drop = self.max_off_policy_strategy == "drop"
        # live = dispatched - dropped = accepted + running < (depth + v + 1) * B; an over-span group
        # (version - dispatch_version + 1 > threshold) is dropped at completion and evicted from the
        # buffer after each update (dispatch age > threshold - 1); the batch is the oldest-dispatched
        # B buffered groups. Not in the record: sync mode's 2k refill credits for k DAPO evictions,
        # and strategy wait's hold on sampling while a running group reaches the threshold.
        exact = drop and not (self.trainer_mode == "sync" and self.filter_groups_metric)
        return attrs.evolve(
            super().lower(ctx),
            admit_budget_base_groups=float((self._depth() + 1) * b),
            admit_budget_per_version_groups=float(b),
            admit_return_evicted=1,
            drop_zero_variance=1 if self.filter_groups_metric else 0,  # evicted, refilled by a new prompt
            max_dispatch_age=self.max_off_policy_threshold - 1 if drop else -1,
            batch_min_groups=b,
            batch_max_groups=b,
            batch_order=2,
            fast_path_exact=int(exact),
        )
