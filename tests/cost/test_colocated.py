"""Colocated (hybrid-engine) placement: each phase pinned by hand (simrl.cost.colocated)."""

from __future__ import annotations

import attrs
import pytest

from simrl.config import load_config
from simrl.cost.base import CostModelError
from simrl.cost.build import build_costs
from simrl.cost.colocated import AFTER, BEFORE, PHASES, ColocatedCost
from simrl.cost.hardware import gpu_spec

H100 = gpu_spec("H100")  # host link 64 GB/s one way, HBM 3.35 TB/s, NVLink 450 GB/s one way
QWEN3_8B_BYTES = 16_381_470_720  # 8,190,735,360 parameters x 2 B (BF16)


def costs(*ov: str):
    return build_costs(load_config(None, ["deployment.placement=colocated", *ov]))


def test_default_phases_qwen3_8b_h100():
    c = costs()
    p = c.colocated_phases
    assert tuple(p) == PHASES
    host = 64e9 * 0.8  # catalog host link x host_link_efficiency = 51.2 GB/s
    # sleep level 1: the engine's weights (TP 1: all 16.38 GB) to host: 16.381e9 / 51.2e9 = 0.3200 s
    assert p["sleep"] == pytest.approx(QWEN3_8B_BYTES / host) == pytest.approx(0.31995, rel=1e-4)
    assert p["wake_weights"] == p["sleep"]
    # trainer parameters (ZeRO-1, Megatron refit: BF16 replicated, 16.38 GB) in and out: 0.3200 s each
    assert p["load_params"] == p["offload_params"] == pytest.approx(0.31995, rel=1e-4)
    # FP32 gradients (ZeRO-1: 4 x 8.1907e9 = 32.76 GB) are freed, then re-allocated and zeroed:
    # one write at 0.8 x 3.35 TB/s = 2.68 TB/s: 32.76e9 / 2.68e12 = 0.012225 s; nothing crosses the host link
    assert p["load_grads"] == pytest.approx(0.012225, rel=1e-3)
    assert "offload_grads" not in p
    # Adam (12 B/param) sharded over 8 GPUs: 12.29 GB / 51.2e9 = 0.2400 s
    assert p["load_optimizer"] == p["offload_optimizer"] == pytest.approx(0.23996, rel=1e-4)
    # reshard: TP 1 / PP 1 trainer, nothing to gather. HBM: the full model written once (16.381e9) +
    # load_weights reads the engine's 8.19e9 parameters at 2 B and writes them at 2 B (32.76e9):
    # 49.14e9 / 2.68e12 = 0.018337 s
    assert c.colocated.gather_s() == {"pp": 0.0, "tp": 0.0, "ep": 0.0}
    assert p["reshard"] == pytest.approx(3 * QWEN3_8B_BYTES / 2.68e12) == pytest.approx(0.018337, rel=1e-3)
    # KV wake: re-mapped, not written
    assert p["kv_rebuild"] == 0.0
    assert c.offload_s == pytest.approx(sum(p.values()))
    assert c.offload_before_s() + c.offload_after_s(2) == pytest.approx(c.offload_s)
    assert c.offload_before_s() == pytest.approx(sum(p[k] for k in BEFORE))  # 0.32 x 2 + 0.0122 + 0.24 = 0.8922 s
    assert c.offload_before_s() == pytest.approx(0.89212, rel=1e-3)


def _direct(**kw):
    base = dict(gpu=H100, engine_weight_bytes=4e9, kv_pool_bytes=40e9, engine_reserve_bytes=1.5e9,
                gpu_memory_utilization=0.5, train_param_bytes=2e9, train_grad_bytes=4e9,
                train_optimizer_bytes=12e9, train_static_bytes=22e9, dense_params=8e9)
    return ColocatedCost(**{**base, **kw})


def test_megatron_refit_gathers_pp_then_tp_and_packs_the_ipc_buffer():
    # NeMo-RL-like: 8e9 dense parameters, BF16, trainer TP 4 x PP 2 on 16 H100 (two nodes), engine TP 4.
    c = _direct(refit="megatron", train_tp=4, train_pp=2, train_gpus=16, refit_transport="ipc")
    g = c.gather_s()
    # PP broadcast: one TP rank's column is 8e9 / 4 x 2 B = 4e9 over both stages; this GPU lacks half
    # (2e9). The PP group's ranks are 16 / 2 = 8 apart: one per node, one NIC: 50 GB/s x 0.8 = 40 GB/s
    # -> 0.05 s
    assert g["pp"] == pytest.approx(2e9 / 40e9) == pytest.approx(0.05)
    # TP all-gather of the full 16e9 BF16 model, 3/4 received (12e9) over NVLink 450 x 0.8 = 360 GB/s
    assert g["tp"] == pytest.approx(12e9 / 360e9) == pytest.approx(0.033333, rel=1e-4)
    assert g["ep"] == 0.0
    # HBM: gathered model written (16e9) + IPC buffer packed, read + write (32e9) + load_weights on the
    # engine's 2e9 parameters, 2 B in + 2 B out (8e9): 56e9 / 2.68e12 = 0.020896 s
    assert c.refit_hbm_bytes() == pytest.approx(56e9)
    assert c.phases()["reshard"] == pytest.approx(0.05 + 0.033333 + 0.020896, rel=1e-4)
    # the direct transport (verl) skips the packing: 24e9 / 2.68e12 = 0.0089552 s of HBM
    assert _direct(refit="megatron", train_tp=4, train_pp=2, train_gpus=16).refit_hbm_bytes() == pytest.approx(24e9)


def test_megatron_refit_gathers_routed_experts_over_ep():
    # MoE: 2e9 dense + 28e9 routed-expert parameters, TP 2, EP 8, one stage, 16 GPUs, BF16.
    g = _direct(dense_params=2e9, expert_params=28e9, train_tp=2, train_ep=8, train_gpus=16).gather_s()
    # TP: 2e9 x 2 B x 1/2 = 2e9 over NVLink 360 GB/s = 0.0055556 s
    assert g["tp"] == pytest.approx(2e9 / 360e9)
    # EP: 28e9 x 2 B x 7/8 = 49e9 over NVLink (8 ranks in a node) = 0.136111 s
    assert g["ep"] == pytest.approx(49e9 / 360e9) == pytest.approx(0.136111, rel=1e-4)
    assert g["pp"] == 0.0


def test_fsdp_refit_gathers_fp32_over_the_shard_group():
    # verl-like: FSDP in pairs (fsdp_size 2), fp32 stored parameters, engine TP 4 (4e9 B = 2e9 params).
    c = _direct(refit="fsdp", shard_group=2, refit_dtype_bytes=4.0, sleep_level=2)
    # full_tensor(): 8e9 x 4 B = 32e9, half received over NVLink: 16e9 / 360e9 = 0.044444 s
    assert c.gather_s() == {"fsdp": pytest.approx(0.044444, rel=1e-4)}
    # HBM: 32e9 written + load_weights reads 2e9 params at 4 B and writes them at 2 B (12e9) = 44e9
    # -> 0.016418 s
    assert c.phases()["reshard"] == pytest.approx(16e9 / 360e9 + 44e9 / 2.68e12) == pytest.approx(0.060862, rel=1e-4)
    p = c.phases()
    assert p["sleep"] == p["wake_weights"] == 0.0  # level 2: nothing crosses the host link
    # params 2 GB / 51.2 GB/s = 0.039063 s; optimizer 12 GB: 0.234375 s; grads 4 GB zeroed at 2.68 TB/s
    assert p["load_params"] == pytest.approx(0.0390625)
    assert p["load_grads"] == pytest.approx(4e9 / 2.68e12)
    assert p["load_optimizer"] == pytest.approx(0.234375)
    assert c.before_s() == pytest.approx(0.0390625 + 4e9 / 2.68e12 + 0.234375)
    assert c.after_s() == pytest.approx(sum(p[k] for k in AFTER))
    level1 = _direct(sleep_level=1).phases()
    assert level1["sleep"] == level1["wake_weights"] == pytest.approx(4e9 / 51.2e9)  # 0.078125 s each
    # one rank holds everything: no gather
    assert _direct(refit="fsdp", shard_group=1).gather_s() == {"fsdp": 0.0}


def test_offload_knobs_off_and_cache_kept():
    p = _direct(param_offload=False, grad_offload=False, optimizer_offload=False, free_cache_engine=False).phases()
    assert p["load_params"] == p["load_grads"] == p["load_optimizer"] == 0.0
    assert p["offload_params"] == p["offload_optimizer"] == 0.0
    assert p["kv_rebuild"] == 0.0


def test_param_offload_per_worker_call():
    # verl's FSDP worker loads and offloads the parameters around each of its calls (the refit's
    # sharding manager, compute_log_prob, update_actor: 3), the optimizer around update_actor only.
    # _direct: 2 GB of parameters over 51.2 GB/s = 0.0390625 s per copy; 3 calls: 0.1171875 s each way
    one, three = _direct().phases(), _direct(param_offload_calls=3).phases()
    assert three["load_params"] == three["offload_params"] == pytest.approx(3 * 0.0390625)
    assert three["load_optimizer"] == one["load_optimizer"] == pytest.approx(0.234375)
    # the other phases do not move: the step pays 2 x 2 x 0.0390625 = 0.15625 s more
    assert _direct(param_offload_calls=3).total_s() - _direct().total_s() == pytest.approx(0.15625)
    assert _direct(param_offload_calls=3, param_offload=False).phases()["load_params"] == 0.0


def test_verl_7b_colocated_card_offload_calls():
    # The verl 7B colocated card's layout (volcengine/verl@1fc52bb5 exp/qwen2-7B-math_32/fsdp2_colocate/run.sh:
    # FSDP2, fsdp_size=2, offload=True): Qwen2.5-Math-7B has 7,615,616,512 parameters, stored fp32 and
    # sharded in pairs: 7.6156e9 x 4 / 2 = 15.231e9 B per GPU; H20's host link 64 GB/s x 0.8 = 51.2 GB/s:
    # 0.29749 s per copy, x 3 calls = 0.89246 s each way (was 0.29749: +1.19 s per step)
    ov = ["deployment.model=Qwen/Qwen2.5-Math-7B", "deployment.rollout.gpu=H20", "deployment.training.gpu=H20",
          "deployment.rollout.tp=4", "deployment.rollout.instances=8", "deployment.training.gpus=32",
          "deployment.training.zero_stage=3", "cost.training_knobs.fsdp_shard_size=2",
          "deployment.rollout.gpu_memory_utilization=0.8"]
    p1 = costs(*ov).colocated_phases
    p3 = costs(*ov, "cost.colocated_knobs.param_offload_calls=3").colocated_phases
    assert p1["load_params"] == pytest.approx(7_615_616_512 * 4 / 2 / 51.2e9, rel=1e-3)
    assert p1["load_params"] == pytest.approx(0.29749, rel=1e-3)
    assert p3["load_params"] == p3["offload_params"] == pytest.approx(0.89246, rel=1e-3)
    assert p3["load_optimizer"] == p1["load_optimizer"]


def test_host_link_override():
    # cost.offload_bytes_per_s replaces the catalog link: 16.381e9 / 25e9 = 0.65526 s
    p = costs("cost.offload_bytes_per_s=25e9").colocated_phases
    assert p["sleep"] == pytest.approx(QWEN3_8B_BYTES / 25e9) == pytest.approx(0.65526, rel=1e-4)


def test_memory_left_for_training_and_rollout_claim():
    c = _direct()
    # asleep engine keeps its 1.5 GB reserve: HBM 81559 MiB - 1.5 GB
    assert c.training_memory_left_bytes() == pytest.approx(81559 * 2**20 - 1.5e9)
    assert c.memory_errors() == []
    kept = _direct(free_cache_engine=False)  # + the 40 GB pool
    assert kept.training_memory_left_bytes() == pytest.approx(81559 * 2**20 - 41.5e9)
    # trainer keeps 2 + 4 + 12 = 18 GB resident; vLLM claims 0.9 x 85.5 GB = 77 GB: too much
    bad = _direct(param_offload=False, grad_offload=False, optimizer_offload=False, gpu_memory_utilization=0.9)
    assert bad.trainer_resident_bytes() == pytest.approx(18e9)
    assert any("gpu_memory_utilization=0.9" in e for e in bad.memory_errors())


def test_verl_like_layout_without_offload():
    # verl's defaults (no offload) need room: ZeRO-3 over 8 GPUs and vLLM at 0.6 fit an H100
    ok = costs("deployment.training.zero_stage=3", "deployment.rollout.gpu_memory_utilization=0.6",
               "cost.colocated_knobs.param_offload=false", "cost.colocated_knobs.grad_offload=false",
               "cost.colocated_knobs.optimizer_offload=false", "cost.colocated_knobs.sleep_level=2")
    p = ok.colocated_phases
    assert p["sleep"] == p["load_params"] == p["offload_optimizer"] == 0.0
    # ZeRO-3 is the FSDP refit: every rank gathers the whole fp32 model (2 x 16.381e9 = 32.76e9 B), 7/8
    # of it over NVLink (8 ranks: 360 GB/s) = 28.67e9 / 360e9 = 0.079632 s; HBM: 32.76e9 written +
    # load_weights on 8.19e9 parameters, 4 B in, 2 B out (49.14e9) = 81.9e9 / 2.68e12 = 0.030562 s
    assert ok.colocated.refit == "fsdp" and ok.colocated.refit_dtype_bytes == 4.0
    assert p["reshard"] == pytest.approx(2 * QWEN3_8B_BYTES * 7 / 8 / 360e9 + 5 * QWEN3_8B_BYTES / 2.68e12)
    assert p["reshard"] == pytest.approx(0.110194, rel=1e-4)
    # ... but ZeRO-1 (61 GB resident) with vLLM at 0.9 does not, and the error names the knobs
    with pytest.raises(CostModelError, match="gpu_memory_utilization"):
        costs("cost.colocated_knobs.param_offload=false", "cost.colocated_knobs.grad_offload=false",
              "cost.colocated_knobs.optimizer_offload=false")
    # disaggregated runs are not checked (the trainer has its own GPUs)
    build_costs(load_config(None, ["cost.colocated_knobs.optimizer_offload=false"]))


@pytest.mark.parametrize(("knob", "match"), [
    ("cost.colocated_knobs.sleep_levle=2", "sleep_levle: unknown knob"),
    ("cost.colocated_knobs.sleep_level=3", "sleep_level: expected 1"),
    ("cost.colocated_knobs.param_offload=1", "param_offload: expected true or false"),
    ("cost.colocated_knobs.host_link_efficiency=1.5", "host_link_efficiency: expected a fraction"),
    ("cost.colocated_knobs.refit=deepspeed", "refit: expected one of fsdp, megatron"),
    ("cost.colocated_knobs.refit_transport=nccl", "refit_transport: expected one of direct, ipc"),
    ("cost.colocated_knobs.refit_dtype_bytes=3", "refit_dtype_bytes: expected 1, 2 or 4"),
    ("cost.colocated_knobs.param_offload_calls=0", "param_offload_calls: expected a whole number"),
    ("cost.colocated_knobs.param_offload_calls=2.5", "param_offload_calls: expected a whole number"),
])
def test_bad_knobs_are_named(knob, match):
    with pytest.raises(CostModelError, match=match):
        costs(knob)


def test_engine_charges_the_phases():
    from simrl.engine.sim import simulate

    cfg = load_config(overrides=["deployment.placement=colocated", "workload.groups=8", "run.training_steps=2",
                                 "run.telemetry=false", "run.plots=false", "policy=sync", "policy.batch_groups=8"])
    c = build_costs(cfg)
    steps = simulate(cfg).steps
    for s in steps:
        assert s.offload_s == pytest.approx(c.offload_s)
        # training starts after the before-phases; rollout resumes after the after-phases
        assert s.train_start - s.batch_ready >= c.offload_before_s() - 1e-9
        assert s.publish_end - s.train_end == pytest.approx(c.offload_after_s(2))


def test_report_renders_the_colocated_phases_as_their_own_table():
    # Rendering by hand: 2 steps; sleep 1.5 s and reshard 0.25 s per step -> totals 3.0 and 0.5 s,
    # 1.75 s per step in all, 3.5 s over the run.
    from simrl.output import render_markdown
    from simrl.report import REPORT_SCHEMA, Report, StepRecord

    step = dict(train_version=0, wait_start=0.0, batch_ready=1.0, train_start=2.0, train_end=3.0, publish_end=4.0,
                groups=1, trajectories=2, trained_completion_tokens=10, trained_prompt_tokens=5, staleness=(0,))
    rep = Report(schema=REPORT_SCHEMA, run_name="r", policy="sync", seed=0,
                 workload={"name": "w", "groups": 1, "schedule_sha256": "0" * 64},
                 steps=(StepRecord(step=1, **step), StepRecord(step=2, **step)), calls=(), totals={}, instances=(),
                 colocated_phases={"sleep": 1.5, "reshard": 0.25})
    md = render_markdown(rep)
    assert "## Colocated phases (s)" in md
    assert "| sleep | before training | vLLM sleep: engine weights to pinned host memory (level 1; level 2 " \
           "discards them) " \
           "| 1.500 | 2 | 3.000 |" in md
    assert "| reshard | after training |" in md and "| 0.250 | 2 | 0.500 |" in md
    assert "| total | | | 1.750 | 2 | 3.500 |" in md
    # A disaggregated run has no such table.
    assert "Colocated phases" not in render_markdown(attrs.evolve(rep, colocated_phases={}))


def test_colocated_run_reports_its_phases():
    from simrl.engine.sim import simulate
    from simrl.output import render_markdown

    ov = ["workload.groups=8", "run.training_steps=2", "run.telemetry=false", "run.plots=false", "policy=sync",
          "policy.batch_groups=8"]
    cfg = load_config(overrides=["deployment.placement=colocated", *ov])
    rep = simulate(cfg)
    phases = build_costs(cfg).colocated_phases
    assert list(rep.colocated_phases) == list(PHASES)
    assert rep.colocated_phases == pytest.approx(phases)
    assert sum(rep.colocated_phases.values()) == pytest.approx(rep.steps[0].offload_s)
    md = render_markdown(rep)
    assert f"| kv_rebuild | after training | vLLM wake_up(kv_cache): KV pool re-mapped, not written (0 s) | " \
           f"{phases['kv_rebuild']:.3f} | 2 |" in md
    assert simulate(load_config(overrides=ov)).colocated_phases == {}


def test_trainer_layout_sets_the_refit_and_the_state_bytes():
    # ZeRO-3 (FSDP) over 8 GPUs: fp32 parameters 4 x 8.1907e9 / 8 = 4.095e9 B (0.079990 s over 51.2 GB/s);
    # the optimizer holds the two fp32 moments only: 8 x 8.1907e9 / 8 = 8.19e9 B (0.159975 s)
    c = costs("deployment.training.zero_stage=3").colocated
    assert (c.refit, c.refit_dtype_bytes, c.shard_group) == ("fsdp", 4.0, 8)
    assert c.phases()["load_params"] == pytest.approx(QWEN3_8B_BYTES * 2 / 8 / 51.2e9) == pytest.approx(0.07999, rel=1e-3)
    assert c.phases()["load_optimizer"] == pytest.approx(QWEN3_8B_BYTES * 4 / 8 / 51.2e9)
    # Megatron TP 2 x PP 2 on 8 GPUs with NeMo-RL's IPC transport: BF16, the PP group 4 ranks apart
    # stays in the node (NVLink); knobs override the derived choice
    m = costs("deployment.training.tp=2", "deployment.training.pp=2", "cost.colocated_knobs.refit_transport=ipc",
              "deployment.rollout.gpu_memory_utilization=0.5").colocated
    assert (m.refit, m.refit_transport, m.refit_dtype_bytes, m.train_tp, m.train_pp) == ("megatron", "ipc", 2.0, 2, 2)
    # PP: (8.19e9 / 2 x 2 B) / 2 = 4.095e9 B over 360 GB/s = 0.011375 s; TP: 16.381e9 / 2 over 360 GB/s = 0.022752 s
    g = m.gather_s()
    assert g["pp"] == pytest.approx(QWEN3_8B_BYTES / 4 / 360e9) and g["tp"] == pytest.approx(QWEN3_8B_BYTES / 2 / 360e9)
    assert costs("deployment.training.zero_stage=3", "cost.colocated_knobs.refit=megatron").colocated.refit_dtype_bytes == 2.0
