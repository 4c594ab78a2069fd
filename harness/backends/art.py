"""ART driver (UNTESTED here: needs four H200s and ART at the pinned commit).

Runs ART's native PipelineTrainer (online autotuning, in-flight updates, routing replay) on a
LocalBackend in dedicated mode: trainer GPUs 0,1 (TP1 CP2 EP2), inference GPUs 2,3. The batch is
pinned (min == max groups per update) through the autotuner's initial bounds. Update evidence is
stamped by a LocalBackend subclass around ``train``: d_k when the batch is handed over, train_end
when training returns, c_k once the new policy version is published. Per-rank intervals come from
the backend's native per-rank timings when it reports them; otherwise both ranks get the native
train interval and the manifest says so (``rank_interval_source``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from harness import pins as P
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.backends.forced import check_completion, request_options, sized_text


def _fit(model_cls, wanted: dict[str, Any], required: set[str]) -> dict[str, Any]:
    """Keep the kwargs the pinned class accepts; a pin it does not accept is an error, not a silent drop."""
    fields = set(getattr(model_cls, "model_fields", {})) or set(wanted)
    missing = required - fields
    if missing:
        raise RuntimeError(f"{model_cls.__name__} at the pinned ART commit lacks {sorted(missing)}")
    return {k: v for k, v in wanted.items() if k in fields}


def run(ctx: RunContext, sink: EvidenceSink, log) -> BackendOutcome:
    return asyncio.run(_run(ctx, sink, log))


async def _run(ctx: RunContext, sink: EvidenceSink, log) -> BackendOutcome:
    import art  # noqa: F401 - heavy: imported only inside the ART environment
    from art.local import LocalBackend
    from art.pipeline_trainer import PipelineTrainer
    from art.pipeline_tuner import PipelineAutotuneConfig
    from transformers import AutoTokenizer

    s, w = ctx.settings, ctx.load_workload()
    clock0 = time.monotonic()
    now = lambda: time.monotonic() - clock0  # noqa: E731 - one monotonic clock for all evidence
    tok = AutoTokenizer.from_pretrained(P.MODEL, revision=P.MODEL_REVISION)
    internal = {
        "init_args": {"max_seq_length": P.MAX_SEQ_LENGTH},
        "engine_args": {"tensor_parallel_size": 1, "enable_expert_parallel": True,
                        "enable_prefix_caching": True, "max_model_len": P.MAX_SEQ_LENGTH},
        "peft_args": {"r": ctx.rank, "lora_alpha": P.LORA_ALPHA},
        "trainer_args": {"context_parallel_size": s["parallel"]["cp"], "expert_parallel_size": s["parallel"]["ep"],
                         "tensor_parallel_size": s["parallel"]["tp"], "routing_replay": s["routing_replay"],
                         "packed_sequence_length": s["packed_sequence_target"]},
        "chat_template_kwargs": dict(P.CHAT_TEMPLATE_KWARGS),
        "chat_template_tool_schema_format": "vllm_openai",
        "trainer_gpu_ids": [0, 1], "inference_gpu_ids": [2, 3],
    }
    model = art.TrainableModel(name=f"bench-{ctx.run_id}", project="rl-bench", base_model=P.MODEL,
                               _internal_config=art.dev.InternalModelConfig(**internal))
    stamps: dict[int, dict] = {}
    batches: dict[int, list[int]] = {}

    class TimedBackend(LocalBackend):
        async def train(self, model, groups, *args, **kwargs):
            k = len(stamps) + 1
            d_k = now()
            batches[k] = [int(g.metadata.get("bench_group", -1)) for g in groups]
            result = await super().train(model, groups, *args, **kwargs)
            train_end = now()
            stamps[k] = {"d_k": d_k, "train_end": train_end, "groups": groups, "result": result}
            return result

    backend = TimedBackend()
    await model.register(backend)
    client = model.openai_client()

    async def rollout(model_, scenario: int, _config):
        trajs = []
        for t in w.group_trajs(scenario):
            messages: list[dict] = []
            for turn, c in enumerate(w.traj_calls(t)):
                L = int(w.call_completion_tokens[c])
                messages.append({"role": "user", "content": sized_text(tok, messages, int(w.call_new_tokens[c]))})
                salt = f"{ctx.run_id}/{t}/{turn}" if w.call_cache_salted[c] else None
                v0, arrival = await model_.get_step(), now()
                resp = await client.chat.completions.create(model=model_.get_inference_name(), messages=messages,
                                                            **request_options(L, salt))
                finish = now()
                choice = resp.choices[0]
                sink.turn(group=scenario, trajectory=t, turn=turn, forced_tokens=L,
                          completion_tokens=resp.usage.completion_tokens, finish_reason=choice.finish_reason,
                          prompt_tokens=resp.usage.prompt_tokens, arrival=arrival, first_token=None, finish=finish,
                          policy_version_start=v0, policy_version_end=await model_.get_step())
                problem = check_completion(L, resp.usage.completion_tokens, choice.finish_reason)
                if problem:
                    log(f"forced length violated: trajectory {t} turn {turn}: {problem}")
                messages.append({"role": "assistant", "content": choice.message.content or ""})
                last = choice
            trajs.append(art.Trajectory(messages_and_choices=[*messages[:-1], last], reward=float(w.traj_reward[t])))
        return art.TrajectoryGroup(trajs, metadata={"bench_group": scenario})

    b = int(s["groups_per_update"])
    autotune = PipelineAutotuneConfig(**_fit(PipelineAutotuneConfig, {
        "mode": "online", "initial_min_batch_size": b, "initial_max_batch_size": b,
        "min_batch_size": b, "max_batch_size": b}, required={"mode"}))
    trainer = PipelineTrainer(model, backend, rollout, range(w.n_groups), config=None, autotune=autotune,
                              max_steps=P.TOTAL_UPDATES, max_steps_off_policy=int(s["staleness_bound"]),
                              limit_mean_steps_off_policy=float(s["mean_policy_age_limit"]),
                              eval_every_n_steps=0, eval_at_start=False, save_checkpoint=False)
    published: dict[int, float] = {}

    async def watch_publication():
        last = await model.get_step()
        while len(published) < P.TOTAL_UPDATES:
            step = await model.get_step()
            for k in range(last + 1, step + 1):
                published[k] = now()
            last = step
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch_publication())
    await trainer.train(handle_signals=False)
    await asyncio.wait_for(watcher, timeout=600)
    source = "native"
    for k in sorted(stamps):
        st = stamps[k]
        metrics = dict(getattr(st["result"], "metrics", {}) or {})
        ranks = metrics.pop("rank_intervals", None)
        if not ranks:
            source = "train-call interval (ART reported no per-rank stamps)"
            ranks = {str(r): [[st["d_k"], st["train_end"]]] for r in range(s["trainer_ranks"])}
        groups = st["groups"]
        sink.update(k=k, d_k=st["d_k"], c_k=published[k], train_end=st["train_end"], publish_end=published[k],
                    policy_version=k, groups=len(groups), trajectories=sum(len(g.trajectories) for g in groups),
                    tokens=int(metrics.get("data/step_trainable_assistant_tokens", 0)), group_ids=batches[k],
                    rank_intervals=ranks, staleness=[int(v) for v in metrics.get("bench/policy_age", [])] or [0],
                    discards={"stale": int(metrics.get("discarded/step/stale_groups", 0)),
                              "zero_variance": int(metrics.get("discarded/step/zero_variance_groups", 0))},
                    native=metrics)
    tuner = getattr(trainer, "_attachments", [])
    healthy = bool(tuner) and not any(getattr(a, "failed", False) for a in tuner)
    return BackendOutcome(exit_code=0, backend_version=P.ART_COMMIT,
                          native_config={"internal_config": internal, "autotune": autotune.model_dump(),
                                         "rank_interval_source": source},
                          autotuner={"mode": autotune.mode, "healthy": healthy,
                                     "detail": f"{len(tuner)} autotuner attachment(s)"})
