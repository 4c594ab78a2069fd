"""SimPy vs JAX on the presets whose record uses the record extensions (`simrl.policy.params`):
verl fully_async (count since the last publication, output-queue cap, a bounded queue admission keeps
from overflowing), verl one_step_off, OpenRLHF and slime train_async (a budget per batch taken),
NeMo-RL (dispatch-window batches), and synchronous ROLL (the sync shape, with a consumption-enforced
bound the engine leaves to the record). Each at its defaults and with small knobs, per step and per call, in one vmapped batch.
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
]


def cases():
    rng = np.random.default_rng(7)
    out = []
    for j, pol in enumerate(PRESETS):
        K = int(rng.integers(1, 4))
        wl = random_workload(groups=GROUPS, n=N, seed=100 + j, prompt=(50, 400), completion=(20, 900),
                             zero_variance=0.3 if "std_filter" in " ".join(pol) else 0.0)
        costs = linear_costs(kv_tokens=10**6, step_s=float(rng.uniform(0.2, 4.0)), sync_s=float(rng.uniform(0.05, 1.0)))
        ov = [*BASE, *pol, f"deployment.rollout.instances={K}", f"deployment.rollout.max_num_seqs={[4, 16, 64][j % 3]}",
              f"run.training_steps={STEPS}", f"router.name={['least_requests', 'round_robin'][j % 2]}"]
        out.append(Case(ov, wl, costs, label=" ".join(pol) + f" K={K}"))
    return out


def test_each_preset_lowers_exactly_with_the_extensions_it_needs():
    ctx = LoweringContext(group_size=N, instances=2)
    recs = {" ".join(pol): Case([*BASE, *pol], None, None).cfg.policy.lower(ctx) for pol in PRESETS}
    assert all(r.fast_path_exact for r in recs.values())
    assert recs["policy=verl"].admit_count_since_publish == 1 and recs["policy=verl"].buffer_capacity_groups == 35
    assert recs["policy=verl policy.mode=one_step_off"].admit_budget_per_batch_groups == 32
    assert recs["policy=openrlhf"].admit_budget_per_batch_groups == 32
    assert recs["policy=nemo_rl"].batch_order == 1


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
