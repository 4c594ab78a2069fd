"""Chunked prefill (``max_num_batched_tokens > 0``) in the instance kernel: `Instance.plan`'s chunks.

SimPy (`simrl.engine.instance.Instance.plan`) gives each prefilling request, in ``Instance.prefilling``
order (admission order; a preempted request re-admitted goes to the end), a chunk
``min(prefill_remaining, budget)`` out of ``budget = max_num_batched_tokens - n_decoding`` (0: unlimited),
and `finish_iteration` moves a request whose prefill reaches 0 to decoding (its first token at that
boundary). Since chunks go in admission order, every prefilling request but the first is untouched:
the prefill still to do is one *line* of tokens in admission order (`InstState.pq_done` ..
`pq_tail`), each prefilling request owning the stretch that ends at its `InstState.slot_pos`, and an
iteration prefilling ``pf`` tokens completes exactly the requests whose stretch ends by
``pq_done + pf``.

An iteration that prefills anchors a new closed-form run in SimPy (`Instance.iteration_end`), so a
boundary whose next iteration prefills is always visited: the anchor iteration's end is an event
(``it + 1``) when prefill is left after it and the budget then still leaves room for it
(``max_num_batched_tokens > n_decoding``). When the budget is spent on decoding sequences, prefilling
requests wait, without decoding, until a finish frees budget (an event anyway), and the iterations in
between are a plain closed-form run.

`Instance.plan`'s stall fallback (a chunk for the head when no chunk was given and nothing decodes)
cannot trigger: with no decoding sequence the budget is ``max_num_batched_tokens`` >= 1 (the config
refuses negative budgets), so the head always gets ``min(prefill_remaining, budget)`` -- a chunk is
always appended when anything is prefilling. The kernel has no such branch.

With this code traced (`Static.chunked_prefill`) an instance's slots are kept in admission order
(a finish or a preemption shifts the later slots down; admissions append), so the newest running
request -- `Instance.plan`'s preemption victim -- is the last occupied slot, and a cumulative sum
over the row runs in admission order (an abort re-prefills every running request in that order).
A configuration with ``max_num_batched_tokens = 0`` in such a batch runs the same code with an
unlimited budget: the whole line in the anchor iteration, as the unchunked kernel does.

A request's stretch of the line is its prompt + generated tokens (its prefill), which is also what it
brings to the decoding KV sum (`plan_chunks` takes the still prefilling requests' KV from the line), but
with the prefix cache (`simrl_fast.prefix`): there a stretch is the prefill (prompt + generated - its hit
shared prefix) and `plan_chunks`' ``hits`` adds the hit part back on the KV side.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simrl_fast.state import BIG, KEY_EMPTY, PF_BASE, pack, unpack_fin, unpack_rid

#: a budget larger than any line (the unlimited budget of max_num_batched_tokens = 0)
_UNLIMITED = 1 << 62


def prefilling(key):
    """Which slot keys belong to requests still prefilling (occupied, finish iteration >= PF_BASE)."""
    fin = unpack_fin(key)
    return (key < KEY_EMPTY) & (fin >= PF_BASE)


def generated_of(key, length, it):
    """`Instance.generated_of` from a slot key: a decoding request finishing at iteration F has
    ``L - (F - it)`` tokens; a prefilling one keeps what it had when admitted (key PF_BASE + L - gen)."""
    fin = unpack_fin(key).astype(jnp.int64)
    length = jnp.asarray(length).astype(jnp.int64)
    return jnp.where(fin >= PF_BASE, length - (fin - PF_BASE), length - (fin - it))


def prefill_key(left, rid):
    """The slot key of a request that still prefills, with ``left`` tokens to generate once it decodes."""
    return pack(PF_BASE + jnp.asarray(left).astype(jnp.int64), rid)


def reprefill_row(key, length, prompt, it, restart, occ):
    """An abort's resume (`Instance.abort_all`, then re-admission in admission order): every running
    request re-prefills prompt + the tokens it keeps (none after abort_restart). Returns the new key row
    (every request prefilling, left = L - kept), the line ends (cumulative in slot = admission order),
    and the line's length."""
    gen = jnp.where(restart, 0, generated_of(key, length, it))
    tok = jnp.where(occ, prompt.astype(jnp.int64) + gen, 0)
    pos = jax.lax.associative_scan(jnp.add, tok)  # (jnp.cumsum lowers to an O(S^2) reduce-window on CPU)
    new_key = jnp.where(occ, prefill_key(length.astype(jnp.int64) - gen, unpack_rid(key)), key)
    return new_key, pos, pos[-1]


def remove_shift(row, at, on, fill):
    """Remove slot ``at`` from an admission-ordered row when ``on``: the later slots move down one."""
    S = row.shape[0]
    shifted = jnp.concatenate([row[1:], jnp.full((1,), fill, row.dtype)])
    return jnp.where(on & (jnp.arange(S) >= at), shifted, row)


def append(row, start, count, vals):
    """Write ``vals[:count]`` into slots ``start ..`` of a row (the admitted calls, in order)."""
    S, A = row.shape[0], vals.shape[0]
    rel = jnp.arange(S) - start
    put = (rel >= 0) & (rel < count)
    return jnp.where(put, vals[jnp.clip(rel, 0, A - 1)].astype(row.dtype), row)


def plan_chunks(p, it, nd, kd, na, pa, pq_done, pq_tail, key, pos, hits=None, zero=None):
    """`Instance.plan`'s chunks for the anchor iteration starting at boundary ``it`` and what they complete.

    ``nd``/``kd``: decoding sequences and their KV; ``na``/``pa``: every prefilling request and its
    prompt + generated tokens; the line ``pq_done .. pq_tail``; the slot ``key``/``pos`` rows.
    Returns (pf: tokens prefilled, na_c / pa_c: requests completed and their tokens, nw / wkv: those still
    prefilling after it, the key row with the completed requests decoding from ``it`` (first token at this
    iteration's end), and whether the next iteration prefills too -- its start boundary ``it + 1`` is then an
    event). ``hits`` (the prefix cache, `simrl_fast.prefix`): per slot, the prompt tokens a request's prefill
    skips (its hit shared prefix), which it holds but not on the line; ``zero``: per slot, a stretch of length
    0 (its whole prompt hit): `Instance.plan` gives it its chunk of 0 tokens only while the budget left
    before it is > 0. Also returns whether the requests still prefilling are all such and the next iteration
    has budget for them: they complete in that iteration, which prefills nothing (`prefix`, late zeros)."""
    tb = p.token_budget
    budget = jnp.where(tb > 0, tb - nd.astype(jnp.int64), _UNLIMITED)
    pend = pq_tail - pq_done
    pf = jnp.where(budget > 0, jnp.minimum(budget, pend), 0)
    comp = prefilling(key) & (pos <= pq_done + pf)
    if zero is not None:  # the budget was used up before it (`Instance.plan`'s `if budget <= 0: break`)
        comp = comp & ~(zero & (pos - pq_done >= budget))
    na_c = jnp.sum(comp.astype(jnp.int32))
    # the still prefilling requests own the line after the last completed one (all of it when none completed),
    # and a request's stretch is its prompt + generated tokens, what it brings to the decoding KV sum
    c_end = jnp.max(jnp.where(comp, pos, -1))
    skipped = 0 if hits is None else jnp.sum(jnp.where(prefilling(key) & ~comp, hits, 0))
    wkv = jnp.where(na_c > 0, pq_tail - c_end + skipped, pa)
    pa_c = pa - wkv
    nw = na - na_c
    new_key = jnp.where(comp, key - ((PF_BASE - jnp.asarray(it).astype(jnp.int64)) << 32), key)
    room = tb - (nd + na_c).astype(jnp.int64) > 0
    again = (pend - pf > 0) & room
    if zero is None:
        return pf, na_c, pa_c, nw, wkv, new_key, again
    return pf, na_c, pa_c, nw, wkv, new_key, again, (pend - pf == 0) & (nw > 0) & room


def next_finish(key):
    """The earliest finish iteration among decoding requests (BIG: none; prefilling keys are skipped)."""
    fin = unpack_fin(key)
    return jnp.min(jnp.where(fin < PF_BASE, fin, BIG))
