"""Generators: registry, determinism, stream independence, structure of each workload."""

import numpy as np
import pytest

from workloads.registry import generate, generator_names, generator_spec
from workloads.types import Workload

ALL = ["constant", "long_generation", "multi_turn", "multi_turn_salted", "rl_code", "rl_math", "tool_history"]
BENCH = ["multi_turn", "long_generation", "tool_history", "multi_turn_salted"]


def test_names_and_default_group_sizes():
    assert generator_names() == ALL
    sizes = {n: generator_spec(n).default_group_size for n in ALL}
    assert sizes == {"constant": 4, "long_generation": 4, "multi_turn": 4, "multi_turn_salted": 4,
                     "rl_code": 8, "rl_math": 8, "tool_history": 8}


@pytest.mark.parametrize("name", ALL)
def test_every_generator_is_valid_deterministic_and_prefix_stable(name):
    w = generate(name, 40, seed=3)
    assert w.problems() == []
    assert w.group_size(0) == generator_spec(name).default_group_size
    assert generate(name, 40, seed=3).schedule_sha256() == w.schedule_sha256()
    longer = generate(name, 60, seed=3)
    assert longer.take_groups(40).schedule_sha256() == w.schedule_sha256()  # group g never depends on G
    if name != "constant":
        assert generate(name, 40, seed=4).schedule_sha256() != w.schedule_sha256()
    mml = w.knobs["max_model_len"]
    assert np.all(w.call_prompt_tokens + w.call_completion_tokens <= mml)


def test_unknown_name_and_knob_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown workload generator 'nope'; valid: constant"):
        generate("nope", 1, 0)
    with pytest.raises(ValueError, match=r"unknown knob\(s\) bogus; valid: .*max_completion"):
        generate("rl_math", 1, 0, bogus=1)
    with pytest.raises(ValueError, match="max_completion='x' must be an integer"):
        generate("rl_math", 1, 0, max_completion="x")
    with pytest.raises(ValueError, match="group_size must be an integer >= 2"):
        generate("multi_turn", 1, 0, group_size=1)
    with pytest.raises(ValueError, match="groups must be an integer >= 1"):
        generate("rl_math", 0, 0)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        generate("rl_math", 1, 1.5)
    assert generate("rl_math", np.int64(2), np.int64(5)).schedule_sha256() == generate("rl_math", 2, 5).schedule_sha256()
    with pytest.raises(ValueError, match="completion_knots: knot 2"):
        generate("rl_math", 1, 0, completion_knots=[[0, 5], [0.5, 9], [0.4, 10], [1, 20]])


def test_knobs_are_coerced_from_strings_and_recorded():
    w = generate("rl_math", 5, 0, max_completion="1000", length_correlation="0.2",
                 prompt_knots="[[0, 50], [1, 60]]")
    assert w.knobs["max_completion"] == 1000 and w.knobs["length_correlation"] == 0.2
    assert w.call_completion_tokens.max() <= 1000
    assert 50 <= w.call_prompt_tokens.min() and w.call_prompt_tokens.max() <= 60


def test_changing_one_field_leaves_the_others_identical():
    base = generate("rl_math", 300, 1)
    capped = generate("rl_math", 300, 1, max_completion=500)
    assert np.array_equal(base.call_prompt_tokens, capped.call_prompt_tokens)
    assert np.array_equal(base.traj_reward, capped.traj_reward)
    assert not np.array_equal(base.call_completion_tokens, capped.call_completion_tokens)
    other = generate("multi_turn", 200, 1, completion_knots=[[0, 10], [1, 20]])
    mt = generate("multi_turn", 200, 1)
    assert np.array_equal(mt.call_new_tokens, other.call_new_tokens)  # observations + first prompt
    assert np.array_equal(mt.traj_reward, other.traj_reward)
    assert not np.array_equal(mt.call_completion_tokens, other.call_completion_tokens)


def test_salted_equals_multi_turn_except_salt_flags():
    a, b = generate("multi_turn", 100, 9), generate("multi_turn_salted", 100, 9)
    assert not a.call_cache_salted.any() and b.call_cache_salted.all()
    for field in ("group_traj_start", "traj_call_start", "group_shared_prompt_tokens", "call_prompt_tokens",
                  "call_new_tokens", "call_completion_tokens", "call_tool_latency_s", "traj_reward"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    unsalted = Workload(**{**{f: getattr(b, f) for f in (
        "name", "seed", "group_traj_start", "traj_call_start", "traj_reward", "group_shared_prompt_tokens",
        "call_prompt_tokens", "call_new_tokens", "call_completion_tokens", "call_tool_latency_s")},
        "call_cache_salted": np.zeros(b.n_calls, bool)})
    assert unsalted.schedule_sha256() == a.schedule_sha256() != b.schedule_sha256()


@pytest.mark.parametrize("name", BENCH)
def test_benchmark_rewards_vary_in_every_group(name):
    w = generate(name, 500, 2)
    r = w.traj_reward.reshape(w.n_groups, -1)
    assert np.all(r.std(axis=1) > 0)


def test_benchmark_shapes():
    mt = generate("multi_turn", 50, 0)
    assert set(np.diff(mt.traj_call_start)) == {3} and mt.group_size(0) == 4
    first = mt.call_prompt_tokens[mt.traj_call_start[:-1]]
    assert np.array_equal(np.repeat(mt.group_shared_prompt_tokens, 4), first)  # history shared by the group
    lg = generate("long_generation", 500, 0)
    assert set(np.diff(lg.traj_call_start)) == {1}
    assert lg.call_completion_tokens.min() >= 512 and lg.call_completion_tokens.max() <= 4096
    th = generate("tool_history", 200, 0)
    assert th.group_size(0) == 8 and set(np.diff(th.traj_call_start)) == {1}
    assert np.median(th.call_prompt_tokens) > 20 * np.median(th.call_completion_tokens)


def test_max_model_len_forces_every_call_to_fit():
    w = generate("multi_turn", 2000, 0, max_model_len=7000)
    free = generate("multi_turn", 2000, 0)
    assert w.problems() == []
    assert np.all(w.call_prompt_tokens + w.call_completion_tokens <= 7000)
    assert np.any(free.call_prompt_tokens + free.call_completion_tokens > 7000)  # so the cap did bite
    assert np.array_equal(w.call_prompt_tokens[w.traj_call_start[:-1]],
                          free.call_prompt_tokens[free.traj_call_start[:-1]])
    with pytest.raises(ValueError, match="max_model_len=2000 cannot hold"):
        generate("tool_history", 50, 0, max_model_len=2000)


def test_rl_math_shape():
    w = generate("rl_math", 4000, 0)
    c = w.call_completion_tokens
    assert 520 < np.median(c) < 680 and 3300 < np.quantile(c, 0.99) < 4800 and c.max() <= 8192
    assert 100 <= w.call_prompt_tokens.min() and w.call_prompt_tokens.max() <= 1000
    r = w.traj_reward.reshape(-1, 8)
    zero_var = (r.std(axis=1) == 0).mean()
    assert 0.2 < zero_var < 0.3  # knob default 0.25
    cc = c.reshape(-1, 8)
    assert np.corrcoef(np.log(cc[:, 0]), np.log(cc[:, 1]))[0, 1] > 0.2  # difficulty shared by the group
    lengths = cc.mean(axis=1)
    assert r[lengths > np.median(lengths)].mean() < r[lengths <= np.median(lengths)].mean()  # hard = long
    none = generate("rl_math", 500, 0, zero_variance_fraction=0.0).traj_reward.reshape(-1, 8)
    assert np.all(none.std(axis=1) > 0)


def test_rl_code_repair_calls():
    w = generate("rl_code", 100, 0, calls=3)
    assert set(np.diff(w.traj_call_start)) == {3}
    assert w.call_tool_latency_s.min() >= 0.05 and w.problems() == []


def test_constant_is_analytic():
    w = generate("constant", 3, 0, group_size=2, prompt=100, completion=10, calls=3, new_tokens=5,
                 tool_latency_s=0.5, shared_prompt=40)
    g = w.group(0)
    assert [c.prompt_tokens for c in g.trajectories[0].calls] == [100, 115, 130]
    assert [c.new_tokens for c in g.trajectories[0].calls] == [100, 5, 5]
    assert all(c.completion_tokens == 10 and c.tool_latency_s == 0.5 for c in g.trajectories[1].calls)
    assert g.shared_prompt_tokens == 40 and [t.reward for t in g.trajectories] == [0.0, 1.0]
