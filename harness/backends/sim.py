"""The ``sim`` runtime: either backend's pinned pipeline run through the simulator (simrl).

Maps the backend's settings onto the simulator preset of the same name (``policy=skyrl`` or
``policy=art`` with their knob names), simulates the run's own workload for twenty updates, and
writes the same evidence a real run writes, with simulated seconds as timestamps (clock
``simulated``). The simulated trainer is one unit, so both trainer ranks get its
[train_start, train_end) interval, marked not native: the trainer rates stay out of the
headline. Which groups
an update trained comes from the simulator's step records (the workload group each trained
group sampled).
"""

from __future__ import annotations

from harness import pins as P
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.errors import BenchError


def overrides(ctx: RunContext) -> list[str]:
    s = ctx.settings
    b = int(s["groups_per_update"])
    par = s["parallel"]
    # The contract's hardware and model: two H200 inference GPUs (one TP1 engine each), two H200
    # trainer GPUs in the backend's layout, Qwen3.5-35B-A3B with per-expert LoRA of the run's rank,
    # published as a LoRA adapter.
    common = [f"run.training_steps={P.TOTAL_UPDATES}", f"run.seed={ctx.seed}", "run.telemetry=false",
              "run.plots=false", "deployment.placement=disaggregated", "deployment.model=qwen3.5-35b-a3b",
              "deployment.rollout.gpu=H200", f"deployment.rollout.instances={int(s['inference_gpus'])}",
              "deployment.rollout.tp=1", "deployment.training.gpu=H200",
              f"deployment.training.gpus={int(s['trainer_ranks'])}", f"deployment.training.tp={par['tp']}",
              f"deployment.training.cp={par['cp']}", f"deployment.training.ep={par['ep']}",
              f"cost.training_knobs.lora_rank={ctx.rank}", "cost.weight_sync=lora"]
    if ctx.backend == "skyrl":
        return [*common, "policy=skyrl", f"policy.max_staleness_steps={int(s['staleness_bound'])}",
                f"policy.num_parallel_generation_workers={int(s['workers'])}", f"policy.policy_mini_batch_size={b}"]
    return [*common, "policy=art", f"policy.max_steps_off_policy={int(s['staleness_bound'])}",
            f"policy.min_batch_size={b}", f"policy.max_batch_size={b}",
            f"policy.num_rollout_workers={int(s['workers'])}"]


def run(ctx: RunContext, sink: EvidenceSink, log) -> BackendOutcome:
    import simrl
    from simrl.config import ConfigError, load_config

    try:
        cfg = load_config(overrides=overrides(ctx))
    except (ConfigError, KeyError) as exc:
        raise BenchError(f"sim runtime: the simulator has no usable {ctx.backend!r} preset ({exc})") from exc
    w = ctx.load_workload()
    report = simrl.simulate(cfg, workload=w)
    if report.diagnosis:
        log(f"simulator stopped early: {report.diagnosis}")
    wrapped = sorted({c.gid for c in report.calls if c.gid >= w.n_groups})
    if wrapped:  # the simulator re-samples the schedule from the start once it runs out
        raise BenchError(f"sim runtime: the run sampled {len(wrapped)} group(s) beyond the {w.n_groups}-group "
                         "schedule (pins.groups_needed is too small for this pipeline)")
    for c in report.calls:
        call = w.traj_calls(c.tid)[c.turn]
        finished = c.finish is not None
        sink.turn(group=c.gid, trajectory=c.tid, turn=c.turn, forced_tokens=int(w.call_completion_tokens[call]),
                  completion_tokens=c.generated_tokens, finish_reason=c.finish_reason if finished else None,
                  prompt_tokens=c.prompt_tokens, scheduled_prompt_tokens=int(w.call_prompt_tokens[call]),
                  arrival=c.arrival, first_token=c.first_token, finish=c.finish,
                  policy_version_start=c.version_start, policy_version_end=c.version_end)
    for st in report.steps:
        iv = [[st.train_start, st.train_end]]
        sink.update(k=st.step, d_k=st.batch_ready, c_k=st.publish_end, train_end=st.train_end,
                    publish_end=st.publish_end, policy_version=st.step, groups=st.groups,
                    trajectories=st.trajectories, tokens=st.trained_completion_tokens, group_ids=list(st.prompts),
                    rank_intervals={str(r): iv for r in range(int(ctx.settings["trainer_ranks"]))},
                    rank_intervals_native=False, staleness=list(st.staleness),
                    native={"wait_start": st.wait_start, "train_start": st.train_start,
                            "trained_prompt_tokens": st.trained_prompt_tokens, "offload_s": st.offload_s})
    return BackendOutcome(exit_code=0 if not report.diagnosis else 1, backend_version=f"simrl {simrl.__version__}",
                          native_config={"simrl_overrides": overrides(ctx), "policy": str(cfg.policy),
                                         "rank_interval_source": "simulated train interval (both ranks)"},
                          notes=tuple(f"{d}" for d in report.domain_warnings[:5]),
                          clock={"kind": "simulated", "end_s": _horizon(report)})


def _horizon(report) -> float:
    """The simulated run's end: its last publication or its last call event, whichever is later."""
    times = [st.publish_end for st in report.steps]
    times += [t for c in report.calls for t in (c.arrival, c.first_token, c.finish) if t is not None]
    return max(times, default=0.0)
