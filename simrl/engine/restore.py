"""Start the SimPy engine from a snapshot (`simrl.snapshot`), for one draw of the unknown future.

The engine is built through its ordinary constructor (`Simulation`) and then filled from the
outside: the pipeline counters and the policy's state, the in-flight groups, the buffer and the
retry queue, each instance's version, running batch (decoding or still prefilling, with the
tokens generated so far and their KV) and waiting queue, the router queue, the trajectories
waiting for a tool, and the trainer's current phase. Nothing in the engine's own modules
changes; the clock starts at the snapshot's time.

What is unknown at the snapshot is drawn (one *draw* = one seed):

* the future prompts and every call not yet issued come from the workload generator at a
  seed derived from (snapshot seed, draw) — same generator, knobs, dataset size and group size;
* the forced length L of a call already in flight is drawn from the workload's length
  distribution *conditioned on* L > tokens generated so far: rejection sampling from the
  draw workload's calls of the same turn (all turns when fewer than `MIN_POOL` exist);
* a trajectory waiting for its tool waits the draw's tool latency minus the time already spent.

Approximations (docs/predict.md, "What a snapshot cannot capture"): the prefix cache starts
cold; an iteration in progress restarts at the snapshot time; a training step in progress ends
after its expected duration; a publication in progress completes after its remaining expected
time without re-pausing instances.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import attrs
import numpy as np

from simrl.engine.core import Simulation
from simrl.engine.records import Request
from simrl.policy.base import GroupRecord, TrajRecord
from simrl.policy.rules import InflightRule, SyncScope
from simrl.snapshot import Snapshot, SnapshotError, decode_value, policy_state_from
from workloads.types import Workload

#: fewest same-turn calls for a per-turn length pool; below it all calls are pooled
MIN_POOL = 32


def draw_seed(base: int, draw: int) -> int:
    """The seed of draw ``draw`` (a pure function of the two: byte-identical reruns)."""
    return int(np.random.SeedSequence([int(base), 0x5EED, int(draw)]).generate_state(1)[0] & 0x7FFFFFFF)


def draw_workload(cfg, seed: int) -> Workload:
    """A fresh sample of the run's workload: same generator and knobs, another seed."""
    w = cfg.workload
    if w.trace:
        from workloads.trace import read_trace

        trace = read_trace(w.trace)
        return trace  # a trace is the dataset itself: future prompts are known
    import workloads

    return workloads.generate(w.generator, groups=w.groups, seed=seed, group_size=w.group_size, **w.knobs)


class LengthSampler:
    """Completion lengths conditioned on what is known so far, by sampling the draw workload.

    Per call (`draw`): a length drawn uniformly from the pool's values above the tokens
    generated so far, i.e. from the workload's distribution conditioned on L > g (the pool is
    the draw workload's call lengths of the same turn). When no pool value exceeds g (the tail),
    the call ends with its next token (L = g + 1).

    Per group (`draw_group`, first calls): lengths are correlated within a group (a prompt's
    latent difficulty), so the group is conditioned as a whole: each group of the draw workload
    is weighted by how well it explains the evidence -- the probability that one of its lengths
    exceeds each in-flight sibling's g, and the density at each finished sibling's length, both
    under a log-normal kernel around the group's lengths --
    one group is drawn by weight, and each in-flight sibling takes one of that group's lengths
    above its g (the per-call rule when it has none).
    """

    KERNEL_SIGMA = 0.35  # width of the kernel on log lengths (about +-40 %)

    def __init__(self, wl: Workload, rng: np.random.Generator):
        self.rng = rng
        counts = np.diff(wl.traj_call_start)
        turn = np.arange(wl.n_calls) - np.repeat(wl.traj_call_start[:-1], counts)
        lengths = np.asarray(wl.call_completion_tokens)
        self.all = np.sort(lengths)
        self.by_turn = {int(t): np.sort(lengths[turn == t]) for t in np.unique(turn)}
        first = wl.traj_call_start[:-1]
        self.groups = [np.sort(lengths[first[wl.group_trajs(g)]]) for g in range(wl.n_groups)]
        width = max(len(g) for g in self.groups)
        self.log_lengths = np.full((len(self.groups), width), np.nan)
        for j, g in enumerate(self.groups):
            self.log_lengths[j, :len(g)] = np.log(np.maximum(g, 1))

    def draw(self, turn: int, generated: int) -> int:
        pool = self.by_turn.get(turn)
        if pool is None or len(pool) < MIN_POOL:
            pool = self.all
        return self._above(pool, generated)

    def _above(self, pool: np.ndarray, generated: int) -> int | None:
        k = int(np.searchsorted(pool, generated, side="right"))  # pool[k:] > generated
        if k >= len(pool):
            return generated + 1
        return int(pool[k + int(self.rng.integers(len(pool) - k))])

    def draw_group(self, generated: list[int], finished: list[int]) -> list[int]:
        """Lengths of a group's in-flight first calls, given their tokens so far and the
        lengths of its finished siblings."""
        logw = np.zeros(len(self.groups))
        lg = self.log_lengths  # [groups, max size], NaN-padded
        ok = ~np.isnan(lg)
        n = ok.sum(axis=1)
        for g in generated:  # P(L > g) under each group, smoothed like the kernel below
            z = (lg - math.log(max(g, 1))) / self.KERNEL_SIGMA
            p_above = np.where(ok, 0.5 * erfc(-np.nan_to_num(z) / math.sqrt(2.0)), 0.0).sum(axis=1) / n
            logw += np.log(p_above + 1e-300)
        for f in finished:  # density at a finished sibling's length
            z = (math.log(max(f, 1)) - lg) / self.KERNEL_SIGMA
            dens = np.where(ok, np.exp(-0.5 * np.nan_to_num(z) ** 2), 0.0).sum(axis=1) / n
            logw += np.log(dens + 1e-12)
        w = np.exp(logw - logw.max())
        pick = self.groups[int(self.rng.choice(len(w), p=w / w.sum()))]
        out = []
        for g in generated:
            k = int(np.searchsorted(pick, g, side="right"))
            out.append(int(pick[k + int(self.rng.integers(len(pick) - k))]) if k < len(pick) else self.draw(0, g))
        return out


def erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function, vectorised (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7)."""
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = poly * np.exp(-a * a)
    return np.where(x >= 0, y, 2.0 - y)


@attrs.define
class Restored:
    """One restored engine and what the predictor reads back from it."""

    sim: Simulation
    requests: dict[int, Request]  # rid -> the snapshot's requests, as live engine records
    t0: float
    steps_before: int  # training steps done before the snapshot (the trainer numbers from 1)
    trainer_free_s: float  # when the trainer can take its next batch (t0 when waiting)


def restore(snap: Snapshot, draw: int = 0, cfg=None, costs=None, *, relayout: bool = False,
            reload_s: float = 0.0, trainer_delay_s: float = 0.0, oracle: bool = False) -> Restored:
    """Build and start a `Simulation` in the state of ``snap`` for draw ``draw``.

    ``cfg`` replaces the snapshot's configuration (a what-if). ``relayout`` puts every running
    and waiting request back on the router queue keeping its tokens (the engines were rebuilt:
    moved, added, removed or re-sharded); ``reload_s`` pauses every instance that long first
    (loading weights); ``trainer_delay_s`` keeps the trainer from taking a batch before
    ``t0 + trainer_delay_s`` (resharding its state onto new GPUs).

    ``oracle`` (tests only) uses the configured workload and its true lengths instead of a
    draw: a faithful restore then reproduces the original run's future.
    """
    base_cfg = snap.sim_config()
    cfg = cfg or base_cfg
    if not cfg.run.telemetry:
        cfg = attrs.evolve(cfg, run=attrs.evolve(cfg.run, telemetry=True))
    seed = draw_seed(cfg.run.seed if cfg.workload.seed is None else cfg.workload.seed, draw)
    if oracle:
        from simrl.engine.sim import load_workload

        wl = load_workload(cfg)
    else:
        wl = draw_workload(cfg, seed)
    rng = np.random.default_rng(seed)
    lengths = LengthSampler(wl, rng)
    if costs is None:
        from simrl.cost.build import build_costs

        costs = build_costs(cfg)
    sim = Simulation(cfg, wl, costs)
    env, book, st, policy = sim.env, sim.book, sim.st, sim.policy
    t0 = snap.time_s
    env._now = t0  # the restored run continues the snapshot's clock (SimPy keeps it in _now)
    st.now = t0

    # -- pipeline counters and the policy's state ----------------------------------------------
    p = snap.pipeline
    st.version = snap.trainer.version
    st.steps_done = snap.trainer.steps_done
    st.groups_dispatched, st.groups_accepted, st.groups_dropped = (
        p.groups_dispatched, p.groups_accepted, p.groups_dropped)
    sim.tally.groups_retried = p.groups_retried
    book.next_gid, book.next_rid = p.next_gid, p.next_rid
    st.policy_state = policy_state_from(policy, p.policy_state)

    # -- groups -------------------------------------------------------------------------------
    if max((g.wg for g in snap.running_groups + snap.buffer + snap.retry), default=-1) >= wl.n_groups:
        raise SnapshotError(f"snapshot names workload group beyond the dataset's {wl.n_groups} groups")
    groups: dict[int, GroupRecord] = {}
    trajs: dict[tuple[int, int], TrajRecord] = {}

    def build_group(sg) -> GroupRecord:
        first = min(t.tid for t in sg.trajs)
        recs = []
        for k, t in enumerate(sg.trajs):
            tid = int(wl.group_trajs(sg.wg)[0]) + (t.tid - first) if len(wl.group_trajs(sg.wg)) > k else None
            if tid is None:
                raise SnapshotError(f"group {sg.gid}: workload group {sg.wg} has fewer trajectories than the snapshot")
            n_calls = len(wl.traj_calls(tid))
            tr = TrajRecord(tid=tid, reward=float(wl.traj_reward[tid]) if t.reward is None else t.reward,
                            calls_total=t.calls_total, calls_done=t.calls_done,
                            completion_tokens=t.completion_tokens, prompt_tokens=t.prompt_tokens,
                            wasted_tokens=t.wasted_tokens, min_version=t.min_version, max_version=t.max_version,
                            finish_time=t.finish_time_s)
            if t.finish_time_s is None:
                # The draw decides how many calls are still to come (at least the one in flight).
                tr.calls_total = max(t.calls_done + 1, n_calls)
            recs.append(tr)
            trajs[(sg.gid, t.tid)] = tr
        g = GroupRecord(gid=sg.gid, wg=sg.wg, epoch=sg.epoch, dispatch_time=sg.dispatch_time_s,
                        dispatch_version=sg.dispatch_version, trajs=recs, finish_time=sg.finish_time_s,
                        retries=sg.retries, tag=decode_value(sg.tag))
        groups[sg.gid] = g
        return g

    for sg in snap.running_groups:
        st.running[sg.gid] = build_group(sg)
    st.buffer = [build_group(sg) for sg in snap.buffer]
    book.retry = deque(build_group(sg) for sg in snap.retry)

    # -- requests -----------------------------------------------------------------------------
    requests: dict[int, Request] = {}
    drawn: dict[int, int] = {}  # rid -> length drawn for a group's first calls, as a whole
    if not oracle:
        firsts: dict[int, list] = {}
        for _, _, q in snap.requests():
            if q.turn == 0:
                firsts.setdefault(q.gid, []).append(q)
        for sg in snap.running_groups:
            qs = firsts.get(sg.gid)
            if not qs:
                continue
            done = [t.completion_tokens for t in sg.trajs
                    if t.finish_time_s is not None and t.calls_done == 1 and t.completion_tokens > 0]
            for q, n in zip(qs, lengths.draw_group([q.generated_tokens for q in qs], done), strict=True):
                drawn[q.rid] = n

    def make_request(q) -> Request:
        g, tr = groups[q.gid], trajs[(q.gid, q.tid)]
        calls = wl.traj_calls(tr.tid)
        c = int(calls[min(q.turn, len(calls) - 1)])
        r = Request(rid=q.rid, group=g, traj=tr, turn=q.turn, call=c, prompt_tokens=q.prompt_tokens,
                    new_tokens=q.new_tokens, shared_tokens=q.shared_tokens,
                    completion_tokens=int(wl.call_completion_tokens[c]) if oracle
                    else drawn.get(q.rid) or lengths.draw(q.turn, q.generated_tokens), salted=q.salted,
                    arrival=q.arrival_s, generated=q.generated_tokens, version=q.version,
                    version_start=q.version_start, aborts=q.aborts, preemptions=q.preemptions)
        if q.turn + 1 > tr.calls_total:
            tr.calls_total = q.turn + 1
        requests[q.rid] = r
        return r

    for inst in sim.instances:  # an added or rebuilt engine loads the latest weights
        old = inst.index < len(snap.instances) and not relayout
        inst.version = snap.instances[inst.index].version if old else st.version
        st.instance_versions[inst.index] = inst.version
    for si in snap.instances:
        inst = sim.instances[si.index] if si.index < len(sim.instances) and not relayout else None
        running = [make_request(q) for q in si.running]
        waiting = [make_request(q) for q in si.waiting]
        if inst is None:
            for r in running + waiting:
                r.aborts += 1 if r in running else 0
                sim.router.submit(r)
            continue
        for q, r in zip(si.running, running, strict=True):
            _place_running(inst, r, q.prefill_left_tokens)
        for r in waiting:
            r.instance = inst.index
            inst.waiting.append(r)
    for q in snap.router_queue:
        sim.router.submit(make_request(q))

    # -- trajectories waiting for a tool --------------------------------------------------------
    for sg in snap.running_groups:
        g = groups[sg.gid]
        for t in sg.trajs:
            if t.tool_wait_since_s is None:
                continue
            tr = trajs[(sg.gid, t.tid)]
            calls = wl.traj_calls(tr.tid)
            last = int(calls[min(t.calls_done - 1, len(calls) - 1)])
            left = max(0.0, float(wl.call_tool_latency_s[last]) - (t0 - t.tool_wait_since_s))
            if t.calls_done < tr.calls_total:
                env.timeout(left).callbacks.append(lambda _e, g=g, tr=tr, n=t.calls_done: book.submit_call(g, tr, n))
            else:
                env.timeout(left).callbacks.append(lambda _e, g=g, tr=tr: book.finish_trajectory(g, tr))

    # -- start the processes -------------------------------------------------------------------
    sim._started = True
    for inst in sim.instances:
        fresh = relayout or inst.index >= len(snap.instances)
        env.process(_instance_start(inst, reload_s if fresh else 0.0))
    env.process(sim.router.run())
    env.process(book.dispatcher())
    tr = snap.trainer
    remaining_steps = max(0, cfg.run.training_steps - tr.steps_done)
    sim.trainer.steps = remaining_steps
    free = t0 + trainer_delay_s
    if tr.phase == "training":
        left = max(0.0, (tr.phase_started_s or t0) + (tr.phase_expected_s or 0.0) - t0)
        left += float(sim.weights.publish_s(len(sim.instances)))
        free = max(free, t0 + left)
    elif tr.phase == "publishing":
        free = max(free, t0 + max(0.0, (tr.phase_started_s or t0) + (tr.phase_expected_s or 0.0) - t0))
    env.process(_trainer_start(sim, snap, remaining_steps, trainer_delay_s))
    return Restored(sim=sim, requests=requests, t0=t0, steps_before=tr.steps_done, trainer_free_s=free)


def _place_running(inst, r: Request, prefill_left: int) -> None:
    """Put ``r`` into ``inst``'s batch as it stood: decoding, or with ``prefill_left`` to prefill.

    Mirrors `Instance.try_admit` and `Instance.finish_iteration` for a request whose tokens are
    already resident (no shared-prefix reference: its whole context is charged to it).
    """
    private = r.prompt_tokens + r.generated + (r.remaining if inst.reserve else 0)
    inst.kv_used += private
    r.private_kv = private
    r.instance = inst.index
    r.segment += 1
    inst.admit_serial += 1
    r.admit_serial = inst.admit_serial
    r.seg_base = r.generated
    inst.running.append(r)
    if prefill_left > 0 or r.generated == 0:
        r.prefill_total = r.prefill_remaining = max(prefill_left, 1)
        r.seg_first_it = -1
        inst.prefilling.append(r)
        return
    # Decoding: generated_of(r) = seg_base + (it - seg_first_it) = generated now.
    r.prefill_total = r.prefill_remaining = 0
    r.seg_first_it = inst.it
    r.traj.note_version(r.version)
    heapq.heappush(inst.finish_heap, (inst.it + r.remaining - 1, r.rid, r.segment, r))
    inst.n_decoding += 1
    inst.kv_decode_sum += r.prompt_tokens + r.generated


def _instance_start(inst, reload_s: float):
    if reload_s > 0:
        yield inst.env.timeout(reload_s)
    yield from inst.run()


def _trainer_start(sim: Simulation, snap: Snapshot, remaining_steps: int, delay_s: float):
    """Finish the trainer's phase in progress, then run its remaining steps."""
    env, book, st, weights, tr = sim.env, sim.book, sim.st, sim.weights, snap.trainer
    t0 = snap.time_s
    if tr.phase in ("training", "publishing") and remaining_steps > 0:
        left = max(0.0, (tr.phase_started_s or t0) + (tr.phase_expected_s or 0.0) - t0)
        if tr.phase == "training":
            st.training = True
            colocated = sim.trainer.colocated
            if colocated:
                yield from weights.pause_all(weights.colocated_rule())
            yield env.timeout(left)
            st.training = False
            if colocated:
                yield from weights.colocated_publish(sim.costs.offload_after_s(len(weights.instances)))
            else:
                yield from weights.publish()
        else:
            yield env.timeout(left)
            if weights.sync.scope is SyncScope.PER_INSTANCE:
                st.version += 1
                for inst in sim.instances:
                    inst.wake()
            else:
                weights.set_version(st.version + 1, keep_running=weights.sync.rule is not InflightRule.CONTINUE)
                weights._clear_caches()
                weights.resume_all()
        st.steps_done += 1
        st.now = env.now
        book.after_publication()
        book.changed.notify()
        remaining_steps -= 1
        sim.trainer.steps = remaining_steps
    if delay_s > 0 and env.now < t0 + delay_s:
        yield env.timeout(t0 + delay_s - env.now)
    yield from sim.trainer.run()
