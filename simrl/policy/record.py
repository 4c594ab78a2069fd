"""Policies whose every rule is a `PolicyParams` record, executed here for the SimPy engine.

The fast path runs the same record in JAX (`simrl_fast`). A `RecordPolicy` therefore has one
encoding: its `record()`; admission, the declared `Sync` and `Staleness`, zero-variance and
dispatch-age filtering, the bounded buffer and batches of ``batch_min_groups..batch_max_groups``
in the record's ``batch_order`` all follow from it, and `lower()` returns it unchanged. What
the record's rules must remember during a run (batches taken, the count restarted at a
publication, drops since the last batch) lives in `RecordState`. `ParamsPolicy` wraps a bare record, which is
how the registry-wide exactness test replays any preset's lowering in SimPy.
"""

from __future__ import annotations

import math
from functools import lru_cache

import attrs

from simrl.policy.base import GroupRecord, PipelineState, Policy, PublishActions, Verdict
from simrl.policy.errors import PolicyError
from simrl.policy.params import ADMIT_WINDOW_EPS_S, LoweringContext, PolicyParams
from simrl.policy.rules import Enforcement, InflightRule, Placement, Staleness, Sync, SyncScope

_RULES = list(InflightRule)
_ENFORCEMENTS = list(Enforcement)


@lru_cache(maxsize=1024)
def _record(policy: RecordPolicy) -> PolicyParams:
    return policy.record()


@attrs.define
class RecordState:
    """What a record's rules remember during a run (a subclass's `State` must extend it)."""

    batches_taken: int = 0  # batches the trainer has taken (admit_budget_per_batch_groups)
    count_offset: int = 0  # running + buffered - dispatched at the last publication (admit_count_since_publish)
    dropped_since_batch: int = 0  # groups the record's filter dropped since the last batch (batch_shrink_by_drops)
    publications: int = 0  # publications whose on_publish ran (admit_max_batches_ahead)
    zero_variance_since_batch: int = 0  # zero-variance drops since the last batch (collapse_zero_variance_groups)
    places: int = 0  # groups the record's filter has seen, in completion order (zero_variance_holds_slot)
    zero_places: list[int] = attrs.field(factory=list)  # places held by zero-variance drops, not yet consumed
    window_start: float = 0.0  # when the admission window began (admit_window_episodes)
    window_admitted: int = 0  # episodes dispatched in it (less the refunds of admit_window_refund)
    window_live: dict = attrs.field(factory=dict)  # gid -> running GroupRecord (admit_window_refund: who finished)
    zero_in_a_row: int = 0  # zero-variance groups in a row that reached the filter (zero_variance_stop_groups)


_NO_STATE = RecordState()


def admits(p: PolicyParams, st: PipelineState, rs: RecordState | None = None, window: bool = True) -> bool:
    """The superset admission rule of `simrl.policy.params` (``rs``: the run's `RecordState`; ``window``: False
    leaves the admission window out, neither read nor restarted)."""
    rs = _NO_STATE if rs is None else rs
    if p.admit_block_while_training and st.training:
        return False
    if p.admit_count_dispatched:
        count = st.groups_dispatched + (rs.count_offset if p.admit_count_since_publish else 0)
    elif p.admit_return_evicted:
        count = st.groups_dispatched - st.groups_dropped
    else:
        count = st.groups_accepted + st.n_running
    if p.admit_max_batches_ahead >= 0 and rs.batches_taken - rs.publications > p.admit_max_batches_ahead:
        return False
    if p.admit_max_ship_lag >= 0 and (rs.batches_taken - st.version + len(st.buffer) // p.batch_min_groups
                                      > p.admit_max_ship_lag):
        return False  # the ship barrier
    if p.admit_episode_cap >= 0 and unfinished_trajectories(st) >= p.admit_episode_cap:
        return False  # the episode permits (read only when the dispatcher wakes: SimPy's dispatcher loop)
    budget = (p.admit_budget_base_groups + p.admit_budget_per_version_groups * st.version
              + p.admit_budget_per_batch_groups * rs.batches_taken)
    blocked = max(0, len(st.buffer) - p.admit_queue_blocks_groups)  # 0 when the queue is unbounded (inf)
    if not (st.n_running + blocked < p.admit_concurrency_groups and count < budget
            and len(st.buffer) < p.admit_buffer_cap_groups):
        return False
    if window and p.admit_window_episodes >= 1:  # read last: only a consultation that would otherwise admit restarts it
        return window_budget(p, st, RecordState() if rs is _NO_STATE else rs) > 0
    return True


def window_budget(p: PolicyParams, st: PipelineState, rs: RecordState) -> int:
    """Episodes the admission window (``admit_window_episodes``) still allows; a window that has run its length
    restarts now (prime-rl's ``Dispatcher.admission_budget``)."""
    if st.now - rs.window_start >= p.admit_window_s - ADMIT_WINDOW_EPS_S:
        rs.window_start, rs.window_admitted = st.now, 0
    return p.admit_window_episodes - rs.window_admitted


def unfinished_trajectories(st: PipelineState) -> int:
    """Trajectories of running groups that have not finished (``admit_episode_cap``'s count)."""
    return sum(1 for g in st.running.values() for t in g.trajs if t.finish_time is None)


def collapse_message(limit: int) -> str:
    """The record's ``collapse_zero_variance_groups`` failsafe, as the run's error."""
    return (f"MODEL COLLAPSE DETECTED: {limit} groups in a row since the last batch had zero reward variance "
            f"(collapse_zero_variance_groups={limit})")


def zero_stop_message(limit: int, std_max: float) -> str:
    """The record's ``zero_variance_stop_groups`` stop, as the run's error (SimPy's and the fast path's)."""
    return (f"zero-variance stop: {limit} groups in a row had zero reward variance (reward std <= {std_max:g}) and "
            f"are all dropped, so no batch would ever train on them (zero_variance_stop_groups={limit}; group size "
            "1, or all rewards equal?)")


def zero_variance(p: PolicyParams, group: GroupRecord) -> bool:
    """The record's zero-variance test: reward std <= ``zero_variance_std_max`` (0: std == 0)."""
    return group.reward_std() <= p.zero_variance_std_max


def crossed(g: GroupRecord, version: int) -> bool:
    """Whether an unfinished trajectory of g already generated under a version older than ``version``."""
    return any(t.finish_time is None and t.min_version is not None and t.min_version < version for t in g.trajs)


def dispatch_aged(p: PolicyParams, g: GroupRecord, version: int) -> bool:
    """Past the record's ``max_dispatch_age`` (counted from the dispatch stamp)."""
    return p.max_dispatch_age >= 0 and version - g.dispatch_version > p.max_dispatch_age


@attrs.frozen
class RecordPolicy(Policy):
    """Base of a policy defined by one `PolicyParams` record (subclasses implement `record`)."""

    State = RecordState

    def record(self) -> PolicyParams:
        raise NotImplementedError(f"{type(self).__name__} must implement record()")

    @property
    def params(self) -> PolicyParams:
        return _record(self)

    @property
    def sync_spec(self) -> Sync:
        p = self.params
        return Sync(rule=_RULES[p.inflight_rule],
                    scope=SyncScope.PER_INSTANCE if p.sync_per_instance else SyncScope.GLOBAL,
                    placement=(Placement.COLOCATED if p.colocated
                               else Placement.DISAGGREGATED if p.disaggregated else None),
                    clear_prefix_cache=bool(p.clear_cache_on_sync))

    @property
    def staleness_spec(self) -> Staleness:
        p = self.params
        return Staleness(None if p.staleness_bound < 0 else p.staleness_bound,
                         _ENFORCEMENTS[p.staleness_enforcement], bool(p.evict_stale_on_publish))

    @property
    def streams(self) -> bool:
        """Whether the streaming trainer may take the batch in pieces: not when admission counts
        batches taken or the batch is not the FIFO head (only `form_batch` knows them)."""
        p = self.params
        return (not p.admit_budget_per_batch_groups and p.batch_order == 0 and not p.batch_shrink_by_drops
                and p.admit_max_ship_lag < 0 and not p.zero_variance_holds_slot)

    def admit(self, st: PipelineState) -> bool:
        return admits(self.params, st, st.policy_state)

    def recheck_in(self, st: PipelineState) -> float | None:
        """With an admission window that alone holds admission: the seconds until it runs out."""
        p, rs = self.params, st.policy_state
        if p.admit_window_episodes < 1 or not admits(p, st, rs, window=False):
            return None
        if window_budget(p, st, rs) > 0:
            return None
        return rs.window_start + p.admit_window_s - st.now

    def on_dispatch(self, group: GroupRecord, st: PipelineState) -> None:
        p, rs = self.params, st.policy_state
        if p.admit_window_episodes >= 1:
            rs.window_admitted += len(group.trajs)  # one admission per episode
            if p.admit_window_refund:
                rs.window_live[group.gid] = group

    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        p = self.params
        verdict = Verdict.ACCEPT
        rs = st.policy_state
        zero = bool(p.drop_zero_variance) and zero_variance(p, group)
        if zero:
            retry = p.drop_zero_variance == 2 and (p.max_retries <= 0 or group.retries < p.max_retries)
            verdict = Verdict.RETRY if retry else Verdict.DROP
            if p.collapse_zero_variance_groups:
                rs.zero_variance_since_batch += 1
                if rs.zero_variance_since_batch >= p.collapse_zero_variance_groups:
                    raise PolicyError(collapse_message(p.collapse_zero_variance_groups))
            if p.zero_variance_stop_groups:
                rs.zero_in_a_row += 1
                if rs.zero_in_a_row >= p.zero_variance_stop_groups:
                    raise PolicyError(zero_stop_message(p.zero_variance_stop_groups, p.zero_variance_std_max))
        elif dispatch_aged(p, group, st.version):
            verdict = Verdict.DROP
        if verdict is Verdict.ACCEPT:
            rs.zero_in_a_row = 0
        else:
            rs.dropped_since_batch += 1
        if p.zero_variance_holds_slot:
            rs.places += 1
            group.tag["place"] = rs.places
            if zero:
                rs.zero_places.append(rs.places)
        return verdict

    def on_publish(self, st: PipelineState) -> PublishActions:
        p = self.params
        st.policy_state.publications += 1
        aged = tuple(g.gid for g in st.buffer if dispatch_aged(p, g, st.version))
        if p.fail_on_version_crossing >= 0 or p.abort_stale_on_publish:
            # aborted (in st.running's order, gids ascending): stale ones, and crossed ones without retries left;
            # re-dispatched: crossed ones, not stale, with retries left
            k = p.fail_on_version_crossing
            abort, requeue = [], []
            for g in st.running.values():
                if p.abort_stale_on_publish and g.staleness(st.version) > p.staleness_bound:
                    abort.append(g.gid)
                elif k >= 0 and crossed(g, st.version):
                    (abort if g.retries >= k else requeue).append(g.gid)
            return PublishActions(abort_running=tuple(abort), requeue_running=tuple(requeue), drop_buffered=aged)
        if p.admit_count_since_publish:
            # the engine's staleness evictions of this publication are applied after this hook
            evict = p.evict_stale_on_publish and p.staleness_bound >= 0
            kept = sum(1 for g in st.buffer if g.gid not in aged
                       and not (evict and g.staleness(st.version) > p.staleness_bound))
            st.policy_state.count_offset = st.n_running + kept - st.groups_dispatched
        return PublishActions(drop_buffered=aged)

    def after_group_done(self, st: PipelineState) -> PublishActions:
        if self.params.admit_window_refund:
            # the group that just finished (all its trajectories done; an aborted one is not) takes its episodes back,
            # whatever its verdict: also one the engine dropped at completion before `on_group_done`
            rs = st.policy_state
            for gid, g in list(rs.window_live.items()):
                if gid not in st.running:
                    del rs.window_live[gid]
                    if g.done:
                        rs.window_admitted = max(0, rs.window_admitted - len(g.trajs))
        cap = self.params.buffer_capacity_groups
        if 0 <= cap < len(st.buffer):  # overflow evicts the oldest
            return PublishActions(drop_buffered=tuple(g.gid for g in st.buffer[: len(st.buffer) - cap]))
        return PublishActions()

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        p, rs = self.params, st.policy_state
        buf = st.buffer
        if p.batch_order == 1:
            oldest = sorted([*st.running, *(g.gid for g in buf)])[: p.batch_max_groups]
            window = set(oldest)
            batch = [g for g in buf if g.gid in window]
            if len(oldest) < p.batch_max_groups or len(batch) < len(oldest):
                return None
        elif p.zero_variance_holds_slot:
            places = sorted([(g.tag["place"], g) for g in buf] + [(z, None) for z in rs.zero_places],
                            key=lambda x: x[0])
            if len(places) < p.batch_min_groups:
                return None
            chosen = places[: p.batch_min_groups]
            used = {z for z, g in chosen if g is None}
            rs.zero_places = [z for z in rs.zero_places if z not in used]
            batch = [g for _, g in chosen if g is not None]
            if not batch:  # only placeholders: consumed, nothing to train
                return None
        elif len(buf) >= p.batch_min_groups:
            batch = sorted(buf, key=lambda g: g.gid) if p.batch_order == 2 else buf
            batch = batch[: p.batch_max_groups]
        elif p.batch_shrink_by_drops and buf and len(buf) + rs.dropped_since_batch >= p.batch_min_groups:
            batch = list(buf)
        else:
            return None
        rs.batches_taken += 1
        rs.dropped_since_batch = 0
        rs.zero_variance_since_batch = 0
        return batch

    def eligible(self, instance_version: int, group: GroupRecord) -> bool:
        return not self.params.route_needs_dispatch_version or instance_version >= group.dispatch_version

    def lower(self, ctx: LoweringContext) -> PolicyParams:
        return self.params


@attrs.frozen
class ParamsPolicy(RecordPolicy):
    """A bare `PolicyParams` record as a policy (not selectable by name)."""

    kind = "params"
    params_record: PolicyParams = attrs.field(validator=attrs.validators.instance_of(PolicyParams))

    def record(self) -> PolicyParams:
        return self.params_record

    def __attrs_post_init__(self):
        p = self.params_record
        if math.isinf(p.admit_concurrency_groups) and math.isinf(p.admit_budget_base_groups) and p.admit_episode_cap < 0:
            raise ValueError("a PolicyParams record with unbounded admission (no concurrency cap, no budget and no "
                             "episode cap)")
