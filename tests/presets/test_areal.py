"""AReaL: every weight update aborts all in-flight requests, which re-prefill on the new weights."""

from preset_scenarios import long_tail_workload, run

ROLLOUT_BOUND = dict(step_s=1.0)  # training is fast next to generation


def test_every_update_aborts_and_reprefills_in_flight_requests():
    wl = long_tail_workload(groups=64)
    rep, sim = run(["policy=areal", "policy.max_head_offpolicyness=2", "policy.consumer_batch_size=16"], wl,
                   **ROLLOUT_BOUND)
    t = rep.totals
    assert t["aborts"] > 0 and t["tokens_reprefilled"] > 0
    spanning = [c for c in rep.calls if c.version_end > c.version_start]
    assert spanning and all(c.aborts >= 1 for c in spanning)  # no request crosses a version unaborted
    # Admission: never more than (eta + v + 1) * B episodes accepted or running.
    dispatched_by_step = [sum(1 for e in sim.events if e["kind"] == "group_dispatch" and e["version"] <= s.train_version)
                          for s in rep.steps]
    assert all(n <= (2 + s.train_version + 1) * 16 for n, s in zip(dispatched_by_step, rep.steps, strict=True))


def test_keep_pause_system_on_the_same_scenario_aborts_nothing():
    wl = long_tail_workload(groups=64)
    rep, _ = run(["policy=skyrl", "policy.policy_mini_batch_size=16", "policy.num_parallel_generation_workers=48",
                  "policy.max_staleness_steps=2"], wl, **ROLLOUT_BOUND)
    assert rep.totals["aborts"] == 0 and rep.totals["tokens_reprefilled"] == 0
    assert any(c.version_end > c.version_start for c in rep.calls)


def test_synchronous_default_is_on_policy():
    rep, _ = run(["policy=areal", "policy.consumer_batch_size=16"], long_tail_workload(groups=64), **ROLLOUT_BOUND)
    assert rep.totals["staleness_max"] == 0 and rep.totals["aborts"] == 0
