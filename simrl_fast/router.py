"""The router's choices (simrl.engine.router.Router.choose / eligible), as array code.

One global FIFO of calls (calls ``routed`` .. ``dispatched * n`` - 1, in rid order). The head is
routed to an eligible instance, or it waits and blocks the calls behind it. Eligible: active, and
with ``Params.cap`` > 0 (``router.active_cap``) fewer than ``cap`` assigned calls (waiting +
running: ``wq_len + running``); the policy's per-instance eligibility is `perinst.routable`,
the same for every instance whenever the router runs. Among the eligible ones:

- least_requests (0): the fewest assigned, lowest index on ties;
- round_robin (1): the first eligible one from ``rr_next`` on (cyclically); ``rr_next`` moves past it;
- dp_shard (2): call number ``routed`` goes to instance ``(routed // shard) % n_inst`` (a static
  partition, no choice): if that instance is not eligible the head waits for it.

kv_cache_aware and throughput_balance are rejected by name (`simrl_fast.lowering.check_supported`).
"""

from __future__ import annotations

import jax.numpy as jnp

from simrl_fast.state import BIG


def assigned(st, p, static):
    """Each instance's assigned calls (Instance.assigned: waiting + running); BIG for inactive rows."""
    active = jnp.arange(static.instances) < p.n_inst
    return jnp.where(active, st.inst.wq_len + st.inst.running, BIG)


def _eligible(a, p):
    return (a < BIG) & ((p.cap <= 0) | (a < p.cap))


def head_ok(st, p, static):
    """Whether the router queue's head (call ``st.routed``) may be routed now (some instance eligible; for
    dp_shard, its slice's instance). Assumes the queue is not empty and `perinst.routable`."""
    a = assigned(st, p, static)
    shard_inst = (st.routed // jnp.maximum(p.shard, 1)) % jnp.maximum(p.n_inst, 1)
    return jnp.where(p.router == 2, _eligible(a[shard_inst], p), jnp.any(_eligible(a, p)))


def choose(st, p, static, on_k):
    """The instances of the next ``n`` queued calls routed one by one (``on_k`` [n]: call k is queued and
    the router runs). Returns (instance of call k [n] int32, routed [n] bool: a prefix of ``on_k``, stopped
    at the first call no instance is eligible for, the round-robin pointer after them)."""
    K = static.instances
    n = on_k.shape[0]
    i32 = jnp.int32
    kk = jnp.arange(K, dtype=i32)
    a = assigned(st, p, static)
    ptr = st.rr_next
    ok = jnp.asarray(True)
    insts, oks = [], []
    n_inst = jnp.maximum(p.n_inst, 1)
    for k in range(n):
        elig = _eligible(a, p)  # (inactive rows hold BIG: never eligible, never the least)
        lr = jnp.argmin(a).astype(i32)
        dist = jnp.where(elig, (kk - ptr) % n_inst, BIG)
        rr = jnp.argmin(dist).astype(i32)
        ds = ((st.routed + k) // jnp.maximum(p.shard, 1) % n_inst).astype(i32)
        i_k = jnp.where(p.router == 1, rr, jnp.where(p.router == 2, ds, lr))
        ok = ok & on_k[k] & elig[i_k]
        ptr = jnp.where(ok & (p.router == 1), (i_k + 1) % n_inst, ptr)
        a = a + ((kk == i_k) & ok).astype(a.dtype)
        insts.append(i_k)
        oks.append(ok)
    return jnp.stack(insts).astype(i32), jnp.stack(oks), ptr.astype(st.rr_next.dtype)
