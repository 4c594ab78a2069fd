"""Dressage (agentic RL on slime): a persistent rollout worker, proxy-level pause, group retry.

System: Accio-Lab Dressage (github.com/Accio-Lab/Dressage, open-sourced June 2026; commit 4eb2e984),
built on THUDM/slime through hook paths. Sources: ``dressage/rollout/{fully,partial}_async_rollout.py``
(``AsyncRolloutWorker``: ``DRESSAGE_ASYNC_MAX_ACTIVE_GROUPS``, ``DRESSAGE_ASYNC_OUTPUT_QUEUE_SIZE``,
80% high watermark, retries, ``_partial_target_groups``), ``dressage/rollout/staleness.py``
(``dressage_staleness_keep_versions``), ``dressage/proxy/{server,generation_controller}.py``
(``/v1/rollout/pause``), ``dressage/training/train_async_with_rollout_pause.py``, ``docs/staleness.md``,
``docs/rollout.md``; slime ``slime/utils/arguments.py``.

Admission. A background worker starts groups while fewer than ``async_max_active_groups``
(None: ``rollout_batch_size``) are active and the output queue holds fewer than
``async_output_queue_size x async_output_queue_high_watermark`` groups; it has no version gate.

Runtime. On a weight update the proxy aborts active requests at a token boundary and holds the
agents' calls. Without ``dressage_partial_rollout`` (default) a trajectory whose request crossed
a version is rejected, its group fails and goes back to the queue from scratch (ahead of new
prompts) up to ``rollout_max_retries`` times, then is dropped: generation pauses keeping KV,
and after the update every group with a trajectory that generated under the old version and is
still running is requeued (its tokens wasted). With it, requests resume from input + partial
output after the update (``abort_resume``, a re-prefill); a trajectory that lived through more
than ``max_partial_rollout_preempts`` updates fails through the same retry path.

Filtering. With ``dressage_staleness_keep_versions`` N > 0 a group is kept only if every
trajectory's last-segment version is among the N newest versions; buffered groups are
re-checked whenever a new version appears.

Batch. ``fully_async``: ``rollout_batch_size`` groups in completion order. ``partial_async``:
the partial target (``partial_rollout_target_groups``, else ``global_batch_size`` samples / n,
capped at ``rollout_batch_size``); the rest keep running for later steps.

Units: slime's ``rollout_batch_size`` counts prompts = groups; ``global_batch_size`` counts
samples. The default scenario's 32 groups per step is used for ``rollout_batch_size``.

Approximations: the engine publishes after every step, so ``update_weights_interval`` k > 1 is
modelled as one step training k rollouts at once; the proxy's abort + hold is the engine's
pause at an iteration boundary; multi-segment samples and routing replay are not modelled.
The staleness window counts published versions (Dressage counts versions it has observed).
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.record import crossed
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Staleness, Sync


@register
@attrs.frozen
class DressagePolicy(Policy):
    kind = "dressage"
    upstream = "Accio-Lab/Dressage@4eb2e984 (dressage/rollout/fully_async_rollout.py, staleness.py)"

    rollout_mode: str = attrs.field(default="fully_async", validator=v.in_(("fully_async", "partial_async")))
    rollout_batch_size: int = attrs.field(default=32, validator=v.gt(0))  # groups per rollout
    global_batch_size: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))  # samples
    partial_rollout_target_groups: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    async_max_active_groups: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    async_output_queue_size: int = attrs.field(default=1000, validator=v.gt(0))  # groups
    async_output_queue_high_watermark: float = attrs.field(default=0.8, validator=[v.gt(0), v.le(1)])
    dressage_partial_rollout: bool = False
    max_partial_rollout_preempts: int | None = attrs.field(default=None, validator=v.optional(v.ge(0)))
    dressage_staleness_keep_versions: int = attrs.field(default=0, validator=v.ge(0))
    rollout_max_retries: int = attrs.field(default=2, validator=v.ge(0))
    update_weights_interval: int = attrs.field(default=1, validator=v.gt(0))

    # -- admission ---------------------------------------------------------------------------
    @property
    def sync_spec(self) -> Sync:
        return Sync(InflightRule.ABORT_RESUME if self.dressage_partial_rollout else InflightRule.KEEP_PAUSE)

    @property
    def staleness_spec(self) -> Staleness:
        n = self.dressage_staleness_keep_versions
        if n == 0:
            return Staleness()
        if not self.dressage_partial_rollout:
            # A trajectory never spans versions (a crossing fails its group), so "every
            # trajectory's version among the N newest" is staleness <= N - 1, checked at completion
            # and on buffered groups at every publication: the engine's drop and eviction.
            return Staleness(n - 1, Enforcement.DROP_AT_COMPLETION, evict_on_publish=True)
        if self.max_partial_rollout_preempts is not None:
            return Staleness(n - 1 + self.max_partial_rollout_preempts, Enforcement.POLICY)
        return Staleness()

    def admit(self, st: PipelineState) -> bool:
        active = self.async_max_active_groups or self.rollout_batch_size
        high = max(1, int(self.async_output_queue_size * self.async_output_queue_high_watermark))
        return st.n_running < active and len(st.buffer) < high

    # -- runtime: version crossings fail groups (retry) ---------------------------------------
    def _crossed(self, g: GroupRecord, st: PipelineState) -> bool:
        """Whether an unfinished trajectory of g generated under a version older than st.version."""
        return crossed(g, st.version)

    def _fail(self, groups: list[GroupRecord]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(gids to requeue, gids to drop once their retries are spent)."""
        retry = tuple(g.gid for g in groups if g.retries < self.rollout_max_retries)
        drop = tuple(g.gid for g in groups if g.retries >= self.rollout_max_retries)
        return retry, drop

    def on_publish(self, st: PipelineState) -> PublishActions:
        failed: list[GroupRecord] = []
        for g in st.running.values():
            if not self.dressage_partial_rollout:
                if self._crossed(g, st):
                    failed.append(g)
                continue
            preempts = g.tag.setdefault("preempts", {})
            for t in g.trajs:
                if t.finish_time is None and t.min_version is not None:
                    preempts[t.tid] = preempts.get(t.tid, 0) + 1
            limit = self.max_partial_rollout_preempts
            if limit is not None and any(n > limit for n in preempts.values()):
                failed.append(g)
        retry, drop = self._fail(failed)
        stale = tuple(g.gid for g in st.buffer if not self._fresh(g, st)) if self.dressage_partial_rollout else ()
        return PublishActions(abort_running=drop, requeue_running=retry, drop_buffered=stale)

    # -- filtering: keep only groups from the N newest versions --------------------------------
    def _fresh(self, g: GroupRecord, st: PipelineState) -> bool:
        # with partial rollout only (without it the engine keeps the window: staleness_spec)
        n = self.dressage_staleness_keep_versions
        if n == 0 or not self.dressage_partial_rollout:
            return True
        return all((t.max_version if t.max_version is not None else g.dispatch_version) > st.version - n
                   for t in g.trajs)

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        return Verdict.ACCEPT if self._fresh(group, st) else Verdict.DROP

    # -- batch -------------------------------------------------------------------------------
    def _target_groups(self, st: PipelineState) -> int:
        if self.rollout_mode == "fully_async":
            target = self.rollout_batch_size
        elif self.partial_rollout_target_groups is not None:
            target = min(self.rollout_batch_size, self.partial_rollout_target_groups)
        elif self.global_batch_size is not None and st.buffer:
            n = len(st.buffer[0].trajs)
            target = min(self.rollout_batch_size, -(-self.global_batch_size // n))
        else:
            target = self.rollout_batch_size
        return target * self.update_weights_interval

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        b = self._target_groups(st)
        return st.buffer[:b] if len(st.buffer) >= b else None

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        # Exact without partial rollout: the output-queue watermark is an output-queue cap
        # (``admit_buffer_cap_groups``), the version-crossing retries are
        # ``fail_on_version_crossing`` = rollout_max_retries, the keep-N window the engine's
        # drop and eviction (staleness_spec), and the batch target is fixed by the group size.
        # With partial rollout the per-trajectory preempt counts have no field (not exact).
        if self.rollout_mode == "fully_async" or self.partial_rollout_target_groups is not None \
                or self.global_batch_size is None:
            target = self._target_groups(_NoBuffer)
        else:
            target = min(self.rollout_batch_size, -(-self.global_batch_size // ctx.group_size)) \
                * self.update_weights_interval
        high = max(1, int(self.async_output_queue_size * self.async_output_queue_high_watermark))
        return attrs.evolve(
            super().lower(ctx),
            admit_concurrency_groups=float(self.async_max_active_groups or self.rollout_batch_size),
            admit_buffer_cap_groups=float(high),
            fail_on_version_crossing=-1 if self.dressage_partial_rollout else self.rollout_max_retries,
            batch_min_groups=target, batch_max_groups=target,
            fast_path_exact=int(not self.dressage_partial_rollout),
        )


class _NoBuffer:
    """An empty pipeline, for the batch targets that do not depend on the group size."""

    buffer: list = []
