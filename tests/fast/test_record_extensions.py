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
    return out


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
    cs = cases()
    for c in cs:
        c.run_simpy()
    res = run_fast(cs)
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
