"""The prefix cache of group-shared prompts on the fast path (`Params.pc`, `Static.prefix`).

As `simrl.engine.instance.Instance` does it for single-call trajectories (multi-turn contexts,
the cache's ``("t", tid)`` entries, are rejected with multi-call workloads):

- a call shares its group's prompt prefix (``shared_tokens``, 0 when salted) when prefix caching
  is on and it has generated nothing (a preempted or aborted request that kept tokens
  re-prefills its whole context, privately). Per instance and dispatched group the shared
  prefix is one entry: held by reference (`InstState.sh_ref`) while a running request of the
  group holds it, else in the LRU cache (`InstState.c_ser`: its LRU serial; `c_floor` marks a
  cleared cache) or gone;
- `Instance.try_admit`: the first sharing call of a group allocates the prefix (KV + shared,
  prefills the whole prompt); a later one hits it (prefills its private part); one that finds
  the entry in the cache moves it back (cache -> KV). `make_room` evicts cache entries LRU
  first, never the one being hit;
- `Instance.release` (finish, preemption, abort): the reference is dropped; the last one moves
  the entry to the cache's MRU end;
- `Instance.plan` (on_demand): before preempting it evicts cache entries LRU first;
- `Instance.clear_cache`: at the resume of a pause (after the aborted requests were released)
  or at the publication, as `lowering.prefix_fields` says (`Params.pc_clear`).

The kernel's boundary step (`instance.instance_action`) admits, in one scan step, the longest
prefix of the waiting queue that fits *without evicting*, or else the head alone with its
evictions (so the classification of the next calls sees them); evictions are "the entries of
smallest serial until it fits": the smallest serial threshold whose entries free enough, found by
bisection over the serials (`evict_lru`: masked sums over the instance's row; a sort of the row, with
its tokens, costs several times a whole scan step on CPU). Between observable boundaries an on_demand instance's KV grows by ``B1`` per
iteration while its cache stays, so the evictions of the plans run at the boundaries before an
event are applied at the event, all at once (`instance_action`, entry: the largest of them was
the last one's, ``kv(E-1) + B1 = kv(E)``); they never preempt (`instance.preempt_boundary` is
still the first boundary whose KV does not fit once the whole cache is evicted).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast.lowering import workload_group

# InstState.slot_sh: whether a running request holds its group's shared prefix, and whether its prefill skipped it
SH_NONE, SH_ALLOC, SH_HIT = 0, 1, 2


def call_shared(w, r, n, G):
    """``Request.shared_tokens`` of call ``r`` (0 for r < 0 and for a salted call)."""
    rr = jnp.maximum(r, 0)
    return jnp.where(r >= 0, w.shared[workload_group(w, rr // n, G), rr % n], 0).astype(jnp.int64)


def entry_tokens(w, static):
    """[Gm] int64: the tokens of each dispatched group's shared-prefix entry (its workload group's)."""
    return w.gshared[workload_group(w, jnp.arange(static.max_groups), static.groups)].astype(jnp.int64)


def evict_lru(c_row, floor, top, tokg, skip, d):
    """`Instance.make_room` / `plan`'s eviction: the live cache entries of the row (serial >= ``floor``, below
    ``top``; ``skip``: not evictable, or gone already) taken in LRU order (serial order) one by one while
    fewer than ``d`` tokens are freed (none when d <= 0, all of them when they free less). Returns (evicted
    [Gm] by gid, their tokens)."""
    ok = (c_row >= floor) & ~skip
    tok = jnp.where(ok, tokg, 0)

    def freed(th):
        return jnp.sum(jnp.where(c_row <= th, tok, 0))

    def body(_, lohi):  # the smallest threshold th in [lo, hi] with freed(th) >= d (hi = top: all)
        lo, hi = lohi
        mid = lo + (hi - lo) // 2
        enough = freed(mid) >= d
        return jnp.where(enough, lo, mid + 1), jnp.where(enough, mid, hi)

    _, th = jax.lax.fori_loop(0, 32, body, (floor - 1, top))
    ev = ok & (c_row <= th)
    return ev, jnp.sum(jnp.where(ev, tokg, 0))


def classify(pcx, heads, gens, n, G, w, r_row, live_row):
    """For each call of the admission window (in order, each after the ones before it are admitted):
    (shared tokens, gid, shares, hits a referenced entry, hits a cache entry) as `Instance.try_admit`
    sees it. A call shares when the run caches prefixes (``pcx``), it carries shared tokens and it has
    generated none; its entry is referenced when a running request holds it (``r_row``) or an earlier
    sharing call of the window belongs to the same group; else in the cache when live (``live_row``)."""
    sh = call_shared(w, heads, n, G)
    g = jnp.maximum(heads, 0) // n
    share = pcx & (sh > 0) & (gens == 0)
    m = heads.shape[0]
    k = jnp.arange(m)
    earlier = jnp.any(share[None, :] & (g[None, :] == g[:, None]) & (k[None, :] < k[:, None]), axis=1)
    insh = share & ((r_row[g] > 0) | earlier)
    inca = share & ~insh & live_row[g]
    return sh, g, share, insh, inca
