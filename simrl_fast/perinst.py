"""Per-instance weight sync (`policy.sync_scope=per_instance`, PSRL): the trainer pushes, each instance pulls.

SimPy (`simrl.engine.weights.Weights`): with ``scope = per_instance`` a publication is `_push`: the
trainer waits ``publish_time(K)`` (as ``continue`` does, no pause), then the version goes up and every
instance is woken (`Instance.wake`). An instance whose version is older than the published one asks
`wants_pull` at the top of its loop and, the record's `should_pull` being True, pulls at once
(`Weights.pull`): it aborts its running requests under the rule (re-routed), clears its prefix cache
when the sync says so, waits ``publish_time(1)``, takes the version it started pulling and wakes the
router. The router routes a call only to an instance whose version is at least the call's group's
dispatch version (`route_needs_dispatch_version`, PSRL's ``eligible``); the others wait in its queue.

What the kernel models (``Static.perinst``, `Params.pull_s` > 0; lowering accepts it only there): the
record's admission has the sync shape (`lowering.sync_shape`: budget (version + 1) x batch counting
accepted + running), so batch v forms once every group admitted at version v finished, and no group is
dispatched again before the push of v + 1. At every push, then, every instance is idle with an empty
waiting queue, holds the previous version, and the router's queue is empty: there is nothing to abort
or re-route, and

1. the push (`push`, in the step whose timer ends the publication, right after `trainer.timer_action`
   and before the trainer forms a batch, as `_push` wakes them before it returns): every active
   instance is woken (START, insertion order by index);
2. a woken instance holding an older version (`takes`/`pull_action`) starts its pull instead of a loop
   turn: a timeout at now + ``pull_s`` (PULL, heap key (now + pull_s, now, seq)), its cache cleared
   when ``pc_clear`` = `lowering.PC_CLEAR_PULL`;
3. the pull's end sets the instance's version (``PerInstState.iv``; the published one, which cannot
   have moved: the next push needs a batch generated after the pulls) and the instance goes idle (its
   waiting queue is empty: nothing was routed to it while it pulled);
4. the router (`routable`) routes only while every active instance holds the published version. Every
   call queued then was dispatched at that version, and all instances pull from the same instant for the
   same time, so they are all lagging or all current whenever the router runs: the pulls end in one
   instant, whose timeouts SimPy pops before the router's wake-up (scheduled by the first of them).

The admission version of a call is the published version (`GroupState.minv`), which equals the admitting
instance's: an instance admits only after its pull. Not modelled (refused by `lowering.perinst_rejections`):
pulls with requests in flight (the pull at an iteration boundary, the rule's aborts, their re-routing
to the router's front, a lagging instance woken again by a finished group) -- any admission other than
the sync shape.
"""

from __future__ import annotations

import jax.numpy as jnp

from simrl_fast.lowering import PC_CLEAR_PULL
from simrl_fast.state import BIG, IDLE, PULL, START


def _active(p, static):
    return jnp.arange(static.instances) < p.n_inst


def routable(st, p, static):
    """Whether the router may route now: every active instance holds the published version (True when
    ``Static.perinst`` is off or the configuration syncs globally)."""
    if not static.perinst:
        return jnp.asarray(True)
    lag = _active(p, static) & (st.pi.iv < st.version)
    return (p.pull_s <= 0) | ~jnp.any(lag)


def push(st, p, static, pub):
    """`Weights._push` after its timeout (``pub``: this step ended a publication; the version is up):
    every active idle instance is woken, in index order (`Instance.wake`: START at now)."""
    if not static.perinst:
        return st
    ins = st.inst
    wake = pub & (p.pull_s > 0) & _active(p, static) & (ins.phase == IDLE)
    rank = jnp.cumsum(wake.astype(jnp.int32)) - 1
    inst = ins._replace(phase=jnp.where(wake, START, ins.phase), ev_t=jnp.where(wake, st.now, ins.ev_t),
                        ev_prev=jnp.where(wake, st.now, ins.ev_prev),
                        ev_seq=jnp.where(wake, st.seq + rank, ins.ev_seq))
    return st._replace(inst=inst, seq=st.seq + jnp.sum(wake.astype(jnp.int32)))


def takes(st, p, static, on, i):
    """(pull start, pull end): whether instance ``i``'s action this step (``on``) is one of the two (else it
    is `instance.instance_action`'s loop turn)."""
    if not static.perinst:
        f = jnp.asarray(False)
        return f, f
    ph = st.inst.phase[i]
    start = on & (p.pull_s > 0) & (ph == START) & (st.pi.iv[i] < st.version)
    return start, on & (ph == PULL)


def pull_action(st, p, static, start, end, i, now):
    """`Weights.pull`: begin (timeout now + ``pull_s``, the cache cleared) or end (version set, idle)."""
    if not static.perinst:
        return st
    ins = st.inst
    k = jnp.arange(static.instances)
    s, e = start & (k == i), end & (k == i)
    inst = ins._replace(
        phase=jnp.where(s, PULL, jnp.where(e, IDLE, ins.phase)),
        ev_t=jnp.where(s, now + p.pull_s, jnp.where(e, jnp.inf, ins.ev_t)),
        ev_prev=jnp.where(s, now, jnp.where(e, jnp.inf, ins.ev_prev)),
        ev_seq=jnp.where(s, st.seq, jnp.where(e, BIG, ins.ev_seq)),
        ev_it=jnp.where(s | e, BIG, ins.ev_it),
    )
    if static.prefix:  # Instance.clear_cache (an idle instance: no shared prefix is referenced)
        clr = s & (p.pc == 1) & (p.pc_clear == PC_CLEAR_PULL)
        inst = inst._replace(c_floor=jnp.where(clr, inst.c_next, inst.c_floor),
                             cache_tok=jnp.where(clr, 0, inst.cache_tok))
    iv = jnp.where(e, st.version, st.pi.iv)
    return st._replace(inst=inst, pi=st.pi._replace(iv=iv), seq=st.seq + start)
