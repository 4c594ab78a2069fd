"""The policy seam: the four questions a system preset answers, and the state it sees.

A policy is a small frozen attrs class (its fields are the upstream knobs). The engine owns
one mutable `PipelineState` and calls the policy's hooks at fixed points (see docs/model.md,
"Policy hooks"):

* admission  -- `admit(st)`: may the next prompt group start now?
* runtime    -- `inflight`: what happens to in-flight requests when new weights are published
                (`InflightRule`), and `sync_scope`: all instances at once, or each pulls alone;
* filtering  -- `on_group_done(group, st)`: accept into the buffer, drop, or retry;
                `on_publish(st)`: what to abort or evict after a version bump;
* batch      -- `form_batch(st)`: which buffered groups make the next training batch (None: wait).

Hooks must be deterministic functions of their arguments; policy-specific counters live in
``st.extra`` (a dict the engine never reads).
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from simrl.policy.rules import Enforcement, InflightRule, Placement, Staleness, Sync, SyncScope


class Verdict(enum.StrEnum):
    ACCEPT = "accept"  # into the buffer, trainable
    DROP = "drop"  # discarded; its tokens count as wasted
    RETRY = "retry"  # discarded and the same prompt is dispatched again from scratch


@attrs.define
class TrajRecord:
    """One trajectory of a dispatched group, as the engine tracks it."""

    tid: int  # workload trajectory index
    reward: float
    calls_total: int
    calls_done: int = 0
    completion_tokens: int = 0  # generated tokens that belong to the final trajectory
    prompt_tokens: int = 0  # prompt of its latest finished call, history included (trained as context)
    wasted_tokens: int = 0  # tokens generated and then thrown away (abort-restart, preemption loss)
    min_version: int | None = None  # oldest weight version that produced one of its tokens
    max_version: int | None = None  # newest weight version that produced one of its tokens
    finish_time: float | None = None

    def note_version(self, v: int) -> None:
        self.min_version = v if self.min_version is None else min(self.min_version, v)
        self.max_version = v if self.max_version is None else max(self.max_version, v)


@attrs.define
class GroupRecord:
    """A dispatched prompt group: the unit of admission, filtering and batching."""

    gid: int  # dispatch serial number (0, 1, 2, ... in dispatch order)
    wg: int  # workload group index
    epoch: int  # pass over the prompt dataset
    dispatch_time: float
    dispatch_version: int
    trajs: list[TrajRecord]
    finish_time: float | None = None
    retries: int = 0
    tag: dict = attrs.field(factory=dict)  # policy scratch (target step, buffer slot, ...)

    @property
    def done(self) -> bool:
        return all(t.finish_time is not None for t in self.trajs)

    @property
    def min_version(self) -> int:
        vs = [t.min_version for t in self.trajs if t.min_version is not None]
        return min(vs) if vs else self.dispatch_version

    @property
    def max_version(self) -> int:
        vs = [t.max_version for t in self.trajs if t.max_version is not None]
        return max(vs) if vs else self.dispatch_version

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.trajs)

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajs]

    def reward_std(self) -> float:
        r = self.rewards
        m = sum(r) / len(r)
        return (sum((x - m) ** 2 for x in r) / len(r)) ** 0.5

    def staleness(self, train_version: int) -> int:
        """Versions between the oldest weights that produced a token and the weights trained."""
        return train_version - self.min_version


@attrs.frozen
class InstanceLoad:
    """A rollout instance as policies may see it (for load-driven admission)."""

    index: int
    version: int
    running: int
    waiting: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    preemptions: int


@attrs.define
class PipelineState:
    """What the engine shows a policy. Mutable; owned by the engine."""

    n_instances: int
    now: float = 0.0
    version: int = 0  # latest policy version the trainer has published
    steps_done: int = 0  # training steps completed
    training: bool = False
    groups_dispatched: int = 0  # cumulative
    groups_accepted: int = 0  # cumulative, into the buffer
    groups_dropped: int = 0  # cumulative (filter, staleness, overflow)
    running: dict[int, GroupRecord] = attrs.field(factory=dict)  # gid -> in-flight group
    buffer: list[GroupRecord] = attrs.field(factory=list)  # finished, accepted, not yet trained
    instance_versions: list[int] = attrs.field(factory=list)
    extra: dict = attrs.field(factory=dict)  # policy-owned counters
    #: callable returning one `InstanceLoad` per rollout instance (set by the engine)
    probe: object = None

    def instance_loads(self) -> list[InstanceLoad]:
        return self.probe() if self.probe is not None else []

    @property
    def n_running(self) -> int:
        return len(self.running)


@attrs.frozen
class PublishActions:
    """What a policy wants done to in-flight or buffered groups (after a publication or a
    finished group). Tokens of aborted or dropped groups count as wasted."""

    abort_running: tuple[int, ...] = ()  # gids of in-flight groups to abort and drop
    requeue_running: tuple[int, ...] = ()  # gids to abort; their prompts are dispatched again
    drop_buffered: tuple[int, ...] = ()  # gids of buffered groups to drop


@attrs.frozen
class Policy:
    """Base class of every policy. Subclasses set `kind` and override hooks."""

    kind: ClassVar[str] = "base"
    #: upstream system and version this policy follows (presets fill it)
    upstream: ClassVar[str] = ""

    # -- runtime -------------------------------------------------------------------------
    @property
    def inflight(self) -> InflightRule:
        return InflightRule.KEEP_PAUSE

    @property
    def sync_scope(self) -> str:
        """``global``: every instance takes the new weights at once; ``per_instance``: each pulls."""
        return "global"

    def should_pull(self, load: InstanceLoad, st: PipelineState) -> bool:
        """Per-instance sync only: may this instance pull the newer version now?

        Asked at every loop turn of an instance that holds an older version than the latest
        published one. True (the default) pulls at once (PSRL's ``greedy``); a status-based
        strategy waits until the instance's load falls below a threshold.
        """
        return True

    @property
    def placement(self) -> str | None:
        """``colocated`` / ``disaggregated`` when the system mode fixes it; None: deployment's."""
        return None

    @property
    def clear_prefix_cache_on_sync(self) -> bool:
        """Whether cached prefixes are dropped when an instance loads new weights.

        True models vLLM's reset_prefix_cache on update, or a per-version cache salt (SkyRL,
        prime-rl): either way old-version prefixes are never hit again.
        """
        return True

    @property
    def pause_rollout_for_sync(self) -> bool:
        """Whether generation stops while weights are transferred (False: versioned LoRA)."""
        return self.inflight is not InflightRule.CONTINUE

    @property
    def sync_spec(self) -> Sync:
        """The declared weight sync the engine enforces (`simrl.engine.weights`)."""
        rule = self.inflight
        if rule is InflightRule.KEEP_PAUSE and not self.pause_rollout_for_sync:
            rule = InflightRule.SWAP_IN_PLACE
        return Sync(rule=rule, scope=SyncScope(self.sync_scope),
                    placement=None if self.placement is None else Placement(self.placement),
                    clear_prefix_cache=self.clear_prefix_cache_on_sync)

    # -- admission -----------------------------------------------------------------------
    def admit(self, st: PipelineState) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement admit()")

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        """Called right after a group is dispatched (tagging, counters)."""

    def eligible(self, instance_version: int, group: GroupRecord) -> bool:
        """May a call of this group run on an instance holding ``instance_version``?"""
        return True

    # -- filtering -----------------------------------------------------------------------
    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        return Verdict.ACCEPT

    def on_publish(self, st: PipelineState) -> PublishActions:
        """Called after every weight publication (the version has just advanced)."""
        return PublishActions()

    def after_group_done(self, st: PipelineState) -> PublishActions:
        """Called after each finished group was accepted or dropped (e.g. abort the surplus)."""
        return PublishActions()

    # -- batch formation -----------------------------------------------------------------
    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement form_batch()")

    # -- promises, for invariants and reports --------------------------------------------
    def staleness_bound(self) -> int | None:
        """Max staleness of a trained group this policy guarantees (None: unbounded)."""
        return None

    @property
    def bound_enforced(self) -> bool:
        """False where upstream only counts violations of its bound (they are reported)."""
        return True

    @property
    def staleness_spec(self) -> Staleness:
        """The declared staleness promise; the engine enforces it in `simrl.engine.staleness`."""
        bound = self.staleness_bound()
        if bound is None:
            return Staleness()
        return Staleness(bound, Enforcement.ADMISSION if self.bound_enforced else Enforcement.COUNTED)

    def describe(self) -> str:
        return self.kind

    def lower(self):
        """This policy as the uniform numeric record of `simrl.policy.params` (fast path)."""
        from simrl.policy.params import INFLIGHT_CODES, PolicyParams

        return PolicyParams(
            inflight_rule=INFLIGHT_CODES[self.inflight.value],
            sync_per_instance=int(self.sync_scope == "per_instance"),
            clear_cache_on_sync=int(self.clear_prefix_cache_on_sync),
            colocated=int(self.placement == "colocated"),
            staleness_bound=-1 if self.staleness_bound() is None else int(self.staleness_bound()),
            fast_path_exact=0,
        )
