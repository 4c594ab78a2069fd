"""SimPy vs JAX on the presets whose record uses the record extensions (`simrl.policy.params`):
verl fully_async (count since the last publication, output-queue cap, a bounded queue admission keeps
from overflowing), verl one_step_off, OpenRLHF and slime train_async (a budget per batch taken),
NeMo-RL (dispatch-window batches), Dressage (groups failed at a publication and re-dispatched), and synchronous ROLL (the sync shape, with a consumption-enforced
bound the engine leaves to the record), ART (variable FIFO batches, workers blocked on a full output
queue, the collapse failsafe checked after the run). Each at its defaults and with small knobs, per step and per call, in one vmapped batch.
"""

import numpy as np
import pytest

pytest.importorskip("jax")

from diffcases import BASE, Case, compare, run_fast  # noqa: E402
from simhelpers import linear_costs, random_workload  # noqa: E402

from simrl.policy.params import LoweringContext  # noqa: E402

GROUPS, N, STEPS = 10, 4, 3

PRESETS = [
    ["policy=verl"],
    ["policy=verl", "policy.ppo_mini_batch_size=2", "policy.trigger_parameter_sync_step=2",
     "policy.staleness_threshold=0.5", "policy.concurrent_samples_per_replica=2"],
    ["policy=verl", "policy.ppo_mini_batch_size=3", "policy.partial_rollout=false"],
    ["policy=verl", "policy.mode=one_step_off"],
    ["policy=verl", "policy.mode=one_step_off", "policy.train_batch_size=3"],
    ["policy=openrlhf"],
    ["policy=openrlhf", "policy.rollout_batch_size=3", "policy.partial_rollout_enable=true"],
    ["policy=nemo_rl"],
    ["policy=nemo_rl", "policy.num_prompts_per_step=3", "policy.max_trajectory_age_steps=2",
     "policy.in_flight_weight_updates=true"],
    ["policy=nemo_rl", "policy.num_prompts_per_step=2", "policy.max_trajectory_age_steps=1",
     "policy.in_flight_weight_updates=true", "policy.recompute_kv_cache_after_weight_updates=true"],
    ["policy=roll"],
    ["policy=roll", "policy.rollout_batch_size=3", "policy.query_filter_type=std_filter", "policy.std_threshold=0"],
    ["policy=slime", "policy.mode=train_async", "policy.rollout_batch_size=3"],
    # ART: variable FIFO batches (min..max), workers blocked on a full output queue, the collapse
    # failsafe checked after the run, the policy gate (S >= 1: never binds), zero-variance discards,
    # in_flight_lora's swap in place (published as continue)
    ["policy=art"],
    ["policy=art", "policy.min_batch_size=2", "policy.max_batch_size=3", "policy.queue_maxsize=2",
     "policy.num_rollout_workers=5"],
    ["policy=art", "policy.max_steps_off_policy=1", "policy.min_batch_size=1", "policy.max_batch_size=4",
     "policy.num_rollout_workers=6", "policy.rollout_weight_update_mode=in_flight_lora"],
    # Dressage: groups crossing a publication fail and are re-dispatched (fail_on_version_crossing = retries),
    # the output-queue watermark, the keep-N window's drop and eviction
    ["policy=dressage", "policy.rollout_batch_size=3", "policy.async_max_active_groups=5"],
    ["policy=dressage", "policy.rollout_batch_size=2", "policy.rollout_max_retries=0", "policy.async_max_active_groups=3",
     "policy.async_output_queue_size=4"],
    ["policy=dressage", "policy.rollout_batch_size=1", "policy.rollout_max_retries=1", "policy.async_max_active_groups=4",
     "policy.dressage_staleness_keep_versions=2"],
]


def cases():
    rng = np.random.default_rng(7)
    out = []
    for j, pol in enumerate(PRESETS):
        K = int(rng.integers(1, 4))
        wl = random_workload(groups=GROUPS, n=N, seed=100 + j, prompt=(50, 400), completion=(20, 900),
                             zero_variance=0.3 if "std_filter" in " ".join(pol) or "art" in pol[0] else 0.0)
        step_s = float(rng.uniform(0.2, 4.0))
        if "policy.queue_maxsize=2" in pol:
            step_s *= 10  # a slow trainer: the output queue fills and blocks workers
        costs = linear_costs(kv_tokens=10**6, step_s=step_s, sync_s=float(rng.uniform(0.05, 1.0)))
        ov = [*BASE, *pol, f"deployment.rollout.instances={K}", f"deployment.rollout.max_num_seqs={[4, 16, 64][j % 3]}",
              f"run.training_steps={STEPS}", f"router.name={['least_requests', 'round_robin'][j % 2]}"]
        out.append(Case(ov, wl, costs, label=" ".join(pol) + f" K={K}"))
    # random ART knobs in the same batch (one compile): batch bounds, workers, queue, bound, mode
    for j in range(6):
        lo = int(rng.integers(1, 4))
        pol = ["policy=art", f"policy.min_batch_size={lo}", f"policy.max_batch_size={lo + int(rng.integers(0, 4))}",
               f"policy.num_rollout_workers={int(rng.integers(1, 8))}", f"policy.queue_maxsize={lo + int(rng.integers(0, 3))}",
               f"policy.max_steps_off_policy={int(rng.integers(1, 3))}",
               f"policy.rollout_weight_update_mode={rng.choice(['step_lora', 'in_flight_lora'])}"]
        K = int(rng.integers(1, 4))
        wl = random_workload(groups=GROUPS, n=N, seed=200 + j, prompt=(50, 400), completion=(20, 900), zero_variance=0.3)
        costs = linear_costs(kv_tokens=10**6, step_s=float(rng.uniform(0.2, 30.0)), sync_s=float(rng.uniform(0.05, 1.0)))
        ov = [*BASE, *pol, f"deployment.rollout.instances={K}", f"deployment.rollout.max_num_seqs={[4, 16, 64][j % 3]}",
              f"run.training_steps={STEPS}", f"router.name={['least_requests', 'round_robin'][j % 2]}"]
        out.append(Case(ov, wl, costs, label="random " + " ".join(pol) + f" K={K}"))
    return out + v1_cases() + hand_cases()


#: verl V1 (oldest-dispatch-first batches, drops by dispatch age, evicted groups' slots returned) and TRL async
#: (drops by dispatch age), in the same batch (one compile)
V1 = [
    ["policy=verl_v1"],
    ["policy=verl_v1", "policy.trainer_mode=separate_async", "policy.parameter_sync_step=1",
     "policy.ppo_mini_batch_size=2", "policy.num_warmup_batches=2", "policy.max_off_policy_threshold=1"],
    ["policy=verl_v1", "policy.trainer_mode=colocate_async", "policy.parameter_sync_step=3",
     "policy.ppo_mini_batch_size=1", "policy.max_off_policy_threshold=2", "policy.filter_groups_metric=acc"],
    ["policy=trl", "policy.mode=async", "policy.per_device_train_batch_size=8", "policy.num_processes=1",
     "policy.max_staleness=0", "policy.max_inflight_tasks=24"],
]


def v1_cases():
    out = []
    for j, pol in enumerate(V1):
        wl = random_workload(groups=GROUPS, n=N, seed=300 + j, prompt=(50, 400), completion=(20, 900),
                             zero_variance=0.3 if "filter_groups_metric=acc" in pol[-1] else 0.0)
        costs = linear_costs(kv_tokens=10**6, step_s=[0.5, 6.0][j % 2], sync_s=0.3)
        ov = [*BASE, *pol, f"deployment.rollout.instances={1 + j % 2}", "deployment.rollout.max_num_seqs=16",
              f"run.training_steps={STEPS}"]
        out.append(Case(ov, wl, costs, label=" ".join(pol)))
    return out


def _hand(label, comps, step_s, **record):
    """A hand-worked case: one instance, iterations of exactly 1 s (a = 1, b = c = p = 0), so a group of N
    identical calls of L tokens admitted at a boundary t finishes at t + L (a call routed while the instance
    is busy waits for its next boundary); training ``step_s``, publication 1 s, in-flight rule continue; the
    record's other fields: concurrency or budget and batches of one group (``record``)."""
    import attrs

    from simrl.policy.params import PolicyParams
    from simrl.policy.record import ParamsPolicy
    from simrl.policy.rules import InflightRule, code
    from workloads.types import build_workload, single_turn_group

    comps = comps + [9] * (GROUPS - len(comps))
    wl = build_workload("hand", 0, [single_turn_group(g, N, 10, [L] * N) for g, L in enumerate(comps)])
    rec = PolicyParams(batch_min_groups=1, batch_max_groups=1, inflight_rule=code(InflightRule.CONTINUE),
                       fast_path_exact=1, **record)
    ov = [*BASE, "deployment.rollout.instances=1", "deployment.rollout.max_num_seqs=64", f"run.training_steps={STEPS}"]
    case = Case(ov, wl, linear_costs(step_s=step_s, sync_s=1.0, a=1.0, b=0.0, c=0.0, p=0.0), label=label)
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(rec))
    return case


def hand_cases():
    """The hand-worked cases of `test_hand_worked_dispatch_age_cases` (their arithmetic is there)."""
    return [_hand("hand fifo", [5, 3, 1, 2, 4, 6], 10.0, admit_concurrency_groups=3),
            _hand("hand oldest", [5, 3, 1, 2, 4, 6], 10.0, admit_concurrency_groups=3, batch_order=2),
            _hand("hand age", [2, 20, 1, 30, 3], 5.0, admit_concurrency_groups=2, max_dispatch_age=0),
            _hand("hand kept", [2, 1, 9, 9], 1.0, admit_budget_base_groups=2, admit_budget_per_version_groups=1,
                  max_dispatch_age=0),
            _hand("hand returned", [2, 1, 9, 9], 1.0, admit_budget_base_groups=2, admit_budget_per_version_groups=1,
                  max_dispatch_age=0, admit_return_evicted=1)]


_RAN = {}


def ran():
    """Every case of this module, run by SimPy and, in one vmapped batch, by the fast path (once per session)."""
    if not _RAN:
        cs = cases()
        for c in cs:
            c.run_simpy()
        _RAN["cases"], _RAN["res"] = cs, run_fast(cs)
    return _RAN["cases"], _RAN["res"]


def test_each_preset_lowers_exactly_with_the_extensions_it_needs():
    ctx = LoweringContext(group_size=N, instances=2)
    recs = {" ".join(pol): Case([*BASE, *pol], None, None).cfg.policy.lower(ctx) for pol in PRESETS}
    assert all(r.fast_path_exact for r in recs.values())
    assert recs["policy=verl"].admit_count_since_publish == 1 and recs["policy=verl"].buffer_capacity_groups == 35
    assert recs["policy=verl policy.mode=one_step_off"].admit_budget_per_batch_groups == 32
    assert recs["policy=openrlhf"].admit_budget_per_batch_groups == 32
    assert recs["policy=nemo_rl"].batch_order == 1
    art = recs["policy=art"]
    assert (art.batch_min_groups, art.batch_max_groups, art.admit_queue_blocks_groups) == (4, 40, 160)
    dr = recs["policy=dressage policy.rollout_batch_size=3 policy.async_max_active_groups=5"]
    assert (dr.fail_on_version_crossing, dr.admit_concurrency_groups, dr.admit_buffer_cap_groups) == (2, 5, 800)


def test_presets_with_record_extensions_match_simpy():
    cs, res = ran()
    for m, c in enumerate(cs):
        assert c.report.diagnosis is None, c.label
        assert len(c.report.steps) == STEPS, c.label
        compare(c, res, m)
    # the extensions are exercised: verl's count restarts at a publication with groups still
    # running or buffered, and nemo_rl trains a window whose groups finished out of dispatch order
    assert any(s.gids != tuple(sorted(s.gids)) for c in cs if "nemo_rl" in c.label for s in c.report.steps)
    # ART's batches vary in size between min and max
    sizes = {len(s.gids) for c in cs if "art" in c.label for s in c.report.steps}
    assert len(sizes) > 1, sizes
    # dressage re-dispatches failed groups (and with retries 0 only aborts them)
    assert any(c.report.totals["groups_retried"] > 0 for c in cs if "dressage" in c.label)


def test_a_run_where_the_collapse_failsafe_may_have_fired_is_refused_by_name():
    # ART's failsafe stops SimPy after `collapse` zero-variance drops since the last batch; the scan
    # does not stop, so a result is kept only when fewer zero-variance groups finished in the whole run
    from types import SimpleNamespace

    from simrl_fast import FastPathUnsupported
    from simrl_fast.engine import _check_collapse
    from simrl_fast.lowering import lower

    wl = random_workload(groups=GROUPS, n=N, seed=5, zero_variance=0.3)
    case = Case([*BASE, "policy=art", "policy.discard_queue_multiplier=1", "policy.min_batch_size=2"], wl,
                linear_costs())
    _, p, wa = lower(case.cfg, wl, linear_costs())
    assert int(p.collapse) == 2 and wa.zero_var.sum() >= 2
    zero = np.nonzero(wa.zero_var)[0]
    finish = np.full((1, 2 * GROUPS), np.nan)
    finish[0, zero[0]] = 1.0  # one zero-variance group finished (gid = workload group on the first pass)
    finish[0, np.nonzero(~wa.zero_var)[0]] = 2.0
    _check_collapse([p], wa, SimpleNamespace(group_finish=finish), None)
    finish[0, GROUPS + zero[1]] = 3.0  # a second one, on the second pass: 2 >= collapse
    with pytest.raises(FastPathUnsupported, match=r"collapse failsafe \(collapse_zero_variance_groups=2\)"):
        _check_collapse([p], wa, SimpleNamespace(group_finish=finish), None)


def test_verl_v1_and_trl_async_lower_the_dispatch_age_fields():
    ctx = LoweringContext(group_size=N, instances=2)
    v1 = Case([*BASE, *V1[0]], None, None).cfg.policy.lower(ctx)
    # train_batch_size = parameter_sync_step 4 x ppo_mini_batch_size 8 = 32 groups; sync mode: depth 0, so the
    # budget is (0 + 1) * 32 + 32 * version; threshold 8: dropped past a dispatch age of 8 - 1 = 7
    assert (v1.batch_order, v1.max_dispatch_age, v1.admit_return_evicted, v1.fast_path_exact) == (2, 7, 1, 1)
    assert (v1.admit_budget_base_groups, v1.admit_budget_per_version_groups, v1.batch_max_groups) == (32, 32, 32)
    trl = Case([*BASE, *V1[3]], None, None).cfg.policy.lower(ctx)
    assert (trl.max_dispatch_age, trl.batch_order, trl.admit_concurrency_groups) == (0, 0, 6)  # 24 samples // 4


def _step(c, res, m, j):
    s = c.report.steps[j]
    fast = (tuple(int(g) for g in res.gids[m, j] if g >= 0), float(res.batch_ready[m, j]), float(res.publish_end[m, j]))
    assert fast == (s.gids, s.batch_ready, s.publish_end), c.label
    return fast


def test_hand_worked_dispatch_age_cases():
    """Iterations of 1 s on one instance (`_hand`); each fact below is derived by hand and holds for both engines.

    fifo / oldest (concurrency 3, training 10 s): g0, g1, g2 (L = 5, 3, 1) start at t = 0 and finish at 5, 3, 1.
    g2 is batch 1 at t = 1 (training 1..11, publication 11..12). Meanwhile g3 (L = 2) starts at 1 and is admitted
    at the boundary t = 2, finishing at 4, and g4 (L = 4) starts at 3, admitted at 4, finishing at 8. At t = 12
    the buffer holds, in finish order, g1 (3), g3 (4), g0 (5), g4 (8), ...: FIFO takes g1, oldest dispatch first
    takes g0 (the lowest gid), both with staleness 1 - 0 = 1.

    age (concurrency 2, max_dispatch_age 0, training 5 s): g0 (L = 2) and g1 (L = 20) start at 0; g0 finishes at 2
    and is batch 1 (training 2..7, publication 7..8: version 1 at t = 8). g2 (L = 1) starts at 2, admitted at 3,
    finishes at 4 and is buffered; at the publication (t = 8) its age is 1 - 0 = 1 > 0: evicted. g3 (L = 30)
    starts at 4 (dispatch version 0). g1 finishes at 20 with age 1 > 0: dropped at completion; g4 (L = 3) starts
    at 20 (dispatch version 1), admitted at 21, finishes at 24 with age 0: batch 2 is g4 at t = 24.

    kept / returned (budget 2 + 1 x version, max_dispatch_age 0, training 1 s): g0 (L = 2) and g1 (L = 1) start
    at 0; g1 is batch 1 at t = 1 (training 1..2, publication 2..3); g0 finishes at 2 and is buffered, then evicted
    at the publication (t = 3, age 1). The budget is now 3 and the count accepted + running is 2 (g0, g1): one
    group starts at 3 (g2). With the evicted group's slot returned the count is 2 - 1 = 1: two start at 3 (g2, g3,
    L = 9, admitted at once by the idle instance, finishing at 12). Batch 2 is g2 at t = 12 (training 12..13,
    publication 13..14) in both; batch 3 is g3 when kept (it starts at 14 and finishes at 23), but g4 when
    returned (g3, buffered since 12 with dispatch version 1, is evicted at t = 14; g4 and g5 start at 14)."""
    cs, res = ran()
    at = {c.label: m for m, c in enumerate(cs)}

    def step(label, j):
        return _step(cs[at[label]], res, at[label], j)

    assert step("hand fifo", 0) == step("hand oldest", 0) == ((2,), 1.0, 12.0)
    assert step("hand fifo", 1) == ((1,), 12.0, 23.0)
    assert step("hand oldest", 1) == ((0,), 12.0, 23.0)
    assert cs[at["hand oldest"]].report.steps[1].staleness == (1,)
    assert step("hand age", 0) == ((0,), 2.0, 8.0)
    assert step("hand age", 1) == ((4,), 24.0, 30.0)
    age = cs[at["hand age"]]
    assert {c.gid: c.finish for c in age.report.calls if c.gid in (1, 2)} == {1: 20.0, 2: 4.0}
    assert float(res.group_finish[at["hand age"], 2]) == 4.0 and float(res.group_finish[at["hand age"], 1]) == 20.0
    assert age.report.totals["trajectories_dropped"] >= 2 * N  # g1 and g2
    for label in ("hand kept", "hand returned"):
        assert step(label, 0) == ((1,), 1.0, 3.0)
        assert step(label, 1) == ((2,), 12.0, 14.0)
    assert step("hand kept", 2) == ((3,), 23.0, 25.0)
    assert step("hand returned", 2) == ((4,), 23.0, 25.0)
    starts = {lab: sorted({c.gid: c.arrival for c in cs[at[lab]].report.calls}.items()) for lab in ("hand kept", "hand returned")}
    assert starts["hand kept"][:3] == [(0, 0.0), (1, 0.0), (2, 3.0)]
    assert starts["hand returned"][:4] == [(0, 0.0), (1, 0.0), (2, 3.0), (3, 3.0)]
