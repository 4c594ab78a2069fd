"""Lowering: (SimConfig, Workload, cost models) -> (Static, Params, WorkloadArrays), numpy only.

This module owns the fast path's declared feature set (`FEATURES`): every configuration is
checked against it and anything outside raises `FastPathUnsupported` naming the feature, so
the JAX engine never approximates. It imports no jax, so the sweep driver can check and reject
configurations (or route them to SimPy) without loading the engine.

`Static` holds what fixes array shapes (hashable; one compile per distinct value), `Params`
holds one configuration's numbers (stacked along a leading axis by `stack_params`), and
`WorkloadArrays` holds the workload's per-(group, sample) lengths, shared by a whole batch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from simrl.cost import formulas as F
from simrl.cost.analytical import AnalyticalTraining, FixedTraining
from simrl.cost.linear import LinearForm
from simrl.cost.roofline import RooflineRollout
from simrl.engine.router import dp_shard_calls
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.rules import Enforcement, InflightRule, SyncScope, code

#: the declared feature set; anything else is rejected by `check_supported`
FEATURES = {
    "workload": "single-call trajectories, equal group sizes, no tool latency",
    "deployment.rollout.kv_policy": "reserve, on_demand (preemption of the newest request, recomputed on re-admission)",
    "deployment.rollout.max_num_batched_tokens": "any: 0 (unchunked prefill) or a per-iteration token budget "
                                                 "(chunked prefill in admission order, decoding first)",
    "deployment.rollout.prefix_caching": "true or false: group-shared prompt prefixes (one reference-counted "
                                         "entry per instance and group, released into an LRU cache, evicted "
                                         "LRU by admissions and by on_demand's plan; cleared at publications "
                                         "as the sync rule says; salted calls never share)",
    "deployment.placement": "disaggregated, or colocated (every instance paused at its next iteration boundary "
                            "when a batch is taken, under the sync rule, keep_pause for drain; offload_before_s, the "
                            "step, offload_after_s, then version + 1 and resume: Costs' phase times, taken once)",
    "router.name": "least_requests, round_robin, dp_shard (router.shard_calls, or derived from the record's "
                   "fixed batch)",
    "router.active_cap": "any (0: no cap; a cap holds the router queue's head until an instance has fewer "
                         "assigned calls; not with fail_on_version_crossing)",
    "cost.rollout": "a model with a linear form a + b*batch + c*kv + p*prefill (linear_coefficients(): "
                    "cost.rollout=linear, psrl artifacts) fitted for the run's model, GPU, tp and pp; or the "
                    "roofline (given or fitted knobs) built for the run's model, GPU and tp/pp/dp/ep, for a dense "
                    "model without sliding-window layers, without enforce_eager",
    "cost.training": "a model with step time a + per_token*tokens and no memory model (constant, fixed, "
                     "fitted fixed / linear artifacts); or cost.training=analytical (knobs) built for the run's "
                     "model and deployment.training layout, whose memory fits the largest possible batch "
                     "(ZeRO-3 collectives per micro-batch and HSDP included; dp_balance=batch only with one DP "
                     "rank or no mini-batches)",
    "cost.strict": "false when a rollout or training model has a fitted validity domain (queries are not checked)",
    "cost.weight_sync": "any model; publish_time(instances) is taken once and must be > 0",
    "policy": "any policy whose lower() is fast_path_exact=1 within these PolicyParams values",
    "policy.inflight_rule": "continue, keep_pause, abort_resume, abort_restart, drain, swap_in_place (as continue: "
                            "the kernel's outputs never read a call's newest version) (global sync)",
    "policy.staleness_enforcement": "any (the engine acts on drop_at_completion; the others are the record's own rules)",
    "policy.drop_zero_variance": "0 or 1 (no retry)",
    "policy.buffer_capacity_groups": "-1 (unbounded), or a capacity admission keeps from overflowing",
    "policy.batch": "batch_order 0 (FIFO: batch_min_groups..batch_max_groups, every buffered group up to the "
                    "max once the min is buffered), 1 (dispatch window, min == max) when no group can be "
                    "dropped, or 2 (oldest dispatch first: the buffered groups of lowest gid, up to the max once "
                    "the min is buffered); no batch_shrink_by_drops",
    "policy.admission": "any admit_* field (admit_return_evicted: a group evicted from the buffer returns its "
                        "slot); admit_max_batches_ahead -1 or >= 1 (never "
                        "binds: one batch at a time); admit_queue_blocks_groups >= batch_min_groups",
    "policy.collapse_zero_variance_groups": "any; a run in which that many zero-variance groups finish is "
                                            "refused after it ran (the failsafe may have fired)",
    "policy.route_needs_dispatch_version": "any under global sync (a no-op there); 1 under per-instance sync",
    "policy.sync_per_instance": "0, or 1 (PSRL's per-instance pulls: the trainer pushes, each instance pulls "
                                "publish_time(1) alone) with the sync shape's admission (budget (version + 1) x "
                                "batch_min_groups counting accepted + running, nothing per batch taken: no group "
                                "runs at a push), route_needs_dispatch_version=1 and no fail_on_version_crossing",
    "policy.fail_on_version_crossing": "any k under a pausing rule (keep_pause, abort_resume, abort_restart, drain) "
                                       "or colocated placement: at each publication the running groups with a call "
                                       "admitted and not finished are aborted, and re-dispatched (retries first, "
                                       "their prompt again) while their retries < k; with chunked prefill and "
                                       "the prefix cache; not with the collapse failsafe when k > 0",
    "policy.abort_stale_on_publish": "0, or 1 under a pausing rule (keep_pause, abort_resume, abort_restart, "
                                      "drain) or colocated placement: at each publication the running groups "
                                      "staler than the bound (from the dispatch version while no call was "
                                      "admitted) are aborted and dropped (simrl_fast.crossing)",
    "policy.zero_variance_holds_slot": "0 or 1 (zero-variance drops hold their place in fixed-size FIFO batches; "
                                        "after a batch of placeholders alone the trainer waits for the next "
                                        "group completion); not with per-instance sync",
    "policy.admit_episode_cap": "any (unfinished trajectories of running groups < the cap, read only where SimPy "
                                 "wakes the dispatcher: a group completion, a batch taken, a publication; it bounds "
                                 "admission alone too: at most the cap's groups run); not with per-instance sync",
    "policy.admit_window_episodes": "any, with any admit_window_s and admit_window_refund (episodes dispatched per "
                                     "window, read last and only where SimPy wakes the dispatcher, which also "
                                     "wakes by itself when the window alone holds admission and runs out); not "
                                     "with per-instance sync",
    "policy.zero_variance_std_max": "any std >= 0 (a group has zero reward variance at reward std <= it)",
    "policy.zero_variance_stop_groups": "any (the run stops after that many zero-variance groups in a row; the fast "
                                        "path stops the configuration there and raises the same diagnosis)",
    "policy.max_dispatch_age": "any: a group whose version - dispatch version exceeds it is dropped when it "
                               "finishes and evicted from the buffer at each publication",
    "policy.admit_max_ship_lag": "any (a ship barrier: batches taken - version + buffered // batch <= the lag) with "
                                 "batch_min_groups == batch_max_groups, zero_variance_holds_slot too",
    "run.time_horizon_s": "inf",
    "workload.knobs.length_growth_per_step / length_drift_knots": "unset (no length drift)",
    "deployment.training.reward_s_per_trajectory": "0",
    "deployment.training.test_freq / validation_s": "no periodic validation",
    "deployment.training.trigger_parameter_sync_step": "1 (no streaming trainer)",
}

# The kernel's in-flight codes: positions in `InflightRule` (written once, in the enum).
RULE_CONTINUE, RULE_KEEP_PAUSE, RULE_ABORT_RESUME, RULE_ABORT_RESTART, RULE_DRAIN = (
    code(r) for r in (InflightRule.CONTINUE, InflightRule.KEEP_PAUSE, InflightRule.ABORT_RESUME,
                      InflightRule.ABORT_RESTART, InflightRule.DRAIN)
)
_KERNEL_RULES = (RULE_CONTINUE, RULE_KEEP_PAUSE, RULE_ABORT_RESUME, RULE_ABORT_RESTART, RULE_DRAIN)
# swap_in_place (ART in_flight_lora) publishes as continue does (a transfer without a pause, then
# version + 1); it only also moves running requests to the new version, which changes their newest
# version (a call's version_end) but not a group's oldest, the only version the kernel's outputs
# depend on (staleness), and clears a prefix cache the kernel only accepts as a no-op.
RULE_SWAP_IN_PLACE = code(InflightRule.SWAP_IN_PLACE)
_KERNEL_RULE = {**{r: r for r in _KERNEL_RULES}, RULE_SWAP_IN_PLACE: RULE_CONTINUE}
# The engine acts only on drop_at_completion (and evict_stale_on_publish); consumption and policy
# enforcements are the policy's own rules, which an exact record carries in its other fields.
_KERNEL_ENFORCEMENTS = tuple(code(e) for e in Enforcement)
ROUTERS = {"least_requests": 0, "round_robin": 1, "dp_shard": 2}
#: `Params.pc_clear` under per-instance sync: `Weights.pull` clears the pulling instance's cache
PC_CLEAR_PULL = 3
KV_POLICIES = {"reserve": 0, "on_demand": 1}


class FastPathUnsupported(ValueError):
    """A configuration outside `FEATURES`; the message names the feature."""


class FastPathNoProgress(RuntimeError):
    """A configuration that can never finish: it dispatches groups forever without training
    (e.g. every group is dropped). A diagnosis, where a loop would otherwise never end."""


def _feature(feature: str, detail: str = "") -> str:
    msg = f"simrl_fast does not support {feature}"
    if detail:
        msg += f" ({detail})"
    return msg + "; use the SimPy engine"


def _reject(feature: str, detail: str = "") -> None:
    raise FastPathUnsupported(_feature(feature, detail))


class Static(NamedTuple):
    """Shape-setting values (hashable): one compiled program per distinct Static."""

    instances: int  # K: instance rows (configs with fewer instances disable the rest)
    slots: int  # S: running-sequence slots per instance (max max_num_seqs)
    group_size: int  # n: trajectories (= calls) per group
    groups: int  # G: workload groups (the prompt dataset)
    max_groups: int  # group slots: groups one run may dispatch (overflow is detected)
    steps: int  # training steps (max over the batch)
    max_batch: int  # B_max: groups per training batch (max over the batch)
    chunk: int  # scan length per outer while-loop turn
    max_chunks: int  # outer turns before giving up (a safety bound; deadlocks stop earlier)
    formulas: int = 3  # cost formulas the batch uses (bit 1: roofline rollout, bit 2: analytical training)
    on_demand: bool = True  # some configuration of the batch has kv_policy=on_demand (else its code is not traced)
    chunked_prefill: bool = True  # some configuration has max_num_batched_tokens > 0 (else its code is not traced)
    prefix: bool = False  # some configuration of the batch shares prompt prefixes (Params.pc; else not traced)
    crossing: bool = False  # some configuration fails groups at a publication (Params.cross > 0 or Params.stale_abort
    #                         > 0; else not traced)
    perinst: bool = False  # some configuration syncs weights per instance (Params.pull_s > 0; else not traced)
    cross_window: int = 1  # waiting-queue entries a publication's failure looks at per instance (>= any wq_len then)
    dispatch_age: bool = False  # some configuration drops by dispatch age (Params.age > 0; else not traced)
    oldest_first: bool = False  # some configuration forms oldest-dispatch-first batches (Params.batch_oldest)
    episode_cap: bool = False  # some configuration caps unfinished trajectories (Params.ep_cap > 0; else not traced)
    window: bool = False  # some configuration has an admission window (Params.win_n > 0; else not traced)

    @property
    def max_calls(self) -> int:
        return self.max_groups * self.group_size


class Params(NamedTuple):
    """One configuration's numbers (scalars; `stack_params` adds the batch axis)."""

    n_inst: np.ndarray  # int32: active instances (<= Static.instances)
    max_seqs: np.ndarray  # int32: max_num_seqs
    kv_cap: np.ndarray  # int64: KV capacity per instance, tokens
    od: np.ndarray  # int32: 1 = kv_policy on_demand (tokens take KV as generated; preemption), 0 = reserve
    token_budget: np.ndarray  # int64: max_num_batched_tokens (tokens one iteration decodes + prefills; 0: unlimited)
    ro_kind: np.ndarray  # int32: rollout formula (simrl_fast.costs: 0 the linear form a..p, 1 roofline)
    ro: np.ndarray  # [NR] float64: simrl.cost.formulas.RooflineParams (zeros under the linear form)
    tr_kind: np.ndarray  # int32: training formula (0 train_a + train_per_token * tokens, 1 analytical)
    tr: np.ndarray  # [NT] float64: simrl.cost.formulas.AnalyticalParams (zeros under the linear form)
    a: np.ndarray  # float64: seconds per iteration
    b: np.ndarray  # float64: seconds per decoding sequence
    c: np.ndarray  # float64: seconds per decoding KV token
    p: np.ndarray  # float64: seconds per prefilled token
    train_a: np.ndarray  # float64: training step seconds (constant part)
    train_per_token: np.ndarray  # float64: training seconds per trained token
    sync_s: np.ndarray  # float64: weight publication seconds
    steps: np.ndarray  # int32: training steps
    router: np.ndarray  # int32: 0 least_requests, 1 round_robin, 2 dp_shard
    conc: np.ndarray  # float64: admit_concurrency_groups
    budget_base: np.ndarray  # float64: admit_budget_base_groups
    budget_per_version: np.ndarray  # float64: admit_budget_per_version_groups
    count_dispatched: np.ndarray  # int32: admit_count_dispatched
    block_training: np.ndarray  # int32: admit_block_while_training
    rule: np.ndarray  # int32: inflight_rule code
    stale_bound: np.ndarray  # int32: staleness_bound (-1 none)
    drop_stale: np.ndarray  # int32: 1 = drop a group staler than the bound at completion
    evict_stale: np.ndarray  # int32: 1 = evict buffered groups staler than the bound at publication
    drop_zero_var: np.ndarray  # int32: 1 = drop groups whose rewards are all equal
    batch: np.ndarray  # int32: groups per training batch
    # record extensions (simrl.policy.params)
    budget_per_batch: np.ndarray  # float64: admit_budget_per_batch_groups
    count_since_pub: np.ndarray  # int32: admit_count_since_publish
    buf_cap: np.ndarray  # float64: admit_buffer_cap_groups (inf: none)
    batch_window: np.ndarray  # int32: 1 = batch_order 1 (dispatch window), 0 = FIFO
    batch_max: np.ndarray  # int32: batch_max_groups (a FIFO batch takes min(buffered, batch_max) once >= batch)
    queue_block: np.ndarray  # float64: admit_queue_blocks_groups (inf: none)
    collapse: np.ndarray  # int32: collapse_zero_variance_groups (0: none; checked after the run)
    # colocated placement (Trainer.run's colocated branch, Weights.colocated_publish)
    colocated: np.ndarray  # int32: 1 = rollout paused for every step (the policy's or the deployment's placement)
    off_before: np.ndarray  # float64: Costs.offload_before_s() (pause acknowledged -> training starts)
    off_after: np.ndarray  # float64: Costs.offload_after_s(instances) (training ends -> version + 1 and resume)
    offload_s: np.ndarray  # float64: Costs.offload_s (StepRecord.offload_s of a colocated step)
    # prefix cache (Instance.try_admit / release / clear_cache; simrl_fast.prefix)
    pc: np.ndarray  # int32: 1 = prefix_caching on and the workload has group-shared prompt tokens not salted
    pc_clear: np.ndarray  # int32: when Weights clears the caches (sync.clear_prefix_cache): 0 never (continue),
    #                       1 at the resume of a pause (pause_all), 2 at the publication (swap_in_place, drain)
    # record extension fail_on_version_crossing (simrl_fast.trainer.fail_crossed)
    cross: np.ndarray  # int32: fail_on_version_crossing + 1 (0: never; k + 1: groups failed at a publication are
    #                    re-dispatched while their retries < k; a Params of zeros fails nothing)
    # record extension admit_max_ship_lag (step.can_dispatch)
    ship_lag: np.ndarray  # int32: admit_max_ship_lag (-1: no ship barrier)
    # per-instance weight sync (Weights._push / pull; simrl_fast.perinst)
    pull_s: np.ndarray  # float64: publish_time(1), one instance's pull (0: global sync)
    # record extensions of verl V1 / TRL async (simrl_fast.trainer: age_cut, trainer_react; step.can_dispatch)
    age: np.ndarray  # int32: max_dispatch_age + 1 (0: none, so a Params of zeros drops nothing; see age_cut)
    batch_oldest: np.ndarray  # int32: 1 = batch_order 2 (the buffered groups of lowest gid)
    return_evicted: np.ndarray  # int32: admit_return_evicted (count = accepted + running - groups evicted)
    # the router (simrl_fast.router): Router.eligible's cap and dp_shard's slice
    cap: np.ndarray  # int32: router.active_cap (0: no cap)
    shard: np.ndarray  # int32: dp_shard's calls per contiguous slice (simrl.engine.router.dp_shard_calls; 0: other routers)
    # record extension abort_stale_on_publish (simrl_fast.crossing.fail_crossed)
    stale_abort: np.ndarray  # int32: 1 = running groups staler than stale_bound are aborted at each publication
    # record extension zero_variance_holds_slot (instance: completion; trainer: batch_ready, trainer_react)
    zslot: np.ndarray  # int32: 1 = a zero-variance drop keeps its place in the FIFO batch order (a placeholder)
    # record extension admit_episode_cap (step.can_dispatch, chain_due; SimState.wake)
    ep_cap: np.ndarray  # int32: admission holds while unfinished trajectories >= it, read at wake-ups (-1: none)
    # record extension admit_window_episodes (step.window_open, sleep_timer; instance: refunds; SimState.win_*)
    win_n: np.ndarray  # int32: admit_window_episodes, episodes dispatched per window (-1: no window)
    win_s: np.ndarray  # float64: admit_window_s, the window's length
    win_refund: np.ndarray  # int32: admit_window_refund (1: a group's completion takes its episodes back)
    # record extensions zero_variance_std_max and zero_variance_stop_groups (instance: completion; SimState.zrow)
    zv_tol: np.ndarray  # float64: a group has zero reward variance when its reward std <= it (0: std == 0)
    zv_stop: np.ndarray  # int32: the run stops when this many groups in a row reaching the filter had zero variance


class WorkloadArrays(NamedTuple):
    """The workload's lengths by (group, sample); shared by every configuration of a batch."""

    prompt: np.ndarray  # [G, n] int32: call_prompt_tokens
    completion: np.ndarray  # [G, n] int32: call_completion_tokens (forced length L)
    zero_var: np.ndarray  # [G] bool: GroupRecord.reward_std() == 0
    seq_tokens: np.ndarray  # [G] int64: sum of prompt + completion (trained sequence lengths)
    completion_sum: np.ndarray  # [G] int64: group completion tokens (trained tokens)
    shared: np.ndarray  # [G, n] int32: Request.shared_tokens of each call (group_shared_prompt_tokens; 0 if salted)
    gshared: np.ndarray  # [G] int32: group_shared_prompt_tokens (the tokens of a group's cache entry)
    reward_std: np.ndarray  # [G] float64: GroupRecord.reward_std() (zero variance: <= Params.zv_tol)


def workload_group(w, g, G):
    """The workload group (prompt) of dispatched group ``g``: ``g % G`` (the n-th fresh dispatch takes prompt
    n % G), or, when groups are re-dispatched (``fail_on_version_crossing`` > 0, GroupBook.retry), the
    group map the step attaches to ``w`` (`with_group_map`). Numpy or jax arrays alike."""
    gmap = getattr(w, "gmap", None)
    return g % G if gmap is None else gmap[g]


_MAPPED: dict[type, type] = {}


def with_group_map(w, gmap):
    """``w`` with the field ``gmap`` ([Gm]: each dispatched group's workload group) that `workload_group` reads."""
    from collections import namedtuple

    base = type(w)
    if base not in _MAPPED:
        _MAPPED[base] = namedtuple(base.__name__ + "Mapped", [*base._fields, "gmap"])
    return _MAPPED[base](*w, gmap)


def lower_workload(workload) -> WorkloadArrays:
    w = workload
    sizes = np.diff(w.group_traj_start)
    if np.any(np.diff(w.traj_call_start) != 1):
        _reject("multi-call trajectories", f"workload {w.name!r}")
    if np.any(sizes != sizes[0]):
        _reject("groups of different sizes", f"workload {w.name!r} has sizes {sorted(set(sizes.tolist()))}")
    if np.any(w.call_tool_latency_s != 0):
        _reject("tool latency after a call (call_tool_latency_s > 0)", f"workload {w.name!r}")
    G, n = w.n_groups, int(sizes[0])
    prompt = w.call_prompt_tokens.reshape(G, n)
    comp = w.call_completion_tokens.reshape(G, n)
    reward_std = np.array([_reward_std(w, g) for g in range(G)], dtype=np.float64)
    zero_var = reward_std == 0.0
    gshared = np.asarray(w.group_shared_prompt_tokens, dtype=np.int64)
    salted = np.asarray(w.call_cache_salted, dtype=bool).reshape(G, n)
    shared = np.where(salted, 0, gshared[:, None])  # simrl.engine.groups: shared_tokens=0 when salted
    return WorkloadArrays(
        prompt=prompt.astype(np.int32), completion=comp.astype(np.int32), zero_var=zero_var,
        seq_tokens=(prompt + comp).sum(axis=1).astype(np.int64), completion_sum=comp.sum(axis=1).astype(np.int64),
        shared=shared.astype(np.int32), gshared=gshared.astype(np.int32), reward_std=reward_std,
    )


def _reward_std(w, g: int) -> float:
    # The same arithmetic as GroupRecord.reward_std, so the zero test agrees bit for bit.
    r = [float(w.traj_reward[t]) for t in w.group_trajs(g)]
    m = sum(r) / len(r)
    return (sum((x - m) ** 2 for x in r) / len(r)) ** 0.5


def lower_policy(policy, ctx: LoweringContext) -> PolicyParams:
    """The policy's PolicyParams, checked against the feature set (the first reason is raised). A policy that
    finds the run cannot go on as configured (`PolicyError` from its ``check_group_size`` at the workload's group
    size, which SimPy's every dispatch calls, or from its ``lower``: the error the engine stops with, e.g.
    nemo_rl's / trl's group size other than ``num_generations_per_prompt`` / ``num_generations``) is refused by
    name with that message, so a caller falls back to SimPy as for any refusal (`srl-sweep` then records the
    engine's failure)."""
    from simrl.policy.errors import PolicyError

    try:
        policy.check_group_size(ctx.group_size)
        pp = policy.lower(ctx)
    except PolicyError as exc:
        raise FastPathUnsupported(_feature(f"policy {policy.kind!r} as configured",
                                           f"the engine stops the run: {exc}")) from exc
    reasons = policy_rejections(pp, f"policy {policy.kind!r}", getattr(policy, "fast_path_gaps", ()))
    if reasons:
        raise FastPathUnsupported(reasons[0])
    return pp


def policy_rejections(pp: PolicyParams, name: str, gaps: tuple[str, ...] = ()) -> list[str]:
    """Every reason the fast path refuses the record ``pp`` (of ``name``), in the order checked. ``gaps``: what
    the policy says its record cannot hold (its ``fast_path_gaps``), named in the fast_path_exact=0 reason."""
    out: list[str] = []
    if not pp.fast_path_exact:
        detail = "its lower() has fast_path_exact=0: its rules do not fit PolicyParams"
        if gaps:
            detail += ": " + "; ".join(gaps)
        out.append(_feature(f"{name}", detail))
    if pp.sync_per_instance:
        out += perinst_rejections(pp, name)
    rules = list(InflightRule)
    if pp.inflight_rule not in _KERNEL_RULE:
        rule = rules[pp.inflight_rule].value if 0 <= pp.inflight_rule < len(rules) else pp.inflight_rule
        out.append(_feature(f"inflight_rule={rule}", name))
    if pp.staleness_enforcement not in _KERNEL_ENFORCEMENTS:
        inv = {code(e): e.value for e in Enforcement}
        enf = inv.get(pp.staleness_enforcement, pp.staleness_enforcement)
        out.append(_feature(f"policy.staleness_enforcement={enf}", name))
    if pp.drop_zero_variance not in (0, 1):
        out.append(_feature("re-dispatch of zero-variance groups (drop_zero_variance=2)", name))
    if pp.buffer_capacity_groups != -1 and not _overflow_unreachable(pp):
        out.append(_feature("a bounded buffer (buffer_capacity_groups) that admission does not keep from "
                            "overflowing", name))
    if pp.batch_min_groups != pp.batch_max_groups and pp.batch_order == 1:
        out.append(_feature("variable batch sizes (batch_min_groups != batch_max_groups) with dispatch-window "
                            "batches", name))
    if pp.admit_max_batches_ahead == 0:
        # it closes when a batch is taken: SimPy's order of trainer and dispatcher in one instant matters
        out.append(_feature("admission closed while a batch is trained or published (admit_max_batches_ahead=0)",
                            name))
    if pp.admit_queue_blocks_groups < pp.batch_min_groups:
        # with Q >= min the trainer never waits while buffered > Q, so its order against the dispatcher
        # in an instant cannot matter
        out.append(_feature("an output queue smaller than the batch minimum (admit_queue_blocks_groups < "
                            "batch_min_groups)", name))
    if pp.fail_on_version_crossing > 0 and pp.collapse_zero_variance_groups:
        # the failsafe is checked after the run from finished gids, whose prompt a re-dispatch changes
        out.append(_feature("the collapse failsafe with re-dispatched groups (fail_on_version_crossing > 0 and "
                            "collapse_zero_variance_groups)", name))
    if pp.batch_shrink_by_drops:
        out.append(_feature("batches shrunk by drops (batch_shrink_by_drops=1)", name))
    if pp.batch_order == 1 and _can_drop(pp):
        # without drops batch k is exactly the groups dispatched k-th (k*B .. k*B+B-1)
        out.append(_feature("dispatch-window batches (batch_order=1) with a rule that drops groups", name))
    if (math.isinf(pp.admit_concurrency_groups) and math.isinf(pp.admit_budget_base_groups)
            and pp.admit_episode_cap < 0):
        out.append(_feature("unbounded admission (no concurrency cap, no budget and no episode cap)", name))
    if pp.admit_block_while_training and not (
        pp.admit_budget_base_groups == pp.admit_budget_per_version_groups == pp.batch_min_groups
        and not pp.admit_count_dispatched
    ):
        # Only the sync shape (closed whenever a batch can form) is order-independent at equal times.
        out.append(_feature("admit_block_while_training with a budget other than (version + 1) * batch", name))
    if pp.admit_max_ship_lag >= 0 and pp.batch_min_groups != pp.batch_max_groups:
        # a batch of more than batch_min_groups lowers the barrier's sum: the trainer's order against the
        # dispatcher in an instant would matter
        out.append(_feature("a ship barrier (admit_max_ship_lag) with variable batch sizes (batch_min_groups != "
                            "batch_max_groups)", name))
    if pp.evict_stale_on_publish and pp.staleness_bound < 0:
        out.append(_feature("eviction at publication without a staleness bound", name))
    return out


def sync_shape(pp: PolicyParams) -> bool:
    """Admission closed whenever a batch can form: a budget of (version + 1) x batch_min_groups counting
    accepted + running, nothing added per batch taken. Then batch v forms once (v + 1) x min groups were
    accepted, so no group runs from then until the publication of v + 1 (running + accepted never exceeds
    the budget), and every batch takes exactly min groups."""
    return bool(pp.admit_budget_base_groups == pp.admit_budget_per_version_groups == pp.batch_min_groups
                and not pp.admit_count_dispatched and not pp.admit_budget_per_batch_groups)


def perinst_rejections(pp: PolicyParams, name: str) -> list[str]:
    """Why the kernel refuses a per-instance sync record (`simrl_fast.perinst`): it models the pulls of
    instances that are all idle, current and with empty queues at every push (the sync shape's admission
    guarantees it), each pulling at once; routed calls wait for a current instance."""
    what = "per-instance weight sync (policy.sync_scope=per_instance)"
    out = []
    if not sync_shape(pp):
        out.append(_feature(f"{what} with admission other than the sync shape (admit_budget_base_groups = "
                            "admit_budget_per_version_groups = batch_min_groups, counting accepted + running, "
                            "nothing per batch taken)", f"{name}: requests would be in flight at a push, and the "
                            "kernel has no pulls at iteration boundaries nor re-routing of aborted calls"))
    if not pp.route_needs_dispatch_version:
        out.append(_feature(f"{what} with route_needs_dispatch_version=0",
                            f"{name}: calls would be routed to instances that are pulling"))
    if pp.fail_on_version_crossing >= 0:
        out.append(_feature(f"{what} with fail_on_version_crossing", name))
    if pp.abort_stale_on_publish:
        out.append(_feature(f"{what} with abort_stale_on_publish", name))
    if pp.zero_variance_holds_slot:
        out.append(_feature(f"{what} with zero_variance_holds_slot", name))
    if pp.admit_episode_cap >= 0:
        out.append(_feature(f"{what} with admit_episode_cap", name))
    if pp.admit_window_episodes >= 1:
        out.append(_feature(f"{what} with an admission window (admit_window_episodes)", name))
    # not drawn together with per-instance sync by the differential generators: refused until they are
    if pp.admit_max_ship_lag >= 0:
        out.append(_feature(f"{what} with a ship barrier (admit_max_ship_lag)", name))
    if pp.admit_return_evicted or pp.max_dispatch_age >= 0 or pp.batch_order == 2:
        out.append(_feature(f"{what} with admit_return_evicted, max_dispatch_age or batch_order=2", name))
    return out


def _can_drop(pp: PolicyParams) -> bool:
    """Whether the record may drop a finished or buffered group."""
    return bool(pp.drop_zero_variance or pp.evict_stale_on_publish or pp.buffer_capacity_groups != -1
                or pp.max_dispatch_age >= 0 or pp.fail_on_version_crossing >= 0
                or (pp.staleness_enforcement == code(Enforcement.DROP_AT_COMPLETION) and pp.staleness_bound >= 0))


def _overflow_unreachable(pp: PolicyParams) -> bool:
    """The buffer can never exceed ``buffer_capacity_groups``: admission counts every dispatched group
    (since the last publication, starting from those then running or buffered) against a constant
    budget no larger than the capacity, and running + buffered never exceeds that count."""
    return bool(pp.admit_count_dispatched and not pp.admit_budget_per_version_groups
                and not pp.admit_budget_per_batch_groups and pp.admit_budget_base_groups <= pp.buffer_capacity_groups)


def check_supported(cfg, workload, costs) -> None:
    """Raise `FastPathUnsupported` for the first feature outside `FEATURES`."""
    r = cfg.deployment.rollout
    if r.kv_policy not in KV_POLICIES:
        _reject(f"deployment.rollout.kv_policy={r.kv_policy}")
    if _colocated(cfg):
        _colocated_checks(cfg, costs)
    if cfg.router.name not in ROUTERS:
        _reject(f"router.name={cfg.router.name}")
    if not math.isinf(cfg.run.time_horizon_s):
        _reject(f"run.time_horizon_s={cfg.run.time_horizon_s}")
    for knob in ("length_growth_per_step", "length_drift_knots"):  # workloads.drift
        if workload.knobs.get(knob):
            _reject(f"workload.knobs.{knob} (response length drifting over steps)")
    t = cfg.deployment.training
    if t.reward_s_per_trajectory:
        _reject(f"deployment.training.reward_s_per_trajectory={t.reward_s_per_trajectory} (reward time in the step)")
    if t.test_freq and t.validation_s:
        _reject(f"deployment.training.test_freq={t.test_freq} with validation_s={t.validation_s} (periodic validation)")
    if t.trigger_parameter_sync_step > 1:
        _reject(f"deployment.training.trigger_parameter_sync_step={t.trigger_parameter_sync_step} (streaming trainer)")
    for knob in ("param_offload", "grad_offload", "optimizer_offload", "optimizer_cpu_offload"):
        if cfg.cost.training_knobs.get(knob):
            _reject(f"cost.training_knobs.{knob}=true (trainer offload phases)")
    _rollout_form(cfg, costs)
    _training_terms(cfg, costs)


def _colocated(cfg) -> bool:
    """The run's placement as the SimPy engine takes it (simrl.engine.core: the policy's declared
    placement, else ``deployment.placement``)."""
    from simrl.policy.rules import Placement

    return (cfg.policy.sync_spec.placement or Placement(cfg.deployment.placement)) is Placement.COLOCATED


def _colocated_checks(cfg, costs) -> None:
    """What colocated placement adds to the feature set: the SimPy trainer's colocated branch only.
    A streaming trainer, trainer offload phases, reward time and periodic validation are rejected
    for every placement (`check_supported`), per-instance sync by `policy_rejections`."""
    if cfg.policy.sync_spec.scope is not SyncScope.GLOBAL:
        _reject("deployment.placement=colocated with per-instance weight sync (policy.sync_scope=per_instance)")
    if tuple(cfg.policy.train_chunks()):
        _reject("deployment.placement=colocated with a policy that trains in chunks of its own")
    for what, s in (("offload_before_s", costs.offload_before_s()),
                    ("offload_after_s", costs.offload_after_s(cfg.deployment.rollout.instances))):
        if not (math.isfinite(s) and s >= 0):
            _reject(f"a colocated {what} of {s!r}", "expected a finite time >= 0")


def _colocated_rule(rule: int) -> int:
    """`Weights.colocated_rule` in kernel codes: the pause before a colocated step keeps running
    requests (keep_pause for drain, continue and swap_in_place, whose pause_all aborts nothing) or
    aborts them (abort_resume, abort_restart)."""
    return rule if rule in (RULE_ABORT_RESUME, RULE_ABORT_RESTART) else RULE_KEEP_PAUSE


def prefix_fields(cfg, wa: WorkloadArrays, pp: PolicyParams, colocated: bool) -> dict:
    """`Params.pc` and `Params.pc_clear`: whether the run shares prompt prefixes (prefix caching on and some
    call carries shared tokens: else the cache never holds an entry, multi-turn contexts being rejected), and
    when `simrl.engine.weights.Weights` clears the caches (``clear_prefix_cache``): `pause_all` (every pausing
    rule and every colocated step: at the resume, after the aborted requests were released), `_swap_in_place`
    and drain's `pause_all` (at the publication: the instances are idle or untouched since), never under
    ``continue``; under per-instance sync at each instance's pull (`PC_CLEAR_PULL`)."""
    pc = bool(cfg.deployment.rollout.prefix_caching) and bool(np.any(wa.shared > 0))
    rule = pp.inflight_rule
    if pp.sync_per_instance:  # Weights.pull clears the pulling instance's cache (simrl_fast.perinst)
        clear = PC_CLEAR_PULL if pc and cfg.policy.sync_spec.clear_prefix_cache else 0
    elif not (pc and cfg.policy.sync_spec.clear_prefix_cache) or (rule == RULE_CONTINUE and not colocated):
        clear = 0
    elif colocated or rule in (RULE_KEEP_PAUSE, RULE_ABORT_RESUME, RULE_ABORT_RESTART):
        clear = 1
    else:  # swap_in_place, drain
        clear = 2
    return dict(pc=np.int32(pc), pc_clear=np.int32(clear))


class RolloutLowered(NamedTuple):
    kind: int  # simrl_fast.costs.RO_*
    form: LinearForm  # the linear form (zeros under the roofline)
    ro: np.ndarray  # [NR] RooflineParams (zeros under the linear form)


class TrainingLowered(NamedTuple):
    kind: int  # simrl_fast.costs.TR_*
    a: float
    per_token: float
    tr: np.ndarray  # [NT] AnalyticalParams (zeros under the linear form)


_ZERO_FORM = LinearForm(0.0, 0.0, 0.0, 0.0)


def _same_model(want, have) -> bool:
    from simrl.cost.architectures import model_arch

    return model_arch(want).name == model_arch(have).name


def _same_gpu(want, have) -> bool:
    from simrl.cost.hardware import gpu_spec

    return gpu_spec(want).name == gpu_spec(have).name


def _roofline_lowered(cfg, ro: RooflineRollout) -> RolloutLowered:
    """The roofline's formula record, checked against the run's layout (never ignored)."""
    r = cfg.deployment.rollout
    name = f"rollout cost model {ro.domain.model}"
    if not _same_model(ro.model, cfg.deployment.model):
        _reject(f"deployment.model={cfg.deployment.model} with a roofline built for {ro.model.name}", name)
    if not _same_gpu(r.gpu, ro.gpu):
        _reject(f"deployment.rollout.gpu={r.gpu} with a roofline built for {ro.gpu.name}", name)
    for key in ("tp", "pp", "dp", "ep"):
        if int(getattr(r, key)) != int(getattr(ro, key)):
            _reject(f"deployment.rollout.{key}={getattr(r, key)} with a roofline built for {key}={getattr(ro, key)}",
                    name)
    q = ro.array_params()
    if q.swa:
        _reject("a roofline rollout of a model with sliding-window layers",
                f"{ro.model.name}: its iteration time bends at min(context, window), no closed form between events")
    if ro.enforce_eager:
        _reject("a roofline rollout with enforce_eager=true",
                "a stage lasts max(GPU time, host launch time): the iteration time is flat, then grows with "
                "the KV, so the boundaries have no single quadratic closed form between events")
    if cfg.cost.strict:
        _reject("cost.strict=true with the roofline's validity domain", "queries are not checked against it")
    return RolloutLowered(1, _ZERO_FORM, np.asarray(q, dtype=np.float64))


def _rollout_form(cfg, costs) -> RolloutLowered:
    """The rollout model's lowered formula: a linear form, or the roofline's record."""
    ro = costs.rollout
    if isinstance(ro, RooflineRollout):
        return _roofline_lowered(cfg, ro)
    if type(ro).__name__ == "ComposedRollout":  # simrl.cost.composed (not imported: it loads the kernel DB code)
        _reject("rollout cost model composed",
                "its kernel-DB tables interpolate in log space (exp/log) and its operator roofline is a soft "
                "maximum (pow): XLA and libm differ in their last bit, so the engines would not agree exactly")
    ask = getattr(ro, "linear_coefficients", None)
    form = ask() if ask is not None else None
    if not isinstance(form, LinearForm):
        _reject(f"rollout cost model {type(ro).__name__}",
                "only models with a linear form a + b*batch + c*kv + p*prefill (linear_coefficients()) "
                "and the dense roofline")
    if getattr(ro, "kv_slope", None) is None:
        _reject(f"rollout cost model {type(ro).__name__} without kv_slope()",
                "the SimPy engine then sums its iteration times one by one, not in the closed form "
                "the fast path computes (simrl.engine.instance.boundary_time)")
    if min(form.a, form.b, form.c, form.p) < 0 or form.a + form.b <= 0:
        _reject("a linear rollout model with negative terms or a + b = 0")
    r = cfg.deployment.rollout
    ff = form.fitted_for
    run = {"model": cfg.deployment.model, "gpu": r.gpu, "tp": r.tp, "pp": r.pp}
    for key, have in run.items():
        want = ff.get(key)
        if want is None:
            continue
        if key == "model":
            same = _same_model(str(want), have)
        elif key == "gpu":
            same = _same_gpu(str(want), have)
        else:
            same = int(want) == int(have)
        if not same:
            cfg_key = "deployment.model" if key == "model" else f"deployment.rollout.{key}"
            _reject(f"{cfg_key}={have} with a rollout cost model fitted for {key}={want}",
                    "its coefficients describe another layout")
    if form.bounded_domain and cfg.cost.strict:
        _reject("cost.strict=true with a fitted rollout validity domain", "queries are not checked against it")
    return RolloutLowered(0, form, np.zeros(len(F.RooflineParams._fields)))


def _analytical_lowered(cfg, t: AnalyticalTraining) -> TrainingLowered:
    """The analytical model's formula record, checked against the run's training layout."""
    d = cfg.deployment.training
    name = f"training cost model {t.domain.model}"
    if not _same_model(t.model, cfg.deployment.model):
        _reject(f"deployment.model={cfg.deployment.model} with an analytical training model built for "
                f"{t.model.name}", name)
    if not _same_gpu(d.gpu, t.gpu):
        _reject(f"deployment.training.gpu={d.gpu} with an analytical training model built for {t.gpu.name}", name)
    for key in ("gpus", "tp", "pp", "cp", "ep"):
        if int(getattr(d, key)) != int(getattr(t, key)):
            _reject(f"deployment.training.{key}={getattr(d, key)} with an analytical training model built for "
                    f"{key}={getattr(t, key)}", name)
    if t._offloads():
        _reject("an analytical training model with trainer offload", name)
    if t.dp_balance == "batch" and t.dp > 1 and (t.mini_batch_samples or 0) > 0:
        _reject("cost.training_knobs.dp_balance=batch with several DP ranks and mini-batches",
                "each optimizer step waits for the busiest rank of a partition of the sample lengths "
                "(AnalyticalTraining.dp_imbalance_flops), which the scan does not compute")
    if cfg.cost.strict:
        _reject("cost.strict=true with the analytical training validity domain", "queries are not checked against it")
    return TrainingLowered(1, 0.0, 0.0, np.asarray(F.analytical_params(t), dtype=np.float64))


def _training_terms(cfg, costs) -> TrainingLowered:
    """The training model's lowered formula: ``a + per_token * tokens``, or the analytical record."""
    t = costs.training
    if isinstance(t, AnalyticalTraining):
        return _analytical_lowered(cfg, t)
    ask = getattr(t, "linear_coefficients", None)
    terms = ask() if ask is not None else None
    if terms is None and isinstance(t, FixedTraining):  # simrl.cost.analytical's constant step
        terms = (float(t.step_s), 0.0)
    if terms is None:
        _reject(f"training cost model {type(t).__name__}",
                "only step times a + per_token*tokens with no memory model (linear_coefficients()) "
                "and cost.training=analytical")
    a, per_tok = terms
    if not t.peak_memory_bytes([]) <= t.memory_capacity_bytes():
        _reject("a training step that does not fit in memory")
    if a < 0 or per_tok < 0 or a + per_tok <= 0:
        _reject("a training step time that can be 0")
    if t.domain.ranges and cfg.cost.strict:
        _reject("cost.strict=true with a fitted training validity domain", "queries are not checked against it")
    return TrainingLowered(0, float(a), float(per_tok), np.zeros(len(F.AnalyticalParams._fields)))


def _check_training_memory(t, wa: WorkloadArrays, batch_groups: int) -> None:
    """SimPy stops at a step whose batch does not fit the training GPUs; the fast path does not
    check per step, so it takes only models where no batch can fail: the peak of the largest
    possible batch (the workload's longest sequences; the peak grows with every length) fits."""
    lens = np.sort((wa.prompt.astype(np.int64) + wa.completion).ravel())[::-1]
    worst = [int(x) for x in lens[: batch_groups * wa.prompt.shape[1]]]
    peak, cap = t.peak_memory_bytes(worst), t.memory_capacity_bytes()
    if not peak <= cap:
        _reject("a training model whose largest possible batch does not fit GPU memory",
                f"{t.domain.model}: {peak / 2**30:.1f} GiB per GPU for the workload's {len(worst)} longest sequences, "
                f"{cap / 2**30:.1f} GiB available; SimPy stops at the first step that does not fit")


def cost_fields(cfg, costs, wa: WorkloadArrays, batch_max_groups: int) -> dict:
    """The Params fields that read the cost models (and the checks on them), computed once for
    `lower` and for `simrl_fast.grid.lower_like` (sweep points that differ only in cost knobs): the
    KV capacity, the rollout form or record, the training terms or record, the publication time and
    the colocated phase times."""
    r = cfg.deployment.rollout
    kv_cap = r.kv_capacity_tokens or int(costs.rollout.kv_capacity_tokens())
    need = int((wa.prompt.astype(np.int64) + wa.completion).max())
    if need > kv_cap:
        _reject("a call larger than the KV capacity", f"{need} > {kv_cap} tokens; SimPy stops with an error")
    sync_s = float(costs.weight_sync.publish_time(r.instances))
    if not sync_s > 0:
        _reject("a weight publication time of 0")
    pull_s = 0.0
    if cfg.policy.sync_spec.scope is not SyncScope.GLOBAL:  # Weights.pull: one instance alone
        pull_s = float(costs.weight_sync.publish_time(1))
        if not (math.isfinite(pull_s) and pull_s > 0):
            _reject(f"a per-instance weight pull time of {pull_s!r}", "expected a finite time > 0")
    colocated = _colocated(cfg)
    off_before = off_after = offload_s = 0.0
    if colocated:
        off_before, off_after = float(costs.offload_before_s()), float(costs.offload_after_s(r.instances))
        offload_s = float(costs.offload_s)
    tr = _training_terms(cfg, costs)
    if tr.kind == 1:
        _check_training_memory(costs.training, wa, batch_max_groups)
    ro = _rollout_form(cfg, costs)
    return dict(kv_cap=np.int64(kv_cap), ro_kind=np.int32(ro.kind), ro=ro.ro, tr_kind=np.int32(tr.kind), tr=tr.tr,
                a=np.float64(ro.form.a), b=np.float64(ro.form.b), c=np.float64(ro.form.c), p=np.float64(ro.form.p),
                train_a=np.float64(tr.a), train_per_token=np.float64(tr.per_token), sync_s=np.float64(sync_s),
                pull_s=np.float64(pull_s),
                colocated=np.int32(colocated), off_before=np.float64(off_before), off_after=np.float64(off_after),
                offload_s=np.float64(offload_s))


def lower(cfg, workload, costs, wa: WorkloadArrays | None = None) -> tuple[Static, Params, WorkloadArrays]:
    """Check and lower one configuration. Units: seconds and tokens.

    ``wa``: ``lower_workload(workload)`` when the caller already has it (a sweep lowers its
    workload once; it is most of the cost of lowering a configuration)."""
    check_supported(cfg, workload, costs)
    wa = lower_workload(workload) if wa is None else wa
    r = cfg.deployment.rollout
    pp = lower_policy(cfg.policy, LoweringContext(group_size=wa.prompt.shape[1], instances=r.instances))
    cf = cost_fields(cfg, costs, wa, int(pp.batch_max_groups))
    rule = _colocated_rule(_KERNEL_RULE[pp.inflight_rule]) if cf["colocated"] else _KERNEL_RULE[pp.inflight_rule]
    if pp.sync_per_instance:
        # Weights._push publishes as continue does (no pause; version + 1), then wakes every instance to pull;
        # the rule only acts on a pulling instance's running requests, which the sync shape leaves none
        rule = RULE_CONTINUE
    if pp.drop_zero_variance and (wa.reward_std <= pp.zero_variance_std_max).all() and not pp.zero_variance_stop_groups:
        # (with zero_variance_stop_groups both engines stop at the n-th group with the same diagnosis)
        raise FastPathNoProgress(
            f"every group of workload {workload.name!r} has rewards with zero variance and policy {cfg.policy.kind!r} "
            "drops such groups (drop_zero_variance=1): no batch can ever form, the run would dispatch groups forever")
    if pp.fail_on_version_crossing >= 0:
        _crossing_checks(rule)
        if cfg.router.active_cap:  # a failed group's calls may wait in the router queue (not modelled there)
            _reject(f"router.active_cap={cfg.router.active_cap} with fail_on_version_crossing")
    if pp.abort_stale_on_publish:
        _crossing_checks(rule, "running groups aborted at a publication past the staleness bound "
                               "(abort_stale_on_publish)")
        if cfg.router.active_cap:  # an aborted group's calls may wait in the router queue (not modelled there)
            _reject(f"router.active_cap={cfg.router.active_cap} with abort_stale_on_publish")
    stale_bound = int(pp.staleness_bound)
    params = Params(
        n_inst=np.int32(r.instances), max_seqs=np.int32(r.max_num_seqs),
        od=np.int32(KV_POLICIES[r.kv_policy]), token_budget=np.int64(r.max_num_batched_tokens),
        steps=np.int32(cfg.run.training_steps), router=np.int32(ROUTERS[cfg.router.name]),
        conc=np.float64(pp.admit_concurrency_groups), budget_base=np.float64(pp.admit_budget_base_groups),
        budget_per_version=np.float64(pp.admit_budget_per_version_groups),
        count_dispatched=np.int32(pp.admit_count_dispatched), block_training=np.int32(pp.admit_block_while_training),
        rule=np.int32(rule), stale_bound=np.int32(stale_bound),
        drop_stale=np.int32(pp.staleness_enforcement == code(Enforcement.DROP_AT_COMPLETION) and stale_bound >= 0),
        evict_stale=np.int32(pp.evict_stale_on_publish), drop_zero_var=np.int32(pp.drop_zero_variance),
        batch=np.int32(pp.batch_min_groups),
        budget_per_batch=np.float64(pp.admit_budget_per_batch_groups),
        count_since_pub=np.int32(pp.admit_count_since_publish), buf_cap=np.float64(pp.admit_buffer_cap_groups),
        batch_window=np.int32(pp.batch_order == 1), batch_max=np.int32(pp.batch_max_groups),
        queue_block=np.float64(pp.admit_queue_blocks_groups), collapse=np.int32(pp.collapse_zero_variance_groups),
        **prefix_fields(cfg, wa, pp, bool(cf["colocated"])), cross=np.int32(pp.fail_on_version_crossing + 1), **cf,
        ship_lag=np.int32(pp.admit_max_ship_lag),
        age=np.int32(pp.max_dispatch_age + 1), batch_oldest=np.int32(pp.batch_order == 2),
        return_evicted=np.int32(pp.admit_return_evicted), stale_abort=np.int32(pp.abort_stale_on_publish),
        zslot=np.int32(pp.zero_variance_holds_slot), ep_cap=np.int32(pp.admit_episode_cap),
        cap=np.int32(cfg.router.active_cap), shard=np.int32(_shard_calls(cfg, pp, wa)),
        win_n=np.int32(pp.admit_window_episodes), win_s=np.float64(pp.admit_window_s),
        win_refund=np.int32(pp.admit_window_refund),
        zv_tol=np.float64(pp.zero_variance_std_max), zv_stop=np.int32(pp.zero_variance_stop_groups),
    )
    static = static_for([params], wa)
    return static, params, wa


def _shard_calls(cfg, pp: PolicyParams, wa: WorkloadArrays) -> int:
    """dp_shard's calls per slice as the SimPy engine derives them (simrl.engine.core: the policy's lowered
    record's fixed batch, or router.shard_calls); 0 for the other routers."""
    if cfg.router.name != "dp_shard":
        return 0
    batch = int(pp.batch_max_groups) if pp.batch_min_groups == pp.batch_max_groups else 0
    try:
        return dp_shard_calls(cfg.router, batch, [wa.prompt.shape[1]], cfg.deployment.rollout.instances)
    except ValueError as exc:  # SimPy stops with the same error (a SimulationError)
        _reject("router.name=dp_shard without a slice", str(exc))


def _crossing_checks(rule: int, what: str = "groups failed at a publication (fail_on_version_crossing)") -> None:
    """``fail_on_version_crossing`` is exact in the kernel where every instance is paused at a publication
    (the failed groups' requests leave paused batches: decoding, or part-way through chunked prefill, holding
    shared prefixes by reference; `simrl_fast.crossing`) or nothing runs then (drain)."""
    if rule == RULE_CONTINUE:
        _reject(f"{what} under inflight_rule continue or swap_in_place",
                "rollout runs through the publication: the groups would leave batches mid-iteration")


def group_bound(p: Params) -> int:
    """Groups one run is expected to dispatch (dropped groups beyond it are detected as overflow).

    With a budget: the budget (accepted + running, or dispatched) over the run. Without one, the groups running
    at once (`running_at_once`) plus what the buffer may hold: with a ship barrier (``admit_max_ship_lag`` = L)
    a group starts only while buffered // batch <= L - (batches taken - version) <= L, so buffered + running
    never exceeds (L + 1) x batch - 1 + running at once (between admissions it only falls), and a run trains
    steps x batch groups: a bound for every run without drops. Otherwise the buffer is not bounded by
    admission, and twice the run's batches are expected."""
    steps, batch = int(p.steps), max(int(p.batch), int(p.batch_max))
    budget = (float(p.budget_base) + float(p.budget_per_version) * max(steps - 1, 0)
              + float(p.budget_per_batch) * steps)
    if int(p.count_since_pub):  # the count restarts at each of the run's publications
        budget *= steps + 1
    running = running_at_once(p, budget)
    if math.isinf(budget):
        lag = int(getattr(p, "ship_lag", -1))
        if lag >= 0 and math.isfinite(running):
            budget = steps * batch + (lag + 1) * int(p.batch) - 1 + running
        else:
            budget = running + 2 * steps * batch
    extra = 0.0
    if fails_groups(p):  # each publication re-dispatches (or aborts, freeing their slots) at most the groups running
        extra = min(running, budget) * steps
    return int(math.ceil(budget + extra)) + batch


def running_at_once(p: Params, budget: float) -> float:
    """Groups running at once: the concurrency cap, the budget, and with an episode cap E (``admit_episode_cap``)
    E: every running group holds at least one unfinished trajectory (a group whose last trajectory finishes
    leaves st.running), and a group starts only while fewer than E are unfinished, so the running groups after
    a start number at most E - 1 + 1 (the unfinished trajectories at most E - 1 + group size)."""
    running = min(float(p.conc), budget)
    ep = int(getattr(p, "ep_cap", -1))
    return min(running, float(ep)) if ep > 0 else running


def fails_groups(p: Params) -> bool:
    """Whether a publication may remove running groups (``fail_on_version_crossing`` or
    ``abort_stale_on_publish``: `simrl_fast.crossing.fail_crossed`, traced under ``Static.crossing``)."""
    return int(p.cross) > 0 or int(getattr(p, "stale_abort", 0)) > 0


def running_bound(p: Params) -> float:
    """Groups that can run at once: the concurrency cap, or the largest budget of the run (inf: unbounded)."""
    steps = int(p.steps)
    budget = (float(p.budget_base) + float(p.budget_per_version) * steps + float(p.budget_per_batch) * (steps + 1))
    return running_at_once(p, budget)


def static_for(params: list[Params], wa: WorkloadArrays, max_groups: int | None = None) -> Static:
    """The smallest Static that holds every configuration in ``params``."""
    G, n = wa.prompt.shape
    mg = max_groups or max(group_bound(p) for p in params)
    steps = max(int(p.steps) for p in params)
    K = max(int(p.n_inst) for p in params)
    actions = mg * (1 + 3 * n) + steps * (2 * K + 6) + 64
    if any(int(p.token_budget) > 0 for p in params):
        # chunked prefill visits every boundary whose iteration prefills: a chunk is at least one token, so at
        # most one visit per prefilled token (a bound for the safety cap only; a real run takes far fewer)
        actions += mg * n * int((wa.prompt.astype(np.int64) + wa.completion).max())
        actions = 1 << (actions - 1).bit_length()  # a power of two: fewer distinct shapes (one compile each)
    chunk = 256
    return Static(
        instances=K, slots=max(int(p.max_seqs) for p in params), group_size=n, groups=G, max_groups=mg,
        steps=steps, max_batch=max(max(int(p.batch), int(p.batch_max)) for p in params), chunk=chunk,
        max_chunks=int(2 * actions / chunk) + 4,
        formulas=(1 if any(int(p.ro_kind) == 1 for p in params) else 0)
        | (2 if any(int(p.tr_kind) == 1 for p in params) else 0),
        on_demand=any(int(p.od) == 1 for p in params),
        chunked_prefill=any(int(p.token_budget) > 0 for p in params),
        prefix=any(int(p.pc) == 1 for p in params),
        crossing=any(fails_groups(p) for p in params),
        perinst=any(float(p.pull_s) > 0 for p in params),
        cross_window=_cross_window(params, mg, n),
        dispatch_age=any(int(p.age) > 0 for p in params),
        oldest_first=any(int(p.batch_oldest) == 1 for p in params),
        episode_cap=any(int(getattr(p, "ep_cap", -1)) > 0 for p in params),
        window=any(int(getattr(p, "win_n", -1)) > 0 for p in params),
    )


def _cross_window(params: list[Params], mg: int, n: int) -> int:
    """A bound on any instance's waiting queue at a publication that fails groups: its calls belong to
    running groups (`running_bound` of them, n calls each); the whole call range when unbounded."""
    bound = max((running_bound(p) for p in params if fails_groups(p)), default=0.0)
    return int(min(mg, math.ceil(bound)) * n) if math.isfinite(bound) else mg * n


def stack_params(params: list[Params]) -> Params:
    """Stack per-configuration Params along a new leading axis (the vmapped axis)."""
    return Params(*(np.stack([np.asarray(getattr(p, f)) for p in params]) for f in Params._fields))
