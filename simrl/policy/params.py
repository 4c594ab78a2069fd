"""The uniform numeric record a policy lowers to, for the JAX fast path.

Every policy, whatever its system, becomes the same flat record of numbers, so that
configurations using different presets can share one vmapped batch. The fields describe a
superset admission rule, the in-flight rule, filtering and batch formation:

admission (a group may start when all hold):
    running < ``admit_concurrency_groups``
    and ``count`` < ``admit_budget_base_groups`` + ``admit_budget_per_version_groups`` * version
    where ``count`` = accepted + running (``admit_count_dispatched`` = 0) or every group
    dispatched so far (= 1); and, if ``admit_block_while_training`` = 1, not while training.

in flight: ``inflight_rule`` (`code` of an `InflightRule`), ``sync_per_instance`` (0/1),
``clear_cache_on_sync`` (0/1), ``colocated`` (0/1).

filtering: ``staleness_bound`` (-1: none), ``staleness_enforcement`` (`code` of an `Enforcement`;
``drop_at_completion``: a group staler than the bound when it finishes is dropped and returns
its admission slot), ``evict_stale_on_publish`` (1: after each publication, buffered groups
staler than the bound are dropped; they keep counting as accepted),
``drop_zero_variance`` (0 keep, 1 drop, 2 drop and re-dispatch the prompt), ``max_retries``,
``buffer_capacity_groups`` (-1: unbounded; overflow evicts the oldest).

batch: ``batch_min_groups`` <= groups taken <= ``batch_max_groups``; FIFO over the buffer.

``fast_path_exact`` is 1 when these numbers reproduce the policy's SimPy behaviour exactly,
0 when the policy has logic the record cannot express (the fast path must then reject it,
naming the policy, rather than approximate).
"""

from __future__ import annotations

import math

import attrs

from simrl.policy.rules import Enforcement, InflightRule, code


@attrs.frozen
class LoweringContext:
    """What a policy may know about the run when it lowers itself."""

    group_size: int  # trajectories per prompt group in the workload
    instances: int  # rollout instances


@attrs.frozen
class PolicyParams:
    admit_concurrency_groups: float = math.inf
    admit_budget_base_groups: float = math.inf
    admit_budget_per_version_groups: float = 0.0
    admit_count_dispatched: int = 0
    admit_block_while_training: int = 0
    inflight_rule: int = code(InflightRule.KEEP_PAUSE)
    sync_per_instance: int = 0
    clear_cache_on_sync: int = 1
    colocated: int = 0
    staleness_bound: int = -1
    staleness_enforcement: int = code(Enforcement.NONE)
    drop_zero_variance: int = 0
    max_retries: int = 0
    buffer_capacity_groups: int = -1
    batch_min_groups: int = 1
    batch_max_groups: int = 1
    fast_path_exact: int = 0
    evict_stale_on_publish: int = 0

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in attrs.asdict(self).items()}
