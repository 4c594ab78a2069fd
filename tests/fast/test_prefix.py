"""The prefix cache over group-shared prompts on the fast path, worked by hand and against SimPy.

One instance, linear costs of dyadic numbers (a = 1 s per iteration, b = 0.5 s per decoding
sequence, c = 0, p = 0.125 s per prefilled token), so every boundary time below is exact in binary
and both engines must give it exactly. Every call has a 120-token prompt and 2 completion tokens.
"""

import attrs
import numpy as np
import pytest
from diffcases import BASE, Case, compare
from simhelpers import linear_costs, random_workload

from simrl.config import load_config
from simrl.policy.params import PolicyParams
from simrl.policy.record import ParamsPolicy
from simrl_fast.lowering import lower, stack_params, static_for
from workloads.types import CallSpec, GroupSpec, TrajectorySpec, build_workload, single_turn_group

PREFIX = [b.replace("prefix_caching=false", "prefix_caching=true") for b in BASE]
COSTS = {"a": 1.0, "b": 0.5, "c": 0.0, "p": 0.125}
ZERO_COMPLETIONS = [(2, 3, 2), (2, 2, 2), (2, 2, 2)]


def _lowered(*extra, workload=None, policy=None):
    cfg = load_config(overrides=[*PREFIX, "policy=bounded_async", "policy.batch_groups=2", *extra])
    if policy is not None:
        cfg = attrs.evolve(cfg, policy=policy)
    return lower(cfg, workload or random_workload(groups=4, n=2), linear_costs())


@pytest.mark.parametrize("extra, clear", [
    (["policy.inflight_rule=continue"], 0),  # no pause, no clear
    (["policy.inflight_rule=keep_pause"], 1), (["policy.inflight_rule=abort_resume"], 1),
    (["policy.inflight_rule=abort_restart"], 1),  # pause_all clears: at the resume, after the aborts
    (["policy.inflight_rule=drain"], 2), (["policy.inflight_rule=swap_in_place"], 2),  # at the publication
    (["policy.inflight_rule=continue", "deployment.placement=colocated"], 1),  # every colocated step pauses
])
def test_prefix_caching_lowers_with_when_the_sync_rule_clears_the_cache(extra, clear):
    static, p, wa = _lowered(*extra)
    assert int(p.pc) == 1 and int(p.pc_clear) == clear and static.prefix
    # random_workload shares each group's whole prompt; salted calls share nothing
    assert (wa.shared == wa.prompt).all() and (wa.gshared == wa.prompt[:, 0]).all()


def test_prefix_caching_without_shared_prompts_or_clears_is_not_traced():
    wl = build_workload("unshared", 0, [_group(g, 0) for g in range(2)] + [_group(2, 100, salted=True)])
    static, p, wa = _lowered(workload=wl)
    assert int(p.pc) == 0 and not static.prefix and int(wa.gshared[2]) == 100 and not wa.shared.any()
    static, p, _ = _lowered("deployment.rollout.prefix_caching=false")
    assert int(p.pc) == 0 and not static.prefix
    keep = ParamsPolicy(PolicyParams(admit_concurrency_groups=2, batch_min_groups=2, batch_max_groups=2,
                                     inflight_rule=1, clear_cache_on_sync=0, fast_path_exact=1))
    _, p, _ = _lowered(policy=keep)
    assert int(p.pc) == 1 and int(p.pc_clear) == 0  # the policy keeps its caches across updates


def test_a_static_without_the_prefix_cache_refuses_a_configuration_that_needs_it():
    from simrl_fast.engine import run

    static, p, wa = _lowered()
    off = static._replace(prefix=False)
    with pytest.raises(ValueError, match="Static.prefix=False"):
        run(off, stack_params([p]), wa)
    assert static_for([p._replace(pc=np.int32(0))], wa).prefix is False


def _group(g: int, shared: int, completions=(2, 2, 2), salted=False) -> GroupSpec:
    return GroupSpec(g, shared, tuple(TrajectorySpec(t, (CallSpec(120, 120, c, 0.0, salted),), float(t % 2))
                                      for t, c in enumerate(completions)))


def _case(groups, kv: int, label: str, extra=()):
    # bounded_async with the continue rule: no pause, no clear of the cache at the publication; three groups
    # per batch, staleness 0: the three groups are dispatched at t = 0, in order, to the one instance
    wl = build_workload(label, 0, groups)
    ov = [*PREFIX, "policy=bounded_async", "policy.batch_groups=3", "policy.max_staleness=0",
          "policy.inflight_rule=continue", "run.training_steps=1", "deployment.rollout.instances=1",
          "deployment.rollout.max_num_seqs=3", f"deployment.rollout.kv_capacity_tokens={kv}", *extra]
    return Case(ov, wl, linear_costs(kv_tokens=kv, step_s=1.0, sync_s=0.5, **COSTS), label)


@pytest.fixture(scope="module")
def cases(monkeypatch_module):
    pytest.importorskip("jax")
    from diffcases import run_fast

    import simrl.engine.instance as oracle

    # SimPy's instance state after every iteration that finished a call: (time, kv_used, cache entries)
    seen: dict[str, list] = {}
    orig = oracle.Instance.finish_iteration

    def spy(self, chunks):
        before = len(self.running)
        orig(self, chunks)
        if len(self.running) < before:
            seen.setdefault(self.label, []).append(
                (self.env.now, self.kv_used, [(k[1], v) for k, v in self.cache.items()]))

    monkeypatch_module.setattr(oracle.Instance, "finish_iteration", spy)
    lru = _case([_group(0, 100), _group(1, 60), _group(2, 80)], 346, "lru")
    salted = _case([_group(0, 100, salted=True), _group(1, 60), _group(2, 80)], 346, "salted")
    # chunked prefill: three groups sharing their whole prompt (a hit prefills nothing), a budget of 120 tokens
    whole = [_group(g, 120, (4, 2, 2)) for g in range(3)]
    chunk = _case(whole, 1000, "chunk", extra=["deployment.rollout.max_num_batched_tokens=120"])
    # iterations of zero seconds (a = 0, b = 1 s per decoding sequence: `test_a_zero_second_iteration_ends_after_the_router`)
    ov = [*PREFIX, "policy=bounded_async", "policy.batch_groups=3", "policy.max_staleness=0",
          "policy.inflight_rule=continue", "run.training_steps=1", "deployment.rollout.instances=1",
          "deployment.rollout.max_num_seqs=2", "deployment.rollout.kv_capacity_tokens=1000", "router.active_cap=2"]
    wl = build_workload("zero", 0, [single_turn_group(g, 3, 120, c) for g, c in enumerate(ZERO_COMPLETIONS)])
    zero = Case(ov, wl, linear_costs(kv_tokens=1000, step_s=1.0, sync_s=0.5, a=0.0, b=1.0, c=0.0, p=0.125), "zero")
    out = [lru, salted, chunk, zero]
    for c in out:
        monkeypatch_module.setattr(oracle.Instance, "label", c.label, raising=False)
        c.run_simpy()
    return out, seen, run_fast(out)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_shared_prefix_is_allocated_once_hit_released_to_the_cache_and_evicted_lru(cases):
    """Capacity 346, max_num_seqs 3; group 0 shares 100 of its 120 prompt tokens, group 1 60, group 2 80.

    t=0, group 0: call 0 allocates the prefix: KV 100 + 20 + 2 = 122 (reserve: prompt + completion),
    prefills all 120 tokens; calls 1 and 2 hit it: KV + 22 each (144, 166), prefill 20 each. The
    iteration prefills 160 tokens: 1 + 0.125*160 = 21 s; then 3 decoding: 1 + 1.5 = 2.5 s -> t=23.5,
    every call has its 2 tokens. Released: the last reference moves the prefix to the cache: KV 0,
    cache {g0: 100}.
    Group 1 (shared 60, private 60): call 3 allocates: 60 + 62 = 122 <= 346 - 100 free; calls 4, 5:
    62 each; KV 246 + cache 100 = 346, nothing evicted. Prefill 120 + 60 + 60 = 240: 1 + 30 = 31 s
    -> 54.5, then 57: cache {g0: 100, g1: 60} (g0 the least recently used).
    Group 2 (shared 80, private 40): call 6 allocates 80 + 42 = 122 <= 346 - 160 = 186 free; call 7
    hits: 42 <= 64 free; call 8 hits: 42 > 22 free, so make_room evicts the LRU entry, g0 (100
    tokens: 122 free); KV 206, cache {g1: 60}. Prefill 120 + 40 + 40 = 200: 1 + 25 = 26 s -> 83,
    then 85.5; released: cache {g1: 60, g2: 80} = 140 tokens (evicting g1 instead would leave 180).
    Batch [0, 1, 2] trains 85.5 -> 86.5, published at 87 (continue: the cache is kept)."""
    (lru, _, _, _), seen, res = cases
    assert seen["lru"] == [(23.5, 0, [(0, 100)]), (57.0, 0, [(0, 100), (1, 60)]), (85.5, 0, [(1, 60), (2, 80)])]
    finish = {c.gid * 3 + c.tid % 3: c.finish for c in lru.report.calls}
    assert finish == {0: 23.5, 1: 23.5, 2: 23.5, 3: 57.0, 4: 57.0, 5: 57.0, 6: 85.5, 7: 85.5, 8: 85.5}
    assert res.call_finish[0, :9].tolist() == [23.5] * 3 + [57.0] * 3 + [85.5] * 3
    assert res.publish_end[0, 0] == 87.0
    assert res.cache_tokens[0].tolist() == [140]
    compare(lru, res, 0, rel=0.0)


def test_salted_calls_never_share_and_a_cached_prefix_moves_back(cases):
    """As above with group 0's calls salted (shared_tokens 0): each holds its whole 120 + 2 privately.
    t=0: calls 0, 1 fit (244; a third would make 366 > 346) and prefill 240 tokens: 1 + 30 = 31 s, then
    2 decoding: 2 s -> 33, nothing cached. Calls 2 (122), 3 (group 1 allocates: 60 + 62 -> 244), 4 (hit:
    62 -> 306) prefill 120 + 120 + 60 = 300: 1 + 37.5 = 38.5 s -> 71.5, then 2.5 s -> 74: cache {g1: 60}.
    Call 5 finds group 1's prefix in the cache: it moves back (KV 60 + 62 = 122, cache 0) and prefills
    60; calls 6 (group 2 allocates: 122 -> 244) and 7 (hit: 42 -> 286); prefill 60 + 120 + 40 = 220:
    1 + 27.5 = 28.5 s -> 102.5, then 105: cache {g1: 60, g2: 80}. Call 8 moves g2's back (42 + 80 <= 346
    - 140) and prefills 40: 1 + 5 = 6 s -> 111, 1.5 s -> 112.5: cache {g1: 60, g2: 80} = 140."""
    (_, salted, _, _), seen, res = cases
    assert seen["salted"] == [(33.0, 0, []), (74.0, 0, [(1, 60)]), (105.0, 0, [(1, 60), (2, 80)]),
                              (112.5, 0, [(1, 60), (2, 80)])]
    assert res.call_finish[1, :9].tolist() == [33.0, 33.0, 74.0, 74.0, 74.0, 105.0, 105.0, 105.0, 112.5]
    assert res.cache_tokens[1].tolist() == [140]
    compare(salted, res, 1, rel=0.0)


def test_a_whole_prompt_hit_prefills_nothing_under_a_token_budget(cases):
    """Budget 120, every prompt (120) shared. t=0: calls 0, 1, 2 admitted; call 0 allocates the prefix and
    its chunk of 120 uses the whole budget, so calls 1 and 2 (nothing to prefill) get no chunk (the plan
    stops at a budget of 0): 1 + 0.125*120 = 16 s. t=16: call 0 decodes, the budget is 119: calls 1 and 2 get
    their chunks of 0 tokens; the iteration prefills nothing (SimPy continues its run): 1 + 0.5 = 1.5 s ->
    17.5, their first tokens. 3 decoding: 1 + 1.5 = 2.5 s -> 20: calls 1 and 2 have their 2 tokens, call 0
    3. t=20: calls 3 (group 1 allocates, a chunk of 119 = the budget left by call 0) and 4 (no chunk)
    admitted: 1 + 0.5 + 0.125*119 = 16.375 s -> 36.375, call 0's 4th token."""
    (_, _, chunk, _), _, res = cases
    finish = {c.gid * 3 + c.tid % 3: c.finish for c in chunk.report.calls}
    assert (finish[0], finish[1], finish[2]) == (36.375, 20.0, 20.0)
    assert res.call_finish[2, :3].tolist() == [36.375, 20.0, 20.0]
    compare(chunk, res, 2, rel=0.0)


def test_a_zero_second_iteration_ends_after_the_router(cases):
    """An iteration of zero seconds (nothing decodes and every prefilling request's whole prompt hit the prefix
    cache; here a = 0, b = 1 s per decoding sequence, c = 0, p = 0.125 s per token; the roofline's idle iteration
    in general) ends at the instant it began. SimPy schedules that timeout at the end of the instance's turn, after
    the router's wake-up that a finish in the turn triggered: the call the router then routes is admitted at that
    boundary (docs/fastpath.md, "Tie rules", 5). The fast path admitted it one boundary later (outsider seed 185).

    One instance, max_num_seqs 2, router.active_cap 2; groups a, b, c (3 calls each, 120-token prompts shared whole)
    with completions a (2, 3, 2), b (2, 2, 2), c (2, 2, 2), all dispatched at t = 0 (3 groups per batch, staleness 0).

    - t=0: a0, a1 routed (the cap), admitted: a0 prefills 120 (0.125*120 = 15 s), a1 hits (nothing). t=15: their
      first tokens; 2 decoding: 2 s. t=17: a0 finishes; the router routes a2; a1 alone: 1 s.
    - t=18: a1 finishes (group a's entry to the cache); a2 admitted, a hit: nothing decodes, nothing to prefill:
      0 s, due at 18. The router, woken by a1's finish, routes b0 first: the boundary at 18 admits b0 (a2's first
      token): a2 decoding + b0 prefilling 120: 1 + 15 = 16 s. (The fast path used to admit b0 at 19, after a 1 s
      iteration of a2 alone: a2 finished at 19.)
    - t=34: a2 finishes, b0's first token; the router routes b1; b0 alone: 1 s. t=35: b0 finishes, b1 admitted
      (a hit on the cached entry): 0 s again, and b2, routed first, is admitted at 35 too (b1's first token; b2
      nothing to prefill): 1 s. t=36: b1 finishes, b2's first token; c0 routed; b2 alone: 1 s.
    - t=37: b2 finishes; c0 admitted (allocates: 15 s); c1 routed, admitted at 52 (c0 decoding, c1 a hit: 1 s).
      t=53: c0 finishes, c1's first token; c2 routed; 1 s. t=54: c1 finishes; c2 admitted (a hit, 0 s; nothing
      left to route): its first token at 54; 1 s. t=55: c2 finishes: the batch at 55, training 55 -> 56,
      publication 56.5."""
    (_, _, _, zero), _, res = cases
    finish = [17.0, 18.0, 34.0, 35.0, 36.0, 37.0, 53.0, 54.0, 55.0]
    first = [15.0, 15.0, 18.0, 34.0, 35.0, 36.0, 52.0, 53.0, 54.0]
    calls = {c.gid * 3 + c.tid % 3: c for c in zero.report.calls}
    assert [calls[r].finish for r in range(9)] == finish
    assert [calls[r].first_token for r in range(9)] == first
    (s,) = zero.report.steps
    assert (s.batch_ready, s.train_end, s.publish_end) == (55.0, 56.0, 56.5)
    assert res.call_finish[3, :9].tolist() == finish
    assert (res.batch_ready[3, 0], res.publish_end[3, 0]) == (55.0, 56.5)
    compare(zero, res, 3, rel=0.0)
