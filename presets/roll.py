"""ROLL (alibaba/ROLL): the RLVR pipeline's ReplayBuffer, async via ``async_generation_ratio``.

Follows ROLL at ``8eb27cc2``: ``roll/distributed/scheduler/generate_scheduler.py``
(``ReplayBuffer.advance_step/poll/begin/commit/abort/get_batch/gc``, ``pause_sampling``),
``roll/distributed/scheduler/user_defined_rollout_loop.py`` (``query_filter``, resend of partial
output), ``roll/pipeline/rlvr/{rlvr_pipeline,rlvr_config}.py``.

* Admission -- a cumulative prompt budget: the first ``advance_step`` sets it to
  ``ceil(B * ratio) + B``, each later step adds B; a prompt (group) may start while
  ``running + completed < budget`` (filtered and GC-aborted prompts free their slot). With
  ``is_use_additional_prompts`` extra prompts may run while ``running + running_extra <
  max_additional_running_prompts``; their commits do not count as completed. Each prompt is
  bound to the step current at its start (``start_step`` = the version it starts on).
* In flight -- every pipeline step begins with ``pause_sampling``: ``gc()`` aborts running
  prompts (and discards finished ones) whose ``start_step <= current_step - ceil(ratio)``, then
  all requests are aborted and, after ``model_update``, resent with their partial output
  (``collect_unfinished``): ``abort_resume``, global; GC-aborted work is wasted.
* Filtering -- ``query_filter_config``: ``mean_filter`` drops a group whose mean reward is
  ``<= threshold_down`` or ``>= threshold_up``; ``std_filter`` one whose (sample) std is
  ``<= std_threshold``; the slot is freed and another prompt starts.
* Batch -- ``get_batch`` reads B groups oldest start step first, from ``current_step -
  ceil(ratio)`` on; at each step it waits while that step has running prompts and too few
  finished ones; with a fractional ratio (1.5, ...) it takes only ``int(B * frac(ratio))`` from
  the oldest step. Extra-prompt surplus beyond B is left (and later GC-discarded).

Knobs. ``async_generation_ratio`` is 0 (synchronous) or >= 1: RLVR's config asserts it
(``rlvr_config.py:221-222``), so 0 < r < 1 is refused here too.

Approximations. ROLL counts samples (B*n with each response its own request when async); all n
responses of a prompt commit together, so counting groups is exact. ``response_filter`` retries
(no-op by default) and reward requests that continue during the update are not modelled. With
``async_generation_ratio = 0`` (upstream's default, synchronous) ROLL pauses sampling right
after ``get_batch``; here the running surplus (extra prompts only) is aborted as soon as the
batch is complete. The weight update is the engine's global publication once per step
(``model_update_frequency`` 1).
"""

from __future__ import annotations

import math

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Staleness, Sync

_FILTERS = ("no_filter", "mean_filter", "std_filter")


def _sample_std(rewards: list[float]) -> float:
    if len(rewards) < 2:
        return 0.0
    m = sum(rewards) / len(rewards)
    return (sum((x - m) ** 2 for x in rewards) / (len(rewards) - 1)) ** 0.5


def _rlvr_ratio(_inst, _attr, value: float) -> None:
    """RLVR refuses an async ratio below 1: ``async_pipeline`` is ``ratio > 0``
    (``roll/configs/base_config.py:821-823``) and then ``assert self.async_generation_ratio >= 1.0``
    (``roll/pipeline/rlvr/rlvr_config.py:221-222``)."""
    if 0.0 < value < 1.0:
        raise ValueError(
            f"async_generation_ratio must be 0 (synchronous) or >= 1.0 (got {value}): ROLL's RLVR "
            "pipeline refuses 0 < ratio < 1 (rlvr_config.py asserts async_generation_ratio >= 1.0)"
        )


@attrs.define
class RollState:
    """ReplayBuffer pool counters (running / running_extra / completed) and batches taken."""

    running: int = 0
    extra: int = 0
    completed: int = 0
    taken: int = 0


@register
@attrs.frozen
class RollPolicy(Policy):
    """ROLL: cumulative prompt budget, oldest-step-first batches, GC of over-age work."""

    kind = "roll"
    group_tags = {"extra": (bool, ())}
    upstream = "alibaba/ROLL@8eb27cc2 (roll/distributed/scheduler/generate_scheduler.py)"
    State = RollState

    rollout_batch_size: int = attrs.field(default=32, validator=v.gt(0))  # B, prompt groups per step
    async_generation_ratio: float = attrs.field(default=0.0, validator=[v.ge(0.0), _rlvr_ratio])
    is_use_additional_prompts: bool = False
    max_additional_running_prompts: int = attrs.field(default=16, validator=v.gt(0))
    query_filter_type: str = attrs.field(default="no_filter", validator=v.in_(_FILTERS))
    threshold_up: float | None = None  # mean_filter; None: +inf (upstream's default)
    threshold_down: float = -1.0  # mean_filter
    std_threshold: float = -1.0  # std_filter

    @property
    def lag(self) -> int:
        return math.ceil(self.async_generation_ratio)

    # -- pool counters of ReplayBuffer (running / running_extra / completed) ----------------
    @staticmethod
    def _pool(st: PipelineState) -> RollState:
        return st.policy_state

    def _budget(self, st: PipelineState) -> int:
        b = self.rollout_batch_size
        first = math.ceil(b * self.async_generation_ratio) if self.async_generation_ratio > 0 else 0
        return first + (st.version + 1) * b

    @property
    def sync_spec(self) -> Sync:
        return Sync(InflightRule.ABORT_RESUME)

    @property
    def staleness_spec(self) -> Staleness:
        return Staleness(self.lag, Enforcement.DROP_AT_CONSUMPTION)

    def admit(self, st: PipelineState) -> bool:
        if self.lag == 0 and st.policy_state.taken > st.version:
            return False  # synchronous: the router stays suspended from get_batch to the next step
        p = self._pool(st)
        if p.running + p.completed < self._budget(st):
            return True
        return self.is_use_additional_prompts and p.running + p.extra < self.max_additional_running_prompts

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        p = self._pool(st)
        if p.running + p.completed < self._budget(st):
            p.running += 1
        else:
            p.extra += 1
            group.tag["extra"] = True

    @staticmethod
    def _release(p: RollState, commit: bool) -> None:
        # ReplayBuffer's _commit_prompt/_abort_prompt: the regular pool drains first.
        if p.running > 0:
            p.running -= 1
            p.completed += int(commit)
        else:
            p.extra -= 1

    def _keep(self, group: GroupRecord) -> bool:
        r = group.rewards
        if self.query_filter_type == "mean_filter" and len(r) > 1:
            mean = sum(r) / len(r)
            up = math.inf if self.threshold_up is None else self.threshold_up
            return not (mean <= self.threshold_down or mean >= up)
        if self.query_filter_type == "std_filter" and len(r) > 1:
            return _sample_std(r) > self.std_threshold
        return True

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        keep = self._keep(group)
        self._release(self._pool(st), commit=keep)
        return Verdict.ACCEPT if keep else Verdict.DROP

    def after_group_done(self, st: PipelineState) -> PublishActions:
        if self.lag == 0 and self.is_use_additional_prompts:
            # Synchronous ROLL pauses sampling right after get_batch: abort the surplus.
            if sum(1 for g in st.buffer if g.dispatch_version == st.version) >= self.rollout_batch_size:
                return self._gc(st, max_step=st.version, running_only=True)
        return PublishActions()

    def _gc(self, st: PipelineState, max_step: int, running_only: bool = False) -> PublishActions:
        p = self._pool(st)
        aborted = tuple(g.gid for g in st.running.values() if g.dispatch_version <= max_step)
        for _ in aborted:
            self._release(p, commit=False)
        dropped = () if running_only else tuple(g.gid for g in st.buffer if g.dispatch_version <= max_step)
        return PublishActions(abort_running=aborted, drop_buffered=dropped)

    def on_publish(self, st: PipelineState) -> PublishActions:
        # pause_sampling at the start of step `version`: current_step is still version - 1.
        return self._gc(st, max_step=st.version - 1 - self.lag)

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        b, cur = self.rollout_batch_size, st.version
        min_step = cur - self.lag
        frac = self.async_generation_ratio % 1
        taken: list[GroupRecord] = []
        for step in range(min_step, cur + 1):
            if step == min_step and step < cur and frac:
                want = int(b * frac)
            else:
                want = b - len(taken)
            ready = [g for g in st.buffer if g.dispatch_version == step]
            running = any(g.dispatch_version == step for g in st.running.values())
            if len(ready) < want and (running or step == cur):
                return None  # ItemsGroup.get_batch blocks while this step still runs
            taken.extend(ready[:want])
            if len(taken) >= b:
                st.policy_state.taken += 1
                return taken[:b]
        return None

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        b = self.rollout_batch_size
        first = math.ceil(b * self.async_generation_ratio) if self.async_generation_ratio > 0 else 0
        # Synchronous ROLL (ratio 0, no additional prompts) is the sync shape: running + completed
        # (= accepted + running) < (v + 1) * B, and the router is suspended from get_batch to the
        # next step (not while training; the abort_resume pause holds dispatch while publishing); its
        # batch is the B groups of the current step, all finished, in completion order. A std filter
        # at threshold 0 drops exactly the zero-variance groups (groups of more than one sample).
        # Not in the record: async ratios (oldest-step-first reading, per-step waits, GC of
        # over-age work), additional prompts and their surplus abort, other filter thresholds.
        zero_var = self.query_filter_type == "std_filter" and self.std_threshold == 0 and ctx.group_size > 1
        exact = self.lag == 0 and not self.is_use_additional_prompts and (
            self.query_filter_type == "no_filter" or zero_var)
        return attrs.evolve(
            super().lower(ctx),
            admit_budget_base_groups=float(first + b),
            admit_budget_per_version_groups=float(b),
            admit_block_while_training=int(self.lag == 0),
            drop_zero_variance=int(self.query_filter_type == "std_filter" and self.std_threshold >= 0),
            batch_min_groups=b,
            batch_max_groups=b,
            fast_path_exact=int(exact),
        )
