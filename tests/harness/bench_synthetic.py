"""Test doubles for the harness: a deterministic workload generator and a synthetic backend driver.

The driver produces evidence whose contract numbers are known in closed form: update k has its
batch ready at d_k = 10k, rank 0 trains over [d_k + 1, d_k + 5), rank 1 over [d_k + 2, d_k + 6)
(native per-rank stamps), training ends at d_k + 6 and publication at c_k = d_k + 7. Every call
of the update's groups starts on policy k - 1 after it was published (c_{k-1} = d_k - 3) and
finishes before d_k: turn j runs over [d_k - 2.9 + 0.8 j, d_k - 2.2 + 0.8 j].
"""

from __future__ import annotations

from harness.backends.base import BackendOutcome
from workloads.types import CallSpec, GroupSpec, TrajectorySpec, build_workload


def fake_generate(name, groups, seed, group_size=None, **knobs):
    n = group_size or (8 if name == "tool_history" else 4)
    calls = 3 if name.startswith("multi_turn") else 1
    out = []
    for g in range(groups):
        trajs = []
        for t in range(n):
            specs, prompt = [], 100 + g
            for j in range(calls):
                new = prompt if j == 0 else 20
                if j:
                    prompt = specs[-1].prompt_tokens + specs[-1].completion_tokens + new
                specs.append(CallSpec(prompt, new, 10 + (seed + g + t + j) % 7, 0.0, name.endswith("salted")))
            trajs.append(TrajectorySpec(t, tuple(specs), float(t % 2)))
        out.append(GroupSpec(g, 50, tuple(trajs)))
    return build_workload(name, seed, out)


def run(ctx, sink, log):
    w = ctx.load_workload()
    b = ctx.settings["groups_per_update"]
    for k in range(1, 21):
        d = 10.0 * k
        gids = list(range((k - 1) * b, k * b))
        tokens = trajs = 0
        for g in gids:
            for tid in w.group_trajs(g):
                trajs += 1
                for turn, c in enumerate(w.traj_calls(tid)):
                    L = int(w.call_completion_tokens[c])
                    tokens += L
                    arrival = d - 2.9 + 0.8 * turn
                    sink.turn(group=g, trajectory=tid, turn=turn, forced_tokens=L, completion_tokens=L,
                              finish_reason="length", prompt_tokens=int(w.call_prompt_tokens[c]),
                              scheduled_prompt_tokens=int(w.call_prompt_tokens[c]), arrival=arrival,
                              first_token=arrival + 0.1, finish=arrival + 0.7,
                              policy_version_start=k - 1, policy_version_end=k - 1)
        sink.update(k=k, d_k=d, c_k=d + 7, train_end=d + 6, publish_end=d + 7, policy_version=k, groups=b,
                    trajectories=trajs, tokens=tokens, group_ids=gids,
                    rank_intervals={"0": [[d + 1, d + 5]], "1": [[d + 2, d + 6]]}, rank_intervals_native=True,
                    staleness=[0] * b, native={"synthetic": True})
    return BackendOutcome(exit_code=0, native_config={"synthetic": True}, backend_version="synthetic",
                          clock={"kind": "simulated", "end_s": 207.0})


class _OnTheClock:
    """The synthetic evidence on a real monotonic clock at ``scale`` x its times: each line is
    written once its last time has passed, as a real driver writes it."""

    def __init__(self, sink, scale: float) -> None:
        import time

        self.sink, self.scale = sink, scale
        self.origin_unix, self._t0 = time.time(), time.monotonic()

    def _wait(self, t: float) -> None:
        import time

        time.sleep(max(0.0, t - (time.monotonic() - self._t0)))

    def turn(self, **kw):
        for key in ("arrival", "first_token", "finish"):
            if kw[key] is not None:
                kw[key] *= self.scale
        self._wait(kw["finish"] if kw["finish"] is not None else kw["arrival"])
        self.sink.turn(**kw)

    def update(self, **kw):
        for key in ("d_k", "c_k", "train_end", "publish_end"):
            kw[key] *= self.scale
        kw["rank_intervals"] = {r: [[s * self.scale, e * self.scale] for s, e in ivs]
                                for r, ivs in kw["rank_intervals"].items()}
        self._wait(kw["c_k"])
        self.sink.update(**kw)


def run_monotonic(ctx, sink, log, scale: float = 0.01):
    """`run` as a real driver reports it: on a monotonic clock with its wall-clock origin."""
    import attrs

    timed = _OnTheClock(sink, scale)
    out = run(ctx, timed, log)
    return attrs.evolve(out, clock={"kind": "monotonic", "origin_unix": timed.origin_unix})
