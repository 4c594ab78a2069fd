"""ART ``PipelineTrainer``: rollout workers, variable-size batches, stale and zero-variance discards.

System: OpenPipe ART (github.com/OpenPipe/ART), ``art.pipeline_trainer.PipelineTrainer``, behaviour
as of mid-2026 (autotune off). Sources: ``src/art/pipeline_trainer/trainer.py`` (rollout workers,
``_wait_for_policy``, ``_collect_batch``, ``_is_group_stale``, ``_group_zero_variance``,
``_record_zero_variance`` / ``_trigger_collapse``), ``src/art/pipeline_tuner/config.py``
(``PipelineRuntimeConfig`` defaults), ``src/art/dev/validate.py``, issue #661.

Admission. ``num_rollout_workers`` workers each run one group at a time. Before starting, a
worker waits until ``policy_version >= next_training_step - max_steps_off_policy``; a finished
group is put into a queue of ``queue_maxsize`` groups (default ``max_steps_off_policy x
max_batch_size``), and a worker blocked on a full queue holds its slot.

Runtime. ``rollout_weight_update_mode="step_lora"`` (default): each step's adapter is a new
LoRA name and leases keep the old one alive, so running rollouts finish on the version they
started with and inference never pauses (``continue``). ``"in_flight_lora"``: one active slot
is swapped in place; running requests continue on the new adapter without a pause
(``swap_in_place``). The cost is the LoRA publication.

Filtering at collection. A group is stale if its oldest initial version is below
``current_step - max_steps_off_policy`` (so staleness <= ``max_steps_off_policy``, enforced), or,
with ``limit_mean_steps_off_policy``, if its token-weighted mean age exceeds that limit.
Zero-variance groups (all rewards within 1e-12, or one trajectory) are discarded; when
``discard_queue_multiplier x min_batch_size`` of them pile up between two steps, ART stops
training with "MODEL COLLAPSE DETECTED"; here the run stops with a `PolicyError` (which the
engine reports as a `SimulationError`) carrying ART's message.

Batch. Block until ``min_batch_size`` groups are ready, then take every ready group up to
``max_batch_size`` (None: 10 x min) without waiting: the batch size varies between the two.

Units: ART counts batches in groups, as the engine does. Upstream defaults are kept
(min 4, max 40 groups); they are meaningful for the default scenario, but steps are then
4-40 groups rather than 32, so compare trained tokens, not steps.

Approximations: discards are decided when a group finishes and again for buffered groups at
every publication (versions change only then), which discards the same groups as ART's check
at dequeue but earlier; with ``in_flight_lora`` a trajectory's token-weighted age uses the
mean of its oldest and newest version (the engine keeps no per-token spans); the packing
stage, autotuning, eval and checkpoint steps are not modelled.
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.errors import PolicyError
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Placement, Staleness, Sync

_MODES = ("step_lora", "in_flight_lora")


def collapse_message(limit: int, multiplier: int) -> str:
    """ART's `_trigger_collapse` text (trainer.py), as one line per sentence."""
    return (
        "MODEL COLLAPSE DETECTED - Training stopped. "
        f"Too many trajectory groups ({limit}) had zero reward variance, "
        "indicating the model may have collapsed to a degenerate policy. "
        "To disable this failsafe: increase `discard_queue_multiplier` (currently triggers after "
        f"{multiplier} * min_batch_size = {limit} zero-variance groups)"
    )


@attrs.define
class ARTState:
    """Zero-variance groups discarded since the last step, and whether a step is running."""

    zero_variance: int = 0
    in_step: bool = False


@register
@attrs.frozen
class ARTPolicy(Policy):
    kind = "art"
    upstream = "OpenPipe/ART@main (2026) PipelineTrainer (src/art/pipeline_trainer/trainer.py)"
    State = ARTState

    max_steps_off_policy: int = attrs.field(default=4, validator=v.ge(0))
    limit_mean_steps_off_policy: float | None = attrs.field(default=None, validator=v.optional(v.ge(0)))
    num_rollout_workers: int = attrs.field(default=16, validator=v.gt(0))
    min_batch_size: int = attrs.field(default=4, validator=v.gt(0))
    max_batch_size: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))  # None: 10 x min
    queue_maxsize: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))  # None: S x max
    discard_queue_multiplier: int = attrs.field(default=100, validator=v.gt(0))
    rollout_weight_update_mode: str = attrs.field(default="step_lora", validator=v.in_(_MODES))

    def __attrs_post_init__(self):
        if self.max_batch_size is not None and self.max_batch_size < self.min_batch_size:
            raise ValueError("max_batch_size must be >= min_batch_size")

    @property
    def max_groups(self) -> int:
        return self.max_batch_size or 10 * self.min_batch_size

    @property
    def queue_groups(self) -> int:
        return self.queue_maxsize or max(1, self.max_steps_off_policy) * self.max_groups

    # -- admission: workers and the policy gate -----------------------------------------------
    def _state(self, st: PipelineState) -> ARTState:
        return st.policy_state

    @property
    def sync_spec(self) -> Sync:
        # LoRA publication: inference is never paused for training. PipelineTrainer needs
        # dedicated trainer and inference GPUs.
        rule = InflightRule.CONTINUE if self.rollout_weight_update_mode == "step_lora" else InflightRule.SWAP_IN_PLACE
        return Sync(rule, placement=Placement.DISAGGREGATED)

    @property
    def staleness_spec(self) -> Staleness:
        # _is_group_stale at collection and again on buffered groups at each step; the
        # token-weighted mean-age limit is the policy's own filter on top.
        return Staleness(self.max_steps_off_policy, Enforcement.DROP_AT_COMPLETION, evict_on_publish=True)

    def admit(self, st: PipelineState) -> bool:
        s = self._state(st)
        next_step = st.version + 1 if s.in_step else st.version
        if st.version < next_step - self.max_steps_off_policy:
            return False
        blocked_on_put = max(0, len(st.buffer) - self.queue_groups)
        return st.n_running + blocked_on_put < self.num_rollout_workers

    # -- filtering -------------------------------------------------------------------------
    def _mean_age(self, g: GroupRecord, version: int) -> float:
        weight = sum(t.completion_tokens for t in g.trajs) or 1
        ages = sum(t.completion_tokens * (version - ((t.min_version or 0) + (t.max_version or 0)) / 2)
                   for t in g.trajs)
        return ages / weight

    def _stale(self, g: GroupRecord, version: int) -> bool:
        # The max_steps_off_policy bound itself is the engine's (staleness_spec); this is the
        # extra token-weighted mean-age limit.
        return self.limit_mean_steps_off_policy is not None and self._mean_age(g, version) > self.limit_mean_steps_off_policy

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        if self._stale(group, st.version):
            return Verdict.DROP
        r = group.rewards
        if len(r) <= 1 or all(abs(x - r[0]) <= 1e-12 for x in r[1:]):
            s = self._state(st)
            s.zero_variance += 1
            limit = self.discard_queue_multiplier * self.min_batch_size
            if s.zero_variance >= limit:
                raise PolicyError(collapse_message(limit, self.discard_queue_multiplier))
            return Verdict.DROP
        return Verdict.ACCEPT

    def on_publish(self, st: PipelineState) -> PublishActions:
        s = self._state(st)
        s.in_step = False
        return PublishActions(drop_buffered=tuple(g.gid for g in st.buffer if self._stale(g, st.version)))

    # -- batch: min to max groups, whatever is ready -------------------------------------------
    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        if len(st.buffer) < self.min_batch_size:
            return None
        s = self._state(st)
        s.in_step = True
        s.zero_variance = 0  # this collection is over; its discard queue is logged and cleared
        return st.buffer[: self.max_groups]

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        # Exact through record extensions: the policy-version gate is a bound on batches taken
        # ahead of publications seen (``admit_max_batches_ahead``: ``in_step`` is one batch taken
        # and not yet published), put-blocked workers hold a slot for every buffered group past
        # the queue (``admit_queue_blocks_groups``), and the collapse failsafe stops the run after
        # multiplier x min zero-variance discards since the last batch
        # (``collapse_zero_variance_groups``; the record's error names the field, not ART's text).
        # The zero-variance tests agree unless a group's rewards differ by at most 1e-12 without
        # being equal (never with 0/1 rewards). Not exact: the token-weighted mean-age limit.
        return attrs.evolve(
            super().lower(ctx),
            admit_concurrency_groups=float(self.num_rollout_workers),
            admit_max_batches_ahead=self.max_steps_off_policy,
            admit_queue_blocks_groups=float(self.queue_groups),
            drop_zero_variance=1,
            collapse_zero_variance_groups=self.discard_queue_multiplier * self.min_batch_size,
            batch_min_groups=self.min_batch_size, batch_max_groups=self.max_groups,
            fast_path_exact=int(self.limit_mean_steps_off_policy is None),
        )
