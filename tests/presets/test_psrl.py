"""PSRL: a straggler's reservation holds its buffer, so the step consuming it waits for the tail."""

from preset_scenarios import group_finish, run, uniform_workload

STRAGGLER = 3  # workload group 3 is dispatched first, as gid 3


def test_step_waits_for_the_straggler_holding_a_reservation():
    wl = uniform_workload(groups=48, n=4, completion=100, stragglers=(STRAGGLER,), straggler_completion=4000)
    rep, sim = run(["policy=psrl", "policy.staleness=1", "policy.staleness_buffer_entries=8"], wl, step_s=2.0)
    tail = group_finish(rep, STRAGGLER)
    # Dispatched at version 0, the straggler reserved an entry of buffer 0 + eta = 1: buffer 1
    # stays STUCK (7 occupied + 1 reserved) and step 2 starts exactly when the straggler finishes.
    assert rep.steps[1].batch_ready == tail
    assert rep.steps[0].batch_ready < 2.0 < tail
    finished_before = {c.gid for c in rep.calls if c.gid != STRAGGLER and group_finish(rep, c.gid) < tail}
    assert len(finished_before) >= 2 * 8  # plenty of finished groups, none may take its entry
    assert rep.totals["staleness_max"] <= 1 and rep.totals["trajectories_dropped"] == 0


def test_bound_holds_with_per_instance_pulls():
    wl = uniform_workload(groups=48, n=4, completion=300, stragglers=(1, 9, 17), straggler_completion=2500)
    rep, sim = run(["policy=psrl", "policy.staleness=2", "policy.staleness_buffer_entries=8",
                    "deployment.rollout.instances=3"], wl, step_s=1.0)
    assert rep.totals["staleness_max"] <= 2
    pulls = [e for e in sim.events if e["kind"] == "pull_end"]
    # Each instance pulls on its own: one version lands on different instances at different times.
    by_version = {}
    for e in pulls:
        by_version.setdefault(e["version"], set()).add(e["t"])
    assert len(by_version) >= len(rep.steps) - 1
    assert any(len(ts) > 1 for ts in by_version.values())
    assert rep.totals["aborts"] > 0  # partial rollout: requests on a pulling instance are re-routed
