"""Typed configuration: defaults, overrides, YAML round trip, errors naming the key path."""

import pytest
import yaml

from simrl.config import ConfigError, load_config, structure, to_yaml, unstructure


def test_default_round_trips_through_yaml():
    cfg = load_config()
    assert structure(yaml.safe_load(to_yaml(cfg))) == cfg


def test_overrides_apply_and_policy_kind_switch_takes_its_defaults():
    cfg = load_config(overrides=["policy=sync", "policy.batch_groups=16", "deployment.rollout.instances=4",
                                 "cost.rollout_knobs.overhead_s=0.01"])
    assert cfg.policy.kind == "sync" and cfg.policy.batch_groups == 16
    assert cfg.deployment.rollout.instances == 4
    assert cfg.cost.rollout_knobs == {"overhead_s": 0.01}


def test_yaml_file_merges_section_by_section(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("deployment:\n  rollout:\n    tp: 2\nrun:\n  seed: 7\n")
    cfg = load_config(str(p), ["run.training_steps=2"])
    assert cfg.deployment.rollout.tp == 2 and cfg.deployment.rollout.instances == 2
    assert cfg.run.seed == 7 and cfg.run.training_steps == 2


@pytest.mark.parametrize(
    "override, expected",
    [
        (["deployment.rollout.tp=x"], "deployment.rollout.tp"),
        (["deployment.rollot.tp=2"], "deployment.rollot: unknown key"),
        (["policy=nope"], "unknown policy kind 'nope'"),
        (["router.name=foo"], "router.name"),
        (["policy.foo=1"], "policy.foo: unknown key"),
        (["deployment.training.gpus=7", "deployment.training.tp=2"], "not divisible"),
        (["deployment.rollout.kv_policy=lazy"], "deployment.rollout.kv_policy"),
        (["run.training_steps=0"], "training_steps"),
        (["novalue"], "expected KEY=VALUE"),
    ],
)
def test_bad_values_name_the_key(override, expected):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=override)
    assert expected in str(err.value)


def test_bad_files_are_reported(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(bad))
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(str(lst))


def test_unstructure_policy_carries_kind():
    d = unstructure(load_config(overrides=["policy=bounded_async", "policy.max_staleness=3"]))
    assert d["policy"]["kind"] == "bounded_async" and d["policy"]["max_staleness"] == 3


def test_preset_knob_errors_name_the_knob():
    with pytest.raises(ConfigError, match=r"policy\.staleness: .*>= 0"):
        load_config(overrides=["policy=psrl", "policy.staleness=-1"])


def test_bad_trace_path_is_a_clean_simulation_error(tmp_path):
    from simrl.engine.core import SimulationError
    from simrl.engine.sim import load_workload

    bad = tmp_path / "t.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(SimulationError, match=r"workload\.trace: .*t\.jsonl:1"):
        load_workload(load_config(overrides=[f"workload.trace={bad}"]))
