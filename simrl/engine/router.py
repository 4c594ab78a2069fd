"""The router: one global FIFO of calls, assigned to rollout instances (docs/model.md, "Router").

The head of the queue is routed as soon as some instance is eligible for it: the policy
allows the instance's weight version for the call's group, and the instance holds fewer than
``active_cap`` assigned calls (0 = no cap). The head blocks the calls behind it (strict FIFO).
A policy that gives groups a queue level (`Policy.route_priority`, e.g. PSRL's multi-level
queue by trajectory version) has each new call queued behind every call of its level or a
lower one, so lower levels are routed first.
Among eligible instances the router policy picks one; every tie goes to the lowest index.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import simpy

from simrl.engine.ports import RoutableInstance
from simrl.engine.records import Request
from simrl.policy.base import GroupRecord


def dp_shard_calls(cfg, batch_groups: int, group_sizes: Sequence[int], instances: int) -> int:
    """Calls per contiguous slice of the ``dp_shard`` router (0 for any other router).

    NeMo-RL's synchronous generation (NVIDIA-NeMo/RL@c751f811 ``vllm_generation.py``,
    ``VllmGeneration.generate``) shards the step's batch with ``shard_by_batch_size(dp_size,
    allow_uneven_shards=True)``: ``ceil(batch / dp_size)`` consecutive sequences per engine, so a
    prompt's samples (``repeat_interleave``) stay together. ``router.shard_calls`` > 0 is taken
    as given; 0 needs a fixed batch of equal groups: ``ceil(batch_groups x group_size / instances)``.
    """
    if cfg.name != "dp_shard":
        return 0
    if cfg.shard_calls:
        return int(cfg.shard_calls)
    sizes = set(int(s) for s in group_sizes)
    if len(sizes) != 1 or batch_groups < 1:
        raise ValueError(
            "router.name=dp_shard: router.shard_calls=0 derives the slice from a fixed batch of equal "
            f"groups, got group sizes {sorted(sizes)[:4]} and batch_groups {batch_groups}; set "
            "router.shard_calls (calls per engine and batch)")
    return -(-batch_groups * sizes.pop() // instances)


class Router:
    """The global call queue; `run` is its SimPy process.

    It sees instances through `RoutableInstance` and the policy only through ``eligible``
    (may a call of this group run on weights of this version?).
    """

    def __init__(self, env: simpy.Environment, cfg, instances: Sequence[RoutableInstance],
                 eligible: Callable[[int, GroupRecord], bool],
                 priority: Callable[[GroupRecord], int | None] | None = None, shard_calls: int = 0):
        self.env = env
        self.shard_calls = shard_calls  # dp_shard: calls per contiguous slice (`dp_shard_calls`)
        self.priority = priority  # the policy's queue level of a group (lower first); None: one FIFO
        self.cfg = cfg
        self.instances = instances
        self.is_eligible = eligible
        self.queue: deque[Request] = deque()
        self.rr_next = 0
        self.wake_ev = env.event()
        self.routed = 0
        # kv_cache_aware's approximate trees, by instance index (see `cache_aware`)
        self.tree_size: dict[int, int] = {}
        self.tree_trajs: dict[int, dict[tuple[int, int], int]] = {}  # (gid, tid) -> prompt
        self.tree_groups: dict[int, dict[int, int]] = {}  # workload group -> shared prefix

    def submit(self, req: Request, front: bool = False) -> None:
        req.instance = -1
        level = None if front or self.priority is None else self.priority(req.group)
        if level is None:
            (self.queue.appendleft if front else self.queue.append)(req)
        else:  # a multi-level queue: behind every call of its level or a lower one
            i = len(self.queue)
            while i > 0 and (self.priority(self.queue[i - 1].group) or 0) > level:
                i -= 1
            self.queue.insert(i, req)
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
        name = self.cfg.name
        if name == "dp_shard":  # the slice's instance, or wait for it (a static partition, no choice)
            inst = self.instances[(self.routed // self.shard_calls) % len(self.instances)]
            return inst if inst in self.eligible(req) else None
        cands = self.eligible(req)
        if not cands:
            return None
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
        """sglang-router's ``cache_aware`` policy (docs/model.md, "Router").

        Checked against sgl-project/sglang@026f853b, sgl-router/src/policies/cache_aware.rs
        (``select_worker``) and sgl-router/src/tree.rs (``get_smallest_tenant``):

        1. Imbalanced when (max - min) > ``balance_abs_threshold`` and max >
           ``balance_rel_threshold`` * min, over the outstanding (routed, not finished) calls of
           every instance: then the least loaded eligible instance.
        2. Else the eligible instance whose approximate tree holds the longest prefix of the
           call's prompt, if that prefix is more than ``cache_threshold`` of the prompt (strict).
        3. Else the eligible instance with the smallest approximate tree.

        Either way the call's prompt is then inserted into the chosen instance's tree. The tree
        is the router's own record of what it sent where (not the engine's cache): a group's
        shared prompt prefix and, per trajectory, the longest prompt routed there. Its size is
        the prompt tokens each routed call added beyond its match on that instance (a radix
        tree's character count, in tokens). Upstream's periodic LRU eviction (``max_tree_size``
        2**26 characters every 120 s) is not modelled: the trees only grow.
        """
        loads = [i.assigned for i in self.instances]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.cfg.balance_abs_threshold and hi > self.cfg.balance_rel_threshold * lo:
            pick = min(cands, key=lambda i: (i.assigned, i.index))
        else:
            matches = [self.tree_match(i.index, req) for i in cands]
            best = max(range(len(cands)), key=lambda k: (matches[k], -cands[k].index))
            rate = matches[best] / req.prompt_tokens if req.prompt_tokens else 0.0
            if rate > self.cfg.cache_threshold:
                pick = cands[best]
            else:
                pick = min(cands, key=lambda i: (self.tree_size.get(i.index, 0), i.index))
        self.tree_insert(pick.index, req)
        return pick

    def tree_match(self, index: int, req: Request) -> int:
        """Prompt tokens of ``req`` already in instance ``index``'s approximate tree.

        A later call's prompt extends the earlier ones of its trajectory (same dispatch), so the
        longest of them routed here is a prefix of it. Every call also starts with its workload
        group's shared prompt prefix (the same text in every epoch and retry), recorded when a
        turn-0 call carrying it (``shared_tokens`` > 0: not salted) was routed here.
        """
        traj = self.tree_trajs.get(index, {}).get((req.group.gid, req.traj.tid), 0)
        group = self.tree_groups.get(index, {}).get(req.group.wg, 0)
        return min(max(traj, group), req.prompt_tokens)

    def tree_insert(self, index: int, req: Request) -> None:
        self.tree_size[index] = self.tree_size.get(index, 0) + req.prompt_tokens - self.tree_match(index, req)
        trajs = self.tree_trajs.setdefault(index, {})
        key = (req.group.gid, req.traj.tid)
        trajs[key] = max(trajs.get(key, 0), req.prompt_tokens)
        if req.shared_tokens:
            groups = self.tree_groups.setdefault(index, {})
            groups[req.group.wg] = max(groups.get(req.group.wg, 0), req.shared_tokens)
