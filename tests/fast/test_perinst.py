"""Per-instance weight sync on the JAX fast path (simrl_fast.perinst): the trainer pushes, each instance pulls
alone, routed calls wait for an instance holding their dispatch version. Against a run worked out by hand and
against SimPy; and the narrower refusals (numpy only)."""

import pytest

pytest.importorskip("jax")

import attrs  # noqa: E402
from diffcases import BASE, Case, compare, run_fast  # noqa: E402

from simrl.cost.base import ValidityDomain  # noqa: E402
from simrl.cost.build import Costs  # noqa: E402
from simrl.cost.linear import ConstantTraining, LinearRollout  # noqa: E402
from simrl.policy.params import PolicyParams  # noqa: E402
from simrl.policy.record import ParamsPolicy  # noqa: E402
from simrl.policy.rules import InflightRule, code  # noqa: E402
from simrl_fast.lowering import PC_CLEAR_PULL, RULE_CONTINUE, FastPathUnsupported, lower, policy_rejections  # noqa: E402
from workloads.types import build_workload, single_turn_group  # noqa: E402

# three prompt groups of two calls (prompt 100 tokens); completion lengths per group
LENGTHS = [(2, 3), (4, 1), (1, 1)]


@attrs.define
class PerInstanceSync:
    """A publication time that grows with the instances it reaches: 0.1 + 0.05 * n seconds."""

    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("weight_sync/per_instance_test"))

    def publish_time(self, n_instances: int) -> float:
        return 0.1 + 0.05 * n_instances


def _costs(p: float = 0.0) -> Costs:
    # every iteration takes a = 0.01 s (no batch or KV term; p per prefilled token), a step 0.055 s
    return Costs(LinearRollout(a=0.01, b=0.0, c=0.0, p=p, kv_tokens=10**6), ConstantTraining(a=0.055),
                 PerInstanceSync())


def _workload(shared: int = 0):
    wl = build_workload("hand", 0, [single_turn_group(g, 2, 100, list(c), [0.0, 1.0]) for g, c in enumerate(LENGTHS)])
    return attrs.evolve(wl, group_shared_prompt_tokens=[shared] * len(LENGTHS)) if shared else wl


def _psrl_case(*extra) -> Case:
    pol = ["policy=psrl", "policy.staleness_buffer_entries=1", *extra]
    ov = [*BASE, *pol, "deployment.rollout.instances=2", "deployment.rollout.max_num_seqs=8", "run.training_steps=3"]
    return Case(ov, _workload(), _costs(), label=" ".join(pol))


def _record(clear: int, **kw) -> PolicyParams:
    """The sync shape (budget (version + 1) x 1 group, counting accepted + running), per-instance pulls."""
    base = dict(admit_budget_base_groups=1.0, admit_budget_per_version_groups=1.0, batch_min_groups=1,
                batch_max_groups=1, sync_per_instance=1, route_needs_dispatch_version=1, clear_cache_on_sync=clear,
                inflight_rule=code(InflightRule.ABORT_RESUME), fast_path_exact=1)
    return PolicyParams(**{**base, **kw})


def _record_case(clear: int) -> Case:
    ov = [*BASE, "policy=sync", "deployment.rollout.instances=2", "deployment.rollout.prefix_caching=true",
          "run.training_steps=3"]
    case = Case(ov, _workload(shared=100), _costs(p=1e-4), label=f"record clear_cache_on_sync={clear}")
    case.cfg = attrs.evolve(case.cfg, policy=ParamsPolicy(_record(clear)))
    return case


def test_instances_pull_alone_after_the_push_and_calls_wait_for_them():
    """psrl, one group per buffer (E = 1), staleness 0, two instances; a publication to n instances takes
    0.1 + 0.05 n s: the push 0.2 s (n = 2), each pull 0.15 s (n = 1). A call admitted at t with L tokens
    finishes at t + 0.01 L; least_requests sends a group's calls to instances 0 and 1.

    t=0      v0: g0 (L = 2, 3) dispatched, routed to 0 and 1, done at 0.02 and 0.03 -> buffer 0 READY:
             step 1 trains 0.03 .. 0.085, push 0.085 .. 0.285.
    0.285    v1: both instances (idle) woken, each pulls 0.285 .. 0.435; g1 (L = 4, 1) is dispatched
             (V_traj = 1) and waits in the router: no instance holds v1.
    0.435    both pulls end; g1's calls routed, done at 0.475 (instance 0) and 0.445 (1): step 2 trains
             0.475 .. 0.53, push 0.53 .. 0.73; pulls 0.73 .. 0.88.
    0.88     g2 (L = 1, 1) routed, done at 0.89: step 3 trains 0.89 .. 0.945, push 0.945 .. 1.145.

    (Under global sync the calls of g1 would start at 0.285.) The same with partial rollout off (the
    keep_pause rule: nothing runs at a pull either) and round-robin routing, in the same batch."""
    cases = [_psrl_case(), _psrl_case("policy.partial_rollout_enable=false", "router.name=round_robin")]
    for c in cases:
        c.run_simpy()
    rep = cases[0].report
    want = [(0.0, 0.03, 0.085, 0.285), (0.285, 0.475, 0.53, 0.73), (0.73, 0.89, 0.945, 1.145)]
    for s, w in zip(rep.steps, want, strict=True):
        assert (s.wait_start, s.batch_ready, s.train_end, s.publish_end) == pytest.approx(w, abs=1e-12)
    g1 = sorted((c.finish, c.instance) for c in rep.calls if c.gid == 1)
    assert g1 == [(pytest.approx(0.445, abs=1e-12), 1), (pytest.approx(0.475, abs=1e-12), 0)]
    res = run_fast(cases)
    for m, c in enumerate(cases):
        compare(c, res, m)


@pytest.mark.slow
def test_the_pull_clears_the_prefix_cache():
    """Two sync-shape records (one group per batch, two instances, the timeline above) with prefix caching,
    the whole 100-token prompt shared (p = 1e-4 s per prefilled token), with and without
    `clear_cache_on_sync`: each instance keeps one 100-token entry per finished group (a gid's entry is never
    hit again, so the clear shows only in the cache's size), and the pull clears it: at the last publication
    (where the fast path stops, before that push's pulls) an instance holds 300 tokens without the clear and
    100 (the last group's) with it. Both match SimPy per step and per call."""
    cases = [_record_case(0), _record_case(1)]
    for c in cases:
        c.run_simpy()
    res = run_fast(cases)
    for m, c in enumerate(cases):
        compare(c, res, m)
    assert res.cache_tokens[0, :2].tolist() == [300, 300]
    assert res.cache_tokens[1, :2].tolist() == [100, 100]


@pytest.mark.slow
def test_psrl_at_its_defaults_matches_simpy():
    """psrl at its full defaults (the default scenario: on_demand KV, chunked prefill, the prefix cache, the
    roofline rollout): identical per step and per call."""
    from simrl.config import load_config
    from simrl.cost.build import build_costs
    from simrl.engine.sim import load_workload

    cfg = load_config(overrides=["policy=psrl"])
    case = Case(["policy=psrl"], load_workload(cfg), build_costs(cfg), "psrl defaults")
    case.run_simpy()
    assert case.report.diagnosis is None and len(case.report.steps) == cfg.run.training_steps
    compare(case, run_fast([case]), 0)


def test_per_instance_sync_lowers_as_a_push_and_pulls():
    """The push publishes as continue (no pause) in publish_time(K); each pull takes publish_time(1); the
    prefix cache is cleared at the pull."""
    c = _record_case(1)
    _, p, _ = lower(c.cfg, c.workload, c.costs)
    assert (float(p.sync_s), float(p.pull_s)) == (pytest.approx(0.2), pytest.approx(0.15))
    assert int(p.rule) == RULE_CONTINUE and int(p.pc_clear) == PC_CLEAR_PULL
    g = _psrl_case()
    static, p, _ = lower(g.cfg, g.workload, g.costs)
    assert static.perinst and int(p.pc_clear) == 0  # prefix caching off in BASE
    c = Case([*BASE, "policy=sync"], _workload(), _costs())
    static, p, _ = lower(c.cfg, c.workload, c.costs)
    assert not static.perinst and float(p.pull_s) == 0.0


@pytest.mark.parametrize("change, reason", [
    (dict(admit_budget_base_groups=2.0), "admission other than the sync shape"),
    (dict(admit_count_dispatched=1), "admission other than the sync shape"),
    (dict(admit_budget_per_batch_groups=1.0), "admission other than the sync shape"),
    (dict(route_needs_dispatch_version=0), "route_needs_dispatch_version=0"),
    (dict(fail_on_version_crossing=0, inflight_rule=code(InflightRule.KEEP_PAUSE)), "with fail_on_version_crossing"),
])
def test_per_instance_sync_outside_the_sync_shape_is_refused_by_name(change, reason):
    assert policy_rejections(_record(1), "record") == []
    why = policy_rejections(_record(1, **change), "record")
    assert len(why) == 1 and "per-instance weight sync (policy.sync_scope=per_instance)" in why[0] and reason in why[0]


def test_psrl_with_staleness_stays_refused_and_a_zero_pull_time_is_refused():
    g = _psrl_case("policy.staleness=1")
    with pytest.raises(FastPathUnsupported, match="fast_path_exact=0"):
        lower(g.cfg, g.workload, g.costs)
    g = _psrl_case()

    @attrs.define
    class PushOnly:  # a publication time that is 0 for one instance
        domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("weight_sync/push_only_test"))

        def publish_time(self, n_instances: int) -> float:
            return 0.1 * (n_instances - 1)

    with pytest.raises(FastPathUnsupported, match="per-instance weight pull time of 0.0"):
        lower(g.cfg, g.workload, attrs.evolve(g.costs, weight_sync=PushOnly()))


def test_a_grid_sweeping_the_publication_time_sets_the_pull_time_too():
    """`cost.weight_sync.publish_s` (the `fixed` model: one time for any number of instances) in a grid is
    the push and, under per-instance sync, each pull; a globally synced point keeps no pull."""
    from simrl_fast.grid import lower_grid

    base = [*BASE, "deployment.rollout.instances=2", "run.training_steps=3"]
    _, p, _ = lower_grid(_workload(), _costs(), {"policy": ["psrl", "psrl", "sync"],
                                                 "cost.weight_sync.publish_s": [0.25, 0.5, 0.75]}, base=base)
    assert p.sync_s.tolist() == [0.25, 0.5, 0.75] and p.pull_s.tolist() == [0.25, 0.5, 0.0]
