"""Cost formulas written once, as array code both engines run.

Each formula is a plain function of a parameter record (a NamedTuple of numbers, built once from a
cost model) and of the query, taking an ``xp`` namespace for the few non-arithmetic operations
(``where``, ``maximum``, ``minimum``, ``ceil``, ``sqrt``). The SimPy cost models call them with `PY`
(Python floats, ``where`` a conditional expression) for their scalar answers; the JAX fast path calls
them with ``jax.numpy`` inside its scan, on per-configuration parameter arrays (`simrl_fast.lowering`
stacks the records, so a sweep may vary the GPU, the layout and the model). Both evaluate the same
IEEE operations in the same order, so they give identical floats.

Rules that keep them so: every branch on a configuration value is a ``where`` whose untaken side is
still finite (guarded denominators), sums keep the association of the original expressions, and no
transcendental function runs on query-dependent values in a formula the fast path lowers (XLA's
``pow`` differs from libm's in the last bit; constants such as ``log(ep)`` are computed once on the
host and stored in the record, and an integer power such as MoE's ``(1 - k/E)^tokens`` is multiplied
out by `power`, exponentiation by squaring with a fixed number of rounds). ``sqrt`` is correctly
rounded in IEEE 754, so it is the same in both.

- `RooflineParams` / `roofline_params` / `roofline_iteration_time` (with `roofline_stage_time`,
  `roofline_gemm_time`, `roofline_comm_time`, `roofline_expert_load_imbalance`): the arithmetic of
  `simrl.cost.roofline.RooflineRollout`; `roofline_kv_slope` is d(iteration time)/d(KV tokens) at a
  fixed batch, for the fast path's closed form (exact for dense models without sliding-window layers,
  whose KV enters only through the decode-attention roofline, proportional to it, and without
  ``enforce_eager``, whose ``max(stage, host launch time)`` is flat until the GPU outruns the host).
- `power`: ``base ** x`` multiplied out (exponentiation by squaring), for MoE's experts-touched term.
- `AnalyticalParams` / `analytical_params` / `analytical_fwd_flops` / `analytical_phase_values` /
  `analytical_activation_comm_time` / `analytical_moe_pass_time` (MoE layers' memory-bound passes,
  grouped-GEMM tiles, EP load and the dropless dispatcher's host floor): the sequence-length-dependent arithmetic of
  `simrl.cost.analytical.AnalyticalTraining` (the per-step constants -- one micro-batch's gradient
  sync, one ZeRO-3 parameter gather, optimizer, overhead -- are taken from its methods when the record
  is built; ``dp_balance="batch"``'s busiest-rank FLOPs come from a partition of the sample lengths
  the caller computes and passes as ``imb_flops``, 0 on the fast path, which rejects it where it binds).
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace
from typing import NamedTuple

#: the ``xp`` namespace for Python scalars (what the SimPy cost models pass)
PY = SimpleNamespace(
    where=lambda c, a, b: a if c else b,
    maximum=max,
    minimum=min,
    ceil=math.ceil,
    floor=math.floor,
    sqrt=math.sqrt,
    logical_and=lambda a, b: a and b,
    logical_or=lambda a, b: a or b,
    logical_not=lambda a: not a,
)


def _maybe(xp, cond) -> bool:
    """Whether a ``where(cond, ...)`` branch must be computed: always for arrays, only when ``cond``
    holds for Python scalars (the same value either way; it spares SimPy the branches not taken)."""
    return bool(cond) if xp is PY else True


def _safe(xp, x):
    """``x`` where positive, else 1 (a denominator for a branch ``where`` does not take)."""
    return xp.where(x > 0, x, 1.0)


# -- roofline rollout -----------------------------------------------------------------------------


class RooflineParams(NamedTuple):
    """Numbers `roofline_iteration_time` needs (floats; flags are 0.0 / 1.0)."""

    dp: float
    pp: float
    tp: float
    overhead_s: float
    overhead_per_seq_s: float  # + inprocess_s_per_seq when the engine core runs in-process
    model_layers: float  # m.layers
    n_full: float  # m.n_full_attention
    n_lin: float  # m.n_linear_attention
    heads: float  # ceil(m.heads / tp)
    dt: float  # weight dtype bytes
    vocab_hidden: float  # m.vocab * m.hidden
    fden: float  # peak FLOP/s of the compute dtype * compute_efficiency
    bden: float  # HBM bytes/s * bandwidth_efficiency
    swa: float  # share of attention layers that slide
    window: float  # m.sliding_window (0 without)
    qk_vd: float  # decode score + value dims (MLA: absorbed)
    hd_vd: float  # head_dim + value_head_dim
    kv_bytes: float  # KV bytes per token per GPU (all full-attention layers of a stage)
    v_heads: float  # ceil(m.linear_value_heads / tp)
    lin_state: float  # linear_key_head_dim * linear_value_head_dim
    state_bytes: float  # recurrent state bytes per sequence per GPU
    hidden: float
    width: float  # MLP width (MoE: experts_per_token * moe_intermediate)
    dense_base: float  # matmul_active - vocab*hidden - n_moe*k*expert_params
    is_moe: float
    n_moe: float  # m.n_moe_layers
    k: float  # experts_per_token
    expert_params: float
    experts: float  # num_experts
    miss: float  # 1 - k/E (1 for dense models)
    shards: float  # expert shards (ep, else tp)
    ep: float
    ep_mult: float  # dp when ep > 1, else 1
    imb_given: float  # moe_imbalance (0: none)
    imb_c: float  # 2 ln(ep) (1 - 1/ep)
    fp8_fac: float  # bandwidth_efficiency / fp8_moe_bandwidth_efficiency under fp8, else 1
    ep_a2a: float  # 1 when EP spans DP ranks (all-to-alls), else 0
    lat: float  # allreduce_latency_s
    bw_tp: float  # link(tp) * comm_efficiency
    bw_ep: float  # link(ep) * comm_efficiency
    bw_pp: float  # link(tp*pp) * comm_efficiency
    eager: float  # enforce_eager: a stage lasts at least the host's kernel launches
    eager_host: float  # eager_host_time(layers / pp): host seconds to launch one stage (0 with CUDA graphs)


def roofline_params(r) -> RooflineParams:
    """The record of a `simrl.cost.roofline.RooflineRollout` (host side, once per model)."""
    m = r.model
    swa = r._swa_fraction()
    qk, vd = m.decode_attention_dims()
    ce = r.comm_efficiency
    ep = r.ep
    per_seq = r.overhead_per_seq_s + (r.inprocess_s_per_seq if r.engine_core == "inprocess" else 0.0)
    return RooflineParams(
        dp=float(r.dp), pp=float(r.pp), tp=float(r.tp), overhead_s=float(r.overhead_s),
        overhead_per_seq_s=float(per_seq), model_layers=float(m.layers),
        n_full=float(m.n_full_attention), n_lin=float(m.n_linear_attention), heads=float(math.ceil(m.heads / r.tp)),
        dt=float(r.weight_dtype_bytes), vocab_hidden=float(m.vocab * m.hidden),
        fden=r.gpu.flops_per_s(r.compute_dtype) * r.compute_efficiency,
        bden=r.gpu.hbm_bytes_per_s * r.bandwidth_efficiency,
        swa=float(swa), window=float(m.sliding_window or 0), qk_vd=float(qk + vd),
        hd_vd=float(m.head_dim + m.value_head_dim), kv_bytes=float(r._kv_bytes_per_token_per_gpu()),
        v_heads=float(math.ceil(m.linear_value_heads / r.tp)),
        lin_state=float(m.linear_key_head_dim * m.linear_value_head_dim),
        state_bytes=float(r._state_bytes_per_seq_per_gpu()), hidden=float(m.hidden),
        width=float(m.intermediate if not m.is_moe else m.experts_per_token * m.moe_intermediate),
        dense_base=float(m.matmul_active_params - m.vocab * m.hidden
                         - m.n_moe_layers * m.experts_per_token * m.expert_params),
        is_moe=float(m.is_moe), n_moe=float(m.n_moe_layers), k=float(m.experts_per_token),
        expert_params=float(m.expert_params), experts=float(m.num_experts),
        miss=(1.0 - m.experts_per_token / m.num_experts) if m.is_moe else 1.0,
        shards=float(r._expert_shards), ep=float(ep), ep_mult=float(r.dp if ep > 1 else 1),
        imb_given=float(r.moe_imbalance or 0.0),
        imb_c=2.0 * math.log(ep) * (1.0 - 1.0 / ep),
        fp8_fac=(r.bandwidth_efficiency / r.fp8_moe_bandwidth_efficiency) if r.compute_dtype == "fp8" else 1.0,
        ep_a2a=float(ep > 1 and r.dp > 1), lat=float(r.allreduce_latency_s),
        bw_tp=r.gpu.link_bytes_per_s(r.tp) * ce, bw_ep=r.gpu.link_bytes_per_s(ep) * ce,
        bw_pp=r.gpu.link_bytes_per_s(r.tp * r.pp) * ce,
        eager=float(r.enforce_eager), eager_host=float(r.eager_host_time(m.layers / r.pp)),
    )


def roofline_roof(xp, q, flops, bytes_):
    return xp.maximum(flops / q.fden, bytes_ / q.bden)


def roofline_expert_load_imbalance(xp, q, ep_tokens):
    """Busiest EP rank's routed load over the mean (see `RooflineRollout.expert_load_imbalance`)."""
    off = xp.logical_or(q.ep <= 1, ep_tokens <= 0)
    if not _maybe(xp, xp.logical_not(off)):
        return 1.0
    mu = ep_tokens * q.k / _safe(xp, q.ep)
    uniform = 1.0 + xp.sqrt(q.imb_c / _safe(xp, mu))
    return xp.where(off, 1.0, xp.where(q.imb_given > 0, q.imb_given, uniform))


#: bits of the integer part of an exponent `power` multiplies out (larger exponents are clamped to
#: 2**POW_BITS - 1; a base below 1 - 1e-10 is 0.0 there already)
POW_BITS = 40


def power(xp, base, x):
    """``base ** x`` for ``0 <= base <= 1`` and ``x >= 0`` without a transcendental call: the same
    IEEE multiplications in the same order in Python and in XLA, so both engines give the same float
    (``pow`` differs between libm and XLA in the last bit).

    The integer part ``n = floor(x)`` by exponentiation by squaring over `POW_BITS` bits (``result *=
    base^(2^i)`` where bit ``i`` of ``n`` is set, ``base^(2^i)`` squared each round; Python stops
    once the remaining bits are 0, which changes nothing). A fractional part ``f`` (a mean token
    count, e.g. a batch split over pipeline micro-batches) reads ``x`` as ``floor(x)`` tokens with
    probability ``1 - f`` and ``floor(x) + 1`` with probability ``f``: ``base^n * (1 - f (1 - base))``,
    exact (``* 1.0``) at integer ``x``."""
    if xp is PY:
        return _py_power(base, x)
    whole = xp.floor(x)
    f = x - whole
    result = 1.0
    p = base
    m = xp.minimum(whole, 2.0**POW_BITS - 1)
    for _ in range(POW_BITS):
        half = xp.floor(m / 2)
        result = xp.where(m - 2 * half > 0, result * p, result)
        p = p * p
        m = half
    return result * (1.0 - f * (1.0 - base))


@functools.lru_cache(maxsize=4096)
def _py_power(base, x):
    """`power` on Python scalars: the same multiplications, by integer bit tests (the SimPy hot path;
    batch sizes recur, so the answers are cached)."""
    whole = math.floor(x)
    f = x - whole
    result = 1.0
    p = base
    n = min(int(whole), 2**POW_BITS - 1)
    while n:
        if n & 1:
            result = result * p
        p = p * p
        n >>= 1
    return result * (1.0 - f * (1.0 - base))


def roofline_experts_touched(xp, q, tokens):
    """``E * (1 - (1 - k/E)^tokens)``: expected distinct experts ``tokens`` select (0 for dense);
    the power is `power`'s (no ``pow``, the same float in both engines)."""
    return q.experts * (1.0 - power(xp, q.miss, tokens))


def roofline_gemm_time(xp, q, tokens, layers, with_lm_head=False):
    """Seconds for the linear projections of ``layers`` layers over ``tokens`` on one GPU."""
    frac = layers / q.model_layers
    dense_w = q.dense_base * frac / q.tp
    flops = 2 * tokens * dense_w
    bytes_ = dense_w * q.dt
    moe = xp.logical_and(q.is_moe > 0, tokens > 0)
    if _maybe(xp, moe):
        moe_layers = q.n_moe * frac
        ep_tokens = tokens * q.ep_mult
        # each rank computes its share of the group's token-expert pairs; the busiest rank more
        imb = roofline_expert_load_imbalance(xp, q, ep_tokens)
        flops = xp.where(moe, flops + 2 * ep_tokens * imb * q.k * q.expert_params * moe_layers / q.shards, flops)
        touched = roofline_experts_touched(xp, q, ep_tokens)
        expert_bytes = touched * q.expert_params * moe_layers / q.shards * q.dt
        expert_bytes = expert_bytes * q.fp8_fac  # FP8 grouped expert GEMMs stream at their lower efficiency
        bytes_ = xp.where(moe, bytes_ + expert_bytes, bytes_)
    if with_lm_head:
        head = q.vocab_hidden / q.tp
        bytes_ += head * q.dt
        flops += 2 * head * tokens
    return roofline_roof(xp, q, flops, bytes_)


def roofline_comm_time(xp, q, tokens, layers):
    """Collectives of one stage: TP all-reduces, EP all-to-alls, the pipeline send."""
    act = tokens * q.hidden * q.dt
    lat = q.lat
    t = 0.0
    if _maybe(xp, q.tp > 1):
        t = xp.where(q.tp > 1, t + 2 * layers * (2 * (q.tp - 1) / q.tp * act / q.bw_tp + lat), t)
    if _maybe(xp, q.ep_a2a > 0):
        # EP dispatch + combine all-to-alls only when EP spans DP ranks (vLLM's use_all2all_kernels);
        # under TP + EP the TP all-reduce above combines.
        moe_layers = q.n_moe * layers / q.model_layers
        imb = roofline_expert_load_imbalance(xp, q, tokens * q.ep_mult)
        t = xp.where(q.ep_a2a > 0,
                     t + 2 * moe_layers * ((q.ep - 1) / _safe(xp, q.ep) * act * q.k * imb / q.bw_ep + lat), t)
    if _maybe(xp, q.pp > 1):
        t = xp.where(q.pp > 1, t + (act / q.bw_pp + lat), t)
    return t


def roofline_stage_time(xp, q, decode_seqs, kv_tokens, prefill_tokens):
    """Seconds for one pipeline stage (``layers / pp``) of one micro-batch on one GPU."""
    layers = q.model_layers / q.pp
    full = q.n_full / q.pp
    lin = q.n_lin / q.pp
    tokens = decode_seqs + prefill_tokens
    dt = q.dt
    has_pf = xp.where(prefill_tokens > 0, 1, 0)
    # linear projections; logits only for sampled positions (LM head averaged over stages)
    t = roofline_gemm_time(xp, q, tokens, layers)
    sampled = decode_seqs + has_pf
    head = q.vocab_hidden / q.tp / q.pp
    t += roofline_roof(xp, q, 2 * head * sampled, head * dt)
    # decode attention over resident KV; prefill attention causal within the chunk; sliding layers
    # read at most the window (per decoding sequence min(mean context, window), per prefill token
    # min(chunk, window))
    swa = q.swa
    kv_eff, pf_sq = kv_tokens, prefill_tokens * prefill_tokens
    if _maybe(xp, swa > 0):
        ctx = xp.where(decode_seqs > 0, kv_tokens / _safe(xp, decode_seqs), 0.0)
        kv_eff = xp.where(swa > 0, kv_tokens * (1 - swa) + swa * decode_seqs * xp.minimum(ctx, q.window), kv_eff)
        pf_sq = xp.where(swa > 0, prefill_tokens * prefill_tokens * (1 - swa)
                         + swa * prefill_tokens * xp.minimum(prefill_tokens, q.window), pf_sq)
    on = xp.logical_and(kv_tokens > 0, full > 0)
    if _maybe(xp, on):
        t = xp.where(on, t + roofline_roof(xp, q, 2 * full * q.heads * q.qk_vd * kv_eff, kv_eff * q.kv_bytes), t)
    on = xp.logical_and(prefill_tokens > 0, full > 0)
    if _maybe(xp, on):
        t = xp.where(on, t + roofline_roof(xp, q, full * q.heads * q.hd_vd * pf_sq, prefill_tokens * q.kv_bytes), t)
    # linear-attention layers read and write each sequence's recurrent state
    on = xp.logical_and(lin > 0, tokens > 0)
    if _maybe(xp, on):
        seqs = decode_seqs + has_pf
        rec = roofline_roof(xp, q, 8 * lin * q.v_heads * q.lin_state * tokens, 2 * seqs * q.state_bytes)
        t = xp.where(on, t + rec, t)
    # elementwise: norms, rotary, activation function, residual adds
    t += roofline_roof(xp, q, 0.0, tokens * layers * (8 * q.hidden + 3 * q.width / q.tp) * dt)
    return t + roofline_comm_time(xp, q, tokens, layers)


def _micro(xp, q, b):
    """Pipeline micro-batches of ``b`` sequences per DP rank (vLLM's virtual engines)."""
    return xp.where(b > 0, xp.maximum(1, xp.minimum(q.pp, xp.ceil(b))), 1)


def roofline_iteration_time(xp, q, batch_size, kv_tokens, prefill_tokens):
    """Seconds for one continuous-batching iteration (`RolloutCost.iteration_time`)."""
    b = batch_size / q.dp
    kv = kv_tokens / q.dp
    pf = prefill_tokens / q.dp
    n_micro = _micro(xp, q, b)
    stage = roofline_stage_time(xp, q, b / n_micro, kv / n_micro, pf / n_micro)
    if _maybe(xp, q.eager > 0):  # the GPU waits for the host's kernel launches
        stage = xp.where(q.eager > 0, xp.maximum(stage, q.eager_host), stage)
    t = q.pp * stage + q.overhead_s + q.overhead_per_seq_s * xp.ceil(b)
    idle = xp.logical_and(batch_size <= 0, prefill_tokens <= 0)
    return xp.where(idle, 0.0, t)


def roofline_kv_slope(xp, q, batch_size):
    """Growth of the iteration time per KV token at ``batch_size`` decoding sequences and no
    prefill: the decode-attention roofline ``pp * max(FLOP, byte) / (dp * micro-batches)``, exact
    without sliding-window layers (every other term depends on the batch only; ``min(context,
    window)`` bends the sliding ones)."""
    n_micro = _micro(xp, q, batch_size / q.dp)
    full = q.n_full / q.pp
    per = xp.maximum(2 * full * q.heads * q.qk_vd / q.fden, q.kv_bytes / q.bden)
    return xp.where(full > 0, q.pp * per / q.dp / n_micro, 0.0)


# -- analytical training --------------------------------------------------------------------------


# NeMo-RL DistributedLogprob: HBM bytes per vocabulary entry of a token (`simrl.cost.analytical`, "fp32 log-softmax")
LOGPROB_FWD_BYTES_PER_VOCAB = 50  # div_(temperature) 2+2, to(fp32) 2+4, amax 4, -max 4+4, exp 4+4 + sum 4, -logsum 4+4, exp 4+4
LOGPROB_BWD_BYTES_PER_VOCAB = 22  # neg 4+4, mul_ 4+4, cast to bf16 4+2


class AnalyticalParams(NamedTuple):
    """Numbers `analytical_phase_values` needs (floats; flags are 0.0 / 1.0)."""

    dp: float
    two_p: float  # 2 * matmul_active_params
    attn_c: float  # 2 * n_full * heads * (head_dim + value_head_dim): attention FLOPs per token per context token
    lin_f: float  # DeltaNet FLOPs per token
    flops_per_s: float  # GPUs of one DP rank * BF16 peak * mfu
    # activation collectives (per trained token of a DP rank)
    tp: float
    pp: float
    cp: float
    sp: float  # ulysses_sp
    layers: float
    hidden: float
    pdt: float  # param dtype bytes
    bw_tp_coll: float  # collective_bytes_per_s(tp) * comm_efficiency
    ep: float
    n_moe: float
    k: float
    bw_ep: float  # scale-up link * comm_efficiency * the dispatcher's share (`ep_link_bytes_per_s`)
    bw_pp: float  # link(tp*pp) * comm_efficiency
    n_full: float
    kv_el: float  # kv_elements_per_token_per_layer
    kv_div: float  # 1 for MLA, else tp
    bw_cp: float  # link(tp*cp) * comm_efficiency
    sp_width: float  # q, k, v and output widths Ulysses swaps
    bw_sp: float  # link(tp*sp) * comm_efficiency
    # schedule
    micro_batch_size: float
    max_tokens_per_gpu: float  # 0: fixed micro-batches
    seq_split: float  # cp * ulysses_sp
    vpp: float
    mini_batch_samples: float  # 0: the whole batch is one optimizer step
    ppo_epochs: float
    update_passes: float
    old_lp: float  # recompute_old_logprob
    ref: float  # reference_model
    lp_fwd: float  # logprob_forwards
    critic: float
    # per-optimizer-step constants (from the model's own methods)
    overlap: float  # comm_overlap
    zero3: float  # zero_stage == 3 (FSDP): collectives per micro-batch
    grad_sync_s: float  # grad_sync_time(): one micro-batch's reduction (+ its two ZeRO-3 gathers)
    gather_s: float  # param_gather_time(): one ZeRO-3 parameter all-gather (0 below ZeRO-3)
    optimizer_s: float
    overhead_s: float
    # MoE layers (all 0.0 for dense models: nothing is added; `analytical_moe_pass_time`)
    is_moe: float = 0.0
    moe_fwd_flops: float = 0.0  # routed-expert FLOPs per token, forward: 2 * n_moe * k * expert_params
    moe_bytes: float = 0.0  # memory-bound MoE bytes per token, forward, all MoE layers (`moe_bytes_per_token`)
    hbm_rank: float = 1.0  # HBM bytes/s of one DP rank's GPUs * moe_bandwidth_efficiency
    gpu_split: float = 1.0  # GPUs a DP rank's micro-batch tokens are split over for the experts: tp * cp * sp
    experts: float = 0.0  # num_experts
    tile_rows: float = 0.0  # grouped-GEMM tile rows (moe_gemm_tile_rows)
    imb_given: float = 0.0  # moe_imbalance (0: uniform routing's expected maximum)
    imb_c: float = 0.0  # 2 ln(ep) (1 - 1/ep)
    moe_host_s: float = 0.0  # host seconds per MoE layer, micro-batch and forward-equivalent pass (moe_host_s_per_layer)
    # EP dispatch/combine (`AnalyticalTraining.ep_copies`): copies of a token each dispatch sends over the
    # scale-up link (``bw_ep``, the dispatcher's share of it) and over the NIC (``bw_ep_ib``); 0: no EP exchange
    ep_nv: float = 0.0
    ep_ib: float = 0.0
    bw_ep_ib: float = 1.0  # NIC bytes/s per GPU * comm_efficiency
    # forward-only passes' own micro-batches (0: the update's; `analytical_logprob_micro_batches`)
    lp_micro_batch_size: float = 0.0  # logprob_micro_batch_size
    lp_max_tokens: float = 0.0  # logprob_max_tokens_per_gpu
    ref_swap_s: float = 0.0  # reference_swap_time(): host-resident reference swapped in and out, per step
    head_last: float = 0.0  # head_on_last_stage with pp > 1: 2 * vocab * hidden * (pp - 1) per token
    lp_fwd_bytes: float = 0.0  # distributed_logprob: HBM bytes per token of one log-prob forward (vocab / tp)
    lp_bwd_bytes: float = 0.0  # ... and of its backward
    hbm_gpu: float = 1.0  # one GPU's HBM bytes/s * optimizer_bandwidth_efficiency (the streaming figure)


def analytical_params(t) -> AnalyticalParams:
    """The record of a `simrl.cost.analytical.AnalyticalTraining` (host side, once per model)."""
    m = t.model
    ce = t.comm_efficiency
    return AnalyticalParams(
        dp=float(t.dp), two_p=2.0 * m.matmul_active_params,
        attn_c=2.0 * m.n_full_attention * m.heads * (m.head_dim + m.value_head_dim),
        lin_f=8.0 * m.n_linear_attention * m.linear_value_heads * (m.linear_key_head_dim * m.linear_value_head_dim),
        flops_per_s=t._flops_per_s(), tp=float(t.tp), pp=float(t.pp), cp=float(t.cp), sp=float(t.ulysses_sp),
        layers=float(m.layers), hidden=float(m.hidden), pdt=float(t.param_dtype_bytes),
        bw_tp_coll=t.gpu.collective_bytes_per_s(t.tp) * ce, ep=float(t.ep), n_moe=float(m.n_moe_layers),
        k=float(m.experts_per_token), bw_ep=t.ep_link_bytes_per_s(), bw_pp=t._bw(t.tp * t.pp),
        n_full=float(m.n_full_attention), kv_el=float(m.kv_elements_per_token_per_layer()),
        kv_div=float(1 if m.is_mla else t.tp), bw_cp=t._bw(t.tp * t.cp),
        sp_width=float(m.heads * m.head_dim + m.kv_heads * (m.head_dim + m.value_head_dim) + m.heads * m.value_head_dim),
        bw_sp=t._bw(t.tp * t.ulysses_sp), micro_batch_size=float(t.micro_batch_size),
        max_tokens_per_gpu=float(t.max_tokens_per_gpu or 0), seq_split=float(t._seq_split),
        vpp=float(t.virtual_pipeline_stages), mini_batch_samples=float(t.mini_batch_samples or 0),
        ppo_epochs=float(t.ppo_epochs), update_passes=float(t._update_passes()),
        old_lp=float(t.recompute_old_logprob), ref=float(t.reference_model), lp_fwd=float(t.logprob_forwards),
        critic=float(t.critic), overlap=float(t.comm_overlap), zero3=float(t.zero_stage == 3),
        grad_sync_s=float(t.grad_sync_time()), gather_s=float(t.param_gather_time()),
        optimizer_s=float(t.optimizer_time()), overhead_s=float(t.overhead_s),
        is_moe=float(m.is_moe), moe_fwd_flops=2.0 * m.n_moe_layers * m.experts_per_token * m.expert_params,
        moe_bytes=float(t.moe_bytes_per_token()),
        hbm_rank=t.tp * t.pp * t.cp * t.ulysses_sp * t.gpu.hbm_bytes_per_s * t.moe_bandwidth_efficiency,
        gpu_split=float(t.tp * t.cp * t.ulysses_sp), experts=float(m.num_experts if m.is_moe else 0),
        tile_rows=float(t.moe_gemm_tile_rows), imb_given=float(t.moe_imbalance or 0.0),
        imb_c=2.0 * math.log(t.ep) * (1.0 - 1.0 / t.ep), moe_host_s=float(t.moe_host_s_per_layer),
        ep_nv=t.ep_copies()[0], ep_ib=t.ep_copies()[1], bw_ep_ib=t.gpu.ib_bytes_per_s * ce,
        lp_micro_batch_size=float(t.logprob_micro_batch_size or 0),
        lp_max_tokens=float(t.logprob_max_tokens_per_gpu or 0), ref_swap_s=float(t.reference_swap_time()),
        head_last=(2.0 * m.vocab * m.hidden * (t.pp - 1) if t.head_on_last_stage else 0.0),
        lp_fwd_bytes=(LOGPROB_FWD_BYTES_PER_VOCAB * m.vocab / t.tp if t.distributed_logprob else 0.0),
        lp_bwd_bytes=(LOGPROB_BWD_BYTES_PER_VOCAB * m.vocab / t.tp if t.distributed_logprob else 0.0),
        hbm_gpu=t.gpu.hbm_bytes_per_s * t.optimizer_bandwidth_efficiency,
    )


def analytical_fwd_flops(xp, q, seq_len):
    """Forward FLOPs of one sample of ``seq_len`` tokens: ``s * flops_per_token(s / 2)`` (causal)."""
    return seq_len * (q.two_p + (q.attn_c * (seq_len / 2) + q.lin_f))


def analytical_activation_comm_time(xp, q, tokens_per_rank, passes):
    """TP, EP, PP, CP (ring) and Ulysses activation traffic of ``passes`` passes over a DP rank's tokens."""
    t = 0.0
    act = tokens_per_rank / (q.cp * q.sp) * q.hidden * q.pdt
    # TP: 2 all-gathers + 2 reduce-scatters per layer and pass ~ 2 all-reduces
    t = xp.where(q.tp > 1, t + passes * 2 * (q.layers / q.pp) * 2 * (q.tp - 1) / q.tp * act / q.bw_tp_coll, t)
    moe_layers = q.n_moe / q.pp
    # EP dispatch + combine per MoE layer and pass: ``ep_nv`` copies of each token over the scale-up link
    # and ``ep_ib`` over the NIC, the two at once (`AnalyticalTraining.ep_copies`); with sequence
    # parallelism (Megatron requires it with TP for MoE) and expert TP 1, each TP rank sends its 1/tp
    ep_t = xp.maximum(q.ep_nv / q.bw_ep, q.ep_ib / q.bw_ep_ib)
    t = xp.where(q.ep > 1, t + passes * 2 * moe_layers * act / q.tp * ep_t, t)
    t = xp.where(q.pp > 1, t + passes * (q.pp - 1) * act / q.bw_pp, t)
    # Ring attention: per layer and forward pass, cp - 1 hops of this rank's K/V chunk.
    kv = tokens_per_rank / q.cp * q.n_full / q.pp * q.kv_el
    kv = kv * (q.pdt / q.kv_div)
    t = xp.where(q.cp > 1, t + passes * (q.cp - 1) * kv / q.bw_cp, t)
    # Ulysses: all-to-alls swap the sequence split for a head split before attention (q, k, v) and
    # back after it (the output), per layer and pass; (sp-1)/sp of it leaves the GPU.
    vol = tokens_per_rank / (q.cp * q.sp) * q.sp_width * q.pdt / q.tp
    t = xp.where(q.sp > 1, t + passes * q.n_full / q.pp * (q.sp - 1) / q.sp * vol / q.bw_sp, t)
    return t


def analytical_optimizer_steps(xp, q, samples):
    """``ppo_epochs * ceil(samples / mini_batch_samples)`` (one per epoch without mini-batches)."""
    per_epoch = xp.where(q.mini_batch_samples > 0,
                         xp.maximum(1, xp.ceil(samples / _safe(xp, q.mini_batch_samples))), 1)
    return q.ppo_epochs * per_epoch


def analytical_micro_batches(xp, q, samples, tokens):
    """Micro-batches per DP rank: samples / micro_batch_size, or with a token budget
    (``max_tokens_per_gpu``, verl's use_dynamic_bsz) the rank's tokens over the budget."""
    dyn = xp.maximum(1, xp.ceil(tokens / q.dp / q.seq_split / _safe(xp, q.max_tokens_per_gpu)))
    fixed = xp.maximum(1, xp.ceil(samples / (q.dp * q.micro_batch_size)))
    return xp.where(q.max_tokens_per_gpu > 0, dyn, fixed)


def analytical_logprob_micro_batches(xp, q, samples, tokens):
    """Micro-batches per DP rank of one forward-only pass (old log-prob, reference, value): the
    rank's tokens over ``lp_max_tokens``, else samples over ``lp_micro_batch_size``, else the
    update's (`analytical_micro_batches`). NeMo-RL packs its log-prob forwards to
    ``sequence_packing.logprob_mb_tokens`` (= max_total_sequence_length x logprob_batch_size) apart
    from the update's ``train_mb_tokens`` (NVIDIA-NeMo/RL@c751f811 ``lm_policy.py``
    ``get_logprobs`` / ``get_reference_policy_logprobs``)."""
    dyn = xp.maximum(1, xp.ceil(tokens / q.dp / q.seq_split / _safe(xp, q.lp_max_tokens)))
    fixed = xp.maximum(1, xp.ceil(samples / (q.dp * _safe(xp, q.lp_micro_batch_size))))
    own = xp.where(q.lp_max_tokens > 0, dyn, fixed)
    return xp.where(xp.logical_or(q.lp_max_tokens > 0, q.lp_micro_batch_size > 0), own,
                    analytical_micro_batches(xp, q, samples, tokens))


def analytical_bubble(xp, q, samples, tokens, mini_batches=1, micro=None):
    """1F1B stretch ``1 + (pp - 1) / (m * vpp)`` (1 without pipeline parallelism); ``micro``: the
    pass's micro-batches per DP rank (default: the update's)."""
    if micro is None:
        micro = analytical_micro_batches(xp, q, samples, tokens)
    m = xp.maximum(1, xp.ceil(micro / mini_batches))
    return xp.where(q.pp <= 1, 1.0, 1 + (q.pp - 1) / (m * q.vpp))


def analytical_moe_pass_time(xp, q, tokens, micro):
    """Seconds one forward-equivalent pass over a DP rank's ``tokens`` (in ``micro`` micro-batches)
    spends in MoE layers beyond the expert FLOPs at the trainer's MFU (0 for dense models):

    - memory-bound passes over the routed activations (router softmax/top-k, permutation into k
      copies and their sort by local expert, the SwiGLU activation, the unpermute/combine):
      ``moe_bytes`` per token over the rank's HBM bandwidth (`AnalyticalTraining.moe_bytes_per_token`);
    - the expert GEMMs on the busiest EP rank at the grouped GEMM's tile efficiency:
      ``expert FLOPs * (imb / g - 1)`` at the MFU, ``g = m / (tile_rows * ceil(m / tile_rows))`` for
      ``m = micro-batch tokens per GPU * k * ep / E`` tokens per expert (each expert's rows are padded
      to whole tiles), ``imb`` the busiest rank's load over the mean (`moe_imbalance`, else the
      expected maximum of ``ep`` binomial loads, ``1 + sqrt(2 ln(ep) (1 - 1/ep) / mu)`` with ``mu``
      the ``micro-batch tokens per GPU * k`` assignments each rank receives on average)."""
    if not _maybe(xp, q.is_moe > 0):
        return 0.0
    per_gpu = tokens / q.dp / micro / q.gpu_split  # one micro-batch's tokens on one GPU
    m = per_gpu * q.k * q.ep / _safe(xp, q.experts)
    tiles = xp.ceil(m / _safe(xp, q.tile_rows))
    g = xp.where(xp.logical_and(q.tile_rows > 0, m > 0), m / _safe(xp, q.tile_rows * tiles), 1.0)
    mu = per_gpu * q.k
    uniform = 1.0 + xp.sqrt(q.imb_c / _safe(xp, mu))
    imb = xp.where(xp.logical_or(q.ep <= 1, mu <= 0), 1.0, xp.where(q.imb_given > 0, q.imb_given, uniform))
    t = tokens / q.dp * (q.moe_fwd_flops * (imb / g - 1.0) / q.flops_per_s + q.moe_bytes / q.hbm_rank)
    return xp.where(q.is_moe > 0, t, 0.0)


#: the phases `analytical_phase_values` returns, in a trainer's order
ANALYTICAL_PHASES = ("old_log_prob", "ref_forward", "log_prob_forwards", "critic_update", "actor_update",
                     "pipeline_bubble", "grad_sync", "optimizer", "overhead")


def analytical_phase_values(xp, q, samples, tokens, fwd_sum, fwd_max, imb_flops=0.0):
    """Seconds of each of `ANALYTICAL_PHASES` for a batch of ``samples`` sequences of ``tokens`` in
    all, whose forward FLOPs (`analytical_fwd_flops`) sum to ``fwd_sum`` with largest ``fwd_max``.
    ``imb_flops``: under ``dp_balance="batch"`` with several mini-batches and DP ranks, the FLOPs the
    optimizer steps of one epoch wait for (`AnalyticalTraining.dp_imbalance_flops`, a partition of
    the sample lengths the host computes); an update pass then lasts ``max(unit, imb_flops /
    flops_per_s)``. 0 otherwise (every optimizer step spread evenly)."""
    unit = xp.maximum(fwd_sum / q.dp, fwd_max) / q.flops_per_s
    # Megatron's even layer split: the last stage also runs the LM head and sets every pass's pace
    last = tokens / q.dp * q.head_last / q.flops_per_s
    unit = unit + last
    # NeMo-RL's fp32 log-softmax over the vocabulary shard, per token on a last-stage GPU
    lgt_tok = tokens / q.dp / q.seq_split / q.hbm_gpu
    lgt_f = lgt_tok * q.lp_fwd_bytes
    lgt_fb = lgt_tok * (q.lp_fwd_bytes + q.lp_bwd_bytes)
    comm = analytical_activation_comm_time(xp, q, tokens / q.dp, 1)
    steps = analytical_optimizer_steps(xp, q, samples)
    # ZeRO-3 (FSDP2) gathers the parameters in every micro-batch's forward and backward and
    # reduce-scatters its gradients in every backward (verl accumulates without no_sync); each
    # forward-only pass gathers once per micro-batch. Other stages reduce once per optimizer step.
    overlap = 1 - q.overlap
    micro = analytical_micro_batches(xp, q, samples, tokens)
    # the forward-only passes' micro-batches (their own budget, else the update's)
    lp_micro = analytical_logprob_micro_batches(xp, q, samples, tokens)
    moe = 0.0
    fwd_unit = unit
    if _maybe(xp, q.is_moe > 0):
        # MoE layers: memory-bound passes, grouped-GEMM tiles, load imbalance; and a pass lasts at least
        # the host time of its MoE layers (the dropless dispatcher syncs host and GPU in every layer)
        moe = analytical_moe_pass_time(xp, q, tokens, micro)
        host = micro * (q.n_moe / q.pp) * q.moe_host_s
        lp_moe = analytical_moe_pass_time(xp, q, tokens, lp_micro)
        lp_host = lp_micro * (q.n_moe / q.pp) * q.moe_host_s
        fwd_unit = xp.where(q.is_moe > 0, xp.maximum(unit + lp_moe, lp_host), unit)
        unit = xp.where(q.is_moe > 0, xp.maximum(unit + moe, host), unit)
    upd_micro = steps * xp.maximum(1, xp.ceil(micro / (steps // q.ppo_epochs)))
    zero3 = q.zero3 > 0
    sync = xp.where(zero3, overlap * upd_micro * q.grad_sync_s, steps * overlap * q.grad_sync_s)
    fwd_gather = xp.where(zero3, overlap * lp_micro * q.gather_s, 0.0)
    n_fwd = q.old_lp + q.ref + q.lp_fwd
    fwd_pass = fwd_unit + lgt_f + comm + fwd_gather
    b1 = analytical_bubble(xp, q, samples, tokens, 1, lp_micro)
    bubble = n_fwd * fwd_unit * (b1 - 1.0)
    upd = q.ppo_epochs * q.update_passes
    update_stretch = analytical_bubble(xp, q, samples, tokens, steps // q.ppo_epochs) - 1.0
    # each optimizer step ends in a collective every DP rank joins: an update pass waits for its
    # busiest rank
    upd_unit = xp.maximum(unit, imb_flops / q.flops_per_s + moe + last)
    actor = upd * (upd_unit + comm) + q.ppo_epochs * lgt_fb
    bubble = bubble + upd * upd_unit * update_stretch
    adam = steps * q.optimizer_s
    # the value model: the actor's size and layout, no log-softmax over the vocabulary
    critic = xp.where(q.critic > 0, fwd_unit + comm + fwd_gather + upd * (upd_unit + comm) + sync + adam, 0.0)
    bubble = xp.where(q.critic > 0, bubble + (fwd_unit * (b1 - 1.0) + upd * upd_unit * update_stretch), bubble)
    # a host-resident reference model is swapped in and out around its forward (`ref_swap_s`)
    return (q.old_lp * fwd_pass, q.ref * fwd_pass + q.ref_swap_s, q.lp_fwd * fwd_pass, critic, actor, bubble,
            sync, adam, q.overhead_s)


def analytical_step_time(xp, q, samples, tokens, fwd_sum, fwd_max, imb_flops=0.0):
    """Sum of `analytical_phase_values`, in their order (what `AnalyticalTraining.step_time` sums)."""
    total = 0.0
    for v in analytical_phase_values(xp, q, samples, tokens, fwd_sum, fwd_max, imb_flops):
        total = total + v
    return total
