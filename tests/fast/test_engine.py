"""The fast engine's API: one compile per (Static, batch size), summaries equal to SimPy's totals."""

import pytest

pytest.importorskip("jax")

from simhelpers import linear_costs, random_workload, run_sim  # noqa: E402

from simrl.config import load_config  # noqa: E402

OV = ["deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
      "deployment.rollout.kv_policy=reserve", "policy=bounded_async", "policy.batch_groups=2",
      "run.training_steps=2", "deployment.rollout.instances=2"]


def configs(rules):
    return [load_config(overrides=[*OV, f"policy.inflight_rule={r}", f"policy.max_staleness={s}"])
            for r in rules for s in (0, 1)]


def test_step_compiles_once_per_static_and_batch_size():
    from simrl_fast import lower, stack_params
    from simrl_fast.engine import TRACE_COUNT, run
    from simrl_fast.lowering import static_for

    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    costs = linear_costs()
    a = [lower(c, wl, costs) for c in configs(["continue", "keep_pause"])]
    b = [lower(c, wl, costs) for c in configs(["drain", "abort_resume"])]
    static = static_for([p for _, p, _ in a + b], a[0][2])
    before = TRACE_COUNT["run"]
    r1 = run(static, stack_params([p for _, p, _ in a]), a[0][2])
    r2 = run(static, stack_params([p for _, p, _ in b]), a[0][2])  # other rules, other numbers: same program
    assert TRACE_COUNT["run"] == before + 1
    assert r1.complete.all() and r2.complete.all()


def test_simulate_batch_summaries_equal_simpy_totals():
    from simrl_fast import simulate_batch

    wl = random_workload(groups=6, n=2, seed=4, completion=(5, 60))
    costs = linear_costs()
    cfgs = configs(["continue", "abort_restart"])
    res = simulate_batch(cfgs, wl, costs)
    for m, cfg in enumerate(cfgs):
        rep, _ = run_sim([*OV, f"policy.inflight_rule={cfg.policy.inflight_rule}",
                          f"policy.max_staleness={cfg.policy.max_staleness}"], wl, costs)
        s, t = res.summary(m), rep.totals
        for k in ("makespan_s", "step_time_mean_s", "trained_tokens_per_s", "staleness_mean"):
            assert s[k] == pytest.approx(t[k], rel=1e-9), k
        assert s["staleness_max"] == t["staleness_max"] and s["tokens_trained"] == t["tokens_trained"]


def test_a_run_whose_every_group_is_dropped_stops_with_a_diagnosis():
    """Doubling the group slots stops once it buys no progress (no hang, no endless recompiles)."""
    import numpy as np

    from simrl_fast import FastPathNoProgress, lower
    from simrl_fast.engine import run_params

    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    ov = [*OV[:3], "policy=areal", "policy.consumer_batch_size=2", "policy.should_accept_fn=nonzero_std",
          "run.training_steps=2", "deployment.rollout.instances=2"]
    _, p, wa = lower(load_config(overrides=ov), wl, linear_costs())
    # Every group's rewards equal (`lower` diagnoses that itself; this is the engine's own guard).
    with pytest.raises(FastPathNoProgress, match="configuration 0 of the batch makes no progress") as exc:
        run_params([p], wa._replace(zero_var=np.ones_like(wa.zero_var), reward_std=np.zeros_like(wa.reward_std)))
    assert "groups accepted: 0" in str(exc.value) and "0 of 2 training steps" in str(exc.value)
    # One prompt in six with a reward spread: gids 0, 6, 12, 18 are accepted (the workload repeats every six
    # groups), the 19th dispatch completes the second batch of two; more slots did make progress.
    zero = np.ones_like(wa.zero_var)
    zero[0] = False
    res = run_params([p], wa._replace(zero_var=zero, reward_std=np.where(zero, 0.0, 1.0)))  # (the kernel's zero test)
    assert res.complete.all() and int(res.groups_accepted[0]) == 4 and int(res.groups_dispatched[0]) == 19
