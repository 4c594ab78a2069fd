"""Non-stationary workloads: response length drifting over steps, reward time and periodic
validation as time in the step (docs/model.md, "Reward and validation time"; workloads/drift.py).
Every expected value is derived by hand in the comments."""

import pytest

import workloads
from simrl.config import ConfigError, load_config
from simrl.engine.sim import simulate
from simrl_fast.lowering import FastPathUnsupported, check_supported
from workloads.drift import LengthDrift

# sync, 2 groups x 2 trajectories per step, constant 100-token completions, constant training
# (a = 2 s), fixed publication (1 s), 3 steps.
BASE = ["policy=sync", "policy.batch_groups=2", "workload.generator=constant", "workload.groups=8",
        "workload.group_size=2", "workload.knobs.completion=100", "workload.knobs.prompt=50",
        "cost.rollout=linear", "cost.training=constant", "cost.training_knobs.a=2.0", "cost.weight_sync=fixed",
        "cost.weight_sync_knobs.publish_s=1", "run.training_steps=3", "run.plots=false"]


def run(*extra):
    return simulate(load_config(None, [*BASE, *extra]))


def test_linear_growth_scales_completions_by_the_dispatch_version():
    # Step k trains groups dispatched at version k-1: factor 1 + 0.5 (k-1) = 1, 1.5, 2;
    # 4 trajectories x 100 x factor = 400, 600, 800 trained completion tokens.
    r = run("workload.knobs.length_growth_per_step=0.5")
    assert [s.trained_completion_tokens for s in r.steps] == [400, 600, 800]
    # Trained prompt tokens are unchanged: 4 x 50.
    assert [s.trained_prompt_tokens for s in r.steps] == [200, 200, 200]
    assert r.workload["name"] == "constant"


def test_knot_schedule_interpolates_and_holds():
    # knots (1, 1.0) .. (3, 2.0): version 0 -> 1.0 (held before the first knot), version 1 -> 1.0,
    # version 2 -> 1.5: 400, 400, 600.
    r = run("workload.knobs.length_drift_knots=[[1,1.0],[3,2.0]]")
    assert [s.trained_completion_tokens for s in r.steps] == [400, 400, 600]
    d = LengthDrift(knots=((1.0, 1.0), (3.0, 2.0)))
    assert [d.factor(v) for v in (0, 1, 2, 3, 9)] == [1.0, 1.0, 1.5, 2.0, 2.0]
    # round half to even, floored at 1, capped at max_model_len - prompt: 100 x 1.5 = 150;
    # 3 x 0.5 = 1.5 -> 2; 1 x 0.1 -> 1; 100 x 2 = 200 capped at 180 - 50 = 130.
    assert d.completion(100, 50, 2, None) == 150
    assert LengthDrift(knots=((0.0, 0.5),)).completion(3, 0, 0, None) == 2
    assert LengthDrift(knots=((0.0, 0.1),)).completion(1, 0, 0, None) == 1
    assert d.completion(100, 50, 3, 180) == 130


def test_drift_knobs_are_checked_by_name():
    with pytest.raises(ValueError, match="not both"):
        workloads.generate("constant", 2, 0, length_growth_per_step=0.1, length_drift_knots=[[0, 1.0]])
    with pytest.raises(ValueError, match="strictly increasing"):
        workloads.generate("constant", 2, 0, length_drift_knots=[[2, 1.0], [1, 2.0]])
    with pytest.raises(ValueError, match=r"length_drift_knots\[0\] factor"):
        workloads.generate("constant", 2, 0, length_drift_knots=[[0, 0.0]])
    with pytest.raises(ValueError, match="length_growth_per_step"):
        workloads.generate("constant", 2, 0, length_growth_per_step="fast")
    # No drift: the workload (and its knobs) is exactly as before.
    assert "length_growth_per_step" not in workloads.generate("constant", 2, 0).knobs


def test_reward_time_is_in_the_step_before_training():
    # 4 trajectories, 0.5 s each, 3 workers: ceil(4 / 3) = 2 rounds = 1.0 s between the batch
    # and the training (2 s), then the publication (1 s).
    r = run("deployment.training.reward_s_per_trajectory=0.5", "deployment.training.reward_workers=3")
    for s in r.steps:
        assert s.reward_s == pytest.approx(1.0)
        assert s.train_start - s.batch_ready == pytest.approx(1.0)
        assert s.train_end - s.train_start == pytest.approx(2.0)
        assert s.publish_end - s.train_end == pytest.approx(1.0)
    assert r.totals["reward_s"] == pytest.approx(3.0)


def test_validation_every_test_freq_steps_and_after_the_last():
    # test_freq 2, 3 steps: validation after steps 2 and 3 (verl validates after the last step),
    # 5 s each, rollout paused; step 3 starts waiting 5 s after step 2's publication.
    base = run()
    r = run("deployment.training.test_freq=2", "deployment.training.validation_s=5")
    assert [s.validation_s for s in r.steps] == pytest.approx([0.0, 5.0, 5.0])  # rollout is idle: no pause wait
    assert r.steps[2].wait_start == pytest.approx(r.steps[1].publish_end + 5.0)
    assert r.steps[1].step_time == pytest.approx(r.steps[1].publish_end + 5.0 - r.steps[1].wait_start)
    assert r.totals["makespan_s"] == pytest.approx(r.steps[2].publish_end + 5.0)
    assert r.totals["validation_s"] == pytest.approx(10.0)
    # Steps 1 and 2 are as without validation (it comes after step 2's publication).
    assert r.steps[1].publish_end == pytest.approx(base.steps[1].publish_end)
    with pytest.raises(ConfigError, match="validation_s"):
        load_config(None, [*BASE, "deployment.training.validation_s=-1"])


@pytest.mark.parametrize(("extra", "name"), [
    (["workload.knobs.length_growth_per_step=0.1"], "length_growth_per_step"),
    (["deployment.training.reward_s_per_trajectory=0.5"], "reward_s_per_trajectory"),
    (["deployment.training.test_freq=2", "deployment.training.validation_s=5"], "test_freq"),
    (["deployment.training.trigger_parameter_sync_step=2"], "trigger_parameter_sync_step"),
])
def test_fast_path_rejects_the_new_mechanics_by_name(extra, name):
    from simrl.cost.build import build_costs
    from simrl.engine.sim import load_workload

    fast = [*BASE, "deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.kv_policy=reserve",
            "deployment.rollout.prefix_caching=false", "router.active_cap=0"]
    plain = load_config(None, fast)
    check_supported(plain, load_workload(plain), build_costs(plain))  # supported without the mechanic
    cfg = load_config(None, [*fast, *extra])
    with pytest.raises(FastPathUnsupported, match=name):
        check_supported(cfg, load_workload(cfg), build_costs(cfg))


# -- streaming trainer (deployment.training.trigger_parameter_sync_step) -------------------------

SPREAD = ["policy=sync", "policy.batch_groups=4", "workload.groups=16", "workload.group_size=2",
          "workload.knobs.completion_knots=[[0,20],[1,2000]]", "cost.rollout=linear", "cost.training=constant",
          "cost.training_knobs.a=2.0", "cost.weight_sync=fixed", "cost.weight_sync_knobs.publish_s=1",
          "run.training_steps=3", "run.plots=false"]


def test_streaming_trains_mini_batches_as_they_arrive_and_publishes_after_k():
    cfg = load_config(None, [*SPREAD, "deployment.training.trigger_parameter_sync_step=2"])
    from simrl.engine.sim import build_simulation, summarise

    sim = build_simulation(cfg)
    sim.run()
    r = summarise(sim)
    ready = {}
    for e in sim.events:
        if e["kind"] == "mini_batch_ready":
            ready[(e["step"], e["mini_batch"])] = e["t"]
    for s in r.steps:
        assert s.mini_batches == 2 and s.groups == 4
        t1, t2 = ready[(s.step, 1)], ready[(s.step, 2)]
        # mini-batch 1 trains from t1 for 2 s; mini-batch 2 starts at max(t2, t1 + 2) and takes 2 s;
        # then the publication (1 s).
        assert s.batch_ready == pytest.approx(t1) and s.train_start == pytest.approx(t1)
        assert s.train_end == pytest.approx(max(t2, t1 + 2.0) + 2.0)
        assert s.publish_end == pytest.approx(s.train_end + 1.0)
        assert all(x == 0 for x in s.staleness)  # one version for the whole step
    # The first mini-batch is trained while the rest of the batch is still generating.
    assert any(ready[(s.step, 2)] > ready[(s.step, 1)] + 2.0 for s in r.steps)
    # With a per-token training cost, training the first half while the rest generates shortens the
    # run (with a constant cost per update both end at t2 + 2 s: nothing to overlap).
    per_token = ["cost.training_knobs.a=0.5", "cost.training_knobs.per_token=0.0005"]
    whole = simulate(load_config(None, [*SPREAD, *per_token]))
    streamed = simulate(load_config(None, [*SPREAD, *per_token, "deployment.training.trigger_parameter_sync_step=2"]))
    assert streamed.totals["makespan_s"] < whole.totals["makespan_s"]


def test_streaming_needs_a_batch_it_can_split():
    from simrl.engine.core import SimulationError

    with pytest.raises(SimulationError, match="must divide the policy's batch of 4"):
        simulate(load_config(None, [*SPREAD, "deployment.training.trigger_parameter_sync_step=3"]))
    with pytest.raises(SimulationError, match="disaggregated"):
        simulate(load_config(None, [*SPREAD, "deployment.training.trigger_parameter_sync_step=2",
                                    "deployment.placement=colocated"]))
