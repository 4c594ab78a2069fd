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
smallest serial until it fits", one sort of the instance's row per step (`lru_sort`,
`evict_lru`). Between observable boundaries an on_demand instance's KV grows by ``B1`` per
iteration while its cache stays, so the evictions of the plans run at the boundaries before an
event are applied at the event, all at once (`instance_action`, entry: the largest of them was
the last one's, ``kv(E-1) + B1 = kv(E)``); they never preempt (`instance.preempt_boundary` is
still the first boundary whose KV does not fit once the whole cache is evicted).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast.state import BIG

# InstState.slot_sh: whether a running request holds its group's shared prefix, and whether its prefill skipped it
SH_NONE, SH_ALLOC, SH_HIT = 0, 1, 2


def call_shared(w, r, n, G):
    """``Request.shared_tokens`` of call ``r`` (0 for r < 0 and for a salted call)."""
    rr = jnp.maximum(r, 0)
    wg, s = (rr // n) % G, rr % n
    return jnp.where(r >= 0, w.shared[wg, s], 0).astype(jnp.int64)


def entry_tokens(w, static):
    """[Gm] int64: the tokens of each dispatched group's shared-prefix entry (its workload group's)."""
    return w.gshared[jnp.arange(static.max_groups) % static.groups].astype(jnp.int64)


def lru_sort(c_row, floor, tokg):
    """The row's live cache entries in LRU order: (live [Gm] by gid, sorted serials (BIG: none), their
    tokens, their gids)."""
    live = c_row >= floor  # floor >= 1: serial 0 is "no entry"
    gidx = jnp.arange(c_row.shape[0], dtype=jnp.int32)
    sk, stok, sg = jax.lax.sort((jnp.where(live, c_row, BIG), jnp.where(live, tokg, 0), gidx), num_keys=1)
    return live, sk, stok, sg


def evict_lru(sk, stok, skip, d):
    """`Instance.make_room` / `plan`'s eviction: the LRU entries (sorted positions, ``skip``: not
    evictable or gone already) taken one by one while fewer than ``d`` tokens are freed (none when d <= 0).
    Returns (evicted sorted positions, their tokens, the largest evicted serial (0: none))."""
    ok = ~skip & (sk < BIG)
    t = jnp.where(ok, stok, 0)
    before = jnp.cumsum(t) - t
    ev = ok & (before < d)
    return ev, jnp.sum(jnp.where(ev, stok, 0)), jnp.max(jnp.where(ev, sk, 0))


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
