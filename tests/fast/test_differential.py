"""SimPy vs JAX on random configurations inside the fast path's feature set, per step and per call.

The default run draws one batch (one compile): random configurations (reserve and on_demand KV)
plus edge cases (max_num_seqs=1, one instance, KV-bound, c=0, constant and dyadic iteration times
where ties are exact, on_demand KV that preempts under every in-flight rule). `-m slow` adds more
seeds and another workload shape.
"""

import numpy as np
import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, COLOCATED, Case, compare, random_case, run_fast  # noqa: E402
from simhelpers import linear_costs, random_workload  # noqa: E402

from workloads.types import build_workload, single_turn_group  # noqa: E402

GROUPS, N, STEPS = 10, 4, 3


def edge_cases(rng):
    wl = random_workload(groups=GROUPS, n=N, seed=11, prompt=(50, 300), completion=(5, 200))
    need = int((wl.call_prompt_tokens + wl.call_completion_tokens).max())
    common = [*BASE, f"run.training_steps={STEPS}"]
    ba = ["policy=bounded_async", "policy.batch_groups=2", "policy.max_staleness=1"]
    out = []
    for rule in ("continue", "keep_pause", "abort_resume", "abort_restart", "drain"):
        out.append(Case([*common, *ba, f"policy.inflight_rule={rule}", "deployment.rollout.max_num_seqs=1",
                         "deployment.rollout.instances=2"], wl, linear_costs(kv_tokens=10**6), f"S=1 {rule}"))
    out.append(Case([*common, "policy=sync", "policy.batch_groups=3", "deployment.rollout.instances=1"], wl,
                    linear_costs(kv_tokens=10**6), "one instance, sync"))
    for rule in ("keep_pause", "abort_resume"):
        out.append(Case([*common, *ba, f"policy.inflight_rule={rule}", "deployment.rollout.instances=3",
                         f"deployment.rollout.kv_capacity_tokens={need}"], wl, linear_costs(kv_tokens=need),
                        f"KV-bound {rule}"))
    out.append(Case([*common, *ba, "deployment.rollout.instances=4", "router.name=round_robin"], wl,
                    linear_costs(c=0.0), "c=0 round robin, calls on instances 1..3"))
    out.append(Case([*common, *ba, "deployment.rollout.instances=3", "policy.inflight_rule=keep_pause"], wl,
                    linear_costs(b=0.0, c=0.0, p=0.0), "constant iterations (exact ties)"))
    out.append(Case([*common, *ba, "deployment.rollout.instances=2", "policy.inflight_rule=continue"], wl,
                    linear_costs(a=2**-7, b=2**-12, c=0.0, p=2**-14, step_s=2.0, sync_s=0.5), "dyadic times"))
    # on_demand KV with a capacity of 1-2 calls per instance: preemptions under every rule, with short
    # training steps so that pauses land among them; exact ties (constant, dyadic times) included
    od = [*[b.replace("kv_policy=reserve", "kv_policy=on_demand") for b in common], "deployment.rollout.max_num_seqs=16"]
    for k, rule in enumerate(("continue", "keep_pause", "abort_resume", "abort_restart", "drain")):
        kv = int(need * (1.0, 1.25, 1.5, 2.0, 1.0)[k])
        out.append(Case([*od, *ba, f"policy.inflight_rule={rule}", "deployment.rollout.instances=2",
                         f"deployment.rollout.kv_capacity_tokens={kv}"], wl,
                        linear_costs(kv_tokens=kv, step_s=0.05, sync_s=0.02), f"on_demand {rule} kv={kv}"))
    out.append(Case([*od, *ba, "deployment.rollout.instances=3", "policy.inflight_rule=abort_resume",
                     f"deployment.rollout.kv_capacity_tokens={need}"], wl,
                    linear_costs(kv_tokens=need, a=2**-7, b=0.0, c=0.0, p=0.0, step_s=2**-3, sync_s=2**-4),
                    "on_demand constant iterations (exact ties)"))
    out.append(Case([*od, *ba, "deployment.rollout.instances=2", "policy.inflight_rule=keep_pause",
                     f"deployment.rollout.kv_capacity_tokens={need * 2}"], wl,
                    linear_costs(kv_tokens=need * 2, a=2**-7, b=2**-12, c=0.0, p=2**-14, step_s=0.25, sync_s=0.125),
                    "on_demand dyadic times"))
    out.append(Case([*od, *ba, "deployment.rollout.instances=1", "policy.inflight_rule=keep_pause",
                     f"deployment.rollout.kv_capacity_tokens={need * 100}"], wl, linear_costs(kv_tokens=need * 100),
                    "on_demand, never preempted"))
    return out + colocated_cases(wl)


def colocated_cases(wl):
    """Colocated placement: the pause at the batch under the colocated rule of each in-flight rule,
    offload before and after (Costs built in code: offload_s / 2, then offload_s / 2 + publish), the
    presets whose default mode is colocated with small batches, a zero offload, and a batch already
    buffered when a publication ends (the resumed instances pause again before running)."""
    common = [*COLOCATED, f"run.training_steps={STEPS}"]
    ba = ["policy=bounded_async", "policy.batch_groups=2", "policy.max_staleness=1"]
    off = lambda x, **kw: attrs.evolve(linear_costs(kv_tokens=10**6, **kw), offload_s=x)  # noqa: E731
    out = []
    for j, rule in enumerate(("continue", "keep_pause", "abort_resume", "abort_restart", "drain", "swap_in_place")):
        out.append(Case([*common, *ba, f"policy.inflight_rule={rule}", f"deployment.rollout.max_num_seqs={[1, 3][j % 2]}",
                         "deployment.rollout.instances=2"], wl, off(3.0), f"colocated {rule}"))
    out.append(Case([*common, "policy=sync", "policy.batch_groups=3", "deployment.rollout.instances=3"], wl,
                    off(0.0, sync_s=0.25), "colocated sync, no offload"))
    # groups of equal short lengths admitted together finish at one boundary, so more than a batch is
    # buffered when the trainer takes one, while every third group (long) is still running: the resumed
    # instance pauses again with its (aborted) requests before running an iteration
    same = build_workload("colocated", 0, [
        single_turn_group(g, N, 50 + g, [300 if g % 3 == 2 else 40] * N, [float(i % 2) for i in range(N)])
        for g in range(GROUPS)])
    for rule in ("keep_pause", "abort_restart"):
        out.append(Case([*common, "policy=bounded_async", "policy.batch_groups=1", "policy.max_staleness=3",
                         f"policy.inflight_rule={rule}", "deployment.rollout.instances=1", "run.training_steps=8"], same,
                        off(0.5, step_s=0.5, sync_s=0.1), f"colocated {rule}, a batch buffered at the publication"))
    out.append(Case([*common, "policy=trl", "policy.per_device_train_batch_size=4", "policy.num_processes=2",
                     "deployment.rollout.instances=2"], wl, off(2.0), "colocated trl (sync: drain as keep_pause)"))
    out.append(Case([*common, "policy=slime", "policy.rollout_batch_size=3", "deployment.rollout.instances=3"], wl,
                    off(1.0, c=0.0), "colocated slime (sync)"))
    return out


def run_batch(seed, count, groups=GROUPS, n=N, steps=STEPS, edges=True, on_demand=0, chunked=False):
    """``chunked``: the random cases draw max_num_batched_tokens too (the whole batch then runs the chunked
    code). Unchunked (the default) the batch runs the unchunked kernel; the chunked code has its own CI cases
    (tests/fast/test_chunked_prefill.py, the hypothesis suite)."""
    rng = np.random.default_rng(seed)
    cases = [random_case(rng, groups, n, steps, chunked=chunked) for _ in range(count)]
    cases += [random_case(rng, groups, n, steps, kv_policy="on_demand", chunked=chunked) for _ in range(on_demand)]
    if edges:
        cases += edge_cases(rng)
    for c in cases:
        c.run_simpy()
    res = run_fast(cases)
    worst = {"time": 0.0, "call": 0.0}
    for m, c in enumerate(cases):
        for k, v in compare(c, res, m).items():
            worst[k] = max(worst[k], v)
    return cases, res, worst


def test_random_and_edge_configurations_match_simpy():
    cases, res, worst = run_batch(seed=2024, count=40, on_demand=12)
    assert worst["time"] == 0.0 and worst["call"] == 0.0  # compare asserts equality; nothing differs
    assert res.complete.sum() >= len(cases) - 3  # nearly all finish their steps (the rest: compared diagnoses)
    # the edge cases reach what they are meant to exercise
    edge = {c.label: m for m, c in enumerate(cases)}
    m = edge["c=0 round robin, calls on instances 1..3"]
    assert set(res.call_inst[m][res.call_inst[m] >= 0].tolist()) == {0, 1, 2, 3}
    assert any(max(s.staleness, default=0) > 0 for c in cases for s in c.report.steps)  # async cases occur
    # colocated: every step pays the offload; with a batch buffered when a publication ends the next
    # pause starts at once (batch_ready = the publish end), and the aborting rules abort
    col = [c for c in cases if c.label.startswith("colocated")]
    assert all(s.offload_s == c.costs.offload_s and s.train_start > s.batch_ready for c in col
               for s in c.report.steps if c.costs.offload_s > 0)
    for c in col:
        if "buffered" in c.label:
            assert any(b.batch_ready == a.publish_end for a, b in zip(c.report.steps, c.report.steps[1:], strict=False))
        if "abort" in c.label:
            assert c.report.totals["aborts"] > 0, c.label
    # on_demand: the tight edge cases and most random ones preempt (compare() checks the counts)
    od = [m for m, c in enumerate(cases) if "on_demand" in c.label]
    assert len(od) == 12 + 8
    preempting = {m for m in od if res.preemptions[m].sum() > 0}
    tight = [m for m in od if not cases[m].label.startswith("K=") and cases[m].label != "on_demand, never preempted"]
    assert len(tight) == 7 and set(tight) <= preempting  # every tight edge case preempts
    assert len(preempting - set(tight)) >= 3  # and some of the random ones
    assert res.preemptions[edge["on_demand, never preempted"]].sum() == 0
    assert all(res.preemptions[m].sum() == 0 for m, c in enumerate(cases) if "on_demand" not in c.label)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_more_random_configurations_match_simpy(seed):
    run_batch(seed=seed, count=150, edges=False, on_demand=60, chunked=True)


@pytest.mark.slow
def test_other_workload_shape_matches_simpy():
    run_batch(seed=9, count=100, groups=7, n=8, steps=4, edges=False, chunked=True)


#: the coverage table's fixes (docs/fastpath.md): the three configuration features fkv's area lacks
FIXES = ["deployment.rollout.kv_policy=reserve", "deployment.rollout.max_num_batched_tokens=0",
         "deployment.rollout.prefix_caching=false"]


@pytest.mark.slow
def test_colocated_presets_at_their_defaults_match_simpy():
    """trl, slime and verl_v1 at their defaults (sync, colocated: the default scenario's roofline rollout,
    analytical training and the built ColocatedCost phases; verl_v1 with its oldest-dispatch-first batches,
    dispatch-age drops and returned admission slots)."""
    from simrl.config import load_config
    from simrl.cost.build import build_costs
    from simrl.engine.sim import load_workload
    cases = []
    for kind in ("trl", "slime", "verl_v1"):
        cfg = load_config(overrides=[f"policy={kind}", *FIXES])
        costs = build_costs(cfg)
        assert costs.colocated is not None and costs.offload_before_s() > 0
        cases.append(Case([f"policy={kind}", *FIXES], load_workload(cfg), costs, kind))
    for c in cases:
        c.run_simpy()
        assert c.report.diagnosis is None and all(s.offload_s == c.costs.offload_s for s in c.report.steps)
    res = run_fast(cases)
    for m, c in enumerate(cases):
        compare(c, res, m)
