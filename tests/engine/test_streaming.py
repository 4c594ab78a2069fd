"""verl fully_async's streaming trainer in the oracle engine: local steps of ``require_batches x
ppo_mini_batch_size`` groups trained as they arrive, a publication every
``trigger_parameter_sync_step`` of them (verl/experimental/fully_async_policy/fully_async_trainer.py
at volcengine/verl@1d85d951: ``_get_samples_from_queue`` takes ``required_samples``, then
``_trigger_parameter_sync_after_step`` syncs when ``local_trigger_step`` reaches the trigger)."""

import pytest
from simhelpers import check_invariants

from simrl.config import load_config
from simrl.engine.sim import build_simulation, summarise

# verl fully_async: window = ppo_mini_batch_size 2 x require_batches 1 x trigger 2 = 4 groups;
# staleness 0, partial rollout; 2-trajectory groups whose completions spread 20..2000 tokens;
# per-token training so that overlapping the first local step with generation pays off.
VERL = ["policy=verl", "policy.mode=fully_async", "policy.ppo_mini_batch_size=2", "policy.require_batches=1",
        "policy.trigger_parameter_sync_step=2", "policy.staleness_threshold=0", "workload.groups=24",
        "workload.group_size=2", "workload.knobs.completion_knots=[[0,20],[1,2000]]", "cost.rollout=linear",
        "cost.training=constant", "cost.training_knobs.a=0.5", "cost.training_knobs.per_token=0.0005",
        "cost.weight_sync=fixed", "cost.weight_sync_knobs.publish_s=1", "run.training_steps=3", "run.plots=false"]
STREAM = "deployment.training.trigger_parameter_sync_step=2"


def _run(*extra):
    sim = build_simulation(load_config(None, [*VERL, *extra]))
    sim.run()
    return sim, summarise(sim)


def test_verl_fully_async_streams_local_steps_and_publishes_every_k():
    sim, r = _run(STREAM)
    check_invariants(r, sim)
    minis = [e for e in sim.events if e["kind"] == "mini_batch_ready"]
    # 3 windows x 2 local steps of require_batches x ppo_mini_batch_size = 2 groups each.
    assert [(e["step"], e["mini_batch"], e["groups"]) for e in minis] == [
        (s, j, 2) for s in (1, 2, 3) for j in (1, 2)]
    for s in r.steps:
        assert s.mini_batches == 2 and s.groups == 4
        assert all(x == 0 for x in s.staleness)  # staleness_threshold 0: one version per window
        assert s.binding_limit  # every step names what bound it
    # A local step trains while the window's other groups are still generating.
    second = {e["step"]: e["t"] for e in minis if e["mini_batch"] == 2}
    assert any(second[s.step] > s.train_start + 1e-9 for s in r.steps)
    # Streaming shortens the run against training each 4-group window as one batch.
    _, whole = _run()
    assert r.totals["makespan_s"] < whole.totals["makespan_s"]


def test_streaming_is_deterministic():
    assert _run(STREAM)[1].to_json() == _run(STREAM)[1].to_json()


def test_streaming_window_must_split_into_k_local_steps():
    from simrl.engine.core import SimulationError

    with pytest.raises(SimulationError, match="must divide the policy's batch of 4"):
        _run("deployment.training.trigger_parameter_sync_step=3")


def test_one_step_off_cannot_stream():
    # verl one_step_off admits batch k+1 when form_batch takes batch k; taking it in pieces would
    # close admission for good, so the streaming trainer refuses it up front.
    from simrl.engine.core import SimulationError

    with pytest.raises(SimulationError, match="policy verl .mode one_step_off. forms whole batches"):
        _run("policy.mode=one_step_off", "policy.train_batch_size=4", STREAM)


def test_streaming_trainer_pays_the_trainer_offload_per_local_step():
    # verl loads and offloads the trainer around each update_actor call (volcengine/verl@144f58a5
    # verl/workers/megatron_workers.py, update_actor / compute_ref_log_prob; verl/workers/fsdp_workers.py
    # likewise), so a window of k local steps pays the offload k times. Qwen3-8B (8,190,735,360 params)
    # on 8 H100, ZeRO-1 (bf16 weights unsharded: 16,381,470,720 B per GPU), param offload only, no
    # old-log-prob recompute or reference: 2 x 16,381,470,720 B / (64 GB/s x 0.8) = 0.6399012 s per call.
    ana = ["cost.training=analytical", "deployment.model=Qwen/Qwen3-8B", "deployment.training.gpu=H100",
           "deployment.training.gpus=8", "deployment.training.zero_stage=1",
           "cost.training_knobs.param_offload=true"]
    base = [v for v in VERL if not v.startswith(("cost.training=", "cost.training_knobs."))]

    def offload(*extra):
        sim = build_simulation(load_config(None, [*base, *ana, *extra]))
        sim.run()
        return [(s.mini_batches, s.phases_s["offload"]) for s in summarise(sim).steps]

    assert offload(STREAM) == [(2, pytest.approx(2 * 0.6399012))] * 3  # two local steps per window
    assert offload() == [(1, pytest.approx(0.6399012))] * 3  # the window trained as one batch
