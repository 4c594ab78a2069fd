"""NeMo-RL async GRPO (legacy ``grpo.async_grpo`` path): every batch is generated for one target step.

System: NVIDIA NeMo-RL (github.com/NVIDIA-NeMo/RL), behaviour as of mid-2026. Sources:
``nemo_rl/algorithms/async_utils/trajectory_collector.py`` (``AsyncTrajectoryCollector``: target
weight versions, reservation of the lowest short target, pause while the window is full),
``nemo_rl/algorithms/async_utils/replay_buffer.py`` (``sample``: only the current target,
eviction by age), ``nemo_rl/algorithms/grpo.py`` (``prepare_for_refit``, drain or in-flight
refit), ``docs/guides/async-grpo.md``, ``examples/configs/grpo_math_1B.yaml``.

Model. Generation is addressed to a target step: at policy version v the collector may fill the
targets v+1 ... v+L (L = ``max_trajectory_age_steps``; v0 ... v0+L at the start). It reserves the
lowest target still short of ``num_prompts_per_step`` groups and generates all its missing
groups at once; when every target in the window is full it waits for the next version. The
trainer at version v takes exactly the ``num_prompts_per_step`` groups targeted at v, so a
trained group is at most L versions old (enforced by admission). On refit the collector stops
starting work; with ``in_flight_weight_updates=false`` (default) it waits for every pending
generation (``drain``); with ``true`` running requests continue under the new weights with
their KV (``keep_pause``), or re-prefill it when ``recompute_kv_cache_after_weight_updates``
is set (``abort_resume``: tokens kept, KV recomputed on the new weights).

Units: NeMo-RL's ``num_prompts_per_step`` is prompts = groups (default 32 in grpo_math_1B, which
is also the default scenario's groups per step); ``num_generations_per_prompt`` (None: the
workload's group size) is only checked against the workload.

Approximations: the window is taken as [v, v+L] rather than [v+1, v+L]; the two agree because
target v is always fully dispatched before version v is reached (dispatch is immediate), and
the wider form cannot deadlock after a drop. The single-controller (SC) samplers are not
modelled; NeMo-RL has no refill filter in this path, so none is modelled.
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.errors import PolicyError
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Staleness, Sync


@attrs.define
class NemoRLState:
    """Groups reserved per target step (dispatched minus dropped)."""

    targets: dict[int, int] = attrs.field(factory=dict)


@register
@attrs.frozen
class NemoRLPolicy(Policy):
    kind = "nemo_rl"
    group_tags = {"target": (int, ("running_groups", "buffer"))}
    upstream = "NVIDIA-NeMo/RL@main (2026) async GRPO (nemo_rl/algorithms/async_utils/)"
    State = NemoRLState

    max_trajectory_age_steps: int = attrs.field(default=1, validator=v.ge(1))
    in_flight_weight_updates: bool = False
    recompute_kv_cache_after_weight_updates: bool = False
    num_prompts_per_step: int = attrs.field(default=32, validator=v.gt(0))  # groups per step
    num_generations_per_prompt: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))

    # -- admission: target-step reservation ---------------------------------------------------
    def _counts(self, st: PipelineState) -> dict[int, int]:
        """Groups reserved per target step (dispatched minus dropped)."""
        return st.policy_state.targets

    def _short_target(self, st: PipelineState) -> int | None:
        counts = self._counts(st)
        for t in range(st.version, st.version + self.max_trajectory_age_steps + 1):
            if counts.get(t, 0) < self.num_prompts_per_step:
                return t
        return None

    @property
    def sync_spec(self) -> Sync:
        if not self.in_flight_weight_updates:
            return Sync(InflightRule.DRAIN)
        if self.recompute_kv_cache_after_weight_updates:
            return Sync(InflightRule.ABORT_RESUME)
        return Sync(InflightRule.KEEP_PAUSE)

    @property
    def staleness_spec(self) -> Staleness:
        return Staleness(self.max_trajectory_age_steps, Enforcement.ADMISSION)

    def admit(self, st: PipelineState) -> bool:
        return self._short_target(st) is not None

    def check_group_size(self, n: int) -> None:
        if self.num_generations_per_prompt is not None and n != self.num_generations_per_prompt:
            raise PolicyError(
                f"nemo_rl: num_generations_per_prompt={self.num_generations_per_prompt} but the workload's "
                f"groups hold {n} samples; set workload.group_size or leave the knob null"
            )

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        t = self._short_target(st)
        group.tag["target"] = t
        counts = self._counts(st)
        counts[t] = counts.get(t, 0) + 1

    # -- filtering: evict anything older than the age window -----------------------------------
    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        if group.tag["target"] < st.version:
            self._counts(st)[group.tag["target"]] -= 1
            return Verdict.DROP
        return Verdict.ACCEPT

    def on_publish(self, st: PipelineState) -> PublishActions:
        old = [g for g in st.buffer if g.tag["target"] < st.version]
        for g in old:
            self._counts(st)[g.tag["target"]] -= 1
        return PublishActions(drop_buffered=tuple(g.gid for g in old))

    # -- batch: exactly the groups targeted at the current version -----------------------------
    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        batch = [g for g in st.buffer if g.tag["target"] == st.version]
        if len(batch) < self.num_prompts_per_step:
            return None
        return batch[: self.num_prompts_per_step]

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        base = super().lower(ctx)
        b = self.num_prompts_per_step
        return attrs.evolve(
            base,
            # dispatched < (L + 1 + v) * B: the target window, counted over every dispatch
            admit_budget_base_groups=float((self.max_trajectory_age_steps + 1) * b),
            admit_budget_per_version_groups=float(b),
            admit_count_dispatched=1,
            batch_min_groups=b,
            batch_max_groups=b,
            # Nothing is ever dropped (every group of target v is trained at version v, before
            # v + 1 exists), so the k-th dispatched group has target k // B and the batch at
            # version v is the B oldest live groups once all are buffered, in buffer order: the
            # record's dispatch-window batch.
            batch_order=1,
            fast_path_exact=1,
        )
