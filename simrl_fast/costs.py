"""The fast engine's cost terms: the formulas of `simrl.cost.formulas`, evaluated on per-configuration
parameter arrays inside the scan (the same arithmetic the SimPy cost models run for their scalars).

`rollout_times` gives an instance's closed-form inputs at an anchor boundary: the anchor iteration
(``dt0``), the iteration after it (``alpha``) and the growth per further iteration (``beta``; the
decoding sequences grow the KV by one token each). `train_time` gives one training step's seconds.
Each selects, per configuration, between the linear forms and the lowered first-principles models
(`Params.ro_kind`, `Params.tr_kind`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from simrl.cost import formulas as F

RO_LINEAR, RO_ROOFLINE = 0, 1
TR_LINEAR, TR_ANALYTICAL = 0, 1


def _record(cls, vec):
    return cls(*(vec[..., i] for i in range(len(cls._fields))))


def check_static(static, params) -> None:
    """Refuse a Static whose ``formulas`` leave out a formula some configuration of ``params`` uses (or
    whose ``on_demand`` leaves out on_demand KV, ``chunked_prefill`` a token budget, or ``prefix`` the prefix cache)."""
    for bit, kind, name in ((1, params.ro_kind, "the roofline rollout"), (2, params.tr_kind, "analytical training")):
        if not static.formulas & bit and np.any(np.asarray(kind) == 1):
            raise ValueError(f"simrl_fast: Static.formulas={static.formulas} leaves out {name}, which some "
                             "configuration of the batch uses; build the Static with static_for over these params")
    # (Static flag, the configurations that need it, what they use)
    gated = (("on_demand", np.asarray(params.od) == 1, "kv_policy=on_demand"),
             ("chunked_prefill", np.asarray(params.token_budget) > 0, "max_num_batched_tokens > 0"),
             ("prefix", np.asarray(params.pc) == 1, "shared prompt prefixes (prefix_caching)"),
             ("crossing", (np.asarray(params.cross) > 0) | (np.asarray(params.stale_abort) > 0),
              "groups failed at a publication (fail_on_version_crossing, abort_stale_on_publish)"))
    for flag, need, what in gated:
        if not getattr(static, flag) and np.any(need):
            raise ValueError(f"simrl_fast: Static.{flag}=False but some configuration of the batch has {what}; "
                             "build the Static with static_for over these params")


def rollout_times(p, static, nd, kd, pa, b1n, k1n):
    """(dt0, alpha, beta): ``iteration_time(nd, kd, pa)``, ``iteration_time(b1n, k1n, 0)`` and its
    growth per iteration (slope in KV tokens times the ``b1n`` tokens each iteration adds). The
    roofline is traced only when the batch uses it (``static.formulas``)."""
    f = lambda v: jnp.asarray(v).astype(jnp.float64)  # noqa: E731
    nd, kd, pa, b1n, k1n = f(nd), f(kd), f(pa), f(b1n), f(k1n)
    dt0 = p.a + p.b * nd + p.c * kd + p.p * pa
    alpha = p.a + p.b * b1n + p.c * k1n
    beta = p.c * b1n
    if not static.formulas & 1:
        return dt0, alpha, beta
    q = _record(F.RooflineParams, p.ro)
    roof = p.ro_kind == RO_ROOFLINE
    dt0 = jnp.where(roof, F.roofline_iteration_time(jnp, q, nd, kd, pa), dt0)
    alpha = jnp.where(roof, F.roofline_iteration_time(jnp, q, b1n, k1n, 0.0), alpha)
    beta = jnp.where(roof, F.roofline_kv_slope(jnp, q, b1n) * b1n, beta)
    return dt0, alpha, beta


def sample_fwd_flops(p, static, seq_len):
    """`simrl.cost.formulas.analytical_fwd_flops` of each sample (0 under a linear training model)."""
    if not static.formulas & 2:
        return jnp.zeros(seq_len.shape, jnp.float64)
    q = _record(F.AnalyticalParams, p.tr)
    return F.analytical_fwd_flops(jnp, q, seq_len.astype(jnp.float64))


def train_time(p, static, samples, tokens, fwd_sum, fwd_max):
    """Seconds of one training step over ``samples`` sequences of ``tokens`` tokens in all."""
    lin = p.train_a + p.train_per_token * tokens.astype(jnp.float64)
    if not static.formulas & 2:
        return lin
    q = _record(F.AnalyticalParams, p.tr)
    an = F.analytical_step_time(jnp, q, jnp.asarray(samples).astype(jnp.float64), tokens.astype(jnp.float64),
                                fwd_sum, fwd_max)
    return jnp.where(p.tr_kind == TR_ANALYTICAL, an, lin)
