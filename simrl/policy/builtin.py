"""Two built-in policies that exercise the seam: synchronous on-policy and bounded staleness.

They are generic, not any one system (the thirteen upstream presets live in `presets/`), and
each is one `PolicyParams` record (`RecordPolicy`): SimPy executes the record, the fast path
lowers it unchanged.
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.params import PolicyParams
from simrl.policy.record import RecordPolicy
from simrl.policy.rules import Enforcement, InflightRule, code

_INFLIGHT = tuple(r.value for r in InflightRule)


@attrs.frozen
class SyncPolicy(RecordPolicy):
    """Synchronous on-policy RL: generate B groups on version v, train, publish v+1, repeat.

    Admission opens only for the groups of the step about to be trained on the current
    version, so nothing is in flight at a weight update and every trained group has
    staleness 0.
    """

    kind = "sync"
    batch_groups: int = attrs.field(default=32, validator=v.gt(0))

    def record(self) -> PolicyParams:
        # Groups dispatched so far belong to steps 0..; step k's groups are k*B..(k+1)*B-1, and
        # admission is closed while training, so nothing is in flight at a weight update.
        b = self.batch_groups
        return PolicyParams(
            admit_budget_base_groups=float(b), admit_budget_per_version_groups=float(b),
            admit_block_while_training=1, inflight_rule=code(InflightRule.DRAIN),
            staleness_bound=0, staleness_enforcement=code(Enforcement.ADMISSION),
            batch_min_groups=b, batch_max_groups=b, fast_path_exact=1,
        )


@attrs.frozen
class BoundedAsyncPolicy(RecordPolicy):
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

    def record(self) -> PolicyParams:
        # The engine drops a group staler than the bound when it finishes and evicts buffered
        # groups that age past it at every publication (`simrl.engine.staleness`).
        b, s = self.batch_groups, self.max_staleness
        return PolicyParams(
            admit_concurrency_groups=float(self.max_concurrent_groups or b * (s + 1)),
            admit_budget_base_groups=float((s + 1) * b), admit_budget_per_version_groups=float(b),
            inflight_rule=code(InflightRule(self.inflight_rule)), staleness_bound=s,
            staleness_enforcement=code(Enforcement.DROP_AT_COMPLETION), evict_stale_on_publish=1,
            batch_min_groups=b, batch_max_groups=b, fast_path_exact=1,
        )
