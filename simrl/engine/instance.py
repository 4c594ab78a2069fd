"""One rollout instance: vLLM-style continuous batching, iteration by iteration.

Implements docs/model.md, "Rollout instance": admission from the instance's waiting queue
(FCFS, bounded by ``max_num_seqs`` and KV), chunked prefill under a per-iteration token
budget, one token per decoding sequence per iteration, the KV policies ``reserve`` and
``on_demand`` (newest request preempted and recomputed when KV runs out), a prefix cache
(group-shared prompts and finished trajectory contexts, evicted LRU), and pauses at
iteration boundaries for weight updates.

Decoding sequences are not touched every iteration: each knows the instance iteration that
yields its first token of the current segment, so its token count is derived, and a heap
keyed by finishing iteration finds completions.

Iteration ends are computed in closed form from an anchor (docs/model.md, "Iteration
boundaries"): the instance's last observable boundary (an admission, a finish, a pause, a
pull, a preemption, a wake) anchors a run whose first iteration ends at ``t1 = anchor +
iteration_time(...)`` and whose ``j``-th boundary is `boundary_time` ``(t1, alpha, beta, j -
1)``, when the cost model's iteration time is affine in the KV at a fixed batch (its
``kv_slope``); each end is scheduled at that absolute time (`timeout_at`), not as ``now + dt``,
so the times do not depend on how many iterations were summed. The JAX fast path evaluates
the same expression (`simrl_fast.closed_form`), so both engines give identical floats. Without
a ``kv_slope`` (a model whose iteration time is not affine in the KV) every iteration ends at
``now + iteration_time(...)``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

import simpy
from simpy.events import NORMAL

from simrl.engine.ports import CallPort, LoadPort, PullPort
from simrl.engine.records import Request
from simrl.policy.rules import InflightRule


def boundary_time(t1: float, alpha: float, beta: float, k):
    """End of iteration ``k + 1`` of a run (``k`` >= 0, a float or a float array): the run's first
    iteration ends at ``t1``, the next ones take ``alpha``, ``alpha + beta``, ``alpha + 2*beta``, ...

    ``t1 + k*alpha + beta*k*(k-1)/2``, in this operation order in both engines (SimPy with Python
    floats, the fast path with float64 arrays, `simrl_fast.closed_form.boundary_time`): the one
    expression every iteration boundary inside a run comes from."""
    return t1 + k * alpha + beta * (k * (k - 1.0) * 0.5)


def timeout_at(env: simpy.Environment, t: float) -> simpy.Event:
    """A timeout that fires at the absolute time ``t`` (>= now), with normal priority.

    `simpy.Environment.schedule` adds a delay to ``now`` (``now + (t - now)`` need not equal
    ``t``), so this pushes the event onto the queue itself, as ``schedule`` does in simpy 4.1.2
    (simpy/core.py: ``heappush(self._queue, (self._now + delay, priority, next(self._eid),
    event))``; simpy/events.py, ``Timeout.__init__``: ``_ok = True``, then ``schedule``)."""
    if not t >= env.now:
        raise ValueError(f"timeout_at({t!r}) is before now ({env.now!r})")
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    heapq.heappush(env._queue, (t, NORMAL, next(env._eid), ev))
    return ev


class Instance:
    """State of one rollout instance; `run` is its SimPy process.

    It sees the rest of the engine only through three ports: ``calls`` (what happened to a
    call), ``load`` (its queues changed) and ``pull`` (per-instance weight sync).
    """

    def __init__(self, env: simpy.Environment, index: int, cfg, cost, capacity: int,
                 calls: CallPort, load: LoadPort, pull: PullPort):
        self.env = env
        self.calls = calls
        self.load = load
        self.pull = pull
        self.index = index
        self.cost = cost
        self.capacity = capacity
        self.max_num_seqs = cfg.max_num_seqs
        self.token_budget = cfg.max_num_batched_tokens  # 0: unlimited
        self.reserve = cfg.kv_policy == "reserve"
        self.prefix_caching = cfg.prefix_caching
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order
        self.prefilling: list[Request] = []  # admitted, prompt not fully prefilled yet
        # (finishing iteration, rid, segment, request); stale entries are skipped on pop
        self.finish_heap: list[tuple[int, int, int, Request]] = []
        self.n_decoding = 0
        self.kv_decode_sum = 0  # sum of prompt + generated over decoding sequences
        self.kv_used = 0  # private KV of running requests + referenced shared prefixes
        self.cache: OrderedDict[tuple, int] = OrderedDict()  # evictable prefixes, LRU first
        self.cache_tokens = 0
        self.shared: dict[int, list[int]] = {}  # gid -> [tokens, references]
        self.it = 0  # iterations completed
        self.version = 0
        self.admit_serial = 0
        self.busy_s = 0.0
        self.preemptions = 0
        self.pause_ack = None  # event the pauser waits on, set while a pause is requested
        self.resume_ev = None
        self.paused = False
        self.wake_ev = env.event()
        # The run of iterations the next one may continue (`iteration_end`): anchored at the last
        # observable boundary; `anchor_it` is None when the next iteration starts a new run.
        self.kv_slope = getattr(cost, "kv_slope", None)
        self.anchor_it: int | None = None
        self.run_t1 = 0.0  # end of the anchor iteration
        self.run_alpha = self.run_beta = 0.0  # closed form of the iterations after it (valid when run_b > 0)
        self.run_b = self.run_k = 0  # their decoding sequences and KV at the first of them

    # -- public helpers used by the router and the sync logic -----------------------------
    @property
    def assigned(self) -> int:
        return len(self.waiting) + len(self.running)

    def outstanding_tokens(self) -> int:
        """Tokens still to produce or prefill for requests assigned here."""
        work = sum(r.prompt_tokens + r.remaining for r in self.waiting)
        return work + sum(r.prefill_remaining + self.completion_left(r) for r in self.running)

    def kv_free(self) -> int:
        return self.capacity - self.kv_used - self.cache_tokens

    def cached_prefix(self, req: Request) -> int:
        """Tokens of ``req``'s prompt this instance could serve from its prefix cache."""
        if not self.prefix_caching or req.salted or req.generated:
            return 0
        if req.turn > 0:
            return req.prompt_tokens - req.new_tokens if ("t", req.traj.tid) in self.cache else 0
        if req.shared_tokens and (req.group.gid in self.shared or ("g", req.group.gid) in self.cache):
            return req.shared_tokens
        return 0

    def wake(self) -> None:
        if not self.wake_ev.triggered:
            self.wake_ev.succeed()

    def enqueue(self, req: Request, front: bool = False) -> None:
        req.instance = self.index
        (self.waiting.appendleft if front else self.waiting.append)(req)
        self.wake()

    def request_pause(self):
        """Ask the instance to stop at its next iteration boundary; returns the ack event."""
        self.pause_ack = self.env.event()
        self.resume_ev = self.env.event()
        self.wake()
        return self.pause_ack

    def resume(self) -> None:
        self.paused = False
        ev, self.resume_ev = self.resume_ev, None
        ev.succeed()

    def generated_of(self, r: Request) -> int:
        if r.seg_first_it < 0:
            return r.seg_base
        return r.seg_base + (self.it - r.seg_first_it)

    def completion_left(self, r: Request) -> int:
        return r.completion_tokens - self.generated_of(r)

    # -- the process -----------------------------------------------------------------------
    def sample(self) -> None:
        self.load.sample(self.index, len(self.waiting), len(self.running), self.kv_used)

    def run(self):
        env = self.env
        while True:
            if self.pause_ack is not None:
                self.paused = True
                self.anchor_it = None
                ack, self.pause_ack = self.pause_ack, None
                ack.succeed()
                yield self.resume_ev if self.resume_ev is not None else env.timeout(0)
                continue
            if self.pull.wants_pull(self):
                self.anchor_it = None
                yield from self.pull.pull(self)
                continue
            self.admit()
            if not self.running:
                self.anchor_it = None
                self.wake_ev = env.event()
                yield self.wake_ev
                continue
            chunks = self.plan()
            if chunks is None:
                continue  # preemption emptied the batch; admit again
            prefill = sum(t for _, t in chunks)
            dt = self.cost.iteration_time(self.n_decoding, self.kv_decode_sum, prefill)
            yield timeout_at(env, self.iteration_end(dt, prefill))
            self.busy_s += dt
            self.finish_iteration(chunks)

    def iteration_end(self, dt: float, prefill: int) -> float:
        """Absolute end time of the iteration starting now, which takes ``dt`` seconds by the cost model.

        The iteration continues the current run when nothing observable happened since its anchor
        (no admission, finish, pause, pull, preemption or wake: `anchor_it` is kept), it prefills
        nothing, and its batch is the run's: ``run_b`` decoding sequences holding ``run_k`` KV tokens
        at the run's second iteration, one more token each per iteration since. Then it ends at
        `boundary_time` of the run's closed form (``alpha`` = the second iteration's time, ``beta`` =
        the cost model's ``kv_slope`` at the batch times the batch: the growth per iteration). Else
        this iteration anchors a new run and ends at ``now + dt``."""
        now = self.env.now
        nd, kd = self.n_decoding, self.kv_decode_sum
        if self.anchor_it is not None and prefill == 0 and self.kv_slope is not None:
            k = self.it - self.anchor_it  # iterations of the run done (the anchor iteration is the first)
            if k == 1:
                slope = self.kv_slope(nd) if nd > 0 else None
                if slope is not None:
                    self.run_alpha, self.run_beta, self.run_b, self.run_k = dt, slope * nd, nd, kd
                else:
                    self.run_b = 0
            if k >= 1 and self.run_b > 0 and nd == self.run_b and kd == self.run_k + (k - 1) * nd:
                return boundary_time(self.run_t1, self.run_alpha, self.run_beta, float(k))
        self.anchor_it, self.run_b = self.it, 0
        self.run_t1 = now + dt
        return self.run_t1

    # -- admission -------------------------------------------------------------------------
    def admit(self) -> None:
        changed = False
        while self.waiting and len(self.running) < self.max_num_seqs:
            if not self.try_admit(self.waiting[0]):
                break
            self.waiting.popleft()
            changed = True
        if changed:
            self.anchor_it = None  # an admission is an observable boundary: the next iteration anchors a run
            self.sample()

    def try_admit(self, r: Request) -> bool:
        """Admit ``r`` if its KV fits (evicting cached prefixes LRU); False when it does not."""
        hit_key, hit_tokens, shared_new, shared_hit = None, 0, 0, False
        use_cache = self.prefix_caching and not r.salted and r.generated == 0
        if use_cache and r.turn > 0 and ("t", r.traj.tid) in self.cache:
            hit_key = ("t", r.traj.tid)
            hit_tokens = r.prompt_tokens - r.new_tokens
        share = use_cache and r.turn == 0 and r.shared_tokens > 0
        if share:
            if r.group.gid in self.shared:
                shared_hit = True
            elif ("g", r.group.gid) in self.cache:
                hit_key, shared_hit = ("g", r.group.gid), True
            else:
                shared_new = r.shared_tokens
        private = r.prompt_tokens + r.generated - (r.shared_tokens if share else 0)
        need_private = private + (r.remaining if self.reserve else 0)
        # A consumed cache entry moves into this request's KV; it frees its own tokens.
        from_cache = self.cache.get(hit_key, 0) if hit_key else 0
        need = need_private + shared_new - (from_cache if hit_key and hit_key[0] == "t" else 0)
        if not self.make_room(need, keep=hit_key):
            return False
        # Commit.
        if hit_key is not None:
            self.cache_tokens -= self.cache.pop(hit_key)
        if share:
            if shared_hit and r.group.gid in self.shared:
                self.shared[r.group.gid][1] += 1
            else:
                self.shared[r.group.gid] = [r.shared_tokens, 1]
                self.kv_used += r.shared_tokens
            r.holds_shared = True
        hit = hit_tokens + (r.shared_tokens if shared_hit else 0)
        self.kv_used += need_private
        r.private_kv = need_private
        r.prefill_total = r.prefill_remaining = r.prompt_tokens + r.generated - hit
        if r.aborts or r.preemptions:
            r.reprefill_tokens += r.prefill_total  # this context was computed once already
        r.seg_base, r.seg_first_it = r.generated, -1
        r.segment += 1
        self.admit_serial += 1
        r.admit_serial = self.admit_serial
        r.version = self.version
        if r.version_start is None:
            r.version_start = self.version
        self.running.append(r)
        self.prefilling.append(r)
        self.calls.on_admit(self.index, self.version, r)
        return True

    def make_room(self, need: int, keep=None) -> bool:
        if need > self.capacity - self.kv_used:
            return False
        while self.kv_free() < need:
            key = next((k for k in self.cache if k != keep), None)
            if key is None:
                return False
            self.cache_tokens -= self.cache.pop(key)
        return True

    # -- one iteration ---------------------------------------------------------------------
    def plan(self) -> list[tuple[Request, int]] | None:
        """Preempt if decoding would overflow KV (on_demand), then allocate prefill chunks."""
        if not self.reserve:
            while self.kv_used + self.n_decoding > self.capacity - self.cache_tokens:
                if self.cache:
                    self.cache_tokens -= self.cache.popitem(last=False)[1]
                    continue
                self.preempt(max(self.running, key=lambda q: q.admit_serial))
                if not self.running:
                    return None
        budget = self.token_budget - self.n_decoding if self.token_budget else 1 << 62
        chunks = []
        for r in self.prefilling:
            if budget <= 0:
                break
            take = min(r.prefill_remaining, budget)
            budget -= take
            chunks.append((r, take))
        if not chunks and not self.n_decoding and self.prefilling:
            # Budget exhausted by nothing: give the head a chunk so the engine cannot stall.
            r = self.prefilling[0]
            chunks.append((r, min(r.prefill_remaining, max(self.token_budget, 1))))
        return chunks

    def finish_iteration(self, chunks: list[tuple[Request, int]]) -> None:
        now = self.env.now
        # Every decoding sequence emitted one token.
        self.kv_decode_sum += self.n_decoding
        if not self.reserve:
            self.kv_used += self.n_decoding
        for r, take in chunks:
            if r not in self.prefilling:
                continue  # its group was aborted during the iteration (remove_group released it)
            r.prefill_remaining -= take
            if r.prefill_remaining == 0:
                self.prefilling.remove(r)
                r.seg_first_it = self.it  # this iteration's end yields its first token
                if r.first_token is None:
                    r.first_token = now
                left = r.completion_tokens - r.seg_base
                heapq.heappush(self.finish_heap, (self.it + left - 1, r.rid, r.segment, r))
                self.n_decoding += 1
                self.kv_decode_sum += r.prompt_tokens + r.seg_base + 1
                if not self.reserve:
                    self.kv_used += 1
        self.it += 1
        done = []
        while self.finish_heap and self.finish_heap[0][0] < self.it:
            _, _, seg, r = heapq.heappop(self.finish_heap)
            if seg == r.segment and r.instance == self.index and r.seg_first_it >= 0:
                done.append(r)
        for r in done:
            r.generated = r.completion_tokens
            r.finish = now
            self.release(r)
            if self.prefix_caching and not r.salted and r.turn + 1 < r.traj.calls_total:
                key = ("t", r.traj.tid)
                self.cache[key] = r.prompt_tokens + r.completion_tokens
                self.cache_tokens += self.cache[key]
        if done:
            self.anchor_it = None  # a finish is an observable boundary
            self.sample()
        for r in done:
            self.calls.on_finished(self.index, r)

    # -- leaving the batch -----------------------------------------------------------------
    def release(self, r: Request) -> None:
        """Remove ``r`` from the batch and free its KV (the shared prefix by reference)."""
        r.generated = self.generated_of(r) if r.finish is None else r.completion_tokens
        self.running.remove(r)
        if r.seg_first_it < 0:
            self.prefilling.remove(r)
        else:
            self.n_decoding -= 1
            self.kv_decode_sum -= r.prompt_tokens + r.generated
        grown = 0 if self.reserve else r.generated - r.seg_base
        self.kv_used -= r.private_kv + grown
        if r.holds_shared:
            entry = self.shared[r.group.gid]
            entry[1] -= 1
            if entry[1] == 0:
                del self.shared[r.group.gid]
                self.kv_used -= entry[0]
                if self.prefix_caching:
                    self.cache[("g", r.group.gid)] = entry[0]
                    self.cache_tokens += entry[0]
            r.holds_shared = False
        r.seg_first_it = -1
        r.prefill_remaining = 0

    def preempt(self, r: Request) -> None:
        self.anchor_it = None
        self.release(r)
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)
        self.calls.on_preempt(self.index, r)

    def abort_all(self, rule: InflightRule) -> list[Request]:
        """Abort every running request at a boundary (weight update); returns them in order."""
        aborted = sorted(self.running, key=lambda q: q.admit_serial)
        self.anchor_it = None
        for r in aborted:
            self.release(r)
            r.aborts += 1
            if rule is InflightRule.ABORT_RESTART:
                self.calls.on_discard(r, r.generated)
                r.generated = 0
        self.finish_heap = []  # every entry belonged to an aborted segment
        if aborted:
            self.sample()
        return aborted

    def clear_cache(self) -> None:
        self.cache.clear()
        self.cache_tokens = 0

    def remove_group(self, group) -> list[Request]:
        """Drop every call of an aborted ``group``; returns those that held generated tokens."""
        lost = []
        for r in [q for q in self.running if q.group is group]:
            self.anchor_it = None
            self.release(r)
            lost.append(r)
        lost += [q for q in self.waiting if q.group is group and q.generated]
        self.waiting = deque(q for q in self.waiting if q.group is not group)
        return lost
