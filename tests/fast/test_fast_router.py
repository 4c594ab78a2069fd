"""The router on the JAX fast path (simrl_fast.router): router.active_cap and dp_shard, against runs worked
out by hand and against SimPy per step and per call; the routers still refused by name (numpy only)."""

import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare, run_fast  # noqa: E402

from simrl.cost.build import Costs  # noqa: E402
from simrl.cost.linear import ConstantSync, ConstantTraining, LinearRollout  # noqa: E402
from simrl_fast.lowering import FastPathUnsupported, lower  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# one group of four calls (prompt 100 tokens) with completions of 2, 4, 1, 1 tokens
LENGTHS = [2, 4, 1, 1]


def _costs() -> Costs:
    # every iteration takes a = 0.01 s (no batch, KV or prefill term): a call admitted at t with L tokens
    # finishes at t + 0.01 L; a training step 0.05 s, a publication 0.1 s
    return Costs(LinearRollout(a=0.01, b=0.0, c=0.0, p=0.0, kv_tokens=10**6), ConstantTraining(a=0.05),
                 ConstantSync(0.1))


def _case(router: str, cap: int) -> Case:
    wl = build_workload("hand", 0, [single_turn_group(0, 4, 100, LENGTHS, [0.0, 1.0, 0.0, 1.0])])
    ov = [*(o for o in BASE if not o.startswith("router.")), "policy=sync", "policy.batch_groups=1",
          "deployment.rollout.instances=2", "deployment.rollout.max_num_seqs=8", f"router.name={router}",
          f"router.active_cap={cap}", "run.training_steps=1"]
    return Case(ov, wl, _costs(), label=f"{router} cap={cap}")


#: (router, active_cap) -> per call (instance, finish), worked out by hand (see the test's doc)
WANT = {
    ("least_requests", 0): [(0, 0.02), (1, 0.04), (0, 0.01), (1, 0.01)],
    ("least_requests", 1): [(0, 0.02), (1, 0.04), (0, 0.03), (0, 0.04)],
    ("round_robin", 1): [(0, 0.02), (1, 0.04), (0, 0.03), (0, 0.04)],
    ("dp_shard", 0): [(0, 0.02), (0, 0.04), (1, 0.01), (1, 0.01)],
    ("dp_shard", 1): [(0, 0.02), (0, 0.06), (1, 0.03), (1, 0.04)],
}


def test_active_cap_and_dp_shard_route_as_worked_out_by_hand():
    """Two instances, one group of calls c0..c3 (L = 2, 4, 1, 1) dispatched at t = 0, 0.01 s per iteration.

    least_requests, no cap: c0 -> 0, c1 -> 1, c2 -> 0 (assigned 1, 1: lowest index), c3 -> 1; all start at 0:
      finishes 0.02, 0.04, 0.01, 0.01.
    least_requests, active_cap 1: c0 -> 0, c1 -> 1; c2 waits (both instances hold 1 call), and c3 behind it.
      0.02: c0 finishes on 0 -> c2 routed to 0 (assigned 0, 1), finishes 0.03; c3 waits.
      0.03: c2 finishes on 0 -> c3 routed to 0 (c1 still holds 1), finishes 0.04. c1 finishes 0.04 on 1.
    round_robin, active_cap 1: c0 -> 0 (pointer 1), c1 -> 1 (pointer 0), c2 waits; 0.02: from the pointer,
      instance 0 is eligible -> c2 there (pointer 1); 0.03: instance 1 still holds c1, so from pointer 1 the
      first eligible is 0 -> c3 there. Same as least_requests here.
    dp_shard, shard_calls 0: the sync record's fixed batch of 1 group of 4 over 2 instances, ceil(4 / 2) = 2
      calls per slice: c0, c1 -> 0, c2, c3 -> 1, all at 0: finishes 0.02, 0.04, 0.01, 0.01.
    dp_shard, active_cap 1: c0 -> 0; c1's slice is instance 0, which holds 1: c1 waits (instance 1 is free, but
      the slice is fixed) and blocks c2, c3. 0.02: c0 finishes -> c1 -> 0 (finishes 0.06), then c2 -> 1
      (0.03); c3 waits for instance 1. 0.03: c2 finishes -> c3 -> 1, finishes 0.04. The batch is ready at 0.06.

    Both engines give exactly these, and the fast path matches SimPy per step and per call."""
    cases = [_case(r, cap) for r, cap in WANT]
    for c in cases:
        c.run_simpy()
    for c, want in zip(cases, WANT.values(), strict=True):
        got = sorted((x.tid, x.instance, x.finish) for x in c.report.calls)
        assert [(i, f) for _, i, f in got] == [(i, pytest.approx(f, abs=1e-12)) for i, f in want], c.label
        assert c.report.steps[0].batch_ready == pytest.approx(max(f for _, f in want), abs=1e-12)
    res = run_fast(cases)
    for m, (c, want) in enumerate(zip(cases, WANT.values(), strict=True)):
        compare(c, res, m)
        assert res.call_inst[m, :4].tolist() == [i for i, _ in want], c.label


def test_dp_shard_slice_lowering():
    """dp_shard's slice: router.shard_calls as given, else ceil(batch groups x group size / instances) from
    the record's fixed batch (4 calls over 2 instances: 2); other routers 0; active_cap copied."""
    c = _case("dp_shard", 0)
    _, p, _ = lower(c.cfg, c.workload, c.costs)
    assert (int(p.router), int(p.shard), int(p.cap)) == (2, 2, 0)
    c.cfg = attrs.evolve(c.cfg, router=attrs.evolve(c.cfg.router, shard_calls=3, active_cap=5))
    _, p, _ = lower(c.cfg, c.workload, c.costs)
    assert (int(p.shard), int(p.cap)) == (3, 5)
    c = _case("round_robin", 2)
    _, p, _ = lower(c.cfg, c.workload, c.costs)
    assert (int(p.router), int(p.shard), int(p.cap)) == (1, 0, 2)


@pytest.mark.parametrize("name", ["kv_cache_aware", "throughput_balance"])
def test_routers_reading_instance_state_are_refused_by_name(name):
    c = _case(name, 0)
    with pytest.raises(FastPathUnsupported, match=f"router.name={name}"):
        lower(c.cfg, c.workload, c.costs)


def test_active_cap_with_version_crossing_is_refused():
    """A group failed at a publication may have calls held in the router queue by the cap: not modelled."""
    ov = [*(o for o in BASE if not o.startswith("router.")), "policy=dressage", "policy.rollout_batch_size=1",
          "policy.rollout_max_retries=1", "deployment.rollout.instances=2", "router.active_cap=2"]
    c = _case("least_requests", 2)
    c = Case(ov, c.workload, c.costs)
    with pytest.raises(FastPathUnsupported, match="active_cap=2 with fail_on_version_crossing"):
        lower(c.cfg, c.workload, c.costs)


def test_grid_of_routers_lowers_dp_shard_per_point():
    """A router.name column holding dp_shard is lowered per value (its slice is derived from the point: here
    sync with 2 groups of 2 calls over 2 instances: ceil(4 / 2) = 2 calls per slice), and a router.active_cap
    column per value too; every row equals lowering the point alone."""
    import numpy as np
    from simhelpers import linear_costs, random_workload

    from simrl.config import load_config
    from simrl_fast import Params
    from simrl_fast.grid import lower_grid

    base = [*(o for o in BASE if not o.startswith("router.")), "policy=sync", "policy.batch_groups=2",
            "deployment.rollout.instances=2"]
    wl, costs = random_workload(groups=6, n=2, seed=3, completion=(5, 60)), linear_costs(kv_tokens=50_000)
    cols = {"router.name": ["least_requests", "dp_shard", "round_robin", "dp_shard"], "router.active_cap": [0, 0, 3, 1]}
    _, params, _ = lower_grid(wl, costs, cols, base=base)
    assert params.shard.tolist() == [0, 2, 0, 2] and params.cap.tolist() == [0, 0, 3, 1]
    assert params.router.tolist() == [0, 2, 1, 2]
    for m in range(4):
        _, want, _ = lower(load_config(overrides=[*base, *(f"{k}={v[m]}" for k, v in cols.items())]), wl, costs)
        assert all(np.array_equal(getattr(params, f)[m], getattr(want, f)) for f in Params._fields), m


@pytest.mark.slow
def test_local_rounds_with_caps_and_slices_match_simpy():
    """Parallel local rounds (`step.local_phase`, 2 rounds) on random configurations with the router drawn
    (`diffcases.draw_router`, kept only where a cap or dp_shard was drawn): a finish is not local while a cap
    holds calls in the router queue; the results equal SimPy's per step and per call."""
    import numpy as np
    from diffcases import random_case
    from test_differential import GROUPS, STEPS, N
    from test_local_phase import _run

    cases = []
    for s in range(40):
        c = random_case(np.random.default_rng([11, s]), GROUPS, N, STEPS, chunked=False, router="any")
        if c.cfg.router.active_cap or c.cfg.router.name == "dp_shard":
            cases.append(c)
        if len(cases) == 8:
            break
    assert any(c.cfg.router.active_cap for c in cases)
    for c in cases:
        c.run_simpy()
    res = _run(cases, 2)
    for m, c in enumerate(cases):
        compare(c, res, m)
