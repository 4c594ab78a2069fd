"""kv_cache_aware routing decisions on small hand-worked cases (docs/model.md, "Router").

The policy follows sglang-router's cache_aware (sgl-project/sglang@026f853b,
sgl-router/src/policies/cache_aware.rs, select_worker): an imbalance escape on outstanding
calls, a strict ``match_rate > cache_threshold`` hit rule on the router's own approximate tree,
and a fallback to the instance with the smallest tree.
"""

from __future__ import annotations

import simpy

from simrl.config import RouterConfig
from simrl.engine.records import Request
from simrl.engine.router import Router
from simrl.policy.base import GroupRecord, TrajRecord


class FakeInstance:
    """Just what the router reads; a routed call stays assigned (never admitted or finished)."""

    def __init__(self, index: int, assigned: int = 0, kv_free: int = 10_000):
        self.index = index
        self.version = 0
        self.load = assigned
        self.free = kv_free
        self.got: list[Request] = []

    @property
    def assigned(self) -> int:
        return self.load

    def outstanding_tokens(self) -> int:
        return 0

    def kv_free(self) -> int:
        return self.free

    def cached_prefix(self, req: Request) -> int:
        return 0

    def enqueue(self, req: Request, front: bool = False) -> None:
        req.instance = self.index
        self.load += 1
        self.got.append(req)

    def sample(self) -> None:
        pass


def group(gid: int, wg: int | None = None, trajs: int = 1) -> GroupRecord:
    return GroupRecord(gid=gid, wg=gid if wg is None else wg, epoch=0, dispatch_time=0.0,
                       dispatch_version=0, trajs=[TrajRecord(tid=10 * gid + k, reward=0.0, calls_total=2)
                                                  for k in range(trajs)])


def call(g: GroupRecord, k: int = 0, turn: int = 0, prompt: int = 1000, shared: int = 1000,
         new: int | None = None) -> Request:
    return Request(rid=0, group=g, traj=g.trajs[k], turn=turn, call=turn, prompt_tokens=prompt,
                   new_tokens=prompt if new is None else new, shared_tokens=shared if turn == 0 else 0,
                   completion_tokens=100, salted=False, arrival=0.0)


def make(loads=(0, 0, 0, 0), eligible=None, **knobs) -> tuple[Router, list[FakeInstance]]:
    """A kv_cache_aware router over fake instances; ``eligible(index)`` stands for the policy."""
    insts = [FakeInstance(i, a) for i, a in enumerate(loads)]
    ok = eligible or (lambda index: True)
    # the policy seam sees (version, group); here every instance has version 0, so key on the index
    r = Router(simpy.Environment(), RouterConfig(name="kv_cache_aware", **knobs), insts,
               lambda version, g: True)
    r.eligible = lambda req: [i for i in insts if ok(i.index)]
    return r, insts


def route(r: Router, req: Request) -> int:
    r.submit(req)
    r.route()
    return req.instance


def test_burst_of_new_groups_spreads_by_smallest_tree():
    # Nothing admitted yet, so every instance shows the same free KV (the old fallback sent all
    # four groups to instance 0). Loads stay balanced (max - min <= 2 < 64).
    # Group 0, sample 0: no match anywhere -> smallest tree, all 0 -> instance 0 (tree 1000).
    # Group 0, sample 1: matches its group prefix on 0: 1000/1000 = 1.0 > 0.3 -> instance 0
    #   (adds 1000 - 1000 = 0 to the tree).
    # Groups 1, 2, 3: no match -> smallest trees 1, 2, 3 in turn (each then 1000).
    r, insts = make()
    picks = [route(r, call(g, k)) for g in (group(i, trajs=2) for i in range(4)) for k in (0, 1)]
    assert picks == [0, 0, 1, 1, 2, 2, 3, 3]
    assert r.tree_size == {0: 1000, 1: 1000, 2: 1000, 3: 1000}


def test_cache_threshold_is_strict():
    # Sample 0 of group 0 (prompt 1000, shared 300) goes to instance 0 (tree 1000).
    # Sample 1 matches 300 tokens on 0: rate 300/1000 = 0.3, not > 0.3 -> smallest tree: instance 1.
    r, _ = make()
    g = group(0, trajs=2)
    assert route(r, call(g, 0, shared=300)) == 0
    assert route(r, call(g, 1, shared=300)) == 1
    assert r.tree_size == {0: 1000, 1: 1000}
    # With cache_threshold 0.29 the same 0.3 is a hit: instance 0, whose tree grows by 1000 - 300.
    r, _ = make(cache_threshold=0.29)
    g = group(0, trajs=2)
    assert route(r, call(g, 0, shared=300)) == 0
    assert route(r, call(g, 1, shared=300)) == 0
    assert r.tree_size == {0: 1700}


def test_next_turn_follows_its_trajectory():
    # Turn 0 (prompt 1000) -> instance 0. Group 1's turn 0 -> instance 1 (smallest tree).
    # Turn 1 of group 0 (prompt 2500 = 1000 + 1200 completion + 300 new): the router's tree on 0
    # holds the 1000-token turn-0 prompt, rate 1000/2500 = 0.4 > 0.3 -> instance 0; its tree
    # grows by 2500 - 1000 = 1500 -> 2500.
    r, _ = make()
    g0, g1 = group(0), group(1)
    assert route(r, call(g0)) == 0
    assert route(r, call(g1)) == 1
    assert route(r, call(g0, turn=1, prompt=2500, new=300)) == 0
    assert r.tree_size == {0: 2500, 1: 1000}
    # A later turn whose match is too small (1000/4000 = 0.25) falls back to the smallest tree:
    # two instances, group 1 (600 tokens) on instance 1: trees 1000 vs 600 -> instance 1.
    r, _ = make(loads=(0, 0))
    g0, g1 = group(0), group(1)
    assert route(r, call(g0)) == 0
    assert route(r, call(g1, prompt=600, shared=600)) == 1
    assert route(r, call(g0, turn=1, prompt=4000, new=300)) == 1


def test_smallest_tree_counts_only_unmatched_tokens():
    # Instance 0 gets group 0 (1000) then, as a hit, its second sample (adds 0);
    # instance 1 gets group 1 (400). Group 2 (600, no match): trees 1000 vs 400 -> instance 1.
    r, _ = make(loads=(0, 0))
    g0 = group(0, trajs=2)
    assert route(r, call(g0, 0)) == 0
    assert route(r, call(g0, 1)) == 0
    assert route(r, call(group(1), prompt=400, shared=400)) == 1
    assert route(r, call(group(2), prompt=600, shared=600)) == 1
    assert r.tree_size == {0: 1000, 1: 1000}


def test_imbalance_escape_uses_outstanding_calls_with_both_thresholds():
    # Group 0's prefix lives on instance 0 (a full match, rate 1.0).
    # Loads 70/5/5/5 (+1 for the first routed call on 0 makes 71): 71 - 5 = 66 > 64 and
    # 71 > 1.5 * 5 -> imbalanced -> least loaded, instance 1, and the call still enters 1's tree.
    r, insts = make(loads=(70, 5, 5, 5))
    g = group(0, trajs=2)
    r.tree_groups[0] = {0: 1000}
    r.tree_size[0] = 1000
    assert route(r, call(g, 0)) == 1
    assert r.tree_size == {0: 1000, 1: 1000}
    # 69 - 5 = 64 is not > 64 -> balanced -> the cache hit on instance 0.
    r, _ = make(loads=(69, 5, 5, 5))
    r.tree_groups[0] = {0: 1000}
    assert route(r, call(group(0))) == 0
    # 200 - 134 = 66 > 64 but 200 > 1.5 * 134 = 201 fails -> balanced -> the hit on 0.
    r, _ = make(loads=(200, 134))
    r.tree_groups[0] = {0: 1000}
    assert route(r, call(group(0))) == 0


def test_loads_of_ineligible_instances_count_but_are_never_picked():
    # Instance 0 is not eligible (e.g. at active_cap) and holds 100 calls: 100 - 0 > 64 and
    # 100 > 0 -> imbalanced; the least loaded eligible instance is 2 (load 3 vs 1's 10).
    r, _ = make(loads=(100, 10, 3), eligible=lambda i: i != 0)
    r.tree_groups[0] = {0: 1000}  # a cache match on the ineligible instance is not used
    assert route(r, call(group(0))) == 2
    # Balanced and the matching instance ineligible: the smallest tree among 1 and 2 (tie -> 1).
    r, _ = make(loads=(10, 10, 3), eligible=lambda i: i != 0)
    r.tree_groups[0] = {0: 1000}
    r.tree_size = {0: 1000}
    assert route(r, call(group(0))) == 1


def test_salted_turn0_call_leaves_no_group_prefix():
    # A salted call carries shared_tokens = 0: its group's next sample finds no shared prefix
    # (its own trajectory key differs) -> smallest tree.
    r, _ = make(loads=(0, 0))
    g = group(0, trajs=2)
    assert route(r, call(g, 0, shared=0)) == 0
    assert route(r, call(g, 1, shared=0)) == 1
