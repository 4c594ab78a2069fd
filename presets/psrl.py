"""PSRL (lhy101/psrl, "parameter-server RL"; the StaleFlow paper, arXiv 2601.12784).

Follows the design docs at ``lhy101/psrl_doc_preview@59c3ef46``: ``docs/design/
{staleness_control,parameter_server,flexible_rollout,architecture}.md`` and
``docs/tutorial/configuration.md`` (the source itself was not available to us).

* Admission (Reserve) -- one staleness buffer per version, ``staleness_buffer_entries`` (E)
  entries each. A group dispatched at version v (``V_traj = v``) reserves an entry in the
  highest buffer of ``[v, v + staleness]`` that still has an EMPTY entry, falling back to
  earlier ones; dispatch blocks only when none of them has room (upstream
  ``StalenessInventory.reserve_data``). So at version 0 with enough instances
  ``(staleness + 1) x E`` groups are in flight.
* Routing -- a call may only run on an instance whose version is ``>= V_traj`` (``eligible``).
  ``enable_multi_priority_queue`` (MLQ, ``routing_strategy``; off by default) queues calls by
  V_traj, the lowest first (``route_priority``), so older trajectories drain ahead of fresher
  ones (``docs/design/flexible_rollout.md``, "Multi-Level Queue").
* In flight -- the trainer pushes every version to the parameter server; each instance pulls
  on its own (``per_instance``): ``greedy`` as soon as a version exists, ``status_based`` once
  its indicator (``request_num``: running + waiting; ``kv_cache``: KV used fraction) falls
  below ``sync_threshold``. With ``partial_rollout_enable`` the pulling instance aborts its
  requests, keeping their tokens, and they re-enter the router (``abort_resume`` with re-route).
  ``seamless_train_version`` (``sync_and_mig_strategy.sync``, default 0 = off, since the
  first pushed version is 1): while the published version p is <= it, an instance pulls p
  only once buffer p, the trainer's next, is READY (``greedy.py:60-66``), so the first
  steps train back to back while instances keep generating on the older weights.
* Filtering (Occupy) -- upstream ``occupy_data_with_reserve``: a finished group first gives up
  its reservation in buffer u, and a group still RESERVED in an earlier, not-READY buffer of
  ``[V_traj, u - 1]`` whose own ``V_traj >= u - staleness`` moves into the vacated entry of u
  (``clear_reserved_entries(move_across_buffer=True)``), so stragglers holding fallback
  reservations are pushed later; then the finished group occupies the earliest buffer of
  ``[V_traj, V_traj + staleness]`` with fewer than E occupied entries and an EMPTY one (the bound
  holds by construction). ``dynamic_sampling_filter`` drops zero-variance groups (their entry is freed
  and refilled by a new dispatch). With ``redundant_rollout_enable`` a buffer accepts
  ``redundant_buffer_entries`` (B' > E) reservations, is READY once E entries are occupied, and
  the groups still reserved in it are aborted (the surplus).
* Batch (Consume) -- the trainer consumes one READY buffer (E occupied entries) per step, in
  version order; a buffer still holding RESERVED entries blocks training (it waits for its
  slowest group).

The buffers live in ``PsrlState`` (``st.policy_state``): per buffer index, the reserved and occupied
counts; a group's tag holds its buffer and its reservation's sequence number.

Checked against the PSRL source ``Somoku/psrl@19c0474`` (``psrl/workers/ps/staleness_controller.py``:
``reserve_data`` :607-725, candidates :698-703, ``target_buffer_id = max(candidate_ids)`` :712;
``clear_reserved_entries`` :948, move-across search :1012-1033; ``occupy_data_with_reserve``
:1147, occupy ``min(candidate_ids)`` :1201-1222).

Approximations. Upstream's default ``staleness_buffer_entries`` is 512; the default scenario
trains 32 groups per step, so the default here is 32 (an entry is one group, all n responses
done). Without ``partial_rollout_enable`` the docs do not say what a pulling instance does with
running requests; here it pulls only when idle (nothing is interrupted). The ``throughput`` and
``hypothesis_test`` indicators, KV transfer through LMCache, migration and the proactive
filter (``retry``/``truncate`` of STUCK buffers) are not modelled; a resumed request always
re-prefills. Entries are groups, not entry slots: when a reservation moves across buffers the
one taken is the latest reservation of the earlier buffer (upstream takes the lowest-index
RESERVED entry, and a buffer is reserved from its last entry backwards), and the redundant
case (upstream's second branch of ``occupy_data_with_reserve``) uses the same rule as the
normal one. ``sync_threshold`` None means: pull when idle. ``fine_grain_overlap``
(``FineGrainOverlapStrategy``, ``psrl/trainer/ppo/strategies/fine_grain_overlap.py``) is modelled
for ``granularity=mini_batch`` with ``overlap_scope=pre_step``: a step trains its buffer in
chunks of ``ppo_mini_batch_size`` x ``multiplier`` groups (clamped to E: no chunking), each as
soon as that many more entries are occupied, one optimizer step per chunk, publishing after
the last (taken when the buffer is READY); the engine's streaming trainer charges each chunk
the training cost of its groups. ``recompute`` (upstream's default scope: only the per-sample
stages overlap, math identical to none) and ``micro_batch`` are refused by name. With MLQ the
order within a level is dispatch order (upstream's default ``request_sort_indicator``
``small_id``). B' (``redundant_buffer_entries``)
defaults to E + E/8, our choice. N' > n redundancy cannot be expressed (the workload fixes n).
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import (
    GroupRecord,
    InstanceLoad,
    PipelineState,
    Policy,
    PublishActions,
    Verdict,
)
from simrl.policy.errors import PolicyError
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, Staleness, Sync, SyncScope

_FGO = ("none", "mini_batch", "micro_batch")


@attrs.define
class PsrlState:
    """The staleness buffers: buffers consumed by the trainer; per buffer index, reserved and occupied counts."""

    consumed: int = 0
    seq: int = 0  # reservations made so far (a reservation's order within its buffer)
    res: dict[int, int] = attrs.field(factory=dict)
    occ: dict[int, int] = attrs.field(factory=dict)


@register
@attrs.frozen
class PsrlPolicy(Policy):
    """PSRL: per-version staleness buffers (Reserve/Occupy/Consume), per-instance weight pulls."""

    kind = "psrl"
    group_tags = {"reserved": (int, ("running_groups",)), "seq": (int, ("running_groups",)), "buffer": (int, ())}
    upstream = "lhy101/psrl_doc_preview@59c3ef46 (docs/design/staleness_control.md, parameter_server.md)"
    State = PsrlState

    staleness: int = attrs.field(default=0, validator=v.ge(0))  # psrl.staleness (eta)
    staleness_buffer_entries: int = attrs.field(default=32, validator=v.gt(0))  # upstream 512
    partial_rollout_enable: bool = True
    redundant_rollout_enable: bool = False
    redundant_buffer_entries: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    sync_strategy: str = attrs.field(default="greedy", validator=v.in_(("greedy", "status_based")))
    sync_indicator: str = attrs.field(default="request_num", validator=v.in_(("request_num", "kv_cache")))
    sync_threshold: float | None = None
    seamless_train_version: int = attrs.field(default=0, validator=v.ge(0))  # sync_and_mig_strategy.sync.*
    enable_multi_priority_queue: bool = False  # routing_strategy.enable_multi_priority_queue (MLQ)
    fine_grain_overlap_granularity: str = attrs.field(default="none", validator=v.in_(_FGO))
    fine_grain_overlap_multiplier: int = attrs.field(default=1, validator=v.ge(1))
    fine_grain_overlap_scope: str = attrs.field(default="recompute", validator=v.in_(("recompute", "pre_step")))
    ppo_mini_batch_size: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))  # groups (prompts)
    dynamic_sampling_filter: bool = False

    def __attrs_post_init__(self):
        g = self.fine_grain_overlap_granularity
        if g == "micro_batch":
            raise ValueError("fine_grain_overlap_granularity='micro_batch' is not modelled (it needs the "
                             "trainer's per-GPU micro-batch size); use 'mini_batch' or 'none'")
        if g == "mini_batch":
            if self.ppo_mini_batch_size is None:
                raise ValueError("fine_grain_overlap_granularity='mini_batch' needs ppo_mini_batch_size "
                                 "(groups per mini-batch, train_actor_rollout_ref.actor.ppo_mini_batch_size)")
            if self.fine_grain_overlap_scope != "pre_step":
                raise ValueError("fine_grain_overlap_scope='recompute' (overlapping only the per-sample stages "
                                 "old_log_prob/ref/values/reward with rollout) is not modelled; "
                                 "use fine_grain_overlap_scope='pre_step' (one optimizer step per chunk)")
        if self.redundant_rollout_enable and self.reserve_capacity <= self.staleness_buffer_entries:
            raise ValueError(
                f"redundant_buffer_entries={self.redundant_buffer_entries} must exceed "
                f"staleness_buffer_entries={self.staleness_buffer_entries} under redundant rollout"
            )

    @property
    def reserve_capacity(self) -> int:
        """B': reservations a buffer accepts (E without redundancy)."""
        e = self.staleness_buffer_entries
        if not self.redundant_rollout_enable:
            return e
        return self.redundant_buffer_entries or e + max(1, e // 8)

    # -- runtime -----------------------------------------------------------------------------
    def should_pull(self, load: InstanceLoad, st: PipelineState) -> bool:
        requests = load.running + load.waiting
        if not self.partial_rollout_enable and requests:
            return False  # nothing may be interrupted: pull when idle
        if self.seamless_train_version >= st.version and not self._ready(st, st.version):
            # greedy.py:60-66 / status_based.py: up to seamless_train_version, version p is pulled
            # only once buffer p (the trainer's next) is READY, so training never waits on rollout
            return False
        if not self.partial_rollout_enable:
            return True
        if self.sync_strategy == "greedy":
            return True
        if self.sync_threshold is None:
            return requests == 0
        if self.sync_indicator == "kv_cache":
            return load.kv_used_tokens / max(load.kv_capacity_tokens, 1) < self.sync_threshold
        return requests < self.sync_threshold

    def eligible(self, instance_version: int, group: GroupRecord) -> bool:
        return instance_version >= group.dispatch_version

    def route_priority(self, group: GroupRecord) -> int | None:
        # MLQ: one queue per V_traj, the lowest (oldest) routed first
        return group.dispatch_version if self.enable_multi_priority_queue else None

    def _ready(self, st: PipelineState, u: int) -> bool:
        """Is buffer u READY (E entries occupied, or already consumed)?"""
        b = self._bufs(st)
        return u < b.consumed or b.occ.get(u, 0) >= self.staleness_buffer_entries

    # -- buffers -----------------------------------------------------------------------------
    @staticmethod
    def _bufs(st: PipelineState) -> PsrlState:
        # consumed: buffers taken by the trainer; res/occ: buffer index -> count
        return st.policy_state

    def _has_empty(self, b: PsrlState, u: int) -> bool:
        return b.res.get(u, 0) + b.occ.get(u, 0) < self.reserve_capacity

    def _reserve_target(self, st: PipelineState) -> int | None:
        """reserve_data: the highest buffer of [v, v + eta] with an EMPTY entry (None: wait)."""
        b = self._bufs(st)
        for u in range(st.version + self.staleness, max(st.version, b.consumed) - 1, -1):
            if self._has_empty(b, u):
                return u
        return None

    @property
    def sync_spec(self) -> Sync:
        rule = InflightRule.ABORT_RESUME if self.partial_rollout_enable else InflightRule.KEEP_PAUSE
        return Sync(rule, scope=SyncScope.PER_INSTANCE)

    @property
    def staleness_spec(self) -> Staleness:
        return Staleness(self.staleness, Enforcement.ADMISSION)  # the per-version buffers

    def admit(self, st: PipelineState) -> bool:
        return self._reserve_target(st) is not None

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        b = self._bufs(st)
        u = self._reserve_target(st)
        if u is None:
            raise PolicyError(f"psrl: group {group.gid} dispatched with no buffer of "
                              f"[{st.version}, {st.version + self.staleness}] free")
        group.tag["reserved"] = u
        group.tag["seq"] = b.seq
        b.seq += 1
        b.res[u] = b.res.get(u, 0) + 1

    def _unreserve(self, b: PsrlState, group: GroupRecord) -> None:
        u = group.tag.pop("reserved", None)
        if u in b.res:
            b.res[u] -= 1

    def _move_into(self, b: PsrlState, u: int, group: GroupRecord, st: PipelineState) -> None:
        """clear_reserved_entries(move_across_buffer=True): refill u's vacated entry from an earlier buffer."""
        e = self.staleness_buffer_entries
        for bid in range(max(group.dispatch_version, b.consumed), min(group.dispatch_version + self.staleness, u - 1) + 1):
            if b.occ.get(bid, 0) >= e:  # READY or READY_WITH_CAPACITY: skipped
                continue
            movable = [g for g in st.running.values()
                       if g.tag.get("reserved") == bid and g.dispatch_version >= u - self.staleness]
            if movable:
                mover = max(movable, key=lambda g: g.tag["seq"])
                b.res[bid] -= 1
                b.res[u] = b.res.get(u, 0) + 1
                mover.tag["reserved"] = u
                return

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        b = self._bufs(st)
        reserved = group.tag["reserved"]
        self._unreserve(b, group)
        if self.dynamic_sampling_filter and group.reward_std() == 0.0:
            return Verdict.DROP
        self._move_into(b, reserved, group, st)
        e = self.staleness_buffer_entries
        lo = max(group.dispatch_version, b.consumed)
        for u in range(lo, group.dispatch_version + self.staleness + 1):
            occ = b.occ.get(u, 0)
            if occ < e and self._has_empty(b, u):
                b.occ[u] = occ + 1
                group.tag["buffer"] = u
                return Verdict.ACCEPT
        if self.redundant_rollout_enable:
            return Verdict.DROP  # a redundant group with no entry left below E: surplus
        raise PolicyError(f"psrl: group {group.gid} (V_traj={group.dispatch_version}) found no buffer to occupy")

    def after_group_done(self, st: PipelineState) -> PublishActions:
        if not self.redundant_rollout_enable:
            return PublishActions()
        b = self._bufs(st)
        c = b.consumed
        if b.occ.get(c, 0) < self.staleness_buffer_entries:
            return PublishActions()
        # The next buffer is READY: groups still reserved in it can occupy nothing (every
        # earlier buffer is consumed), so they are the redundant surplus.
        surplus = tuple(g.gid for g in st.running.values() if g.tag.get("reserved") == c)
        for gid in surplus:
            self._unreserve(b, st.running[gid])
        return PublishActions(abort_running=surplus)

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        b = self._bufs(st)
        c = b.consumed
        if b.occ.get(c, 0) < self.staleness_buffer_entries:
            return None  # not READY: free entries or RESERVED (STUCK) ones remain
        b.consumed = c + 1
        b.occ.pop(c)
        b.res.pop(c, None)
        return [g for g in st.buffer if g.tag.get("buffer") == c]

    # -- fine_grain_overlap (pre_step, mini_batch): a buffer trained chunk by chunk ------------
    def train_chunks(self) -> tuple[int, ...]:
        """resolve_fine_grain_chunk_size (psrl/utils/config.py:5-91): chunk = mini-batch x multiplier
        groups, clamped to the full batch (then no chunking); the last chunk carries the remainder."""
        if self.fine_grain_overlap_granularity != "mini_batch":
            return ()
        e, chunk = self.staleness_buffer_entries, self.ppo_mini_batch_size * self.fine_grain_overlap_multiplier
        if chunk >= e:
            return ()
        return (chunk,) * (e // chunk) + ((e % chunk,) if e % chunk else ())

    def take_chunk(self, st: PipelineState, j: int, size: int) -> list[GroupRecord] | None:
        """_emit_pending_chunks (psrl/workers/agent_loop/manager.py:1426-1507): chunk j of the next
        buffer once ``size`` more of its entries are occupied (accumulation order: version, then
        arrival); the last one when the buffer is READY, which consumes it."""
        b = self._bufs(st)
        c = b.consumed
        avail = sorted((g for g in st.buffer if g.tag.get("buffer") == c),
                       key=lambda g: (g.dispatch_version, g.finish_time, g.gid))
        if j < len(self.train_chunks()) - 1:
            return avail[:size] if len(avail) >= size else None
        if b.occ.get(c, 0) < self.staleness_buffer_entries:
            return None
        b.consumed = c + 1
        b.occ.pop(c)
        b.res.pop(c, None)
        return avail

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        e = self.staleness_buffer_entries
        return attrs.evolve(
            super().lower(ctx),
            admit_budget_base_groups=float((self.staleness + 1) * self.reserve_capacity),
            admit_budget_per_version_groups=float(self.reserve_capacity),
            drop_zero_variance=int(self.dynamic_sampling_filter),
            batch_min_groups=e,
            batch_max_groups=e,
            route_needs_dispatch_version=1,
            fast_path_exact=int(self._record_exact()),
        )

    def _record_exact(self) -> bool:
        """Whether the record reproduces the buffers: with staleness 0 a group dispatched at
        version v can only reserve and occupy buffer v, every earlier buffer was READY (E
        occupied) before v was published, so "buffer v has an EMPTY entry" is accepted + running
        < (v + 1) x E (a filtered group frees its entry), buffer v is the FIFO batch of E, and
        an instance lagging behind the published version holds no request (nothing runs at a
        push; a call of version v + 1 may only run at >= v + 1: ``route_needs_dispatch_version``),
        so every pull rule that lets an idle instance pull at once pulls as greedy does.
        Not exact: staleness > 0 (fallback reservations, moves across buffers), redundant
        rollout, fine-grain chunks, ``seamless_train_version``, and a status threshold that
        could hold an idle instance back (``kv_cache``, or a threshold <= 0)."""
        idle_pulls = (self.sync_strategy == "greedy" or not self.partial_rollout_enable
                      or self.sync_threshold is None
                      or (self.sync_indicator == "request_num" and self.sync_threshold > 0))
        return (self.staleness == 0 and not self.redundant_rollout_enable and not self.train_chunks()
                and self.seamless_train_version == 0 and idle_pulls)
