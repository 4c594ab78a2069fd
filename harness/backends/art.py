"""ART driver (NEVER RUN ON GPUs: needs four H200s and ART).

Checked against openpipe-art 0.5.18 (`pins.UPSTREAM["art"]`; the pinned commit 2ebfc1c2 could
not be reached here and 0.5.18 is the newest release) by ``scripts/check_upstream_api.py``:
every import, signature, InternalModelConfig key and metric name is in `API`, verified by AST.

What that source offers, and so what this driver does: ``PipelineTrainer`` with the batch pinned
directly (``min_batch_size == max_batch_size``; 0.5.18 has no autotuner, so none is run or
claimed), on ``art.megatron.MegatronBackend`` (a ``LocalBackend`` in dedicated mode; Megatron
TP/EP are set through ``ART_MEGATRON_*`` environment variables; 0.5.18 has no CP knob, so the
pinned layout is TP1 CP1 EP2 DP2). ``init_args.load_in_4bit`` is set False and
``load_in_16bit`` True (the LocalBackend default is 4-bit). ``rollout_weights_mode="lora"``
(0.5.18 has no in-flight LoRA mode). ART 0.5.18's Megatron path trains rank-1 LoRA only
(``art.megatron.lora.LORA_RANK``), so ``--rank 8`` is refused rather than silently run at 1.
The base model is the run-local snapshot link (the revision enforced by path; the engine also
gets ``revision``). Stamps: d_k when ``backend.train`` is called, train_end and c_k when it
returns (the new step is served after ``train`` returns). Stale discards per update are the
difference of the trainer's cumulative ``state.discarded_stale_groups`` at successive ``train``
calls; staleness is ``step - min(initial_policy_version)`` of each trained group. Per-rank
intervals: none per rank in 0.5.18, so the trainer rates are marked not native.
"""

from __future__ import annotations

import asyncio
import os
import time

from harness import pins as P
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.backends.forced import check_completion, request_options, sized_text
from harness.errors import BenchError

API = {
    "symbols": [
        "art.model:TrainableModel.__init__(self, *, name, project, entity, id, run_id, config, base_model, "
        "base_path, report_metrics, _internal_config, **kwargs)",
        "art.model:Model.openai_client(self)",
        "art.model:Model.get_inference_name(self, step)",
        "art.model:Model.get_step(self)",
        "art.model:Model.register",
        "art.trajectories:Trajectory",
        "art.trajectories:TrajectoryGroup.__init__(self, trajectories, *, exceptions, metadata, metrics, logs)",
        "art.megatron.runtime.backend:MegatronBackend.__init__(self, *, in_process, path)",
        "art.local.backend:LocalBackend.train",
        "art.pipeline_trainer.trainer:PipelineTrainer.__init__(self, model, backend, rollout_fn, scenarios, config, "
        "eval_fn, *, num_rollout_workers, min_batch_size, max_batch_size, max_steps_off_policy, queue_maxsize, "
        "learning_rate, loss_fn, loss_fn_config, normalize_advantages, adam_params, packed_sequence_length, "
        "max_steps, discard_queue_multiplier, log_interval_seconds, status_ewa_alpha, total_scenarios, "
        "eval_every_n_steps, eval_at_start, save_checkpoint, checkpoint_retention_strategy, "
        "checkpoint_retention_interval, resume)",
        "art.pipeline_trainer.trainer:PipelineTrainer.train(self, *, handle_signals)",
    ],
    "typed_dict_keys": {
        "art.pipeline_trainer.state:PipelineState": ["discarded_stale_groups"],
        "art.trajectories:Trajectory": ["messages_and_choices", "reward", "initial_policy_version"],
        "art.dev.model:InternalModelConfig": ["init_args", "engine_args", "trainer_gpu_ids", "inference_gpu_ids",
                                              "rollout_weights_mode", "chat_template_kwargs",
                                              "chat_template_tool_schema_format"],
        "art.dev.model:InitArgs": ["max_seq_length", "load_in_4bit", "load_in_16bit", "revision"],
        "art.dev.engine:EngineArgs": ["tensor_parallel_size", "enable_prefix_caching", "max_model_len",
                                      "revision"],
    },
    "strings": {
        "art.pipeline_trainer.trainer": ["state"],
        "art.megatron.provider": ["ART_MEGATRON_TENSOR_MODEL_PARALLEL_SIZE",
                                  "ART_MEGATRON_EXPERT_MODEL_PARALLEL_SIZE"],
        "art.megatron.lora": ["LORA_RANK"],
    },
}
ART_LORA_RANK = 1  # art/megatron/lora.py LORA_RANK at openpipe-art 0.5.18


def run(ctx: RunContext, sink: EvidenceSink, log) -> BackendOutcome:
    if ctx.rank != ART_LORA_RANK:
        raise BenchError(f"ART {P.UPSTREAM['art']['version']}'s Megatron backend trains LoRA rank "
                         f"{ART_LORA_RANK} only (art/megatron/lora.py LORA_RANK); run ART with --rank 1")
    return asyncio.run(_run(ctx, sink, log))


async def _run(ctx: RunContext, sink: EvidenceSink, log) -> BackendOutcome:
    s = ctx.settings
    par = s["parallel"]
    os.environ["ART_MEGATRON_TENSOR_MODEL_PARALLEL_SIZE"] = str(par["tp"])
    os.environ["ART_MEGATRON_EXPERT_MODEL_PARALLEL_SIZE"] = str(par["ep"])
    import art  # heavy: imported only inside the ART environment
    from art.megatron.runtime.backend import MegatronBackend
    from art.pipeline_trainer.trainer import PipelineTrainer
    from transformers import AutoTokenizer

    w = ctx.load_workload()
    origin_unix, clock0 = time.time(), time.monotonic()
    now = lambda: time.monotonic() - clock0  # noqa: E731 - one monotonic clock for all evidence
    tok = AutoTokenizer.from_pretrained(ctx.model_path)
    trainer_ids = list(range(int(s["trainer_ranks"])))
    internal = {
        "init_args": {"max_seq_length": P.MAX_SEQ_LENGTH, "load_in_4bit": False, "load_in_16bit": True,
                      "revision": P.MODEL_REVISION},
        "engine_args": {"tensor_parallel_size": 1, "enable_prefix_caching": True, "max_model_len": P.MAX_SEQ_LENGTH,
                        "revision": P.MODEL_REVISION},
        "trainer_gpu_ids": trainer_ids,
        "inference_gpu_ids": list(range(len(trainer_ids), len(trainer_ids) + int(s["inference_gpus"]))),
        "rollout_weights_mode": "lora",
        "chat_template_kwargs": dict(P.CHAT_TEMPLATE_KWARGS),
        "chat_template_tool_schema_format": "vllm_openai",
    }
    model = art.TrainableModel(name=f"bench-{ctx.run_id}", project="rl-bench", base_model=ctx.model_path,
                               _internal_config=art.dev.InternalModelConfig(**internal))
    stamps: dict[int, dict] = {}

    class TimedBackend(MegatronBackend):
        async def train(self, model, trajectory_groups, **kwargs):
            groups = list(trajectory_groups)
            d_k = now()
            discarded = int(trainer.state.discarded_stale_groups)  # cumulative, counted for this batch too
            result = await super().train(model, groups, **kwargs)
            end = now()
            stamps[int(result.step)] = {"d_k": d_k, "train_end": end, "publish_end": end, "groups": groups,
                                        "metrics": dict(result.metrics or {}), "discarded_cum": discarded}
            return result

    backend = TimedBackend()
    await model.register(backend)
    client = model.openai_client()

    async def rollout(model_, scenario: int, _config):
        trajs = []
        for t in w.group_trajs(scenario):
            messages: list[dict] = []  # the conversation as sent (and as the tokenizer templates it)
            trained: list = []  # ART's messages_and_choices: the same, with the returned Choice objects
            for turn, c in enumerate(w.traj_calls(t)):
                L, prompt = int(w.call_completion_tokens[c]), int(w.call_prompt_tokens[c])
                messages.append({"role": "user", "content": sized_text(tok, messages, prompt)})
                trained.append(messages[-1])
                salt = f"{ctx.run_id}/{t}/{turn}" if w.call_cache_salted[c] else None
                v0, arrival = await model_.get_step(), now()
                resp = await client.chat.completions.create(model=model_.get_inference_name(), messages=messages,
                                                            **request_options(L, salt))
                finish = now()
                choice = resp.choices[0]
                sink.turn(group=scenario, trajectory=t, turn=turn, forced_tokens=L,
                          completion_tokens=resp.usage.completion_tokens, finish_reason=choice.finish_reason,
                          prompt_tokens=resp.usage.prompt_tokens, scheduled_prompt_tokens=prompt, arrival=arrival,
                          first_token=None, finish=finish, policy_version_start=v0,
                          policy_version_end=await model_.get_step())
                problem = check_completion(L, resp.usage.completion_tokens, choice.finish_reason)
                if problem:
                    log(f"forced length violated: trajectory {t} turn {turn}: {problem}")
                messages.append({"role": "assistant", "content": choice.message.content or ""})
                trained.append(choice)
            trajs.append(art.Trajectory(messages_and_choices=trained, reward=float(w.traj_reward[t])))
        return art.TrajectoryGroup(trajs, metadata={"bench_group": scenario})

    b = int(s["groups_per_update"])
    trainer = PipelineTrainer(model, backend, rollout, range(w.n_groups), None,
                              num_rollout_workers=int(s["workers"]), min_batch_size=b, max_batch_size=b,
                              max_steps_off_policy=int(s["staleness_bound"]), max_steps=P.TOTAL_UPDATES,
                              packed_sequence_length=int(s["packed_sequence_target"]),
                              eval_every_n_steps=0, eval_at_start=False, save_checkpoint=False, resume=False)
    await trainer.train(handle_signals=False)
    prev_discarded = 0
    for k in sorted(stamps):
        st = stamps[k]
        m, groups = st["metrics"], st["groups"]
        stale, prev_discarded = st["discarded_cum"] - prev_discarded, st["discarded_cum"]
        gids = [int(g.metadata["bench_group"]) for g in groups]
        iv = [[st["d_k"], st["train_end"]]]
        sink.update(k=k, d_k=st["d_k"], c_k=st["publish_end"], train_end=st["train_end"],
                    publish_end=st["publish_end"], policy_version=k, groups=len(groups),
                    trajectories=sum(len(g.trajectories) for g in groups),
                    tokens=sum(int(w.call_completion_tokens[c]) for g in gids for t in w.group_trajs(g)
                               for c in w.traj_calls(t)),
                    group_ids=gids, rank_intervals={str(r): iv for r in range(int(s["trainer_ranks"]))},
                    rank_intervals_native=False,
                    staleness=[k - 1 - min(int(t.initial_policy_version if t.initial_policy_version is not None
                                                   else k - 1) for t in g.trajectories) for g in groups],
                    discards={"stale": stale, "zero_variance": 0}, native=m)
    return BackendOutcome(exit_code=0, backend_version=f"openpipe-art {P.UPSTREAM['art']['version']}",
                          native_config={"internal_config": internal, "megatron_env": {
                              "ART_MEGATRON_TENSOR_MODEL_PARALLEL_SIZE": par["tp"],
                              "ART_MEGATRON_EXPERT_MODEL_PARALLEL_SIZE": par["ep"]},
                              "rank_interval_source": "backend.train call, both ranks (not native)"},
                          clock={"kind": "monotonic", "origin_unix": origin_unix})
