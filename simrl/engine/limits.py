"""What bound each training step, and the queue and buffer depth over time (docs/model.md,
"Binding limit of a step").

`LimitClock` watches the engine's own timeline. While the trainer waits for a batch it splits
that wait, instant by instant, into

* ``staleness_bound``: the share of rollout instances that sit idle (nothing running, nothing
  waiting) while admission is closed by the version budget (the rule that keeps the staleness
  bound; for a synchronous policy, bound 0);
* ``concurrency_cap``: the idle share while admission is closed by the cap on groups in flight;
* ``rollout``: the rest (the busy instances' share, and all of it while admission is open or
  paused): the trainer waits for generation that is running.

An instant with k of n instances idle adds ``dt * k / n`` to the admission cause and
``dt * (n - k) / n`` to ``rollout``, so the three parts sum to the wait.
A step's binding limit is the largest of those three wait parts, its training time
(``training``: batch ready to train end, colocated pause and offload included) and its
publication (``weight_sync``: train end to publish end), ties going to the earlier name in
`LIMITS`. The depth series records, at every change, the groups in flight, finished and
waiting in the buffer (per oldest token version), and being trained.
"""

from __future__ import annotations

from simrl.policy.base import PipelineState, Policy
from simrl.policy.rules import Enforcement, code

#: the limits a step can be bound by, in tie-break order
LIMITS = ("rollout", "training", "weight_sync", "staleness_bound", "concurrency_cap")
WAIT_PARTS = ("rollout", "staleness_bound", "concurrency_cap")


def closed_by(policy: Policy, st: PipelineState) -> str:
    """Why admission is closed now: ``staleness_bound`` or ``concurrency_cap``.

    A `RecordPolicy` says it through its record (the in-flight cap or the output-queue cap, vs
    the budget, which is a staleness bound where the record declares a bound); any
    other policy is read through its declared `Staleness`: an admission-enforced bound is the
    staleness bound, anything else the concurrency cap.
    """
    params = getattr(policy, "params", None)
    if params is not None and hasattr(params, "admit_concurrency_groups"):
        if st.n_running >= params.admit_concurrency_groups or len(st.buffer) >= params.admit_buffer_cap_groups:
            return "concurrency_cap"
        # the budget closed it: a staleness bound where the record declares one that the policy does
        # not keep by its own filter at consumption
        own = params.staleness_enforcement in (code(Enforcement.DROP_AT_CONSUMPTION), code(Enforcement.POLICY))
        return "staleness_bound" if params.staleness_bound >= 0 and not own else "concurrency_cap"
    spec = policy.staleness_spec
    if spec.bound is not None and spec.enforcement is Enforcement.ADMISSION:
        return "staleness_bound"
    return "concurrency_cap"


class LimitClock:
    def __init__(self, env, st: PipelineState, policy: Policy, n_instances: int):
        self.env = env
        self.st = st
        self.policy = policy
        self.n = n_instances
        self.busy = [False] * n_instances
        self.idle = n_instances  # instances with nothing running or waiting
        self.trainer_waiting = False
        self.admission = "rollout"  # what closed admission at the last dispatcher pass
        self.since = 0.0
        self.spent = dict.fromkeys(WAIT_PARTS, 0.0)
        self.training_groups = 0
        self.depth: list[tuple] = []  # (t, in_flight, buffered, training, {version: groups})

    # -- hooks -------------------------------------------------------------------------------
    def sample(self, instance: int, waiting: int, running: int) -> None:
        busy = bool(waiting or running)
        if busy != self.busy[instance]:
            self.busy[instance] = busy
            self._touch()
            self.idle += -1 if busy else 1

    def settled(self, paused: bool) -> None:
        """The dispatcher finished a pass: admission is closed (or paused by a drain) until the next change."""
        self._touch()
        self.admission = "rollout" if paused else closed_by(self.policy, self.st)
        self._depth()

    def trainer(self, waiting: bool, training_groups: int = 0) -> None:
        self._touch()
        self.trainer_waiting = waiting
        self.training_groups = training_groups
        self._depth()

    # -- accounting --------------------------------------------------------------------------
    def _touch(self) -> None:
        now = self.env.now
        if self.trainer_waiting and now > self.since:
            dt, share = now - self.since, self.idle / self.n if self.n else 0.0
            if self.admission == "rollout":
                self.spent["rollout"] += dt
            else:
                self.spent[self.admission] += dt * share
                self.spent["rollout"] += dt * (1.0 - share)
        self.since = now

    def _depth(self) -> None:
        st = self.st
        by_version: dict[str, int] = {}
        for g in st.buffer:
            key = str(g.min_version)
            by_version[key] = by_version.get(key, 0) + 1
        row = (len(st.running), len(st.buffer), self.training_groups, by_version)
        if self.depth and self.depth[-1][1:] == row:
            return
        if self.depth and self.depth[-1][0] == self.env.now:
            self.depth[-1] = (self.env.now, *row)
        else:
            self.depth.append((self.env.now, *row))

    def snapshot(self) -> dict[str, float]:
        self._touch()
        return dict(self.spent)


def binding_limit(wait_parts: dict[str, float], training_s: float, sync_s: float) -> str:
    parts = {**wait_parts, "training": training_s, "weight_sync": sync_s}
    return max(LIMITS, key=lambda k: (parts.get(k, 0.0), -LIMITS.index(k)))
