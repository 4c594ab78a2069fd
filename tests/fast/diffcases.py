"""Differential-test helpers: random configurations inside the fast path's feature set, both
engines on each, and a comparison per training step and per call.

Configurations are drawn from a seeded numpy Generator (no global seeding). All cases of one
batch share (groups, group size, steps) so the JAX side compiles once and runs them vmapped
with one workload per configuration.
"""

from __future__ import annotations

import math
import zlib

import attrs
import numpy as np
from simhelpers import linear_costs, random_workload

from simrl.config import load_config
from simrl.engine.sim import build_simulation, summarise
from simrl.observe import from_report
from simrl.policy.params import LoweringContext
from simrl.policy.record import ParamsPolicy
from simrl_fast.observe import from_fast

RULES = ["continue", "keep_pause", "abort_resume", "abort_restart", "drain"]
BASE = ["deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
        "deployment.rollout.kv_policy=reserve", "deployment.placement=disaggregated", "router.active_cap=0"]


#: BASE with colocated placement (the policy's own declared placement still wins, as in SimPy)
COLOCATED = [*(o for o in BASE if not o.startswith("deployment.placement=")), "deployment.placement=colocated"]


class Case:
    """One configuration: overrides, workload and cost models, and the SimPy outcome."""

    def __init__(self, overrides, workload, costs, label=""):
        self.overrides, self.workload, self.costs, self.label = list(overrides), workload, costs, label
        self.cfg = load_config(overrides=self.overrides)

    def run_simpy(self):
        """SimPy's run (``stopped``: the record's ``zero_variance_stop_groups`` error where it stopped the run)."""
        from simrl.engine.errors import SimulationError

        self.stopped = None
        sim = build_simulation(self.cfg, self.workload, self.costs)
        try:
            sim.run()
        except SimulationError as exc:
            if not str(exc).startswith("zero-variance stop:"):
                raise
            self.stopped, self.report = str(exc), None
            return None
        self.report = summarise(sim)
        self.preemptions = preemptions_until_done(sim)
        return self.report


def preemptions_until_done(sim) -> list[int]:
    """Per instance, the preemptions SimPy made before the final publication took effect.

    SimPy stops at the `done` event, which fires after the events already due at that instant (an
    instance resumed by the final publication runs its turn, and may preempt, first); the fast path
    stops at the publication itself. What happens in that instant after it changes no compared
    outcome (calls finishing then are not compared either), so the count stops at the final
    ``publish_end`` event of the telemetry (all of them when the run did not finish)."""
    events = sim.recorder.events
    steps = sim.cfg.run.training_steps
    end = next((k for k, e in enumerate(events) if e["kind"] == "publish_end" and e["step"] == steps), len(events))
    out = [0] * len(sim.instances)
    for e in events[:end]:
        if e["kind"] == "preempt":
            out[e["inst"]] += 1
    return out


def draw_token_budget(rng: np.random.Generator, slots: int) -> int:
    """A ``max_num_batched_tokens``: unchunked (0), the vLLM default (8192), a budget below the longer
    prompts (chunks split across iterations), or a tight one near ``max_num_seqs`` (a budget at or below
    the decoding sequences holds every prefill until a finish frees some)."""
    kind = rng.choice(["off", "default", "split", "tight"], p=[0.3, 0.1, 0.3, 0.3])
    if kind == "off":
        return 0
    if kind == "default":
        return 8192
    if kind == "split":
        return int(rng.integers(64, 1025))
    return int(rng.integers(max(8, slots // 4), max(9, slots + 9)))  # (at least 8: fewer prefill visits)


def shared_prompts(rng: np.random.Generator, wl):
    """``wl`` with group-shared prompt prefixes drawn per group (the whole first prompt, a part of it, or
    none) and some calls salted (`CallSpec.cache_salted`: they never share): the prefix cache's draws."""
    first = wl.call_prompt_tokens[wl.traj_call_start[wl.group_traj_start[:-1]]]
    kind = rng.integers(0, 4, wl.n_groups)  # 0 whole prompt, 1 a part, 2 none, 3 a part with salted calls
    part = np.array([int(rng.integers(1, max(int(x), 1) + 1)) for x in first])
    shared = np.where(kind == 0, first, np.where(kind == 2, 0, part))
    salted = np.zeros(len(wl.call_prompt_tokens), dtype=bool)
    for g in np.nonzero(kind == 3)[0]:
        calls = np.arange(wl.traj_call_start[wl.group_traj_start[g]], wl.traj_call_start[wl.group_traj_start[g + 1]])
        salted[calls] = rng.random(len(calls)) < 0.5
    return attrs.evolve(wl, group_shared_prompt_tokens=shared, call_cache_salted=salted)


def random_case(rng: np.random.Generator, groups: int, n: int, steps: int, kv_policy: str = "reserve",
                chunked: bool = True, prefix: str = "off", perinst: bool = False, crossing: str = "off",
                router: str = "two") -> Case:
    """A random configuration inside the declared feature set.

    ``kv_policy``: ``reserve``, ``on_demand`` or ``any`` (drawn last, so the other draws of a seed do
    not depend on it; small KV capacities make on_demand preempt). ``chunked``: draw
    ``max_num_batched_tokens`` (`draw_token_budget`, after everything else), else 0. ``prefix``: ``off``
    (prefix caching off), ``on`` or ``any`` (drawn after the budget): prefix caching with group-shared
    prompts redrawn by `shared_prompts` half the time (else the whole prompt: a hit prefills nothing).
    ``perinst``: a third of the time (drawn next) the policy is psrl (per-instance weight pulls,
    `draw_psrl`) instead. ``crossing``: ``off``, ``on`` or ``any`` (drawn next, not with psrl): groups failed
    at a publication (``fail_on_version_crossing``, `draw_crossing`), with whatever budget and cache were
    drawn. Then a fifth of the cases but psrl's replay the drawn policy's record with a ship barrier
    (``admit_max_ship_lag`` 0..2). Last, with ``crossing`` on, 40% of them abort running groups past the
    staleness bound at each publication (`draw_stale_abort`); and a quarter of the cases but psrl's hold the places
    of zero-variance drops in fixed-size FIFO batches (`draw_zero_slots`). ``router``: ``two``
    (least_requests or round_robin, drawn with the deployment) or ``any`` (after everything else,
    `draw_router`: dp_shard too, and an active_cap). Last of all, a quarter of the cases but psrl's cap the
    unfinished trajectories, read when the dispatcher wakes (`draw_episode_cap`, prime-rl's permits), drawn from
    a generator seeded by the case's label: ``rng`` is not advanced, so later cases keep their values; then, from
    that generator, an admission window on a quarter of the cases but psrl's (`draw_window`, prime-rl's dispatcher
    window), then a ship barrier together with zero-variance placeholders on a fifth of the cases but psrl's
    (`ship_zero_slots_record`) and a zero-variance threshold and stop on a quarter (`zero_test_record`); then, the
    same way, a fifth of the cases get equal call lengths (`draw_equal_lengths`: ties)."""
    K = int(rng.integers(1, 5))
    S = int(rng.choice([1, 2, 3, 4, 8, 16, 64]))
    lo_c, hi_c = sorted(int(x) for x in rng.integers(1, 600, 2))
    prompt = (int(rng.integers(10, 200)), int(rng.integers(200, 900)))
    wl = random_workload(groups=groups, n=n, seed=int(rng.integers(1 << 30)), prompt=prompt,
                         completion=(lo_c, hi_c + 2), zero_variance=float(rng.choice([0.0, 0.3])))
    need = int((wl.call_prompt_tokens + wl.call_completion_tokens).max())
    kv = int(need * rng.choice([1.0, 1.5, 3.0, 10.0, 1000.0]))
    a = float(rng.uniform(1e-3, 1e-2))
    b = float(rng.choice([0.0, rng.uniform(1e-6, 1e-4)]))
    c = float(rng.choice([0.0, rng.uniform(1e-9, 1e-7)]))
    p = float(rng.uniform(1e-6, 1e-4)) if c == 0.0 else float(rng.choice([0.0, rng.uniform(1e-6, 1e-4)]))
    costs = linear_costs(kv_tokens=kv, step_s=float(rng.uniform(0.05, 8.0)), sync_s=float(rng.uniform(0.01, 2.0)),
                         a=a, b=b, c=c, p=p)
    B = int(rng.integers(1, 5))
    kind = rng.choice(["sync", "bounded_async", "bounded_async", "skyrl", "areal", "verl_v1", "trl"])
    if kind == "sync":
        pol = ["policy=sync", f"policy.batch_groups={B}"]
    elif kind == "bounded_async":
        s = int(rng.integers(0, 4))
        pol = ["policy=bounded_async", f"policy.batch_groups={B}", f"policy.max_staleness={s}",
               f"policy.inflight_rule={rng.choice(RULES)}"]
        if rng.random() < 0.3:
            pol.append(f"policy.max_concurrent_groups={int(rng.integers(1, B * (s + 1) + 2))}")
    elif kind == "skyrl":
        s = int(rng.integers(0, 3))
        k = int(rng.integers(B, B * (s + 1) + 1))
        pol = ["policy=skyrl", f"policy.policy_mini_batch_size={B}", f"policy.max_staleness_steps={s}",
               f"policy.num_parallel_generation_workers={k}"]
    elif kind == "verl_v1":  # oldest-dispatch-first batches, drops by dispatch age, evicted groups' slots returned
        mode = str(rng.choice(["sync", "colocate_async", "separate_async"]))
        pol = ["policy=verl_v1", f"policy.trainer_mode={mode}", f"policy.ppo_mini_batch_size={B}",
               f"policy.parameter_sync_step={int(rng.integers(1, 3))}",
               f"policy.num_warmup_batches={int(rng.integers(0, 3))}",
               f"policy.max_off_policy_threshold={int(rng.integers(1, 4))}"]
        if mode != "sync" and rng.random() < 0.5:  # (sync mode's 2k refill credits are not in the record)
            pol.append("policy.filter_groups_metric=acc")
    elif kind == "trl":  # async: FIFO batches, drops by dispatch age (max_staleness), a bounded queue
        pol = ["policy=trl", "policy.mode=async", f"policy.per_device_train_batch_size={B * n}",
               "policy.num_processes=1", f"policy.max_staleness={int(rng.integers(0, 3))}",
               f"policy.max_inflight_tasks={int(rng.integers(1, 3 * B + 3)) * n}",
               f"policy.queue_maxsize={int(rng.integers(1, 3 * B + 3)) * n}"]
    else:
        pol = ["policy=areal", f"policy.consumer_batch_size={B}", f"policy.max_head_offpolicyness={int(rng.integers(0, 3))}",
               f"policy.should_accept_fn={rng.choice(['none', 'nonzero_std'])}"]
    ov = [*BASE, *pol, f"deployment.rollout.instances={K}", f"deployment.rollout.max_num_seqs={S}",
          f"deployment.rollout.kv_capacity_tokens={kv}", f"router.name={rng.choice(['least_requests', 'round_robin'])}",
          f"run.training_steps={steps}"]
    if kv_policy == "any":
        kv_policy = str(rng.choice(["reserve", "on_demand"]))
    if kv_policy != "reserve":
        ov.append(f"deployment.rollout.kv_policy={kv_policy}")
    tb = draw_token_budget(rng, S) if chunked else 0
    if tb:
        ov = [o for o in ov if not o.startswith("deployment.rollout.max_num_batched_tokens=")]
        ov.append(f"deployment.rollout.max_num_batched_tokens={tb}")
    if prefix == "any":
        prefix = "on" if rng.random() < 0.5 else "off"
    if prefix == "on":
        ov.append("deployment.rollout.prefix_caching=true")
        if rng.random() < 0.5:
            wl = shared_prompts(rng, wl)
        kv_policy += " prefix"
    psrl_drawn = perinst and rng.random() < 1 / 3
    if psrl_drawn:
        old = pol
        pol = draw_psrl(rng, B)
        ov = [o for o in ov if o not in old] + pol
    if crossing == "any":
        crossing = "on" if rng.random() < 0.5 else "off"
    record = None
    if crossing == "on" and not psrl_drawn:
        ov, pol, record = draw_crossing(rng, ov, pol, B, K, n)
    case = Case(ov, wl, costs, label=f"K={K} S={S} kv={kv} {kv_policy} tb={tb} c={c:.2g} p={p:.2g} {' '.join(pol)}")
    if record is not None:
        case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(record))
    if not psrl_drawn and rng.random() < 0.2:  # drawn last: a ship barrier (prime-rl's TARGET_LAG) on the drawn policy's record
        rec = case.cfg.policy.lower(LoweringContext(group_size=n, instances=K))
        if rec.batch_min_groups == rec.batch_max_groups:
            lag = int(rng.integers(0, 3))
            case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(attrs.evolve(rec, admit_max_ship_lag=lag)))
            case.label += f" ship_lag={lag}"
    if crossing == "on" and not psrl_drawn and rng.random() < 0.4:
        case = draw_stale_abort(rng, case, n, K)
    if not psrl_drawn and rng.random() < 0.25:  # drawn last of all: zero-variance drops holding their batch places
        case = draw_zero_slots(case, n, K)
    if router == "any":
        draw_router(rng, case, n, K)
    # last of all, from a generator of its own seeded by the case's label (so the cases drawn after this one from
    # ``rng`` keep their values): prime-rl's episode permits on a quarter of the cases but psrl's
    own = np.random.default_rng(zlib.crc32(case.label.encode()))
    if not psrl_drawn and own.random() < 0.25:
        case = draw_episode_cap(own, case, n, K)
    # then, from the same generator: prime-rl's admission window on a quarter of the cases but psrl's
    if not psrl_drawn and own.random() < 0.25:
        case = draw_window(own, case, n, K)
    # then (from the same generator, after the episode cap): a ship barrier together with zero-variance placeholders
    # on a fifth of the cases but psrl's, and prime-rl's zero-variance threshold and stop on a quarter
    if not psrl_drawn and own.random() < 0.2:
        case = draw_record(case, n, K, lambda rec: ship_zero_slots_record(own, rec), _zero_label("ship+zero_slots"))
    if not psrl_drawn and own.random() < 0.25:
        case = draw_record(case, n, K, lambda rec: zero_test_record(own, rec, case.workload), _zero_label("zero_test"))
    draw_equal_lengths(case)
    return case


def draw_record(case: Case, n: int, K: int, change, label) -> Case:
    """The drawn policy's record changed by ``change`` (unchanged where it returns None or there is no record);
    ``label(new record)`` is appended to the case's label (`draw_equal_lengths` seeds from the label)."""
    from simrl.policy.errors import PolicyError

    try:
        rec = case.cfg.policy.lower(LoweringContext(group_size=n, instances=K))
    except PolicyError:  # (a policy without a record: the fast path refuses it anyway)
        return case
    new = change(rec)
    if new is not None:
        case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(new))
        case.label += label(new)
    return case


def _zero_label(what: str):
    """`draw_record`'s label for the ship barrier and zero-variance changes."""
    return lambda new: (f" {what}(lag={new.admit_max_ship_lag} std_max={new.zero_variance_std_max:g} "
                        f"stop={new.zero_variance_stop_groups})")


def ship_zero_slots_record(rng: np.random.Generator, rec):
    """``rec`` with a ship barrier (lag 0..2) and zero-variance placeholders together (prime-rl's pair): a record
    with one of them gets the other, where its batches allow it (`zero_slots_record`); else None."""
    if rec.zero_variance_holds_slot and rec.admit_max_ship_lag < 0:
        return attrs.evolve(rec, admit_max_ship_lag=int(rng.integers(0, 3)))
    if rec.admit_max_ship_lag >= 0 and not rec.zero_variance_holds_slot:
        slots = zero_slots_record(attrs.evolve(rec, admit_max_ship_lag=-1))
        return None if slots is None else attrs.evolve(slots, admit_max_ship_lag=rec.admit_max_ship_lag)
    return None


def zero_test_record(rng: np.random.Generator, rec, wl):
    """``rec`` (dropping zero-variance groups, not per-instance, exact) with a zero-variance threshold
    (``zero_variance_std_max``: 0, or one of the workload's group reward stds but the largest, so the groups up to
    it count as zero; the test is <=) and half the time a stop after 2..8 such groups in a row
    (``zero_variance_stop_groups``; where it fires both engines stop, `Case.run_simpy` keeps SimPy's error and
    `compare` checks the fast path's flag)."""
    if rec.drop_zero_variance != 1 or rec.sync_per_instance or not rec.fast_path_exact:
        return None
    from simrl_fast.lowering import lower_workload

    stds = sorted(set(lower_workload(wl).reward_std.tolist()) - {0.0})  # GroupRecord.reward_std's arithmetic
    k = int(rng.integers(0, len(stds)))  # (below the largest: some prompt keeps its variance, so batches can form)
    tol = stds[k - 1] if k else 0.0
    stop = int(rng.integers(2, 9)) if rng.random() < 0.5 else 0
    return attrs.evolve(rec, zero_variance_std_max=tol, zero_variance_stop_groups=stop)



def draw_equal_lengths(case: Case, share: float = 0.2) -> None:
    """Drawn after everything (from a generator seeded by the label, so no other draw changes): on ``share`` of the
    cases every call gets the workload's shortest prompt and completion (ties: whole groups finish in one instant,
    instances go idle together, a batch forms in the instant the dispatcher admits; found by tests/fast/outsider.py
    on the ``constant`` generator). The shared prefixes are capped at the prompt; the KV capacity still holds a
    call."""
    own = np.random.default_rng(zlib.crc32((case.label + " equal lengths").encode()))
    if own.random() >= share:
        return
    wl = case.workload
    prompt, comp = int(wl.call_prompt_tokens.min()), int(wl.call_completion_tokens.min())
    first = np.zeros(len(wl.call_prompt_tokens), dtype=bool)
    first[wl.traj_call_start[:-1]] = True
    case.workload = attrs.evolve(
        wl, call_prompt_tokens=np.full_like(wl.call_prompt_tokens, prompt),
        call_new_tokens=np.where(first, prompt, wl.call_new_tokens),
        call_completion_tokens=np.full_like(wl.call_completion_tokens, comp),
        group_shared_prompt_tokens=np.minimum(wl.group_shared_prompt_tokens, prompt))
    case.label += f" equal(prompt={prompt}, completion={comp})"


def episode_cap_record(rng: np.random.Generator, rec, n: int):
    """``rec`` with an episode cap of 1..3n unfinished trajectories, read when the dispatcher wakes
    (``admit_episode_cap``, prime-rl's permits), or None where the fast path would refuse it (per-instance sync,
    an inexact lowering)."""
    if rec is None or rec.sync_per_instance or not rec.fast_path_exact:
        return None
    return attrs.evolve(rec, admit_episode_cap=int(rng.integers(1, 3 * n + 1)))


def draw_episode_cap(rng: np.random.Generator, case: Case, n: int, K: int) -> Case:
    """The drawn policy's record with `episode_cap_record` (unchanged where the fast path would refuse it)."""
    return draw_record(case, n, K, lambda rec: episode_cap_record(rng, rec, n),
                       lambda new: f" episode_cap={new.admit_episode_cap}")


def window_record(rng: np.random.Generator, rec, n: int):
    """``rec`` with an admission window (``admit_window_episodes`` 1..3n episodes per ``admit_window_s``: a dyadic
    0.25..2 s half the time, so that its timeouts tie with dyadic events, else 0.02..3 s; completions refunded half
    the time; prime-rl's dispatcher window), or None where the fast path would refuse it (per-instance sync, an
    inexact lowering)."""
    if rec is None or rec.sync_per_instance or not rec.fast_path_exact:
        return None
    w = int(rng.integers(1, 3 * n + 1))
    length = float(rng.choice([0.25, 0.5, 1.0, 2.0])) if rng.random() < 0.5 else float(rng.uniform(0.02, 3.0))
    return attrs.evolve(rec, admit_window_episodes=w, admit_window_s=length,
                        admit_window_refund=int(rng.integers(0, 2)))


def draw_window(rng: np.random.Generator, case: Case, n: int, K: int) -> Case:
    """The drawn policy's record with `window_record` (unchanged where the fast path would refuse it)."""
    return draw_record(case, n, K, lambda rec: window_record(rng, rec, n),
                       lambda new: (f" window={new.admit_window_episodes}/{new.admit_window_s:.3g}s"
                                    f"{' refund' if new.admit_window_refund else ''}"))


def zero_slots_record(rec):
    """``rec`` with zero-variance groups dropped and holding their place in the batch (``zero_variance_holds_slot``,
    prime-rl's ``filter_zero_advantages``) where its batches allow it (fixed-size FIFO), else None."""
    if (rec.batch_order != 0 or rec.batch_min_groups != rec.batch_max_groups or rec.batch_shrink_by_drops
            or rec.collapse_zero_variance_groups or rec.sync_per_instance or rec.drop_zero_variance == 2
            or not rec.fast_path_exact or rec.admit_max_ship_lag >= 0):  # (the pair: `ship_zero_slots_record`)  # (refused with a ship barrier)
        return None
    return attrs.evolve(rec, drop_zero_variance=1, zero_variance_holds_slot=1)


def draw_zero_slots(case: Case, n: int, K: int) -> Case:
    """The drawn policy's record with `zero_slots_record` (unchanged where its batches do not allow it)."""
    rec = zero_slots_record(case.cfg.policy.lower(LoweringContext(group_size=n, instances=K)))
    if rec is not None:
        case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
        case.label += " zero_slots"
    return case


def draw_stale_abort(rng: np.random.Generator, case: Case, n: int, K: int) -> Case:
    """Drawn last (with ``crossing`` on): the drawn policy's record with running groups past the staleness bound
    aborted at each publication (``abort_stale_on_publish``, prime-rl's ``max_off_policy_steps``) when its in-flight
    rule pauses every instance (a bound 0..2, counted only, where the record has none)."""
    from simrl.policy.rules import InflightRule, code

    rec = case.cfg.policy.lower(LoweringContext(group_size=n, instances=K))
    paused = rec.colocated or rec.inflight_rule in (code(InflightRule.KEEP_PAUSE), code(InflightRule.ABORT_RESUME),
                                                    code(InflightRule.ABORT_RESTART), code(InflightRule.DRAIN))
    if not paused or rec.admit_count_since_publish or rec.sync_per_instance or not rec.fast_path_exact:
        return case
    set_stale_abort(rng, case, rec)
    return case


def set_stale_abort(rng: np.random.Generator, case: Case, rec) -> None:
    """``case`` replays ``rec`` with ``abort_stale_on_publish`` (a counted bound 0..2 where it has none)."""
    from simrl.policy.rules import Enforcement, code

    extra = {}
    if rec.staleness_bound < 0:
        extra = dict(staleness_bound=int(rng.integers(0, 3)), staleness_enforcement=code(Enforcement.COUNTED))
    rec = attrs.evolve(rec, abort_stale_on_publish=1, **extra)
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    case.label += f" abort_stale(bound={rec.staleness_bound})"


def draw_router(rng: np.random.Generator, case: Case, n: int, K: int) -> None:
    """Redraw ``case``'s router in place (after every other draw): least_requests, round_robin or dp_shard
    (router.shard_calls 0 where the policy's record has a fixed batch, else 1..2n), and half the time a
    router.active_cap of 1..n + 1 (group size n: small enough to hold calls in the router queue; none with
    fail_on_version_crossing or abort_stale_on_publish, which the fast path refuses with a cap)."""
    from simrl.policy.errors import PolicyError

    try:
        rec = case.cfg.policy.lower(LoweringContext(group_size=n, instances=K))
    except PolicyError:  # (a policy without a record: the fast path refuses it anyway)
        rec = None
    name = str(rng.choice(["least_requests", "round_robin", "dp_shard"]))
    shard = 0
    if name == "dp_shard":
        if rec is None or rec.batch_min_groups != rec.batch_max_groups or rng.random() < 0.3:
            shard = int(rng.integers(1, 2 * n + 1))
    cap = int(rng.integers(1, n + 2)) if rng.random() < 0.5 else 0
    if cap and (rec is None or rec.fail_on_version_crossing >= 0 or rec.abort_stale_on_publish):
        cap = 0
    case.cfg = attrs.evolve(case.cfg, router=attrs.evolve(case.cfg.router, name=name, shard_calls=shard,
                                                          active_cap=cap))
    case.label += f" router={name} shard={shard} cap={cap}"

def draw_psrl(rng: np.random.Generator, entries: int) -> list[str]:
    """psrl overrides the fast path lowers exactly (staleness 0: per-instance pulls, `simrl_fast.perinst`):
    ``entries`` groups per buffer, with or without partial rollout, greedy or status-based pulls (a
    request-count threshold > 0 or none: an idle instance pulls at once), MLQ routing and the zero-variance
    filter drawn."""
    pol = ["policy=psrl", f"policy.staleness_buffer_entries={entries}",
           f"policy.partial_rollout_enable={str(rng.random() < 0.7).lower()}",
           f"policy.enable_multi_priority_queue={str(rng.random() < 0.3).lower()}",
           f"policy.dynamic_sampling_filter={str(rng.random() < 0.3).lower()}"]
    if rng.random() < 0.4:
        pol.append("policy.sync_strategy=status_based")
        if rng.random() < 0.5:
            pol.append(f"policy.sync_threshold={int(rng.integers(1, 4))}")
    return pol


def draw_crossing(rng: np.random.Generator, ov: list[str], pol: list[str], B: int, K: int, n: int):
    """Groups failed at a publication: dressage (keep_pause) with small knobs, or the drawn policy's record
    with ``fail_on_version_crossing`` = k (0..2) when its in-flight rule pauses every instance (else dressage).
    Returns (overrides, policy label, the record or None)."""
    from simrl.policy.rules import InflightRule, code

    k = int(rng.integers(0, 3))
    if rng.random() < 0.5:
        cfg = load_config(overrides=ov)
        rec = cfg.policy.lower(LoweringContext(group_size=n, instances=K))
        paused = rec.inflight_rule in (code(InflightRule.KEEP_PAUSE), code(InflightRule.ABORT_RESUME),
                                       code(InflightRule.ABORT_RESTART), code(InflightRule.DRAIN))
        if paused and rec.batch_order != 1 and not rec.admit_count_since_publish:
            return ov, [*pol, f"fail_on_version_crossing={k}"], attrs.evolve(rec, fail_on_version_crossing=k)
    dr = ["policy=dressage", f"policy.rollout_batch_size={B}", f"policy.rollout_max_retries={k}",
          f"policy.async_max_active_groups={B + int(rng.integers(0, 4))}"]
    return [o for o in ov if not o.startswith("policy")] + dr, dr, None



def run_fast(cases: list[Case], chunk: int | None = None):
    """Run every case on the JAX engine, vmapped, one workload per case (one compile per shape)."""
    from simrl_fast import lower
    from simrl_fast.engine import run_params

    lowered = [lower(c.cfg, c.workload, c.costs) for c in cases]
    return run_params([p for _, p, _ in lowered], [wa for _, _, wa in lowered], chunk=chunk, stops=False)


def run_compared(cases: list[Case], ps, was, static, rel: float = 0.0, **kw):
    """The lowered ``cases`` (params ``ps``, workload arrays ``was``) in one fast-path batch under ``static``
    (`run_params`, one chunk; ``kw``: its other options), each compared with its SimPy report at ``rel``
    (`compare`). Returns (results, [(index, AssertionError), ...] for those that differ)."""
    from simrl_fast.engine import run_params

    res = run_params(ps, was, static=static, chunk=len(ps), **kw)
    bad = []
    for m, case in enumerate(cases):
        try:
            compare(case, res, m, rel=rel)
        except AssertionError as exc:
            bad.append((m, exc))
    return res, bad


def dispatch_times(report) -> dict[int, float]:
    """Each group's dispatch time in a SimPy report (its calls arrive when it is dispatched), for the groups with a
    recorded call."""
    out: dict[int, float] = {}
    for c in report.calls:
        out[c.gid] = min(out.get(c.gid, math.inf), c.arrival)
    return out


def compare(case: Case, res, m: int, rel: float = 0.0) -> dict:
    """Assert the JAX run ``m`` matches the SimPy report of ``case``; return the worst errors.

    ``rel=0`` (the default): times equal, not close (both engines compute them with the same
    expressions, docs/fastpath.md "Results and tolerances")."""
    rep = case.report
    wl = case.workload
    n = int(wl.group_traj_start[1] - wl.group_traj_start[0])
    where = f"[{case.label}]"
    # zero_variance_stop_groups: SimPy stopped with the record's error, and the fast path stopped too
    stopped = getattr(case, "stopped", None)
    assert bool(res.zero_stop[m]) == (stopped is not None), f"{where} zero-variance stop: fast {bool(res.zero_stop[m])}" \
                                                           f" vs simpy {stopped!r}"
    if stopped is not None:
        return {"time": 0.0, "call": 0.0}
    # The observable record first (per step: times, version, groups, staleness histogram,
    # trained tokens, trainer busy time), then what it does not hold (batch order, calls).
    bad = from_fast(res, m).mismatches(from_report(rep), rel)
    assert not bad, f"{where} observables differ: {bad[:5]}"
    worst = {"time": 0.0, "call": 0.0}

    def close(x, y, what):
        err = abs(x - y) / max(abs(y), 1e-12)
        ok = x == y if rel == 0 else (err <= rel or abs(x - y) < 1e-12)
        assert ok, f"{where} {what}: fast {x!r} vs simpy {y!r}"
        return err

    for j, s in enumerate(rep.steps):
        for name, ref in (("wait_start", s.wait_start), ("batch_ready", s.batch_ready), ("train_start", s.train_start),
                          ("train_end", s.train_end), ("publish_end", s.publish_end)):
            worst["time"] = max(worst["time"], close(float(getattr(res, name)[m, j]), ref, f"step {j + 1} {name}"))
        assert float(res.offload_s[m, j]) == s.offload_s, f"{where} step {j + 1} offload_s"
        gids = tuple(int(g) for g in res.gids[m, j] if g >= 0)
        assert gids == s.gids, f"{where} step {j + 1} gids {gids} != {s.gids}"
        stale = tuple(int(x) for x in res.stale[m, j, : len(gids)])
        assert stale == s.staleness, f"{where} step {j + 1} staleness {stale} != {s.staleness}"
        assert int(res.completion_tokens[m, j]) == s.trained_completion_tokens, f"{where} step {j + 1} tokens"
    end = rep.steps[-1].publish_end if rep.steps else math.inf
    seen = set()
    for c in rep.calls:
        if c.finish is None or c.finish >= end:
            continue
        # its sample within its workload group (a re-dispatched group's prompt is not gid % G)
        wg = int(np.searchsorted(wl.group_traj_start, c.tid, side="right")) - 1
        rid = c.gid * n + (c.tid - int(wl.group_traj_start[wg]))
        seen.add(rid)
        worst["call"] = max(worst["call"], close(float(res.call_finish[m, rid]), c.finish, f"call {rid} finish"))
        assert int(res.call_inst[m, rid]) == c.instance, f"{where} call {rid} instance"
    fast_done = {int(r) for r in np.nonzero(res.call_finish[m] < end)[0]}
    assert fast_done == seen, f"{where} finished calls differ: {sorted(fast_done ^ seen)[:10]}"
    # on_demand KV: the same preemptions on every instance (0 under reserve), up to the final publication
    pre = case.preemptions
    assert sum(pre) <= rep.totals["preemptions"] == sum(int(i["preemptions"]) for i in rep.instances)
    assert res.preemptions[m, : len(pre)].tolist() == pre, f"{where} preemptions {res.preemptions[m]} != {pre}"
    return worst
