"""The router: one global FIFO of calls, assigned to rollout instances (docs/model.md, "Router").

The head of the queue is routed as soon as some instance is eligible for it: the policy
allows the instance's weight version for the call's group, and the instance holds fewer than
``active_cap`` assigned calls (0 = no cap). The head blocks the calls behind it (strict FIFO).
Among eligible instances the router policy picks one; every tie goes to the lowest index.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from simrl.engine.records import Request

if TYPE_CHECKING:
    from simrl.engine.core import Simulation
    from simrl.engine.instance import Instance


class Router:
    def __init__(self, sim: Simulation):
        self.sim = sim
        self.cfg = sim.cfg.router
        self.queue: deque[Request] = deque()
        self.rr_next = 0
        self.wake_ev = sim.env.event()
        self.routed = 0

    def submit(self, req: Request, front: bool = False) -> None:
        req.instance = -1
        (self.queue.appendleft if front else self.queue.append)(req)
        self.wake()

    def wake(self) -> None:
        if not self.wake_ev.triggered:
            self.wake_ev.succeed()

    def run(self):
        while True:
            self.route()
            self.wake_ev = self.sim.env.event()
            yield self.wake_ev

    def route(self) -> None:
        while self.queue:
            req = self.queue[0]
            inst = self.choose(req)
            if inst is None:
                return
            self.queue.popleft()
            self.routed += 1
            inst.enqueue(req)
            self.sim.on_route(inst, req)

    def eligible(self, req: Request) -> list[Instance]:
        cap = self.cfg.active_cap
        policy = self.sim.policy
        return [
            i for i in self.sim.instances
            if (cap == 0 or i.assigned < cap) and policy.eligible(i.version, req.group)
        ]

    def choose(self, req: Request) -> Instance | None:
        cands = self.eligible(req)
        if not cands:
            return None
        name = self.cfg.name
        if name == "round_robin":
            n = len(self.sim.instances)
            for k in range(n):
                idx = (self.rr_next + k) % n
                pick = next((i for i in cands if i.index == idx), None)
                if pick is not None:
                    self.rr_next = (idx + 1) % n
                    return pick
        if name == "least_requests":
            return min(cands, key=lambda i: (i.assigned, i.index))
        if name == "throughput_balance":
            return min(cands, key=lambda i: (i.outstanding_tokens(), i.index))
        return self.cache_aware(req, cands)

    def cache_aware(self, req: Request, cands: list[Instance]) -> Instance:
        """Prefix affinity with an imbalance escape, else the most KV headroom.

        Follows vllm-router / sglang-gateway ``cache_aware``: when loads are imbalanced
        (max - min > abs threshold and max > rel threshold * min) pick the least loaded;
        otherwise the instance with the longest cached prefix if its match ratio reaches
        ``cache_threshold``; otherwise the one with the most free KV.
        """
        loads = [i.assigned for i in cands]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.cfg.balance_abs_threshold and hi > self.cfg.balance_rel_threshold * lo:
            return min(cands, key=lambda i: (i.assigned, i.index))
        best = max(cands, key=lambda i: (i.cached_prefix(req), -i.index))
        if best.cached_prefix(req) >= self.cfg.cache_threshold * req.prompt_tokens and best.cached_prefix(req) > 0:
            return best
        return max(cands, key=lambda i: (i.kv_free(), -i.index))
