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
    # trainer parameters (ZeRO-1: BF16 replicated, 16.38 GB) in and out: 0.3200 s each
    assert p["load_params"] == p["offload_params"] == pytest.approx(0.31995, rel=1e-4)
    # FP32 gradients, not sharded under ZeRO-1: 4 x 8.1907e9 = 32.76 GB / 51.2e9 = 0.6399 s
    assert p["load_grads"] == p["offload_grads"] == pytest.approx(0.63990, rel=1e-4)
    # Adam (12 B/param) sharded over 8 GPUs: 12.29 GB / 51.2e9 = 0.2400 s
    assert p["load_optimizer"] == p["offload_optimizer"] == pytest.approx(0.23996, rel=1e-4)
    # reshard: training and rollout both hold the whole model (no gather); the copy into the
    # engine reads and writes it: 2 x 16.381e9 / (3.35e12 x 0.8) = 0.01223 s
    assert p["reshard"] == pytest.approx(2 * QWEN3_8B_BYTES / 2.68e12) == pytest.approx(0.012225, rel=1e-3)
    # KV rebuild: one write of the pool at 0.8 x HBM bandwidth
    assert p["kv_rebuild"] == pytest.approx(c.colocated.kv_pool_bytes / 2.68e12)
    assert c.offload_s == pytest.approx(sum(p.values()))
    assert c.offload_before_s() + c.offload_after_s(2) == pytest.approx(c.offload_s)
    assert c.offload_before_s() == pytest.approx(sum(p[k] for k in BEFORE))  # 0.32 x 2 + 0.64 + 0.24 = 1.52 s
    assert c.offload_before_s() == pytest.approx(1.5198, rel=1e-3)


def _direct(**kw):
    base = dict(gpu=H100, engine_weight_bytes=8e9, kv_pool_bytes=40e9, engine_reserve_bytes=1.5e9,
                gpu_memory_utilization=0.5, train_param_bytes=2e9, train_grad_bytes=4e9,
                train_optimizer_bytes=12e9, train_static_bytes=22e9, reshard_group=4)
    return ColocatedCost(**{**base, **kw})


def test_level2_discards_weights_and_reshard_gathers_the_rollout_shard():
    c = _direct(sleep_level=2)
    p = c.phases()
    assert p["sleep"] == p["wake_weights"] == 0.0  # level 2: nothing crosses the host link
    # rollout TP shard 8 GB, trainer holds 2 GB of it (ZeRO-3): gather 6 GB over NVLink
    # (4 ranks in a node: 450 GB/s x 0.8 = 360 GB/s) = 0.016667 s, + copy 2 x 8e9 / 2.68e12 = 0.005970 s
    assert p["reshard"] == pytest.approx(6e9 / 360e9 + 16e9 / 2.68e12) == pytest.approx(0.022637, rel=1e-4)
    # KV pool 40 GB written at 2.68 TB/s = 0.014925 s
    assert p["kv_rebuild"] == pytest.approx(0.014925, rel=1e-4)
    # params 2 GB / 51.2 GB/s = 0.039063 s; grads 4 GB: 0.078125 s; optimizer 12 GB: 0.234375 s
    assert p["load_params"] == pytest.approx(0.0390625)
    assert p["load_grads"] == pytest.approx(0.078125)
    assert p["load_optimizer"] == pytest.approx(0.234375)
    assert c.before_s() == pytest.approx(0.0390625 + 0.078125 + 0.234375)
    assert c.after_s() == pytest.approx(sum(p[k] for k in AFTER))
    level1 = _direct(sleep_level=1).phases()
    assert level1["sleep"] == level1["wake_weights"] == pytest.approx(8e9 / 51.2e9)  # 0.15625 s each


def test_offload_knobs_off_and_cache_kept():
    p = _direct(param_offload=False, grad_offload=False, optimizer_offload=False, free_cache_engine=False).phases()
    assert p["load_params"] == p["load_grads"] == p["load_optimizer"] == 0.0
    assert p["offload_params"] == p["offload_grads"] == p["offload_optimizer"] == 0.0
    assert p["kv_rebuild"] == 0.0


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
    # rollout TP 1 holds 16.38 GB, the ZeRO-3 trainer 1/8 of it: gather 7/8 over NVLink (8 ranks: 360 GB/s)
    # = 14.334e9 / 360e9 = 0.039817 s, + copy 0.012225 s
    assert p["reshard"] == pytest.approx(QWEN3_8B_BYTES * 7 / 8 / 360e9 + 2 * QWEN3_8B_BYTES / 2.68e12)
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
    assert "| sleep | before training | vLLM sleep: engine weights to host (level 1; level 2 discards them) " \
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
    assert f"| kv_rebuild | after training | vLLM wake_up(kv_cache): KV pool re-mapped and written | " \
           f"{phases['kv_rebuild']:.3f} | 2 |" in md
    assert simulate(load_config(overrides=ov)).colocated_phases == {}
