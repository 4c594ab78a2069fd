"""prime-rl: KV-driven adaptive in-flight permits, one-step ship barrier, drop past max_off_policy_steps."""

from simhelpers import linear_costs, random_workload, run_sim

# 32 samples = 8 groups of 4 per step
BASE = ["policy=prime_rl", "policy.batch_size=32", "policy.seq_len=4096", "run.training_steps=5"]


def _run(*extra, kv_tokens=1_000_000, step_s=3.0, zero_variance=0.0, completion=(50, 2500)):
    wl = random_workload(groups=64, n=4, seed=13, completion=completion, zero_variance=zero_variance)
    return run_sim([*BASE, *extra], wl, linear_costs(kv_tokens=kv_tokens, step_s=step_s))


def _max_in_flight(sim):
    running, peak = set(), 0
    for e in sim.events:
        if e["kind"] == "group_dispatch":
            running.add(e["gid"])
        elif e["kind"] in ("group_done", "group_abort"):
            running.discard(e["gid"])
        peak = max(peak, len(running))
    return peak


def test_permits_start_from_kv_capacity_and_follow_it():
    big, big_sim = _run()
    small, small_sim = _run(kv_tokens=30_000)
    cap_big = big_sim.st.policy_state.cap_history[0][1]
    cap_small = small_sim.st.policy_state.cap_history[0][1]
    # C / seq_len before step 1, C summed over the two instances
    assert cap_big == 2 * 1_000_000 // 4096 and cap_small == 2 * 30_000 // 4096
    assert _max_in_flight(small_sim) < _max_in_flight(big_sim)


def test_a_preemption_cuts_the_cap():
    report, sim = _run("policy.initial_inflight=400", kv_tokens=30_000)
    history = sim.st.policy_state.cap_history
    assert report.totals["preemptions"] > 0
    assert history and history[0][1] < 400  # the first change is the overload cut
    # sized from KV capacity, admission avoids the preemptions a fixed generous cap causes
    adaptive, _ = _run(kv_tokens=30_000)
    fixed, _ = _run("policy.initial_inflight=400", "policy.min_inflight=400", kv_tokens=30_000)
    assert adaptive.totals["preemptions"] < fixed.totals["preemptions"] / 10


def test_ship_barrier_keeps_at_most_one_batch_ahead():
    # with few permits the barrier (shipped - version <= 1) is what stops dispatch under a slow trainer
    report, _ = _run("policy.max_inflight=16", step_s=20.0)
    assert report.totals["staleness_max"] <= 2
    assert report.totals["groups_dispatched"] <= 8 * (5 + 2)


def test_groups_past_max_off_policy_steps_are_dropped():
    report, _ = _run("policy.max_off_policy_steps=0", step_s=0.5, completion=(50, 6000))
    assert report.totals["staleness_max"] == 0
    assert report.totals["tokens_wasted_filter"] + report.totals["tokens_wasted_abort"] > 0


def test_zero_advantage_groups_take_their_batch_slot_without_backfill():
    report, _ = _run(zero_variance=0.5)
    assert any(s.groups < 8 for s in report.steps)
    assert report.totals["tokens_wasted_filter"] > 0
    kept, _ = _run("policy.filter_zero_advantages=false", zero_variance=0.5)
    assert [s.groups for s in kept.steps] == [8] * 5
