"""TRL GRPO: the synchronous colocated ``GRPOTrainer`` (default) and the experimental ``AsyncGRPOTrainer``.

System: Hugging Face TRL (github.com/huggingface/trl), behaviour as of mid-2026 (before the
LoRA path of PR #7017, TRL v1.14). Sources: ``trl/trainer/grpo_trainer.py`` and
``trl/trainer/grpo_config.py`` (sync: ``generation_batch_size``, ``steps_per_generation``,
``num_iterations``, weights pushed before a generation), ``trl/experimental/async_grpo/``
``{async_grpo_config,async_grpo_trainer,async_rollout_worker,vllm_client,weight_transfer}.py``
(async: ``max_inflight_tasks``, ``queue_maxsize``, ``/pause?mode=keep`` + NCCL every
``weight_sync_steps``, drop at dequeue when ``version - model_version > max_staleness``),
``docs/source/async_grpo_trainer.md``.

``mode="sync"`` (GRPOTrainer, vLLM colocated): generation and training never overlap. One
generation of ``generation_batch_size = per_device_train_batch_size * num_processes *
steps_per_generation`` samples feeds ``steps_per_generation / gradient_accumulation_steps``
optimizer steps (one by default, so staleness 0; more make the later slices off-policy).
Placement is colocated: rollout pauses for the whole step.

``mode="async"`` (AsyncGRPOTrainer, separate GPUs): a rollout process keeps at most
``max_inflight_tasks`` completions in flight (-1: ``max_staleness`` x samples per step) and blocks
when its output queue holds ``queue_maxsize`` samples. Each group is stamped with the version at
dispatch; at the consumer a sample older than ``max_staleness`` versions is dropped. Weight
sync keep-pauses vLLM, so running requests continue on the new weights.

Units: samples per optimizer step = ``per_device_train_batch_size * num_processes *
gradient_accumulation_steps``; the engine takes whole groups, ceil(samples / group size) of
them. TRL's defaults (8 per device, 1 process) give one group per step, which would turn the
default scenario (32 groups per step) into 160 one-group steps; the preset's defaults
(32 x 8 processes = 256 samples = 32 groups of 8) match the scenario instead.

Approximations: TRL streams single samples and may split a group across two steps; here a
group is trained whole. The stale drop is applied when a group finishes and again to buffered
groups at each publication (the version only changes there), which drops the same groups as
a drop at dequeue. The engine publishes after every step, so async ``weight_sync_steps`` k > 1
is one engine step training k optimizer steps' samples at once (as the verl preset does for
``trigger_parameter_sync_step``). ``num_iterations`` (mu) > 1 re-trains a batch, which the
engine cannot express (it trains each group once), so it is fixed at 1.
"""

from __future__ import annotations

import math

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.errors import PolicyError
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Placement, Staleness, Sync


@attrs.define
class TRLState:
    """The workload's group size, seen at the first dispatch (None before)."""

    group_size: int | None = None


@register
@attrs.frozen
class TRLPolicy(Policy):
    kind = "trl"
    upstream = "huggingface/trl@v1.13 (GRPOTrainer; trl.experimental.async_grpo.AsyncGRPOTrainer)"
    State = TRLState

    mode: str = attrs.field(default="sync", validator=v.in_(("sync", "async")))
    per_device_train_batch_size: int = attrs.field(default=32, validator=v.gt(0))  # samples
    num_processes: int = attrs.field(default=8, validator=v.gt(0))
    gradient_accumulation_steps: int = attrs.field(default=1, validator=v.gt(0))
    steps_per_generation: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))  # None: grad accum
    num_iterations: int = attrs.field(default=1, validator=v.in_((1,)))
    num_generations: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))  # None: workload's
    max_staleness: int = attrs.field(default=4, validator=v.ge(0))
    max_inflight_tasks: int = attrs.field(default=-1, validator=v.ge(-1))  # samples; -1: auto
    queue_maxsize: int = attrs.field(default=1024, validator=v.gt(0))  # samples
    weight_sync_steps: int = attrs.field(default=1, validator=v.gt(0))  # async only

    def __attrs_post_init__(self):
        spg = self.steps_per_generation or self.gradient_accumulation_steps
        if spg % self.gradient_accumulation_steps:
            raise ValueError("steps_per_generation must be a multiple of gradient_accumulation_steps")

    # -- derived sizes -----------------------------------------------------------------------
    @property
    def samples_per_step(self) -> int:
        return self.per_device_train_batch_size * self.num_processes * self.gradient_accumulation_steps

    @property
    def steps_per_gen(self) -> int:
        """Optimizer steps one sync-mode generation feeds."""
        return (self.steps_per_generation or self.gradient_accumulation_steps) // self.gradient_accumulation_steps

    def _groups(self, samples: int, group_size: int) -> int:
        return max(1, math.ceil(samples / group_size))

    def _group_size(self, st: PipelineState) -> int:
        return st.policy_state.group_size or self.num_generations or 1

    # -- admission ---------------------------------------------------------------------------
    @property
    def sync_spec(self) -> Sync:
        if self.mode == "sync":
            return Sync(InflightRule.DRAIN, placement=Placement.COLOCATED)
        return Sync(InflightRule.KEEP_PAUSE, placement=Placement.DISAGGREGATED)

    @property
    def staleness_spec(self) -> Staleness:
        if self.mode == "sync":
            return Staleness(self.steps_per_gen - 1, Enforcement.ADMISSION)
        # async: dispatch version >= train version - max_staleness, and no token predates dispatch
        return Staleness(self.max_staleness, Enforcement.DROP_AT_CONSUMPTION)

    def admit(self, st: PipelineState) -> bool:
        n = self._group_size(st)
        b = self._groups(self.samples_per_step, n)
        if self.mode == "sync":
            # Generation j (of steps_per_gen * b groups) starts at step j * steps_per_gen.
            gen = st.steps_done // self.steps_per_gen
            return not st.training and st.groups_accepted + st.n_running < (gen + 1) * self.steps_per_gen * b
        cap = self.max_inflight_tasks if self.max_inflight_tasks >= 0 else self.max_staleness * self.samples_per_step
        in_flight = sum(len(g.trajs) for g in st.running.values())
        queued = sum(len(g.trajs) for g in st.buffer)
        return in_flight + n <= max(cap, n) and queued < self.queue_maxsize

    def check_group_size(self, n: int) -> None:
        if self.num_generations is not None and n != self.num_generations:
            raise PolicyError(
                f"trl: num_generations={self.num_generations} but the workload's groups hold {n} samples; "
                "set workload.group_size or leave the knob null"
            )

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        st.policy_state.group_size = len(group.trajs)

    # -- filtering (async): per-sample age from the dispatch stamp -----------------------------
    def _stale(self, g: GroupRecord, st: PipelineState) -> bool:
        return self.mode == "async" and st.version - g.dispatch_version > self.max_staleness

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        return Verdict.DROP if self._stale(group, st) else Verdict.ACCEPT

    def on_publish(self, st: PipelineState) -> PublishActions:
        return PublishActions(drop_buffered=tuple(g.gid for g in st.buffer if self._stale(g, st)))

    # -- batch -------------------------------------------------------------------------------
    @property
    def samples_per_sync(self) -> int:
        """Samples trained between two publications."""
        return self.samples_per_step * (self.weight_sync_steps if self.mode == "async" else 1)

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        b = self._groups(self.samples_per_sync, self._group_size(st))
        if len(st.buffer) < b:
            return None
        return st.buffer[:b]

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        base = super().lower(ctx)
        n = self.num_generations or ctx.group_size
        b = self._groups(self.samples_per_sync, n)
        if self.mode == "sync":
            k = self.steps_per_gen
            return attrs.evolve(
                base, admit_budget_base_groups=float(k * b), admit_budget_per_version_groups=float(b),
                admit_block_while_training=1, batch_min_groups=b, batch_max_groups=b,
                fast_path_exact=int(k == 1),
            )
        cap = self.max_inflight_tasks if self.max_inflight_tasks >= 0 else self.max_staleness * self.samples_per_step
        # in-flight samples + n <= max(cap, n): running < max(cap, n) // n; queued samples < queue_maxsize:
        # buffered groups < ceil(queue_maxsize / n); a sample older than max_staleness versions by its
        # dispatch stamp is dropped at completion and at each publication.
        return attrs.evolve(
            base, admit_concurrency_groups=float(max(1, cap // n)),
            admit_buffer_cap_groups=float(math.ceil(self.queue_maxsize / n)),
            max_dispatch_age=self.max_staleness, batch_min_groups=b, batch_max_groups=b,
            fast_path_exact=1,
        )
