"""The policy seam: the four questions a system preset answers, and the state it sees.

A policy is a small frozen attrs class (its fields are the upstream knobs). The engine owns
one mutable `PipelineState` and calls the policy's hooks at fixed points (docs/model.md,
"Processes and events", "Trajectories and groups", "Weight update"):

* admission  -- `admit(st)`: may the next prompt group start now?
* runtime    -- `sync_spec`: a declared `Sync` (what a publication does to in-flight requests,
                global or per-instance sync, placement, prefix-cache reset);
* filtering  -- `on_group_done(group, st)`: accept into the buffer, drop, or retry;
                `on_publish(st)`: what to abort or evict after a version bump;
                `staleness_spec`: a declared `Staleness` bound and its enforcement;
* batch      -- `form_batch(st)`: which buffered groups make the next training batch (None: wait).

Hooks must be deterministic functions of their arguments; what a policy remembers lives in
its typed `State` (``st.policy_state``, created by `init_state()`; the engine never reads it).
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import attrs

from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.rules import InflightRule, Placement, Staleness, Sync, SyncScope, code  # noqa: F401 (re-export)


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
    #: the policy's own typed state (`Policy.init_state()`); the engine never reads it
    policy_state: Any = None
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


@attrs.define
class NoState:
    """The state of a policy that keeps none."""


@attrs.frozen
class Policy:
    """Base class of every policy. Subclasses set `kind` and override hooks.

    The policy object is frozen (its fields are knobs); what it must remember during a run
    lives in its `State`, an attrs class the engine creates once with `init_state()` and shows
    the hooks as ``st.policy_state``.
    """

    kind: ClassVar[str] = "base"
    #: upstream system and version this policy follows (presets fill it)
    upstream: ClassVar[str] = ""
    State: ClassVar[type] = NoState
    #: the group tags (``GroupRecord.tag``) the policy keeps: key -> (value type, the snapshot
    #: lists -- ``running_groups``, ``buffer`` -- whose groups must carry it). A snapshot's tags are
    #: checked against it (`simrl.snapshot`): a declared tag missing or of another type is refused.
    group_tags: ClassVar[dict[str, tuple[type, tuple[str, ...]]]] = {}

    def init_state(self):
        """A fresh `State` for one run."""
        return self.State()

    # -- runtime: declared values the engine enforces ------------------------------------------
    @property
    def sync_spec(self) -> Sync:
        """How new weights reach rollout (`simrl.engine.weights` enforces it)."""
        return Sync()

    def ready_to_publish(self, st: PipelineState) -> bool:
        """May the trainer publish the version it just trained?

        Asked when a step's training ends and again after every change until it is true;
        rollout goes on meanwhile. True (the default) publishes at once; slime's
        ``train_async.py`` first waits for the next rollout's target to be collected.
        """
        return True

    def should_pull(self, load: InstanceLoad, st: PipelineState) -> bool:
        """Per-instance sync only: may this instance pull the newer version now?

        Asked at every loop turn of an instance that holds an older version than the latest
        published one. True (the default) pulls at once (PSRL's ``greedy``); a status-based
        strategy waits until the instance's load falls below a threshold.
        """
        return True

    # -- admission -----------------------------------------------------------------------
    def admit(self, st: PipelineState) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement admit()")

    def recheck_in(self, st: PipelineState) -> float | None:
        """Seconds after which the dispatcher should ask `admit` again although nothing changed.

        Asked when `admit` has just said no. None (the default): admission is re-evaluated only
        when something changes (a group finishes, a batch is taken, a version is published).
        A policy whose gate opens with time alone (prime-rl's per-window admission budget)
        returns the time left; it must return None when only an event can open the gate, or a
        stuck run would never end.
        """
        return None

    def check_group_size(self, n: int) -> None:
        """Raise `PolicyError` where this policy cannot run groups of ``n`` samples (a knob that fixes the
        group size, e.g. TRL's ``num_generations``). One rule for both engines: SimPy calls it at every
        dispatch, before `on_dispatch`; the fast path's lowering calls it with the workload's group size
        (`simrl_fast.lowering.lower_policy`), so a run the engine would stop is refused by name there."""

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        """Called right after a group is dispatched (tagging, counters)."""

    def eligible(self, instance_version: int, group: GroupRecord) -> bool:
        """May a call of this group run on an instance holding ``instance_version``?"""
        return True

    def route_priority(self, group: GroupRecord) -> int | None:
        """The router queue level of this group's calls (lower levels are routed first).

        None (the default): one FIFO queue. A call is queued behind every call of its level or
        a lower one; a resumed call still goes to the front.
        """
        return None

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

    def train_chunks(self) -> tuple[int, ...]:
        """Sizes (in groups) of the chunks one step is trained in, each as soon as `take_chunk`
        gives it, publishing after the last (PSRL ``fine_grain_overlap`` with ``pre_step``).
        Empty (the default): `form_batch` gives the whole batch."""
        return ()

    def take_chunk(self, st: PipelineState, j: int, size: int) -> list[GroupRecord] | None:
        """The j-th chunk (``size`` groups) of the current step, or None to wait (with `train_chunks`)."""
        raise NotImplementedError(f"{type(self).__name__} declares train_chunks but no take_chunk()")

    # -- the staleness promise, for the engine, the invariants and the report ----------------
    @property
    def staleness_spec(self) -> Staleness:
        """Max staleness of a trained group and who keeps it (`simrl.engine.staleness`)."""
        return Staleness()

    def describe(self) -> str:
        return self.kind

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        """This policy as the uniform numeric record of `simrl.policy.params` (fast path).

        The base fills the fields that follow from the declared `Sync` and `Staleness`;
        presets evolve it with their admission and batch numbers and say whether it is exact.
        """
        sync, stale = self.sync_spec, self.staleness_spec
        return PolicyParams(
            inflight_rule=code(sync.rule),
            sync_per_instance=int(sync.scope is SyncScope.PER_INSTANCE),
            clear_cache_on_sync=int(sync.clear_prefix_cache),
            colocated=int(sync.placement is Placement.COLOCATED),
            disaggregated=int(sync.placement is Placement.DISAGGREGATED),
            staleness_bound=-1 if stale.bound is None else int(stale.bound),
            staleness_enforcement=code(stale.enforcement),
            evict_stale_on_publish=int(stale.evict_on_publish),
            fast_path_exact=0,
        )
