"""Random configurations over the fast path's whole declared feature set (an independent tester's
generator, wider than `diffcases.random_case`).

A case draws, independently:

- the policy: either a random `PolicyParams` record (`ParamsPolicy`) with every field the kernel
  accepts -- admission by concurrency, budget (base, per version, per batch taken), counting accepted
  + running, dispatched, or dispatched since the last publication; an output-queue cap; a blocking
  output queue; batches-ahead gates; the sync shape's block while training; every in-flight rule
  including ``swap_in_place``; every staleness enforcement with and without a bound; eviction at
  publication; zero-variance drops and the collapse failsafe; FIFO batches of min..max,
  dispatch-window and oldest-dispatch-first batches; drops by dispatch age; admission slots returned
  by evicted groups; a bounded buffer admission keeps from overflowing; routing by dispatch
  version -- redrawn until `lowering.policy_rejections` accepts it; or a registered preset at its
  defaults or with small knobs;
- the rollout cost: a random linear form, or the roofline of a dense or MoE model at several
  tp/pp/dp/ep layouts (from knobs or the bundled fitted H100 artifact);
- the training cost: a constant or linear step (``ConstantTraining(a, per_token)``), or the
  analytical model at several layouts (dense and MoE, ZeRO stages, HSDP, micro-batches, CP);
- the weight-sync model: a constant, or one of the built-in modes;
- instances, max_num_seqs, KV capacity (down to one call), router, zero-variance groups;
- drawn last (so the draws above keep a seed's values): ``kv_policy=on_demand`` with a KV capacity
  of one to three calls' need (preemption is frequent), and ``deployment.placement=colocated`` (the
  training GPUs raised to hold the rollout) with a drawn offload or, when the costs are built, the
  built colocated phases; a record may declare colocated itself, and a preset draw may become trl or
  slime in their default (sync, colocated) mode; then ``max_num_batched_tokens``
  (`diffcases.draw_token_budget`: unchunked, 8192, budgets that split prompts, budgets near
  max_num_seqs that decoding sequences can use up); then ``prefix_caching=true`` with group-shared prompt
  prefixes (whole, partial, none, some calls salted: `diffcases.shared_prompts`) and, half the time,
  a KV capacity of one to three calls' need (evictions are frequent); last, ``fail_on_version_crossing`` (0..2) on a record whose
  instances are all paused at a publication (a pausing rule or colocated), or dressage with small knobs
  (with whatever token budget and prefix cache were drawn above); then a ship
  barrier (``admit_max_ship_lag`` 0..2) on a record with fixed-size batches; last, per-instance
  weight sync (disaggregated): a record with the sync shape's admission made per-instance (no ship
  barrier), or psrl with small knobs (one of them staleness 1, refused by its lowering); after everything
  (the case's costs included), ``abort_stale_on_publish`` on a third of the records that pause every
  instance at a publication (a counted bound 0..2 where the record has none); then zero-variance drops holding
  their batch places (``zero_variance_holds_slot``) on a quarter of the records with fixed-size FIFO batches.
  After everything, half the time, the router redrawn (`diffcases.draw_router`: dp_shard too, and a
  router.active_cap); last of all, an episode cap of 1..3n unfinished trajectories read when the dispatcher wakes
  (``admit_episode_cap``, prime-rl's permits) on a quarter of the records; after it, an admission window
  (``admit_window_episodes``, `diffcases.window_record`, prime-rl's dispatcher window) on a quarter of the records;
  then a ship barrier together with zero-variance placeholders (`diffcases.ship_zero_slots_record`) on a fifth of
  them, and a zero-variance threshold and stop (`diffcases.zero_test_record`: ``zero_variance_std_max``,
  ``zero_variance_stop_groups``) on a quarter; then, from a generator seeded by the
  label, equal call lengths on a fifth of the cases (`diffcases.draw_equal_lengths`: ties).

Whatever `simrl_fast.lower` refuses is reported as refused (a named rejection), not compared.
"""

from __future__ import annotations

import math
from importlib.resources import files

import attrs
import numpy as np
from diffcases import (
    BASE,
    Case,
    draw_equal_lengths,
    draw_router,
    draw_token_budget,
    episode_cap_record,
    set_stale_abort,
    shared_prompts,
    ship_zero_slots_record,
    window_record,
    zero_slots_record,
    zero_test_record,
)
from simhelpers import random_workload

from simrl.config import load_config
from simrl.cost.base import CostModelError
from simrl.cost.build import Costs, build_costs
from simrl.cost.linear import ConstantSync, ConstantTraining, LinearRollout
from simrl.policy.params import LoweringContext, PolicyParams
from simrl.policy.record import ParamsPolicy
from simrl.policy.rules import Enforcement, InflightRule, code
from simrl_fast.lowering import sync_shape

INF = math.inf
DENSE, MOE = "qwen2.5-7b", "qwen3-30b-a3b"
ROLLOUT_LAYOUTS = {
    DENSE: [dict(tp=1), dict(tp=2), dict(tp=4, pp=2), dict(tp=2, dp=2)],
    MOE: [dict(tp=2), dict(tp=4, ep=4), dict(tp=2, dp=2, ep=4), dict(tp=2, pp=2)],
}
TRAINING_LAYOUTS = {
    DENSE: [[], ["deployment.training.tp=2"], ["deployment.training.tp=2", "deployment.training.pp=2",
                                                "deployment.training.micro_batch_size=2"],
            ["deployment.training.gpus=4", "deployment.training.zero_stage=3", "cost.training_knobs.fsdp_shard_size=2",
             "cost.training_knobs.max_tokens_per_gpu=256", "cost.training_knobs.recompute_old_logprob=true"],
            ["deployment.training.gpus=16", "deployment.training.tp=2", "deployment.training.cp=2",
             "deployment.training.zero_stage=3"],
            ["deployment.training.pp=2", "cost.training_knobs.max_tokens_per_gpu=8192",
             "cost.training_knobs.critic=true", "cost.training_knobs.reference_model=true"]],
    MOE: [["deployment.training.gpus=8", "deployment.training.tp=2", "deployment.training.ep=4",
           "deployment.training.zero_stage=3"],
          ["deployment.training.gpus=16", "deployment.training.tp=2", "deployment.training.ep=8",
           "cost.training_knobs.max_tokens_per_gpu=4096", "cost.training_knobs.mini_batch_samples=2"],
          ["deployment.training.gpus=8", "deployment.training.ep=8", "deployment.training.zero_stage=3",
           "deployment.training.micro_batch_size=2"]],
}
SYNC_MODES = ["nccl", "checkpoint_engine", "lora"]

# Presets at their defaults and with small knobs (the fast path's accepted ones; a refusal is counted).
PRESETS = [
    ["policy=sync"], ["policy=bounded_async"], ["policy=skyrl"], ["policy=areal"], ["policy=verl"],
    ["policy=verl", "policy.mode=one_step_off"], ["policy=openrlhf"], ["policy=nemo_rl"], ["policy=roll"],
    ["policy=art"], ["policy=slime", "policy.mode=train_async"], ["policy=trl", "policy.mode=async"],
    ["policy=verl", "policy.ppo_mini_batch_size=2", "policy.staleness_threshold=0.5",
     "policy.concurrent_samples_per_replica=2"],
    ["policy=verl", "policy.ppo_mini_batch_size=3", "policy.partial_rollout=false"],
    ["policy=verl", "policy.mode=one_step_off", "policy.train_batch_size=3"],
    ["policy=openrlhf", "policy.rollout_batch_size=3", "policy.partial_rollout_enable=true"],
    ["policy=nemo_rl", "policy.num_prompts_per_step=3", "policy.max_trajectory_age_steps=2",
     "policy.in_flight_weight_updates=true"],
    ["policy=nemo_rl", "policy.num_prompts_per_step=2", "policy.max_trajectory_age_steps=1",
     "policy.in_flight_weight_updates=true", "policy.recompute_kv_cache_after_weight_updates=true"],
    ["policy=roll", "policy.rollout_batch_size=3", "policy.query_filter_type=std_filter", "policy.std_threshold=0"],
    ["policy=slime", "policy.mode=train_async", "policy.rollout_batch_size=3"],
    ["policy=areal", "policy.max_head_offpolicyness=1", "policy.should_accept_fn=nonzero_std",
     "policy.consumer_batch_size=3", "policy.max_concurrent_rollouts=6"],
    ["policy=skyrl", "policy.max_staleness_steps=2", "policy.policy_mini_batch_size=3",
     "policy.zero_variance_filter=true", "policy.sample_full_batch=true", "policy.num_parallel_generation_workers=5"],
    ["policy=art", "policy.min_batch_size=2", "policy.max_batch_size=3", "policy.queue_maxsize=2",
     "policy.num_rollout_workers=5"],
    ["policy=art", "policy.max_steps_off_policy=1", "policy.min_batch_size=1", "policy.max_batch_size=4",
     "policy.num_rollout_workers=6", "policy.rollout_weight_update_mode=in_flight_lora"],
    ["policy=trl", "policy.mode=async", "policy.per_device_train_batch_size=4", "policy.num_processes=2",
     "policy.max_staleness=1", "policy.queue_maxsize=6"],
    ["policy=trl", "policy.mode=async", "policy.per_device_train_batch_size=4", "policy.num_processes=1",
     "policy.max_staleness=0", "policy.max_inflight_tasks=16"],
    ["policy=verl_v1"], ["policy=verl_v1", "policy.trainer_mode=separate_async"],
    ["policy=verl_v1", "policy.trainer_mode=colocate_async", "policy.parameter_sync_step=1",
     "policy.ppo_mini_batch_size=3", "policy.num_warmup_batches=2", "policy.max_off_policy_threshold=1"],
    ["policy=verl_v1", "policy.trainer_mode=separate_async", "policy.parameter_sync_step=2",
     "policy.ppo_mini_batch_size=1", "policy.max_off_policy_threshold=2", "policy.filter_groups_metric=acc"],
    ["policy=verl_v1", "policy.trainer_mode=separate_async", "policy.parameter_sync_step=1",
     "policy.ppo_mini_batch_size=2", "policy.num_warmup_batches=2", "policy.max_off_policy_threshold=1"],
    *[["policy=bounded_async", "policy.batch_groups=2", "policy.max_staleness=1", f"policy.inflight_rule={r.value}"]
      for r in InflightRule],
]

# in-flight rules that pause every instance at a publication (fail_on_version_crossing is exact there)
PAUSING = tuple(code(r) for r in (InflightRule.KEEP_PAUSE, InflightRule.ABORT_RESUME, InflightRule.ABORT_RESTART,
                                  InflightRule.DRAIN))
# psrl: staleness 0 (per-instance pulls, simrl_fast.perinst) and, last, staleness 1 (fast_path_exact=0: refused)
PSRL = [["policy=psrl", "policy.staleness_buffer_entries=2"],
        ["policy=psrl", "policy.staleness_buffer_entries=3", "policy.partial_rollout_enable=false"],
        ["policy=psrl", "policy.staleness_buffer_entries=1", "policy.sync_strategy=status_based",
         "policy.sync_threshold=2", "policy.enable_multi_priority_queue=true", "policy.dynamic_sampling_filter=true"],
        ["policy=psrl", "policy.staleness_buffer_entries=4", "policy.sync_strategy=status_based"],
        ["policy=psrl", "policy.staleness=1", "policy.staleness_buffer_entries=2"]]
DRESSAGE = [["policy=dressage", "policy.rollout_batch_size=3", "policy.async_max_active_groups=5"],
            ["policy=dressage", "policy.rollout_batch_size=2", "policy.rollout_max_retries=0",
             "policy.async_max_active_groups=3", "policy.async_output_queue_size=4"],
            ["policy=dressage", "policy.rollout_batch_size=1", "policy.rollout_max_retries=1",
             "policy.async_max_active_groups=4", "policy.dressage_staleness_keep_versions=2"]]


def random_record(rng: np.random.Generator, n_inst: int, tries: int = 200) -> PolicyParams:
    """A random record the fast path accepts (redrawn until `policy_rejections` is empty)."""
    from simrl_fast.lowering import policy_rejections

    for _ in range(tries):
        rec = _draw_record(rng)
        if rec is None:
            continue
        try:
            ParamsPolicy(rec)
        except ValueError:
            continue
        if not policy_rejections(rec, "record"):
            return rec
    raise AssertionError("no accepted record drawn")


def _draw_record(rng) -> PolicyParams | None:
    def pick(*xs, p=None):
        return xs[int(rng.choice(len(xs), p=p))]

    bmin = int(rng.integers(1, 5))
    order = pick(0, 0, 0, 1)
    bmax = bmin if order == 1 else bmin + pick(0, 0, 1, 2, 5)
    count_dispatched = pick(0, 1)
    since_pub = pick(0, 1) if count_dispatched else 0
    base = pick(INF, float(bmin), float(bmin * int(rng.integers(1, 4))), float(rng.integers(1, 12)))
    per_version = pick(0.0, 0.0, float(bmin), float(rng.integers(1, 4)))
    per_batch = pick(0.0, 0.0, float(bmin), float(rng.integers(1, 3)))
    conc = pick(INF, float(rng.integers(1, 12)))
    if math.isinf(conc) and math.isinf(base):
        conc = float(rng.integers(1, 12))
    sync_shape = rng.random() < 0.15
    block = 0
    if sync_shape:  # admission closed while training, budget (version + 1) * batch
        base = per_version = float(bmin)
        count_dispatched = since_pub = 0
        per_batch, block = 0.0, 1
        bmax = bmin if rng.random() < 0.5 else bmax
    bound = pick(-1, 0, 1, 2, 3)
    # a bound needs an enforcement other than none, and none needs no bound (`Staleness`)
    enforcement = int(rng.integers(1, len(Enforcement))) if bound >= 0 else code(Enforcement.NONE)
    evict = pick(0, 1) if bound >= 0 else 0
    dzv = pick(0, 1)
    collapse = pick(0, 0, int(rng.integers(1, 8))) if dzv else 0
    cap = -1
    if count_dispatched and not per_version and not per_batch and not math.isinf(base) and rng.random() < 0.3:
        cap = int(base + rng.integers(0, 3))
    buf_cap = pick(INF, INF, float(rng.integers(1, 8)))
    ahead = pick(-1, -1, int(rng.integers(1, 3)))
    queue = pick(INF, INF, float(bmin + rng.integers(0, 3)))
    # verl V1 / TRL async: oldest-dispatch-first batches, drops by dispatch age, evicted groups' slots returned
    if order == 0 and rng.random() < 0.3:
        order = 2
    age = pick(-1, -1, 0, 1, 2)
    returned = pick(0, 0, 1) if not count_dispatched else 0
    return PolicyParams(
        admit_concurrency_groups=conc, admit_budget_base_groups=base, admit_budget_per_version_groups=per_version,
        admit_count_dispatched=count_dispatched, admit_block_while_training=block,
        inflight_rule=int(rng.integers(0, len(InflightRule))), clear_cache_on_sync=pick(0, 1),
        staleness_bound=bound, staleness_enforcement=enforcement, drop_zero_variance=dzv,
        buffer_capacity_groups=cap, batch_min_groups=bmin, batch_max_groups=bmax, fast_path_exact=1,
        evict_stale_on_publish=evict, admit_budget_per_batch_groups=per_batch, admit_count_since_publish=since_pub,
        admit_buffer_cap_groups=buf_cap, batch_order=order, admit_max_batches_ahead=ahead,
        admit_queue_blocks_groups=queue, collapse_zero_variance_groups=collapse,
        route_needs_dispatch_version=pick(0, 1), disaggregated=pick(0, 1),
        max_dispatch_age=age, admit_return_evicted=returned,
    )


def _built_or_none(cfg):
    """The configuration's built costs, or None where its model cannot be built for this layout
    (then the case keeps the offload it drew instead of the built colocated phases)."""
    try:
        return build_costs(cfg)
    except CostModelError:
        return None


def wide_case(rng: np.random.Generator, groups: int, n: int, steps: int, policy_kind: str | None = None) -> Case:
    """One random configuration over the whole declared feature set (see the module doc)."""
    K = int(rng.integers(1, 5))
    S = int(rng.choice([1, 2, 3, 4, 8, 16, 64]))
    lo_c, hi_c = sorted(int(x) for x in rng.integers(1, 600, 2))
    prompt = (int(rng.integers(10, 200)), int(rng.integers(200, 900)))
    wl = random_workload(groups=groups, n=n, seed=int(rng.integers(1 << 30)), prompt=prompt,
                         completion=(lo_c, hi_c + 2), zero_variance=float(rng.choice([0.0, 0.3, 0.6])))
    need = int((wl.call_prompt_tokens + wl.call_completion_tokens).max())
    ov = [*BASE, f"deployment.rollout.instances={K}", f"deployment.rollout.max_num_seqs={S}",
          f"router.name={rng.choice(['least_requests', 'round_robin'])}", f"run.training_steps={steps}"]
    labels = []
    # rollout
    ro_kind = rng.choice(["linear", "linear", "roofline", "roofline_moe", "roofline_fitted"])
    model = MOE if ro_kind == "roofline_moe" else DENSE
    ov.append(f"deployment.model={model}")
    kv = None
    if rng.random() < 0.5:
        kv = int(need * rng.choice([1.0, 1.5, 3.0, 10.0]))
        ov.append(f"deployment.rollout.kv_capacity_tokens={kv}")
    if ro_kind.startswith("roofline"):
        layout = ROLLOUT_LAYOUTS[model][int(rng.integers(len(ROLLOUT_LAYOUTS[model])))]
        if ro_kind == "roofline_fitted":
            layout = dict(tp=int(rng.choice([1, 2])))
            ov.append(f"cost.rollout={files('simrl.cost') / 'data' / 'rollout-roofline-h100.json'}")
        else:
            ov.append("cost.rollout=roofline")
        ov += [f"deployment.rollout.{k}={v}" for k, v in layout.items()]
        labels.append(f"{ro_kind} {model} {layout}")
    # training
    tr_kind = rng.choice(["constant", "linear", "analytical"])
    if tr_kind == "analytical":
        tl = TRAINING_LAYOUTS[model][int(rng.integers(len(TRAINING_LAYOUTS[model])))]
        ov += ["cost.training=analytical", *tl]
        labels.append(f"analytical {tl}")
    else:
        ov.append("cost.training=constant")
    # weight sync
    ws = rng.choice(["constant", "constant", *SYNC_MODES])
    if ws != "constant":
        ov.append(f"cost.weight_sync={ws}")
        labels.append(f"sync {ws}")
    # policy
    kind = policy_kind or ("record" if rng.random() < 0.6 else "preset")
    if kind == "record":
        rec = random_record(rng, K)
        pol_ov, policy = [], ParamsPolicy(rec)
        labels.append(f"record {_short(rec)}")
    else:
        pol_ov = list(PRESETS[int(rng.integers(len(PRESETS)))])
        policy = None
        labels.append(" ".join(pol_ov))
    # linear rollout, constant / linear training, constant sync: their numbers
    if ro_kind == "linear":
        a = float(rng.uniform(1e-3, 1e-2))
        b = float(rng.choice([0.0, rng.uniform(1e-6, 1e-4)]))
        c = float(rng.choice([0.0, rng.uniform(1e-9, 1e-7)]))
        p = float(rng.uniform(1e-6, 1e-4)) if c == 0.0 else float(rng.choice([0.0, rng.uniform(1e-6, 1e-4)]))
    if tr_kind != "analytical":
        per_token = float(rng.uniform(1e-6, 1e-4)) if tr_kind == "linear" else 0.0
        tr_a = float(rng.uniform(0.05, 8.0))
    sync_s = float(rng.uniform(0.01, 2.0)) if ws == "constant" else None
    # drawn last (so the draws above keep a seed's values): on_demand KV and colocated placement
    kv_policy = "on_demand" if rng.random() < 0.35 else "reserve"
    if kv_policy == "on_demand":  # one call's need up to a few calls per instance: preemptions are frequent
        kv = int(need * rng.choice([1.0, 1.0, 1.25, 1.5, 2.0, 3.0]))
        ov = [o for o in ov if not o.startswith("deployment.rollout.kv_capacity_tokens=")]
        ov += ["deployment.rollout.kv_policy=on_demand", f"deployment.rollout.kv_capacity_tokens={kv}"]
        labels.insert(0, "on_demand")
    colocated = rng.random() < 0.35
    offload = None
    if colocated:
        ov = [o for o in ov if not o.startswith("deployment.placement=")] + ["deployment.placement=colocated"]
        offload = float(rng.choice([0.0, rng.uniform(0.05, 4.0), rng.uniform(0.05, 4.0)]))
        how = rng.random()
        if kind == "record" and how < 0.3:  # the record itself declares colocated placement
            rec = attrs.evolve(rec, colocated=1, disaggregated=0)
            policy = ParamsPolicy(rec)
            labels[-1] = f"record {_short(rec)}"
        elif kind == "preset" and how < 0.4:  # presets whose default mode is colocated (sync)
            pol_ov = [["policy=trl", "policy.per_device_train_batch_size=4", "policy.num_processes=2"],
                      ["policy=slime", "policy.rollout_batch_size=3"], ["policy=trl"],
                      ["policy=slime"]][int(rng.integers(4))]
            labels[-1] = " ".join(pol_ov)
        labels.insert(0, f"colocated offload={offload:.3g}")
    tb = draw_token_budget(rng, S)
    if tb:
        ov = [o for o in ov if not o.startswith("deployment.rollout.max_num_batched_tokens=")]
        ov.append(f"deployment.rollout.max_num_batched_tokens={tb}")
        labels.insert(0, f"tb={tb}")
    if rng.random() < 0.5:  # the prefix cache over group-shared prompts (tight KV: evictions)
        ov.append("deployment.rollout.prefix_caching=true")
        if rng.random() < 0.6:
            wl = shared_prompts(rng, wl)
        if rng.random() < 0.5:
            kv = int(need * rng.choice([1.0, 1.25, 1.5, 2.0, 3.0]))
            ov = [o for o in ov if not o.startswith("deployment.rollout.kv_capacity_tokens=")]
            ov.append(f"deployment.rollout.kv_capacity_tokens={kv}")
        labels.insert(0, "prefix")
    # drawn last too: groups failed at a publication (fail_on_version_crossing), by a record or by dressage
    if kind == "record" and rng.random() < 0.3:
        k = int(rng.integers(0, 3))
        paused = rec.colocated or (colocated and not rec.disaggregated) or rec.inflight_rule in PAUSING
        if paused and rec.batch_order != 1 and not rec.admit_count_since_publish and not (k and rec.collapse_zero_variance_groups):
            rec = attrs.evolve(rec, fail_on_version_crossing=k)
            policy = ParamsPolicy(rec)
            labels[-1] = f"record {_short(rec)}"
    elif kind == "preset" and rng.random() < 0.2:
        pol_ov = DRESSAGE[int(rng.integers(len(DRESSAGE)))]
        labels[-1] = " ".join(pol_ov)
    # drawn last too: a ship barrier (admit_max_ship_lag, prime-rl's TARGET_LAG) on a record of fixed-size batches
    if kind == "record" and rec.batch_min_groups == rec.batch_max_groups and rng.random() < 0.3:
        rec = attrs.evolve(rec, admit_max_ship_lag=int(rng.integers(0, 3)))
        policy = ParamsPolicy(rec)
        labels[-1] = f"record {_short(rec)}"
    # drawn last too: per-instance weight sync (PSRL's pulls), by a record with the sync shape's admission or by
    # psrl (disaggregated only: the kernel refuses per-instance sync with colocated placement, as lowering does)
    if not colocated and rng.random() < 0.25:
        if kind == "record" and sync_shape(rec) and rec.admit_max_ship_lag < 0 and not rec.admit_return_evicted \
                and rec.max_dispatch_age < 0 and rec.batch_order != 2 and rec.fail_on_version_crossing < 0 and not rec.colocated:
            rec = attrs.evolve(rec, sync_per_instance=1, route_needs_dispatch_version=1)
            policy = ParamsPolicy(rec)
            labels[-1] = f"record {_short(rec)}"
        elif kind == "preset" and pol_ov[0] != "policy=dressage":
            pol_ov = PSRL[int(rng.integers(len(PSRL)))]
            labels[-1] = " ".join(pol_ov)
    ov += pol_ov
    if colocated:  # the rollout shares the training GPUs: raise them (a multiple, so the layout still divides)
        d = load_config(overrides=[o for o in ov if o != "deployment.placement=colocated"]).deployment
        if d.rollout.gpus > d.training.gpus:
            ov.append(f"deployment.training.gpus={d.training.gpus * -(-d.rollout.gpus // d.training.gpus)}")
    case = Case(ov, wl, None, label=f"K={K} S={S} kv={kv} " + " | ".join(labels))
    if policy is not None:
        case.cfg = attrs.evolve(case.cfg, policy=policy)
    cfg = case.cfg
    if ro_kind.startswith("roofline") or tr_kind == "analytical" or ws != "constant":
        built = build_costs(cfg)  # colocated: a model whose weights do not fit is a CostModelError (redrawn)
    elif colocated:
        built = _built_or_none(cfg)  # only for the colocated phases (else the offload drawn above)
    else:
        built = None
    if ro_kind == "linear":
        rollout = LinearRollout(a=a, b=b, c=c, p=p, kv_tokens=kv or need * 1000)
    else:
        rollout = built.rollout
    if tr_kind == "analytical":
        training = built.training
    else:
        training = ConstantTraining(a=tr_a, per_token=per_token)
    sync = built.weight_sync if ws != "constant" else ConstantSync(sync_s)
    if colocated and built is not None and built.colocated is not None and offload == 0.0:
        # the built colocated phases (sleep, offload, wake, reshard, KV rebuild) in place of a zero offload
        case.costs = Costs(rollout, training, sync, offload_s=built.offload_s, colocated=built.colocated)
        case.label = case.label.replace("offload=0 ", "offload=built ")
    else:
        case.costs = Costs(rollout, training, sync, offload_s=offload or 0.0)
    # drawn last of all (so every draw above keeps a seed's values): running groups past the staleness bound aborted
    # at each publication (abort_stale_on_publish, prime-rl's max_off_policy_steps) on a record that pauses every
    # instance at a publication (a bound 0..2, counted only, where the record has none)
    if kind == "record" and rng.random() < 0.3:
        rec = case.cfg.policy.params_record
        paused = rec.colocated or (colocated and not rec.disaggregated) or rec.inflight_rule in PAUSING
        if paused and not rec.admit_count_since_publish and not rec.sync_per_instance:
            set_stale_abort(rng, case, rec)
    # then: zero-variance drops holding their batch places (zero_variance_holds_slot) on a quarter of the records
    if kind == "record" and rng.random() < 0.25:
        rec = zero_slots_record(case.cfg.policy.params_record)
        if rec is not None:
            case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
            case.label += " zero_slots"
    if rng.random() < 0.5:  # drawn last: the router redrawn (dp_shard, router.active_cap: diffcases.draw_router)
        draw_router(rng, case, n, case.cfg.deployment.rollout.instances)
    # last of all: prime-rl's episode permits (admit_episode_cap, read when the dispatcher wakes) on a quarter of the
    # records
    if kind == "record" and rng.random() < 0.25:
        rec = episode_cap_record(rng, case.cfg.policy.params_record, n)
        if rec is not None:
            case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
            case.label += f" episode_cap={rec.admit_episode_cap}"
    # after it: prime-rl's admission window (admit_window_episodes, its recheck timeout) on a quarter of the records
    if kind == "record" and rng.random() < 0.25:
        rec = window_record(rng, case.cfg.policy.params_record, n)
        if rec is not None:
            case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
            case.label += (f" window={rec.admit_window_episodes}/{rec.admit_window_s:.3g}s"
                           f"{' refund' if rec.admit_window_refund else ''}")
    # then: a ship barrier together with zero-variance placeholders (prime-rl's pair) on a fifth of the records, and
    # prime-rl's zero-variance threshold and stop on a quarter (diffcases.ship_zero_slots_record, zero_test_record)
    if kind == "record" and rng.random() < 0.2:
        rec = ship_zero_slots_record(rng, case.cfg.policy.params_record)
        if rec is not None:
            case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
            case.label += f" ship_lag={rec.admit_max_ship_lag} zero_slots"
    if kind == "record" and rng.random() < 0.25:
        rec = zero_test_record(rng, case.cfg.policy.params_record, case.workload)
        if rec is not None:
            case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
            case.label += f" zero_std_max={rec.zero_variance_std_max:g} zero_stop={rec.zero_variance_stop_groups}"
    draw_equal_lengths(case)  # last of all, from the label's own generator: equal lengths (ties) on a fifth
    return case


def _short(rec: PolicyParams) -> str:
    d = attrs.asdict(rec)
    dflt = attrs.asdict(PolicyParams())
    return " ".join(f"{k}={v}" for k, v in d.items() if v != dflt[k] and k != "fast_path_exact")


def lowered_or_reason(case: Case):
    """(static, params, wa) or the refusal's message."""
    from simrl_fast.lowering import FastPathNoProgress, FastPathUnsupported, lower

    try:
        return lower(case.cfg, case.workload, case.costs)
    except (FastPathUnsupported, FastPathNoProgress) as exc:
        return str(exc)


def ctx_for(case: Case) -> LoweringContext:
    return LoweringContext(group_size=int(np.diff(case.workload.group_traj_start)[0]),
                           instances=case.cfg.deployment.rollout.instances)


__all__ = ["wide_case", "random_record", "lowered_or_reason", "PRESETS", "code"]
