"""SimPy vs JAX on random configurations inside the fast path's feature set, per step and per call.

The default run draws one batch (one compile): random configurations plus edge cases
(max_num_seqs=1, one instance, KV-bound, c=0, constant and dyadic iteration times where ties
are exact). `-m slow` adds more seeds and another workload shape.
"""

import numpy as np
import pytest

pytest.importorskip("jax")

from diffcases import BASE, Case, compare, random_case, run_fast  # noqa: E402
from simhelpers import linear_costs, random_workload  # noqa: E402

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
    return out


def run_batch(seed, count, groups=GROUPS, n=N, steps=STEPS, edges=True):
    rng = np.random.default_rng(seed)
    cases = [random_case(rng, groups, n, steps) for _ in range(count)]
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
    cases, res, worst = run_batch(seed=2024, count=40)
    assert worst["time"] == 0.0 and worst["call"] == 0.0  # compare asserts equality; nothing differs
    assert res.complete.sum() >= len(cases) - 3  # nearly all finish their steps (the rest: compared diagnoses)
    # the edge cases reach what they are meant to exercise
    edge = {c.label: m for m, c in enumerate(cases)}
    m = edge["c=0 round robin, calls on instances 1..3"]
    assert set(res.call_inst[m][res.call_inst[m] >= 0].tolist()) == {0, 1, 2, 3}
    assert any(max(s.staleness, default=0) > 0 for c in cases for s in c.report.steps)  # async cases occur


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_more_random_configurations_match_simpy(seed):
    run_batch(seed=seed, count=150, edges=False)


@pytest.mark.slow
def test_other_workload_shape_matches_simpy():
    run_batch(seed=9, count=100, groups=7, n=8, steps=4, edges=False)
