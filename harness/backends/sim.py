"""The ``sim`` runtime: either backend's pinned pipeline run through the simulator (simrl).

Maps the backend's settings onto the simulator preset of the same name (``policy=skyrl`` or
``policy=art`` with their knob names), simulates the run's own workload for twenty updates, and
writes the same evidence a real run writes, with simulated seconds as timestamps. The simulated
trainer is one unit, so both trainer ranks get its [train_start, train_end) interval. Which groups
an update trained is reconstructed first-finished-first (the preset's FIFO buffer order).
"""

from __future__ import annotations

from harness import pins as P
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.errors import BenchError


def overrides(ctx: RunContext) -> list[str]:
    s = ctx.settings
    b = int(s["groups_per_update"])
    common = [f"run.training_steps={P.TOTAL_UPDATES}", f"run.seed={ctx.seed}", "run.telemetry=false",
              "run.plots=false", "deployment.placement=disaggregated", "deployment.rollout.instances=2"]
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
    finished: dict[int, float] = {}
    for c in report.calls:
        if c.finish is not None:
            finished[c.gid] = max(finished.get(c.gid, 0.0), c.finish)
        sink.turn(group=c.gid, trajectory=c.tid, turn=c.turn, forced_tokens=int(w.call_completion_tokens[
            w.traj_calls(c.tid)[c.turn]]), completion_tokens=c.generated_tokens, finish_reason=c.finish_reason,
            prompt_tokens=c.prompt_tokens, arrival=c.arrival, first_token=c.first_token, finish=c.finish,
            policy_version_start=c.version_start, policy_version_end=c.version_end)
    order = sorted(finished, key=lambda g: (finished[g], g))
    taken = 0
    for st in report.steps:
        gids = order[taken: taken + st.groups]
        taken += st.groups
        iv = [[st.train_start, st.train_end]]
        sink.update(k=st.step, d_k=st.batch_ready, c_k=st.publish_end, train_end=st.train_end,
                    publish_end=st.publish_end, policy_version=st.step, groups=st.groups,
                    trajectories=st.trajectories, tokens=st.trained_completion_tokens, group_ids=gids,
                    rank_intervals={str(r): iv for r in range(int(ctx.settings["trainer_ranks"]))},
                    staleness=list(st.staleness),
                    native={"wait_start": st.wait_start, "train_start": st.train_start,
                            "trained_prompt_tokens": st.trained_prompt_tokens, "offload_s": st.offload_s})
    return BackendOutcome(exit_code=0 if not report.diagnosis else 1, backend_version=f"simrl {simrl.__version__}",
                          native_config={"simrl_overrides": overrides(ctx), "policy": str(cfg.policy),
                                         "rank_interval_source": "simulated train interval (both ranks)"},
                          notes=tuple(f"{d}" for d in report.domain_warnings[:5]))
