"""Two built-in policies that exercise the seam: synchronous on-policy and bounded staleness.

They are generic, not any one system; the thirteen upstream presets live in `presets/`.
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, InflightRule, PipelineState, Policy
from simrl.policy.params import ENFORCEMENT_CODES
from simrl.policy.rules import Enforcement, Staleness

_INFLIGHT = tuple(r.value for r in InflightRule)


@attrs.frozen
class SyncPolicy(Policy):
    """Synchronous on-policy RL: generate B groups on version v, train, publish v+1, repeat.

    Admission opens only for the groups of the step about to be trained on the current
    version, so nothing is in flight at a weight update and every trained group has
    staleness 0.
    """

    kind = "sync"
    batch_groups: int = attrs.field(default=32, validator=v.gt(0))

    @property
    def inflight(self) -> InflightRule:
        return InflightRule.DRAIN

    def admit(self, st: PipelineState) -> bool:
        # Groups dispatched so far belong to steps 0..; step k's groups are k*B..(k+1)*B-1.
        return not st.training and st.groups_accepted + st.n_running < (st.version + 1) * self.batch_groups

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        if len(st.buffer) < self.batch_groups:
            return None
        return st.buffer[: self.batch_groups]

    def staleness_bound(self) -> int | None:
        return 0

    def lower(self):
        b = self.batch_groups
        return attrs.evolve(
            super().lower(), admit_budget_base_groups=float(b), admit_budget_per_version_groups=float(b),
            admit_block_while_training=1, staleness_enforcement=ENFORCEMENT_CODES["admission"],
            batch_min_groups=b, batch_max_groups=b, fast_path_exact=1,
        )


@attrs.frozen
class BoundedAsyncPolicy(Policy):
    """Asynchronous RL with bounded staleness: admission control plus a consumption guard.

    A group may start while ``accepted + running < (max_staleness + version + 1) * batch_groups``
    (dropped groups return their slot) and fewer than ``max_concurrent_groups`` are running
    (AReaL-style admission). Admission alone does not bound staleness when a straggler is
    overtaken by groups dispatched later, so a finished group older than ``max_staleness`` is
    dropped, and buffered groups that age past it at a publication are evicted: every trained
    group has staleness <= max_staleness. Batches are the first ``batch_groups`` finished
    groups (FIFO).
    """

    kind = "bounded_async"
    batch_groups: int = attrs.field(default=32, validator=v.gt(0))
    max_staleness: int = attrs.field(default=1, validator=v.ge(0))
    max_concurrent_groups: int | None = None  # None: batch_groups * (max_staleness + 1)
    inflight_rule: str = attrs.field(default="abort_resume", validator=v.in_(_INFLIGHT))

    @property
    def inflight(self) -> InflightRule:
        return InflightRule(self.inflight_rule)

    def admit(self, st: PipelineState) -> bool:
        cap = self.max_concurrent_groups or self.batch_groups * (self.max_staleness + 1)
        budget = (self.max_staleness + st.version + 1) * self.batch_groups
        return st.n_running < cap and st.groups_accepted + st.n_running < budget

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        if len(st.buffer) < self.batch_groups:
            return None
        return st.buffer[: self.batch_groups]

    def staleness_bound(self) -> int | None:
        return self.max_staleness

    @property
    def staleness_spec(self) -> Staleness:
        # The engine drops a group staler than the bound when it finishes and evicts buffered
        # groups that age past it at every publication (`simrl.engine.staleness`).
        return Staleness(self.max_staleness, Enforcement.DROP_AT_COMPLETION, evict_on_publish=True)

    def lower(self):
        b, s = self.batch_groups, self.max_staleness
        return attrs.evolve(
            super().lower(), admit_concurrency_groups=float(self.max_concurrent_groups or b * (s + 1)),
            admit_budget_base_groups=float((s + 1) * b), admit_budget_per_version_groups=float(b),
            staleness_enforcement=ENFORCEMENT_CODES["drop_at_completion"], evict_stale_on_publish=1,
            batch_min_groups=b, batch_max_groups=b, fast_path_exact=1,
        )
