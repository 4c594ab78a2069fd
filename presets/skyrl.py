"""SkyRL (NovaSky-AI/SkyRL): the fully-async trainer with AReaL-style capacity control.

Follows ``skyrl/train/fully_async_trainer.py`` (``_AsyncStalenessManager``, the K generation
workers, the finished-group buffer), ``skyrl/train/config/config.py`` (knobs and their checks)
and ``docs/content/docs/tutorials/fully_async.mdx`` at HEAD of mid 2026 (PRs #579, #799).

* Admission -- K = ``num_parallel_generation_workers`` virtual workers each run one group; a
  worker may start when ``min(K - running, (S + g) * B - (accepted + running)) > 0`` with
  ``S = max_staleness_steps``, ``B = policy_mini_batch_size`` (groups) and ``g`` the global step
  being trained (1-based, so ``g = version + 1``); ``accepted`` counts every group ever
  finished and kept.
* In flight -- pause, broadcast, resume with ``PauseMode.KEEP``: running requests keep their
  KV and continue on the new weights (``keep_pause``); the prefix cache is salted per version,
  so old prefixes are never reused (modelled as a cache clear).
* Filtering -- nothing is dropped for staleness: a group older than S is still trained and
  counted (``async/staleness_violation_count``): enforcement ``counted``. With
  ``sample_full_batch`` zero-variance groups are dropped and their capacity returned (the
  workers keep pulling new prompts); without it they are loss-masked but trained.
* Batch -- exactly B groups in finish order (FIFO); training waits until B are ready.

Approximations. Upstream's defaults (``num_parallel_generation_workers=768`` against a
``policy_mini_batch_size`` of 256 prompts) keep K = 3B; the default scenario has B = 32 groups,
where K=768 would fail upstream's own check ``B <= K <= B*(S+1)``, so the default here is
K = 96 = 3B, keeping upstream's ratio. A loss-masked zero-variance group still costs training
time here as it does upstream. ``offload_kv_for_weight_sync`` and the ``delta`` sync backend are
cost-model matters, not policy ones.
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.params import PolicyParams
from simrl.policy.record import RecordPolicy
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, code


@register
@attrs.frozen
class SkyrlPolicy(RecordPolicy):
    """SkyRL fully-async: capacity-limited workers, keep-pause updates, violations only counted."""

    kind = "skyrl"
    upstream = "NovaSky-AI/SkyRL@HEAD-2026 (skyrl/train/fully_async_trainer.py, config/config.py)"

    max_staleness_steps: int = attrs.field(default=4, validator=v.ge(0))
    num_parallel_generation_workers: int = attrs.field(default=96, validator=v.gt(0))  # upstream 768 (=3B)
    policy_mini_batch_size: int = attrs.field(default=32, validator=v.gt(0))  # groups (prompts)
    sample_full_batch: bool = False
    zero_variance_filter: bool = False

    def __attrs_post_init__(self):
        b, k, s = self.policy_mini_batch_size, self.num_parallel_generation_workers, self.max_staleness_steps
        if not b <= k <= b * (s + 1):
            raise ValueError(
                f"num_parallel_generation_workers={k} must lie in [policy_mini_batch_size, "
                f"policy_mini_batch_size*(max_staleness_steps+1)] = [{b}, {b * (s + 1)}] (SkyRL's config check)"
            )
        if self.sample_full_batch and not self.zero_variance_filter:
            raise ValueError("sample_full_batch=true needs zero_variance_filter=true (SkyRL's config check)")

    def record(self) -> PolicyParams:
        # Admission: running < workers and accepted + running < (S + v + 1) * B (a dropped
        # group returns its capacity). Keep-pause updates; the prefix cache is salted per
        # version (a clear). SkyRL logs async/staleness_violation_count and trains the group
        # anyway: the bound is counted. With sample_full_batch zero-variance groups are dropped.
        b = self.policy_mini_batch_size
        return PolicyParams(
            admit_concurrency_groups=float(self.num_parallel_generation_workers),
            admit_budget_base_groups=float((self.max_staleness_steps + 1) * b),
            admit_budget_per_version_groups=float(b),
            inflight_rule=code(InflightRule.KEEP_PAUSE),
            staleness_bound=self.max_staleness_steps,
            staleness_enforcement=code(Enforcement.COUNTED),
            drop_zero_variance=int(self.sample_full_batch),
            batch_min_groups=b,
            batch_max_groups=b,
            fast_path_exact=1,
        )
