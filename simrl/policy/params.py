"""The uniform numeric record a policy lowers to, for the JAX fast path.

Every policy, whatever its system, becomes the same flat record of numbers, so that
configurations using different presets can share one vmapped batch. The fields describe a
superset admission rule, the in-flight rule, filtering and batch formation:

admission (a group may start when all hold):
    running < ``admit_concurrency_groups``
    and ``count`` < ``admit_budget_base_groups`` + ``admit_budget_per_version_groups`` * version
                    + ``admit_budget_per_batch_groups`` * batches taken by the trainer so far
    where ``count`` = accepted + running (``admit_count_dispatched`` = 0) or every group
    dispatched so far (= 1); with ``admit_return_evicted`` = 1 (and ``admit_count_dispatched`` = 0)
    a group dropped from the buffer returns its slot too, so ``count`` = dispatched - dropped
    (verl V1's live groups); with ``admit_count_since_publish`` = 1 (and ``admit_count_dispatched``
    = 1) the count restarts at each publication from the groups then running or buffered (after
    that publication's evictions), so it is the groups dispatched since plus those (verl
    fully_async's ``staleness_samples``); and buffered groups < ``admit_buffer_cap_groups`` (a
    bounded output queue: verl's MessageQueue, TRL's ``queue_maxsize``); and, if
    ``admit_block_while_training`` = 1, not while training; and, if ``admit_max_batches_ahead``
    = S >= 0, batches taken by the trainer - publications seen <= S (ART's ``_wait_for_policy``:
    policy version >= next training step - S; a publication is seen when its ``on_publish`` runs).
    With a finite ``admit_queue_blocks_groups`` = Q, buffered groups beyond Q each hold a
    concurrency slot: the concurrency test is running + max(0, buffered - Q) < concurrency (a
    rollout worker blocked putting its group into a full output queue, ART's ``queue_maxsize``).
    With ``admit_max_ship_lag`` = L >= 0 (a ship barrier), a group may start only while
    batches taken by the trainer - version + floor(buffered / ``batch_min_groups``) <= L: the
    batches shipped to the trainer or waiting complete in the buffer run at most L ahead of the
    published weights (prime-rl's dispatcher pause, ``TARGET_LAG`` = 1; -1: none).
    With ``admit_episode_cap`` = E >= 1 (-1: none), a group may start only while the unfinished
    trajectories of running groups (episodes holding a permit) number fewer than E. A trajectory
    finishing does not wake the dispatcher: the count is read only when it wakes (a group
    completion, a batch taken, a publication), so a permit freed by a finish is used at the next
    wake-up (prime-rl's episode permits, ``min_inflight..max_inflight``).
    With ``admit_window_episodes`` = W >= 1 (-1: none), an admission window of ``admit_window_s`` seconds:
    read last, when every other condition admits, a window that has run its length (now - its start >=
    ``admit_window_s`` - `ADMIT_WINDOW_EPS_S`) restarts there (its start is that consultation's time, its
    count 0); a group may start while the episodes (trajectories) dispatched in the window number fewer than
    W (so the last group may overshoot it); with ``admit_window_refund`` = 1 every group that finishes (a
    natural completion, whatever its verdict; not an abort) takes its episodes back off the count (floored at
    0). When the window alone holds admission the dispatcher also wakes by itself when the window runs out
    (`RecordPolicy.recheck_in`: a timeout of start + length - now seconds). prime-rl's dispatcher
    (``admission_budget``: max(group size, cap // 10) episodes per 5 s, completions refunded under AIMD).

in flight: ``inflight_rule`` (`code` of an `InflightRule`), ``sync_per_instance`` (0/1),
``clear_cache_on_sync`` (0/1), ``colocated`` (0/1), ``disaggregated`` (0/1: the policy itself
declares disaggregated placement, whatever ``deployment.placement`` says; 0 with ``colocated`` = 0:
the deployment's); ``route_needs_dispatch_version`` (0/1): a call
runs only on an instance holding at least its group's dispatch version (PSRL's routing with
per-instance pulls; a no-op under global sync, where every instance holds the published version);
``fail_on_version_crossing`` = k >= 0: at each publication every running group with an unfinished
trajectory that already generated under an older version fails, and is dispatched again from
scratch (ahead of new prompts) while its retries < k, else aborted and dropped (Dressage without
partial rollout; -1: never); ``abort_stale_on_publish`` (0/1): at each publication every running
group staler than ``staleness_bound`` (the new version minus its oldest token's version, its dispatch
version while no call was admitted) is aborted and dropped (prime-rl's ``max_off_policy_steps`` check
of in-flight groups; needs a bound).

filtering: ``staleness_bound`` (-1: none), ``staleness_enforcement`` (`code` of an `Enforcement`;
``drop_at_completion``: a group staler than the bound when it finishes is dropped and returns
its admission slot), ``evict_stale_on_publish`` (1: after each publication, buffered groups
staler than the bound are dropped; they keep counting as accepted),
``drop_zero_variance`` (0 keep, 1 drop, 2 drop and re-dispatch the prompt), ``max_retries``,
``buffer_capacity_groups`` (-1: unbounded; overflow evicts the oldest),
``max_dispatch_age`` (-1: none; a group with version - dispatch version above it is dropped
when it finishes and evicted from the buffer at each publication: the age is counted from the
dispatch stamp, not from the oldest token as ``staleness_bound`` is; verl V1's span check, TRL
async's sample age). The record's filter checks zero variance first, then the dispatch age.
``zero_variance_holds_slot`` (0/1, with ``drop_zero_variance`` = 1 and fixed-size FIFO batches): a group
dropped for zero reward variance keeps its place in the batch order (completion order): a batch takes the
first ``batch_min_groups`` places, buffered groups and such placeholders, and trains its buffered groups
only; a batch of placeholders alone is consumed and not taken (the trainer waits for the next change;
prime-rl's ``filter_zero_advantages`` without backfill).
``zero_variance_std_max`` (>= 0): a group has zero reward variance when its reward std is at most this (0: exactly
0; prime-rl's ``filter_zero_advantages`` tests std <= 1e-12). ``zero_variance_stop_groups`` = n > 0 (with
``drop_zero_variance``): the run stops with an error when n groups in a row that reached the filter had zero
reward variance (an accepted group restarts the count; a group dropped for staleness or dispatch age leaves it;
prime-rl's stop after 10 x batch zero-advantage groups in a row); 0: never.
``collapse_zero_variance_groups`` = n > 0 (with ``drop_zero_variance``): the run stops with an
error when the n-th group since the last batch is dropped for zero reward variance (ART's
"MODEL COLLAPSE DETECTED" failsafe); 0: never.

batch: ``batch_min_groups`` <= groups taken <= ``batch_max_groups``, by ``batch_order``:
    0 FIFO: the first ``batch_max_groups`` buffered groups, once ``batch_min_groups`` are buffered;
    1 dispatch window: the ``batch_max_groups`` oldest-dispatched groups not yet trained or
      dropped, once every one of them is buffered, listed in buffer order (batch k is exactly
      the groups addressed to step k: NeMo-RL's target steps);
    2 oldest dispatch first: the ``batch_max_groups`` buffered groups of lowest dispatch serial,
      once ``batch_min_groups`` are buffered (verl V1's ``sorted(..., key=gid)``).
``batch_shrink_by_drops`` = 1: a FIFO batch may also form with every buffered group (at least
one) when buffered + groups the record's filter dropped since the last batch reach
``batch_min_groups`` (AReaL ``dynamic_bs``).

``fast_path_exact`` is 1 when these numbers reproduce the policy's SimPy behaviour exactly,
0 when the policy has logic the record cannot express (the fast path must then reject it,
naming the policy, rather than approximate).
"""

from __future__ import annotations

import math

import attrs

from simrl.policy.rules import Enforcement, InflightRule, code

#: an admission window has run its length when now - its start >= its length - this (the timeout that reopens it
#: fires at now + (start + length - now), which float rounding may put a few ulps before start + length)
ADMIT_WINDOW_EPS_S = 1e-9


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
    admit_budget_per_batch_groups: float = 0.0
    admit_count_since_publish: int = 0
    admit_return_evicted: int = 0
    admit_buffer_cap_groups: float = math.inf
    max_dispatch_age: int = -1
    batch_order: int = 0
    batch_shrink_by_drops: int = 0
    admit_max_batches_ahead: int = -1
    admit_queue_blocks_groups: float = math.inf
    collapse_zero_variance_groups: int = 0
    fail_on_version_crossing: int = -1
    route_needs_dispatch_version: int = 0
    disaggregated: int = 0
    admit_max_ship_lag: int = -1
    abort_stale_on_publish: int = 0
    zero_variance_holds_slot: int = 0
    admit_episode_cap: int = -1
    admit_window_episodes: int = -1
    admit_window_s: float = 0.0
    admit_window_refund: int = 0
    zero_variance_std_max: float = 0.0
    zero_variance_stop_groups: int = 0

    def __attrs_post_init__(self):
        if self.admit_count_since_publish and not self.admit_count_dispatched:
            raise ValueError("admit_count_since_publish=1 needs admit_count_dispatched=1")
        if self.admit_return_evicted and self.admit_count_dispatched:
            raise ValueError("admit_return_evicted=1 needs admit_count_dispatched=0")
        if self.batch_order not in (0, 1, 2):
            raise ValueError(f"batch_order={self.batch_order}: expected 0 (FIFO), 1 (dispatch window) "
                             "or 2 (oldest dispatch first)")
        if self.batch_order == 1 and self.batch_min_groups != self.batch_max_groups:
            raise ValueError("batch_order=1 (dispatch window) needs batch_min_groups == batch_max_groups")
        if self.batch_shrink_by_drops and self.batch_order != 0:
            raise ValueError("batch_shrink_by_drops=1 needs batch_order=0 (FIFO)")
        if self.colocated and self.disaggregated:
            raise ValueError("colocated=1 and disaggregated=1 contradict each other")
        if self.collapse_zero_variance_groups and not self.drop_zero_variance:
            raise ValueError("collapse_zero_variance_groups > 0 needs drop_zero_variance >= 1")
        if self.admit_max_ship_lag < -1:
            raise ValueError(f"admit_max_ship_lag={self.admit_max_ship_lag}: expected -1 (none) or a lag >= 0")
        if self.fail_on_version_crossing >= 0 and self.admit_count_since_publish:
            raise ValueError("fail_on_version_crossing >= 0 cannot be combined with admit_count_since_publish=1")
        if self.abort_stale_on_publish not in (0, 1):
            raise ValueError(f"abort_stale_on_publish={self.abort_stale_on_publish}: expected 0 or 1")
        if self.abort_stale_on_publish and self.staleness_bound < 0:
            raise ValueError("abort_stale_on_publish=1 needs a staleness_bound >= 0")
        if self.abort_stale_on_publish and self.admit_count_since_publish:
            raise ValueError("abort_stale_on_publish=1 cannot be combined with admit_count_since_publish=1")
        if self.zero_variance_holds_slot not in (0, 1):
            raise ValueError(f"zero_variance_holds_slot={self.zero_variance_holds_slot}: expected 0 or 1")
        if self.zero_variance_holds_slot and not (
                self.drop_zero_variance == 1 and self.batch_order == 0 and not self.batch_shrink_by_drops
                and self.batch_min_groups == self.batch_max_groups and not self.collapse_zero_variance_groups):
            raise ValueError("zero_variance_holds_slot=1 needs drop_zero_variance=1, FIFO batches (batch_order=0, no "
                             "batch_shrink_by_drops) of fixed size (batch_min_groups == batch_max_groups) and no "
                             "collapse_zero_variance_groups")
        if self.admit_episode_cap == 0 or self.admit_episode_cap < -1:
            raise ValueError(f"admit_episode_cap={self.admit_episode_cap}: expected -1 (none) or a cap >= 1 "
                             "(0 would never admit a group)")

        if self.admit_window_episodes == 0 or self.admit_window_episodes < -1:
            raise ValueError(f"admit_window_episodes={self.admit_window_episodes}: expected -1 (none) or a window of "
                             ">= 1 episodes (0 would never admit a group)")
        if self.admit_window_episodes >= 1 and not (0.0 < self.admit_window_s < math.inf):
            raise ValueError(f"admit_window_s={self.admit_window_s}: an admission window (admit_window_episodes="
                             f"{self.admit_window_episodes}) needs a finite length > 0 s")
        if self.admit_window_refund not in (0, 1):
            raise ValueError(f"admit_window_refund={self.admit_window_refund}: expected 0 or 1")
        if not (0.0 <= self.zero_variance_std_max < math.inf):
            raise ValueError(f"zero_variance_std_max={self.zero_variance_std_max}: expected a finite std >= 0")
        if self.zero_variance_stop_groups < 0:
            raise ValueError(f"zero_variance_stop_groups={self.zero_variance_stop_groups}: expected 0 (never) or a "
                             "count >= 1")
        if self.zero_variance_stop_groups and not self.drop_zero_variance:
            raise ValueError("zero_variance_stop_groups > 0 needs drop_zero_variance >= 1")

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in attrs.asdict(self).items()}
