"""verl fully_async: the overage queue fills up to M and its head is the stalest; one_step_off."""

import attrs
from preset_scenarios import rollout_events_during_training, run, uniform_workload

from presets.verl import VerlPolicy, VerlState


@attrs.define
class ProbeState(VerlState):
    queue_depth: list[int] = attrs.field(factory=list)


class QueueProbe(VerlPolicy):
    """Records the MessageQueue depth each time the trainer reads a window from it."""

    State = ProbeState

    def form_batch(self, st):
        batch = super().form_batch(st)
        if batch is not None:
            st.policy_state.queue_depth.append(len(st.buffer))
        return batch


def test_overage_queue_grows_and_its_head_is_stalest():
    wl = uniform_workload(groups=64, n=4, completion=200)
    probe = QueueProbe()  # upstream defaults: M = int(8 * 1.1 * 4) = 35 > window 32
    rep, sim = run(["policy=verl", "run.training_steps=6"], wl, step_s=20.0, policy=probe)
    depth = sim.st.policy_state.queue_depth
    assert depth == sorted(depth) and depth[0] == 32 and depth[-1] == probe.queue_size == 35
    for s in rep.steps[1:]:
        head, tail = s.staleness[0], s.staleness[-1]
        assert head == max(s.staleness) == 1 and tail == 0  # surplus of the last window, read first
        assert sum(1 for x in s.staleness if x == 1) == 35 - 32
    assert rep.totals["trajectories_dropped"] == 0  # the Rollouter throttles, it does not drop


def test_one_step_off_generates_the_next_batch_during_training():
    wl = uniform_workload(groups=64, n=4, completion=200)
    rep, sim = run(["policy=verl", "policy.mode=one_step_off"], wl, step_s=5.0)
    assert [max(s.staleness) for s in rep.steps] == [0] + [1] * (len(rep.steps) - 1)
    assert rollout_events_during_training(sim)
