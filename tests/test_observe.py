"""The observable record: built from a SimPy report, compared field by field."""

import attrs
from simhelpers import random_workload, run_sim

from simrl.observe import from_report, histogram


def test_histogram_counts_groups_per_staleness():
    assert histogram([1, 0, 1, 2, 1]) == ((0, 1), (1, 3), (2, 1))
    assert histogram([]) == ()


def test_record_from_a_report_and_its_mismatches():
    report, _ = run_sim(["policy=bounded_async", "policy.batch_groups=4", "policy.max_staleness=1",
                         "run.training_steps=3"], random_workload(groups=16, n=4))
    obs = from_report(report)
    assert obs.complete and [s.step for s in obs.steps] == [1, 2, 3]
    for s, r in zip(obs.steps, report.steps, strict=True):
        assert s.publish_end == r.publish_end and s.train_version == r.train_version
        assert sum(n for _, n in s.staleness_histogram) == r.groups == 4
        assert s.trainer_busy_s == r.train_end - r.train_start
    assert obs.mismatches(obs) == []
    late = attrs.evolve(obs.steps[1], publish_end=obs.steps[1].publish_end * (1 + 1e-6))
    other = attrs.evolve(obs, steps=(obs.steps[0], late, obs.steps[2]))
    assert other.mismatches(obs) == [f"step 2 publish_end: {late.publish_end!r} vs {obs.steps[1].publish_end!r}"]
    fewer = attrs.evolve(obs, steps=obs.steps[:2], complete=False)
    assert fewer.mismatches(obs) == ["complete False != True", "steps 2 != 3"]
