"""The parse caches of `simrl.config.load_config` (override values, files, the default data):
a cached load equals an uncached one, and no two configurations share a mutable container."""

from __future__ import annotations

import pytest

from simrl.config import ConfigError, clear_parse_caches, load_config, to_yaml, unstructure

OVERRIDES = ["policy=bounded_async", "policy.max_staleness=2", "deployment.rollout.instances=3",
             "workload.knobs={len_mu: 6.5, buckets: [1, 2, 3]}", "router.name=round_robin"]


def test_cached_load_equals_uncached(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("deployment:\n  rollout:\n    max_num_seqs: 128\nworkload:\n  knobs: {tags: [a, b]}\n")
    clear_parse_caches()
    first = to_yaml(load_config(str(path), OVERRIDES))
    again = to_yaml(load_config(str(path), OVERRIDES))  # every parse now a cache hit
    clear_parse_caches()
    assert first == again == to_yaml(load_config(str(path), OVERRIDES))
    assert load_config(str(path), OVERRIDES).deployment.rollout.max_num_seqs == 128


def test_configurations_share_no_mutable_container(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("workload:\n  knobs: {tags: [a, b]}\n")
    a = load_config(str(path), ["workload.knobs.buckets=[1, 2]"])
    b = load_config(str(path), ["workload.knobs.buckets=[1, 2]"])
    a.workload.knobs["buckets"].append(99)  # knobs dicts are mutable inside the frozen config
    a.workload.knobs["tags"].append("z")
    a.workload.knobs["new"] = 1
    assert b.workload.knobs == {"tags": ["a", "b"], "buckets": [1, 2]}
    c = load_config(str(path), ["workload.knobs.buckets=[1, 2]"])
    assert c.workload.knobs == {"tags": ["a", "b"], "buckets": [1, 2]}
    unstructure(load_config())["deployment"]["rollout"]["instances"] = 77  # the default data is copied too
    assert load_config().deployment.rollout.instances == 2


def test_changed_file_is_parsed_again(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("deployment:\n  rollout:\n    instances: 3\n")
    assert load_config(str(path)).deployment.rollout.instances == 3
    path.write_text("deployment:\n  rollout:\n    instances: 5\n")  # same size, same second: keyed by the text
    assert load_config(str(path)).deployment.rollout.instances == 5


def test_errors_are_not_cached(tmp_path):
    for _ in range(2):  # the second time is not a silent cache hit
        with pytest.raises(ConfigError, match="expected an integer"):
            load_config(overrides=["deployment.rollout.instances=abc"])
        with pytest.raises(ConfigError, match=r"override workload.knobs=\[1,"):
            load_config(overrides=["workload.knobs=[1, 2"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="expected a mapping of sections"):
            load_config(str(bad))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_file_is_an_error_not_the_default(tmp_path, text):
    # an empty document is almost always a mistake (a truncated or wrong file): it is named, and
    # the way to run the default is said; an explicit `{}` still means "change nothing"
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"empty.yaml: the configuration file is empty .* leave out --config"):
        load_config(str(path))
    path.write_text("{}\n")
    assert to_yaml(load_config(str(path))) == to_yaml(load_config())


def test_config_base_loads_what_load_config_loads(tmp_path):
    from simrl.config import ConfigBase

    path = tmp_path / "c.yaml"
    path.write_text("deployment:\n  rollout:\n    max_num_seqs: 128\n")
    base = ["policy=bounded_async", "workload.knobs.tags=[a]", "deployment.rollout.instances=3"]
    cb = ConfigBase(str(path), base)
    for more in ([], ["policy.max_staleness=2", "deployment.rollout.instances=4"], ["policy=sync"],
                 ["workload.knobs.tags=[b, c]"]):
        assert to_yaml(cb.load(more)) == to_yaml(load_config(str(path), [*base, *more]))
    a, b = cb.load(), cb.load()
    a.workload.knobs["tags"].append("x")
    assert b.workload.knobs["tags"] == ["a"] and cb.load().workload.knobs["tags"] == ["a"]
    with pytest.raises(ConfigError) as got:
        cb.load(["deployment.rollout.instances=0"])
    with pytest.raises(ConfigError) as want:
        load_config(str(path), [*base, "deployment.rollout.instances=0"])
    assert str(got.value) == str(want.value)
    with pytest.raises(ConfigError, match="expected an integer"):
        ConfigBase(str(path), ["deployment.rollout.instances=x"]).load()


def test_sweep_keys_equal_the_full_unstructure():
    """srl-sweep's workload and layout keys unstructure only their sections: the same text."""
    import json

    from simrl_explore.checks import _layout_key
    from simrl_explore.runner import _workload_key

    cfg = load_config(overrides=OVERRIDES)
    d = unstructure(cfg)
    assert _workload_key(cfg) == json.dumps([d["workload"], cfg.run.seed], sort_keys=True, default=str)
    parts = {"model": d["deployment"]["model"], "cost": d["cost"], "rollout": d["deployment"]["rollout"],
             "training": d["deployment"]["training"]}
    assert _layout_key(cfg, "rollout", "training") == json.dumps(parts, sort_keys=True, default=str)
