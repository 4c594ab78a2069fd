"""Policies whose every rule is a `PolicyParams` record, executed here for the SimPy engine.

The fast path runs the same record in JAX (`simrl_fast`). A `RecordPolicy` therefore has one
encoding: its `record()`; admission, the declared `Sync` and `Staleness`, zero-variance
filtering, the bounded buffer and FIFO batches of ``batch_min_groups..batch_max_groups`` all
follow from it, and `lower()` returns it unchanged. `ParamsPolicy` wraps a bare record, which is
how the registry-wide exactness test replays any preset's lowering in SimPy.
"""

from __future__ import annotations

import math
from functools import lru_cache

import attrs

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.rules import Enforcement, InflightRule, Placement, Staleness, Sync, SyncScope

_RULES = list(InflightRule)
_ENFORCEMENTS = list(Enforcement)


@lru_cache(maxsize=1024)
def _record(policy: RecordPolicy) -> PolicyParams:
    return policy.record()


def admits(p: PolicyParams, st: PipelineState) -> bool:
    """The superset admission rule of `simrl.policy.params`."""
    if p.admit_block_while_training and st.training:
        return False
    count = st.groups_dispatched if p.admit_count_dispatched else st.groups_accepted + st.n_running
    return st.n_running < p.admit_concurrency_groups and count < (
        p.admit_budget_base_groups + p.admit_budget_per_version_groups * st.version)


@attrs.frozen
class RecordPolicy(Policy):
    """Base of a policy defined by one `PolicyParams` record (subclasses implement `record`)."""

    def record(self) -> PolicyParams:
        raise NotImplementedError(f"{type(self).__name__} must implement record()")

    @property
    def params(self) -> PolicyParams:
        return _record(self)

    @property
    def sync_spec(self) -> Sync:
        p = self.params
        return Sync(rule=_RULES[p.inflight_rule],
                    scope=SyncScope.PER_INSTANCE if p.sync_per_instance else SyncScope.GLOBAL,
                    placement=Placement.COLOCATED if p.colocated else None,
                    clear_prefix_cache=bool(p.clear_cache_on_sync))

    @property
    def staleness_spec(self) -> Staleness:
        p = self.params
        return Staleness(None if p.staleness_bound < 0 else p.staleness_bound,
                         _ENFORCEMENTS[p.staleness_enforcement], bool(p.evict_stale_on_publish))

    def admit(self, st: PipelineState) -> bool:
        return admits(self.params, st)

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        p = self.params
        if p.drop_zero_variance and group.reward_std() == 0.0:
            retry = p.drop_zero_variance == 2 and (p.max_retries <= 0 or group.retries < p.max_retries)
            return Verdict.RETRY if retry else Verdict.DROP
        return Verdict.ACCEPT

    def after_group_done(self, st: PipelineState) -> PublishActions:
        cap = self.params.buffer_capacity_groups
        if 0 <= cap < len(st.buffer):  # overflow evicts the oldest
            return PublishActions(drop_buffered=tuple(g.gid for g in st.buffer[: len(st.buffer) - cap]))
        return PublishActions()

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        p = self.params
        if len(st.buffer) < p.batch_min_groups:
            return None
        return st.buffer[: p.batch_max_groups]

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        return self.params


@attrs.frozen
class ParamsPolicy(RecordPolicy):
    """A bare `PolicyParams` record as a policy (not selectable by name)."""

    kind = "params"
    params_record: PolicyParams = attrs.field(validator=attrs.validators.instance_of(PolicyParams))

    def record(self) -> PolicyParams:
        return self.params_record

    def __attrs_post_init__(self):
        p = self.params_record
        if math.isinf(p.admit_concurrency_groups) and math.isinf(p.admit_budget_base_groups):
            raise ValueError("a PolicyParams record with unbounded admission")
