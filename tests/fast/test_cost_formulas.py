"""First-principles cost models on the fast path: the roofline rollout and the analytical training
step are written once (`simrl.cost.formulas`) and both engines run that code, so the SimPy models'
scalars and the JAX engine's array evaluations are the same floats; a run with them gives the same
step and call times in both engines; what the closed form cannot take is rejected by name.

The hand-derived values need no jax; the rest does (one small compile per shape).
"""

from importlib.resources import files

import numpy as np
import pytest
from diffcases import BASE, Case, compare, run_fast
from simhelpers import random_workload

from simrl.config import load_config
from simrl.cost import formulas as F
from simrl.cost.analytical import AnalyticalTraining
from simrl.cost.build import build_costs
from simrl.cost.roofline import RooflineRollout
from simrl_fast.lowering import FastPathUnsupported, lower


def tiny_roofline(**kw) -> F.RooflineParams:
    """A dense 2-layer model on a round-number GPU: 1e12 FLOP/s and 1e11 B/s after efficiencies."""
    base = dict(dp=1.0, pp=1.0, tp=1.0, overhead_s=0.003, overhead_per_seq_s=1e-5, model_layers=2.0, n_full=2.0,
                n_lin=0.0, heads=4.0, dt=2.0, vocab_hidden=64_000.0, fden=1e12, bden=1e11, swa=0.0, window=0.0,
                qk_vd=64.0, hd_vd=64.0, kv_bytes=1024.0, v_heads=0.0, lin_state=0.0, state_bytes=0.0, hidden=64.0,
                width=256.0, dense_base=1e6, is_moe=0.0, n_moe=0.0, k=0.0, expert_params=0.0, experts=0.0, miss=1.0,
                shards=1.0, ep=1.0, ep_mult=1.0, imb_given=0.0, imb_c=0.0, fp8_fac=1.0, ep_a2a=0.0, lat=1e-5,
                bw_tp=1e11, bw_ep=1e11, bw_pp=1e11, eager=0.0, eager_host=0.0)
    base.update(kw)
    return F.RooflineParams(**base)


def test_roofline_formula_by_hand():
    q = tiny_roofline()
    # decode, batch 2, 100 resident KV tokens, no prefill (tp = pp = dp = 1, one micro-batch):
    #   GEMMs: max(2*2*1e6 / 1e12, 1e6*2 / 1e11) = max(4e-6, 2e-5) = 2e-5
    #   LM head (64000 params, 2 sampled): max(2*64000*2 / 1e12, 64000*2 / 1e11) = 1.28e-6
    #   decode attention: max(2*2*4*64*100 / 1e12, 100*1024 / 1e11) = max(1.024e-7, 1.024e-6) = 1.024e-6
    #   elementwise: 2 tokens * 2 layers * (8*64 + 3*256) * 2 B / 1e11 = 10240 / 1e11 = 1.024e-7
    #   no TP/EP/PP collectives; stage = 2.24064e-5; + 0.003 overhead + 2 * 1e-5 per sequence
    assert F.roofline_iteration_time(F.PY, q, 2, 100, 0) == pytest.approx(0.0030424064, rel=1e-12)
    # each further iteration adds 2 KV tokens at the byte-bound 1024 / 1e11 = 1.024e-8 s per token
    assert F.roofline_kv_slope(F.PY, q, 2) == pytest.approx(1.024e-8, rel=1e-12)
    assert (F.roofline_iteration_time(F.PY, q, 2, 102, 0) - F.roofline_iteration_time(F.PY, q, 2, 100, 0)
            == pytest.approx(2 * 1.024e-8, rel=1e-6))
    # prefill of 10 tokens, nothing decoding: GEMMs max(2*10*1e6/1e12, 2e6/1e11) = 2e-5; LM head for
    # one sampled position 1.28e-6; prefill attention max(2*4*64*10^2 / 1e12, 10*1024 / 1e11) = 1.024e-7;
    # elementwise 10*2*1280*2 / 1e11 = 5.12e-7: stage 2.18944e-5, + 0.003, no decoding sequence
    assert F.roofline_iteration_time(F.PY, q, 0, 0, 10) == pytest.approx(0.0030218944, rel=1e-12)
    assert F.roofline_iteration_time(F.PY, q, 0, 0, 0) == 0.0
    # tp = 2: one ring all-reduce pair per layer: 2 layers * 2 * ((2*1/2) * 2*64*2 B / 1e11 + 1e-5)
    #   = 4 * (2.56e-9 + 1e-5) = 4.001024e-5 on top of the stage (the record's other numbers unchanged)
    tp2 = tiny_roofline(tp=2.0)
    assert F.roofline_comm_time(F.PY, tp2, 2, 2.0) == pytest.approx(4.001024e-5, rel=1e-12)
    # enforce_eager with 2.2e-5 s of host launches per stage: the decode stage above (2.24064e-5)
    # outruns the host, unchanged; the 10-token prefill stage (2.18944e-5) waits for it:
    # 2.2e-5 + 0.003 = 0.003022
    eager = tiny_roofline(eager=1.0, eager_host=2.2e-5)
    assert F.roofline_iteration_time(F.PY, eager, 2, 100, 0) == pytest.approx(0.0030424064, rel=1e-12)
    assert F.roofline_iteration_time(F.PY, eager, 0, 0, 10) == pytest.approx(0.003022, rel=1e-12)
    assert F.roofline_iteration_time(F.PY, eager, 0, 0, 0) == 0.0


def test_analytical_formula_by_hand():
    q = F.AnalyticalParams(
        dp=2.0, two_p=2e9, attn_c=1e5, lin_f=0.0, flops_per_s=1e15, tp=1.0, pp=1.0, cp=1.0, sp=1.0, layers=2.0,
        hidden=64.0, pdt=2.0, bw_tp_coll=1e11, ep=1.0, n_moe=0.0, k=0.0, bw_ep=1e11, bw_pp=1e11, n_full=2.0,
        kv_el=128.0, kv_div=1.0, bw_cp=1e11, sp_width=512.0, bw_sp=1e11, micro_batch_size=1.0,
        max_tokens_per_gpu=0.0, seq_split=1.0, vpp=1.0, mini_batch_samples=0.0, ppo_epochs=1.0, update_passes=4.0,
        old_lp=0.0, ref=0.0, lp_fwd=0.0, critic=0.0, overlap=0.0, zero3=0.0, grad_sync_s=0.5, gather_s=0.0,
        optimizer_s=0.1, overhead_s=0.2)
    # forward FLOPs of a sample: s * (2e9 + 1e5 * s/2): 1000 -> 2.05e12, 3000 -> 6.45e12
    fwd = [F.analytical_fwd_flops(F.PY, q, s) for s in (1000, 3000)]
    assert fwd == [pytest.approx(2.05e12, rel=1e-12), pytest.approx(6.45e12, rel=1e-12)]
    # busiest DP rank: max(8.5e12 / 2, 6.45e12) = 6.45e12 FLOPs -> 6.45e-3 s per pass; 4 passes
    # (fwd + bwd + recompute) = 0.0258; + 0.5 grad sync + 0.1 Adam + 0.2 overhead = 0.8258
    t = F.analytical_step_time(F.PY, q, 2, 4000, sum(fwd), max(fwd))
    assert t == pytest.approx(0.8258, rel=1e-12)
    # pp = 2 (flops_per_s given): 1 micro-batch per DP rank, bubble 1 + 1/1 adds 4 * 6.45e-3 = 0.0258, and
    # each of the 4 passes sends the rank's 2000 tokens' activations once: 2000 * 64 * 2 B / 1e11 = 2.56e-6
    assert F.analytical_step_time(F.PY, q._replace(pp=2.0), 2, 4000, sum(fwd), max(fwd)) == pytest.approx(
        0.8258 + 0.0258 + 4 * 2.56e-6, rel=1e-12)
    # dp_balance=batch: the update passes wait for 8e12 FLOPs (> 6.45e12) -> 8e-3 s each:
    # 0.8258 - 4 * 6.45e-3 + 4 * 8e-3 = 0.832
    assert F.analytical_step_time(F.PY, q, 2, 4000, sum(fwd), max(fwd), 8e12) == pytest.approx(0.832, rel=1e-12)
    # ZeRO-3 (grad_sync_s 0.5 per micro-batch with its gathers, 0.1 per gather), one old-log-prob pass,
    # 500 tokens per GPU: 4000 / 2 / 500 = 4 micro-batches per rank, one optimizer step:
    #   sync = 4 * 0.5 = 2.0; the forward-only pass gathers 4 * 0.1 = 0.4: 6.45e-3 + 0.4
    #   0.0258 + 0.40645 + 2.0 + 0.1 + 0.2 = 2.73225; comm_overlap 0.5 halves sync and gathers: 1.53225
    z3 = q._replace(zero3=1.0, gather_s=0.1, old_lp=1.0, max_tokens_per_gpu=500.0)
    assert F.analytical_step_time(F.PY, z3, 2, 4000, sum(fwd), max(fwd)) == pytest.approx(2.73225, rel=1e-12)
    assert F.analytical_step_time(F.PY, z3._replace(overlap=0.5), 2, 4000, sum(fwd), max(fwd)) == pytest.approx(
        1.53225, rel=1e-12)
    # EP all-to-alls send each TP rank's 1/tp of the tokens (tp = ep = 2, 2 MoE layers, k = 2), one pass over
    # 2000 tokens: act = 2000 * 64 * 2 B = 256000 B
    #   TP: 2 * 2 layers * 2 * (1/2) * 256000 / 1e11 = 1.024e-5
    #   EP: one copy per token over the link (ep_nv = k (ep - 1) / ep = 1), dispatch + combine:
    #   2 * 2 MoE layers * 256000 / 2 * 1 / 1e11 = 5.12e-6; sum 1.536e-5
    ep = q._replace(tp=2.0, ep=2.0, n_moe=2.0, k=2.0, ep_nv=1.0)
    assert F.analytical_activation_comm_time(F.PY, ep, 2000, 1) == pytest.approx(1.536e-5, rel=1e-12)
    # across nodes: half a copy over a 1e10 B/s NIC at once with the link's copy: max(1 / 1e11, 0.5 / 1e10)
    # = 5e-11 s per byte: 2 * 2 * 128000 * 5e-11 = 2.56e-5; sum 1.024e-5 + 2.56e-5 = 3.584e-5
    ib = ep._replace(ep_ib=0.5, bw_ep_ib=1e10)
    assert F.analytical_activation_comm_time(F.PY, ib, 2000, 1) == pytest.approx(3.584e-5, rel=1e-12)


def _grid():
    b = np.array([0, 1, 2, 3, 7, 64, 255, 0, 5], dtype=np.float64)
    kv = np.array([0, 900, 1_000, 5_000, 123_457, 60_000, 2_000_000, 0, 400], dtype=np.float64)
    pf = np.array([0, 0, 17, 300, 0, 8191, 50_000, 40, 3], dtype=np.float64)
    return b, kv, pf


def test_integer_power_by_hand():
    # (1 - 8/128)^tokens by squaring: 3 = 0b11 -> 0.9375 * 0.9375^2 = 0.9375 * 0.87890625 = 0.823974609375
    # (exact in binary, so it equals pow); 0 -> 1; a fractional 2.5 tokens reads as 2 or 3 tokens with
    # probability 1/2 each: 0.87890625 * (1 - 0.5 * 0.0625) = 0.87890625 * 0.96875 = 0.8514404296875
    assert F.power(F.PY, 0.9375, 3) == 0.823974609375
    assert F.power(F.PY, 0.9375, 0) == 1.0
    assert F.power(F.PY, 0.9375, 2.5) == 0.8514404296875 == (0.87890625 + 0.823974609375) / 2
    # large exponents agree with libm's pow to a few ulp and go to 0 past the float range
    assert F.power(F.PY, 0.9375, 1000) == pytest.approx(0.9375**1000, rel=1e-13)
    assert F.power(F.PY, 0.9375, 2.0**45) == 0.0


MOE = "qwen3-30b-a3b"


@pytest.mark.parametrize("model, layout", [
    ("qwen2.5-7b", dict(tp=1)), ("qwen2.5-7b", dict(tp=2)), ("qwen2.5-7b", dict(tp=4, pp=2)),
    ("qwen2.5-7b", dict(tp=2, dp=2)),
    # MoE: TP-sharded experts, TP + EP, DP + EP (all-to-alls and the load imbalance's sqrt), and pipeline
    # micro-batches (a fractional token count per micro-batch: `power`'s fractional part)
    (MOE, dict(tp=2)), (MOE, dict(tp=4, ep=4)), (MOE, dict(tp=2, dp=2, ep=4)), (MOE, dict(tp=2, pp=2)),
])
def test_roofline_jax_and_python_give_identical_floats(model, layout):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    ro = RooflineRollout(model, "H100", **layout)
    q = ro.array_params()
    b, kv, pf = _grid()
    qj = F.RooflineParams(*(jnp.float64(x) for x in q))  # traced arguments, as in the engine (not constants)
    got = jax.jit(lambda q, b, kv, pf: F.roofline_iteration_time(jnp, q, b, kv, pf))(qj, b, kv, pf)
    want = [ro.iteration_time(int(x), int(y), int(z)) for x, y, z in zip(b, kv, pf, strict=True)]
    assert np.asarray(got).tolist() == want  # the same floats, bit for bit


def test_analytical_jax_and_python_give_identical_floats():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    lens = [1200, 40, 7000, 333, 2048, 5]

    @jax.jit
    def step(qj, s):
        fwd = F.analytical_fwd_flops(jnp, qj, s)
        total = 0.0
        for i in range(len(lens)):  # in order, as Python's sum
            total = total + fwd[i]
        return F.analytical_step_time(jnp, qj, jnp.float64(len(lens)), jnp.sum(s), total, jnp.max(fwd))

    dense = "qwen2.5-7b"
    for model, kw in ((dense, dict()), (dense, dict(tp=2, pp=2, micro_batch_size=2)),
                      (dense, dict(gpus=16, tp=2, cp=2, zero_stage=3)),
                      (dense, dict(pp=2, max_tokens_per_gpu=8192, critic=True, reference_model=True)),
                      (dense, dict(gpus=8, zero_stage=3, fsdp_shard_size=4, max_tokens_per_gpu=2048,
                                   mini_batch_samples=2, comm_overlap=0.25, recompute_old_logprob=True)),
                      # MoE layers: memory-bound passes, grouped-GEMM tiles (ceil), the EP load imbalance (sqrt)
                      (MOE, dict(gpus=16, tp=2, ep=8, max_tokens_per_gpu=4096, mini_batch_samples=2)),
                      (MOE, dict(gpus=8, ep=8, zero_stage=3, micro_batch_size=2, moe_imbalance=1.3)),
                      (MOE, dict(gpus=8, ep=8, moe_host_s_per_layer=2.935e-3)),  # the host floor (off by default)
                      # the flex dispatcher across nodes: NVLink and NIC copies at once (maximum)
                      (MOE, dict(gpus=16, ep=16, moe_token_dispatcher_type="flex")),
                      # the forward passes' own micro-batches, a host-resident reference (NeMo-RL)
                      (dense, dict(pp=2, max_tokens_per_gpu=2048, logprob_max_tokens_per_gpu=8192,
                                   recompute_old_logprob=True, reference_model=True, reference_on_host=True,
                                   head_on_last_stage=True, distributed_logprob=True)),
                      (dense, dict(gpus=8, zero_stage=3, logprob_micro_batch_size=3, recompute_old_logprob=True)),
                      (MOE, dict(gpus=16, tp=2, ep=8, max_tokens_per_gpu=1024, logprob_max_tokens_per_gpu=4096,
                                 recompute_old_logprob=True, reference_model=True, reference_on_host=True,
                                 distributed_logprob=True)),
                      (dense, dict(gpus=8, pp=2, critic=True, head_on_last_stage=True, distributed_logprob=True,
                                   mini_batch_samples=2))):
        t = AnalyticalTraining(model, "H100", **kw)
        qj = F.AnalyticalParams(*(jnp.float64(x) for x in t.array_params()))
        assert float(step(qj, jnp.asarray(lens, dtype=jnp.float64))) == t.step_time(lens), kw


FIRST_PRINCIPLES = [*BASE, "run.training_steps=3", "policy=bounded_async", "policy.batch_groups=2",
                    "policy.max_staleness=1", "policy.inflight_rule=keep_pause", "deployment.rollout.instances=2",
                    "deployment.rollout.max_num_seqs=8", "deployment.model=qwen2.5-7b", "deployment.rollout.gpu=H100",
                    "cost.rollout=roofline", "cost.training=analytical", "cost.weight_sync=nccl"]


def roofline_case(wl, *extra: str) -> Case:
    overrides = [*FIRST_PRINCIPLES, *extra]
    return Case(overrides, wl, build_costs(load_config(overrides=overrides)), f"roofline + analytical {extra}")


def test_roofline_and_analytical_runs_equal_in_both_engines():
    pytest.importorskip("jax")
    wl = random_workload(groups=10, n=4, seed=5, prompt=(50, 300), completion=(5, 200))
    cases = [roofline_case(wl, "deployment.rollout.tp=1"), roofline_case(wl, "deployment.rollout.tp=2"),
             roofline_case(wl, "deployment.rollout.tp=2", "deployment.training.tp=2", "policy.inflight_rule=continue"),
             roofline_case(wl, f"cost.rollout={files('simrl.cost') / 'data' / 'rollout-roofline-h100.json'}"),
             # FSDP2 collectives per micro-batch under HSDP (2 replicas of 2-GPU shard groups)
             roofline_case(wl, "deployment.training.gpus=4", "deployment.training.zero_stage=3",
                           "cost.training_knobs.fsdp_shard_size=2", "cost.training_knobs.max_tokens_per_gpu=256",
                           "cost.training_knobs.recompute_old_logprob=true"),
             # an MoE model: touched experts (1 - k/E)^tokens in the rollout, EP all-to-alls in training
             roofline_case(wl, "deployment.model=qwen3-30b-a3b", "deployment.rollout.tp=2",
                           "deployment.training.gpus=8", "deployment.training.tp=2", "deployment.training.ep=4",
                           "deployment.training.zero_stage=3"),
             # NeMo-RL's trainer: log-prob micro-batches, host-resident reference, LM head on the last
             # PP stage, fp32 log-softmax
             roofline_case(wl, "deployment.training.gpus=4", "deployment.training.pp=2",
                           "cost.training_knobs.max_tokens_per_gpu=256",
                           "cost.training_knobs.logprob_max_tokens_per_gpu=1024",
                           "cost.training_knobs.recompute_old_logprob=true", "cost.training_knobs.reference_model=true",
                           "cost.training_knobs.reference_on_host=true", "cost.training_knobs.head_on_last_stage=true",
                           "cost.training_knobs.distributed_logprob=true")]
    for c in cases:
        c.run_simpy()
    res = run_fast(cases)
    for m, c in enumerate(cases):
        worst = compare(c, res, m)  # times equal, not close (closed-form boundaries in both engines)
        assert worst["time"] == 0.0 and worst["call"] == 0.0, (c.label, worst)
        for j, s in enumerate(c.report.steps):  # the training step is the analytical model's, exactly
            lens = [int(x) for g in s.prompts for x in (wl.call_prompt_tokens + wl.call_completion_tokens)[
                wl.traj_call_start[wl.group_traj_start[g]:wl.group_traj_start[g + 1]]]]
            assert float(res.train_end[m, j] - res.batch_ready[m, j]) == pytest.approx(
                c.costs.training.step_time(lens), rel=1e-12)
    simpy_end = [c.report.steps[-1].publish_end for c in cases[:2]]
    fast_end = [float(res.publish_end[m, 2]) for m in range(2)]
    assert simpy_end[1] < simpy_end[0] and fast_end[1] < fast_end[0]  # tp=2 decodes faster in both


def test_first_principles_models_outside_the_closed_form_are_rejected_by_name():
    wl = random_workload(groups=4, n=2, seed=1, prompt=(50, 100), completion=(5, 50))
    cfg = load_config(overrides=FIRST_PRINCIPLES)
    lower(cfg, wl, build_costs(cfg))  # the dense roofline + analytical lower
    moe = [*FIRST_PRINCIPLES, "deployment.model=qwen3-30b-a3b", "deployment.rollout.tp=2",
           "deployment.training.zero_stage=3"]
    _, params, _ = lower(load_config(overrides=moe), wl, build_costs(load_config(overrides=moe)))
    assert int(params.ro_kind) == 1  # the MoE roofline lowers (its power is multiplied out, `F.power`)
    for extra, needle in [
        (["cost.strict=true"], "cost.strict=true with the roofline's validity domain"),
        (["cost.rollout_knobs.enforce_eager=true"], "a roofline rollout with enforce_eager=true"),
        (["deployment.training.gpus=2", "deployment.training.zero_stage=3", "cost.training_knobs.mini_batch_samples=2",
          "cost.training_knobs.dp_balance=batch"], "cost.training_knobs.dp_balance=batch with several DP ranks"),
    ]:
        c = load_config(overrides=[*FIRST_PRINCIPLES, *extra])
        with pytest.raises(FastPathUnsupported, match=needle):
            lower(c, wl, build_costs(c))
    # the bundled fitted roofline (efficiencies fitted on H100 iterations) lowers as the knob one does;
    # the composed kernel-DB model is rejected with its reason
    data = files("simrl.cost") / "data"
    fitted = [*FIRST_PRINCIPLES, f"cost.rollout={data / 'rollout-roofline-h100.json'}"]
    _, params, _ = lower(load_config(overrides=fitted), wl, build_costs(load_config(overrides=fitted)))
    assert int(params.ro_kind) == 1
    composed = [*FIRST_PRINCIPLES, f"cost.rollout={data / 'rollout-composed-h100.json'}"]
    with pytest.raises(FastPathUnsupported, match="rollout cost model composed"):
        lower(load_config(overrides=composed), wl, build_costs(load_config(overrides=composed)))
    # models built for another layout are never ignored
    for extra, needle in [(["deployment.rollout.tp=2"], "deployment.rollout.tp=2 with a roofline built for tp=1"),
                          (["deployment.training.tp=2"], "deployment.training.tp=2 with an analytical training "
                                                         "model built for tp=1")]:
        with pytest.raises(FastPathUnsupported, match=needle):
            lower(load_config(overrides=[*FIRST_PRINCIPLES, *extra]), wl, build_costs(cfg))
    # a batch that might not fit the training GPUs (SimPy would stop at that step)
    long = random_workload(groups=4, n=8, seed=1, prompt=(30_000, 31_000), completion=(1_000, 2_000))
    # (8 samples of ~32k tokens in one micro-batch: ~51 GiB of checkpointed layer inputs on top of ~57 GiB of
    # weights, gradients and Adam states per GPU)
    c = load_config(overrides=[*FIRST_PRINCIPLES, "deployment.training.micro_batch_size=8"])
    with pytest.raises(FastPathUnsupported, match="largest possible batch does not fit GPU memory"):
        lower(c, long, build_costs(c))


def test_a_static_without_the_formula_a_configuration_uses_is_refused():
    pytest.importorskip("jax")
    from simhelpers import linear_costs

    from simrl_fast.costs import check_static
    from simrl_fast.lowering import stack_params, static_for

    wl = random_workload(groups=4, n=2, seed=1, prompt=(50, 100), completion=(5, 50))
    cfg = load_config(overrides=FIRST_PRINCIPLES)
    _, roof, wa = lower(cfg, wl, build_costs(cfg))
    static_lin, lin, _ = lower(cfg, wl, linear_costs())  # the same configuration with linear costs
    assert static_lin.formulas == 0 and static_for([roof], wa).formulas == 3  # linear: no formula traced
    with pytest.raises(ValueError, match="leaves out the roofline rollout"):
        check_static(static_lin, stack_params([lin, roof]))
    check_static(static_for([lin, roof], wa), stack_params([lin, roof]))
