"""build_costs: families, knobs, strict mode, artifacts, plug-in families, domain reports."""

import pytest

from simrl.config import load_config
from simrl.cost.analytical import AnalyticalTraining, FixedTraining
from simrl.cost.base import CostModelError, OutOfDomainError, RolloutCost, TrainingCost, WeightSyncCost
from simrl.cost.build import Costs, build_costs, families, register_rollout_family
from simrl.cost.roofline import RooflineRollout


def build(*overrides):
    return build_costs(load_config(overrides=list(overrides)))


def test_default_run_builds_the_analytical_families():
    c = build()
    assert isinstance(c, Costs)
    assert isinstance(c.rollout, RooflineRollout) and isinstance(c.rollout, RolloutCost)
    assert isinstance(c.training, AnalyticalTraining) and isinstance(c.training, TrainingCost)
    assert isinstance(c.weight_sync, WeightSyncCost) and c.weight_sync.mode == "nccl"
    assert c.domain_reports() == []
    assert c.offload_s > 0.0  # priced always; the engine charges it only when colocated


def test_layout_comes_from_the_deployment():
    c = build("deployment.rollout.tp=2", "deployment.training.tp=2", "deployment.rollout.max_num_seqs=128")
    assert c.rollout.tp == 2 and c.training.tp == 2 and c.rollout.max_num_seqs == 128


def test_knobs_are_passed_through():
    slow = build("cost.rollout_knobs.compute_efficiency=0.3").rollout
    fast = build().rollout
    assert slow.iteration_time(0, 0, 8192) > 1.5 * fast.iteration_time(0, 0, 8192)
    assert build("cost.training_knobs.lora_rank=16").training.lora_rank == 16


def test_unknown_knob_names_its_key_and_lists_valid_ones():
    with pytest.raises(CostModelError) as exc:
        build("cost.rollout_knobs.compute_eff=0.5")
    msg = str(exc.value)
    assert "cost.rollout_knobs.compute_eff" in msg and "compute_efficiency" in msg
    with pytest.raises(CostModelError, match="cost.training_knobs.tp"):
        build("cost.training_knobs.tp=2")  # layout lives in deployment.training
    with pytest.raises(CostModelError, match="cost.weight_sync_knobs.rank"):
        build("cost.weight_sync_knobs.rank=8")  # nccl has no rank


def test_bad_knob_value_is_a_cost_model_error():
    with pytest.raises(CostModelError, match="compute_efficiency"):
        build("cost.rollout_knobs.compute_efficiency=2")


def test_fixed_training_needs_step_s():
    with pytest.raises(CostModelError, match="cost.training_knobs.step_s"):
        build("cost.training=fixed")
    c = build("cost.training=fixed", "cost.training_knobs.step_s=7")
    assert isinstance(c.training, FixedTraining) and c.training.step_time([100]) == 7


def test_weight_sync_modes_and_lora_rank_from_training():
    for mode in ("nccl", "checkpoint_engine", "filesystem", "lora"):
        assert build(f"cost.weight_sync={mode}").weight_sync.publish_time(2) > 0
    c = build("cost.weight_sync=lora", "cost.training_knobs.lora_rank=8")
    assert c.weight_sync.knobs["rank"] == 8
    assert build("cost.weight_sync=fixed", "cost.weight_sync_knobs.publish_s=3").weight_sync.publish_time(1) == 3


def test_unknown_family():
    with pytest.raises(CostModelError, match="roofline"):
        build("cost.rollout=magic")


def test_strict_turns_domain_exits_into_errors():
    c = build("cost.strict=true")
    with pytest.raises(OutOfDomainError):
        c.rollout.iteration_time(10_000, 1000, 0)


def test_domain_reports_collect_all_models():
    c = build()
    with pytest.warns(UserWarning):
        c.rollout.iteration_time(10_000, 1000, 0)
    with pytest.warns(UserWarning):
        c.weight_sync.publish_time(100_000)
    dims = {(r["model"].split("[")[0], r["dimension"]) for r in c.domain_reports()}
    assert dims == {("roofline", "batch_size"), ("weight_sync", "n_instances")}


def test_colocated_placement_prices_offload():
    assert build("deployment.placement=colocated").offload_s > 1.0


def test_offload_is_charged_when_the_policy_colocates():
    from simrl.config import load_config
    from simrl.engine.sim import simulate

    def offloads(*ov):
        cfg = load_config(overrides=["workload.groups=8", "run.training_steps=1", "run.telemetry=false", *ov])
        return [s.offload_s for s in simulate(cfg).steps]

    assert all(x > 1.0 for x in offloads("policy=trl", "policy.mode=sync", "policy.per_device_train_batch_size=4",
                                          "policy.num_processes=8"))
    assert offloads("policy=sync", "policy.batch_groups=8") == [0.0]


def test_artifact_path_is_loaded_checked_and_strict_applies(tmp_path):
    from simrl.cost.artifact import write_artifact
    from simrl.cost.fit import fit_artifact
    from simrl.cost.linear import LinearRollout
    from simrl.cost.observations import make

    obs = [make("iteration", 1e-3 + 1e-5 * b + 2e-5 * p, "s",
                {"batch_size": b, "kv_tokens": 10 * b, "prefill_tokens": p},
                {"hardware": "H100", "source": "synthetic", "date": "2026-01-01"})
           for b, p in [(1, 0), (8, 0), (64, 512), (0, 1024), (32, 64)]]
    path = tmp_path / "rollout.json"
    write_artifact(path, fit_artifact("psrl", obs, model="qwen3-8b", tp=1))
    c = build(f"cost.rollout={path}", "cost.strict=true")
    assert isinstance(c.rollout, LinearRollout) and c.rollout.domain.strict
    assert c.sources["rollout"].spec == str(path) and c.sources["rollout"].family == "psrl"
    with pytest.raises(CostModelError, match="cost.rollout_knobs.a: knobs are not used with an artifact"):
        build(f"cost.rollout={path}", "cost.rollout_knobs.a=1")
    with pytest.raises(CostModelError, match="cannot read"):
        build("cost.rollout=fitted/rollout.json")


def test_fitted_only_family_by_name_points_to_artifacts():
    with pytest.raises(CostModelError, match="'psrl' is fitted: give its artifact path"):
        build("cost.rollout=psrl")


def test_registered_family_plugs_in():
    from simrl.cost import registry

    try:
        register_rollout_family("tiny", lambda cfg, knobs: RooflineRollout(cfg.deployment.model, "H200", **knobs))
        assert "tiny" in families("rollout")
        assert build("cost.rollout=tiny").rollout.gpu.name == "H200"
        register_rollout_family("tiny", lambda cfg, knobs: object())
        with pytest.raises(CostModelError, match="not a rollout cost model"):
            build("cost.rollout=tiny")
        with pytest.raises(ValueError):
            register_rollout_family("x.json", lambda cfg, knobs: None)
    finally:
        registry.unregister("rollout", "tiny")
    assert "tiny" not in families("rollout")
