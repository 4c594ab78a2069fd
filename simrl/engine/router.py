"""The router: one global FIFO of calls, assigned to rollout instances (docs/model.md, "Router").

The head of the queue is routed as soon as some instance is eligible for it: the policy
allows the instance's weight version for the call's group, and the instance holds fewer than
``active_cap`` assigned calls (0 = no cap). The head blocks the calls behind it (strict FIFO).
Among eligible instances the router policy picks one; every tie goes to the lowest index.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import simpy

from simrl.engine.ports import RoutableInstance
from simrl.engine.records import Request
from simrl.policy.base import GroupRecord


class Router:
    """The global call queue; `run` is its SimPy process.

    It sees instances through `RoutableInstance` and the policy only through ``eligible``
    (may a call of this group run on weights of this version?).
    """

    def __init__(self, env: simpy.Environment, cfg, instances: Sequence[RoutableInstance],
                 eligible: Callable[[int, GroupRecord], bool]):
        self.env = env
        self.cfg = cfg
        self.instances = instances
        self.is_eligible = eligible
        self.queue: deque[Request] = deque()
        self.rr_next = 0
        self.wake_ev = env.event()
        self.routed = 0

    def submit(self, req: Request, front: bool = False) -> None:
        req.instance = -1
        (self.queue.appendleft if front else self.queue.append)(req)
        self.wake()

    def remove_group(self, group: GroupRecord) -> list[Request]:
        """Drop every queued call of an aborted ``group``; returns those holding generated tokens."""
        lost = [q for q in self.queue if q.group is group and q.generated]
        self.queue = deque(q for q in self.queue if q.group is not group)
        return lost

    def wake(self) -> None:
        if not self.wake_ev.triggered:
            self.wake_ev.succeed()

    def run(self):
        while True:
            self.route()
            self.wake_ev = self.env.event()
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
            inst.sample()

    def eligible(self, req: Request) -> list[RoutableInstance]:
        cap = self.cfg.active_cap
        return [
            i for i in self.instances
            if (cap == 0 or i.assigned < cap) and self.is_eligible(i.version, req.group)
        ]

    def choose(self, req: Request) -> RoutableInstance | None:
        cands = self.eligible(req)
        if not cands:
            return None
        name = self.cfg.name
        if name == "round_robin":
            n = len(self.instances)
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

    def cache_aware(self, req: Request, cands: list[RoutableInstance]) -> RoutableInstance:
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
