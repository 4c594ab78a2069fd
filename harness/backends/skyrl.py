"""SkyRL driver (NEVER RUN ON GPUs: needs four H200s and SkyRL, ``--skyrl-source``).

Checked against SkyRL at `pins.UPSTREAM["skyrl"]` (a9564572e, the newest snapshot reachable
here; the older pin 52063b65 was not) by ``scripts/check_upstream_api.py``: every import,
method, config key and metric name below is listed in `API` and verified by AST.

Runs ``FullyAsyncRayPPOTrainer`` (``trainer.fully_async.enabled=true``): B groups per update,
``num_parallel_generation_workers`` 12 (3), ``max_staleness_steps`` 4, Megatron TP1 CP1 EP2
DP2 on the trainer GPUs, one vLLM engine DP2 EP2 on the other two. Config is built with
``SkyRLTrainConfig.from_cli_overrides`` (no ``+`` keys: SkyRL rejects them). The model path is
the run-local snapshot link, which is how the revision is enforced (SkyRL's ModelConfig has no
revision field). Hooks, all on methods the pinned loop calls:
- ``convert_generation_group_mini_batch_to_training_input``: the trained groups' uids (the
  dataset row = workload group) and their ``global_step - global_step_when_scheduled``;
- ``_run_training``: d_k and train_end (the loop's ``run_training`` phase is exactly this call);
- ``_phase_gauge.timed_phase("sync_weights")``: c_k at the end of the weight sync.
The generator is SkyRL's ``GeneratorInterface`` with per-request forced lengths; the train data
is one prompt row per workload group, in group order, so a group's uid is its index.
Per-rank intervals: the pinned trainer gives none per rank, so both ranks carry the
``run_training`` interval marked not native, and the trainer rates stay out of the headline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

from harness import pins as P
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.backends.forced import request_options, sized_text

# Everything this driver touches upstream, verified by scripts/check_upstream_api.py.
API = {
    "symbols": [
        "skyrl.train.config.config:SkyRLTrainConfig.from_cli_overrides(cls, args)",
        "skyrl.train.entrypoints.main_base:BasePPOExp.__init__(self, cfg)",
        "skyrl.train.entrypoints.main_base:BasePPOExp.run(self)",
        "skyrl.train.entrypoints.main_base:BasePPOExp.get_generator(self, cfg, tokenizer, inference_engine_client)",
        "skyrl.train.entrypoints.main_base:BasePPOExp.get_trainer(self, cfg, tracker, tokenizer, train_dataset, "
        "eval_dataset, inference_engine_client, generator, colocate_pg)",
        "skyrl.train.entrypoints.main_base:validate_cfg",
        "skyrl.train.fully_async_trainer:FullyAsyncRayPPOTrainer._run_training(self, training_input)",
        "skyrl.train.fully_async_trainer:FullyAsyncRayPPOTrainer.convert_generation_group_mini_batch_to_training_input"
        "(self, cur_generation_group_mini_batch, dropped_groups)",
        "skyrl.train.fully_async_trainer:GeneratedOutputGroup",
        "skyrl.train.utils.metrics:TrainingPhaseGauge.timed_phase(self, name, timings)",
        "skyrl.train.generators.base:GeneratorInterface.generate(self, input_batch)",
        "skyrl.backends.skyrl_train.inference_servers.base:InferenceEngineInterface.chat_completion"
        "(self, request_payload)",
        "skyrl.train.utils.utils:initialize_ray(cfg)",
    ],
    "config_root": "skyrl.train.config.config:SkyRLTrainConfig",
    "typed_dict_keys": {
        "skyrl.train.generators.base:GeneratorOutput": ["prompt_token_ids", "response_ids", "rewards", "loss_masks",
                                                        "stop_reasons", "rollout_metrics", "rollout_logprobs"],
        "skyrl.train.generators.base:GeneratorInput": ["prompts", "env_extras"],
        "skyrl.train.fully_async_trainer:GeneratedOutputGroup": ["uid", "global_step_when_scheduled"],
    },
    "strings": {
        # phase names the loop times, and the metric keys read back
        "skyrl.train.fully_async_trainer": ["run_training", "sync_weights", "_phase_gauge",
                                            "async/staleness_max", "async/staleness_violation_count"],
    },
}


def overrides(ctx: RunContext, train_file: str, n_samples: int) -> list[str]:
    """SkyRLTrainConfig dotlist for this run; every key is a field path of the pinned dataclasses."""
    s = ctx.settings
    b, par = int(s["groups_per_update"]), s["parallel"]
    return [
        f"data.train_data=['{train_file}']", f"data.val_data=['{train_file}']",
        f"trainer.policy.model.path={ctx.model_path}",
        f"trainer.policy.model.lora.rank={ctx.rank}", f"trainer.policy.model.lora.alpha={P.LORA_ALPHA}",
        "trainer.strategy=megatron", "trainer.bf16=true",
        f"trainer.policy.megatron_config.tensor_model_parallel_size={par['tp']}",
        f"trainer.policy.megatron_config.context_parallel_size={par['cp']}",
        f"trainer.policy.megatron_config.expert_model_parallel_size={par['ep']}",
        "trainer.placement.colocate_all=false", f"trainer.placement.policy_num_gpus_per_node={s['trainer_ranks']}",
        "generator.inference_engine.num_engines=1", "generator.inference_engine.tensor_parallel_size=1",
        f"generator.inference_engine.data_parallel_size={s['inference_gpus']}",
        f"generator.inference_engine.expert_parallel_size={s['inference_gpus']}",
        "generator.inference_engine.enable_prefix_caching=true",
        f"trainer.train_batch_size={b}", f"trainer.policy_mini_batch_size={b}",
        "trainer.fully_async.enabled=true",
        f"trainer.fully_async.max_staleness_steps={int(s['staleness_bound'])}",
        f"trainer.fully_async.num_parallel_generation_workers={int(s['workers'])}",
        f"trainer.max_training_steps={P.TOTAL_UPDATES}", "trainer.epochs=1",
        "trainer.eval_interval=-1", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=-1", "trainer.hf_save_interval=-1", "trainer.resume_mode=none",
        "trainer.algorithm.policy_loss_type=cispo", "trainer.algorithm.cispo.cispo_anchor=rollout",
        "trainer.logger=console", f"trainer.max_prompt_length={P.MAX_SEQ_LENGTH}",
        "generator.batched=false", "generator.use_cache_salt=true", f"generator.max_input_length={P.MAX_SEQ_LENGTH}",
        f"generator.n_samples_per_prompt={n_samples}",
        "generator.chat_template_kwargs={enable_thinking: false, preserve_thinking: true}",
        "generator.sampling_params.temperature=1.0", "generator.sampling_params.top_p=1.0",
        "generator.sampling_params.additional_kwargs={ignore_eos: true}",
    ]


def run(ctx: RunContext, sink: EvidenceSink, log) -> BackendOutcome:
    if ctx.skyrl_source:
        sys.path.insert(0, ctx.skyrl_source)
    from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface  # noqa: F401
    from skyrl.train.config.config import SkyRLTrainConfig  # heavy: SkyRL environment only
    from skyrl.train.entrypoints.main_base import BasePPOExp, validate_cfg
    from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer
    from skyrl.train.generators.base import GeneratorInterface
    from skyrl.train.utils.utils import initialize_ray
    from transformers import AutoTokenizer

    w = ctx.load_workload()
    origin_unix, clock0 = time.time(), time.monotonic()
    now = lambda: time.monotonic() - clock0  # noqa: E731 - one monotonic clock for all evidence
    tok = AutoTokenizer.from_pretrained(ctx.model_path)
    train_file = Path(ctx.run_dir) / "skyrl_train_prompts.jsonl"  # one row per workload group, in order
    with open(train_file, "w", encoding="utf-8") as fh:
        for g in range(w.n_groups):
            fh.write(json.dumps({"prompt": [{"role": "user", "content": "bench"}], "env_class": "bench",
                                 "bench_group": g}) + "\n")
    stamps: dict[int, dict] = {}
    pending: dict = {}
    published = [0]  # the policy version being served: k once update k's weight sync has ended

    class BenchGenerator(GeneratorInterface):
        """Each call issued with its scheduled prompt length and forced completion length."""

        def __init__(self, client) -> None:
            self.client = client

        async def generate(self, input_batch):
            extras = input_batch.get("env_extras") or [{}] * len(input_batch["prompts"])
            g = int(extras[0]["bench_group"])
            trajs = list(w.group_trajs(g))
            outs = await asyncio.gather(*(self._trajectory(g, t) for t in trajs))
            return {k: [o[k] for o in outs] for k in outs[0]} | {"rollout_metrics": {}}

        async def _trajectory(self, g: int, t: int) -> dict:
            messages: list[dict] = []
            prompt_ids: list[int] = []
            response: list[int] = []
            mask: list[int] = []
            logprobs: list[float] = []  # rollout logprobs: the fully async loss optimises against them
            for turn, c in enumerate(w.traj_calls(t)):
                L, prompt = int(w.call_completion_tokens[c]), int(w.call_prompt_tokens[c])
                messages.append({"role": "user", "content": sized_text(tok, messages, prompt)})
                salt = f"{ctx.run_id}/{t}/{turn}" if w.call_cache_salted[c] else None
                opts = request_options(L, salt)
                v0, arrival = published[0], now()
                out = await self.client.chat_completion({"json": {
                    "messages": messages, "max_tokens": L, "temperature": opts["temperature"],
                    "top_p": opts["top_p"], "logprobs": True, "return_token_ids": True, **opts["extra_body"]},
                    "headers": {}})
                finish = now()
                choice, usage = out["choices"][0], out["usage"]
                sink.turn(group=g, trajectory=t, turn=turn, forced_tokens=L,
                          completion_tokens=usage["completion_tokens"], finish_reason=choice["finish_reason"],
                          prompt_tokens=usage["prompt_tokens"], scheduled_prompt_tokens=prompt, arrival=arrival,
                          first_token=None, finish=finish, policy_version_start=v0, policy_version_end=published[0])
                ids = list(out.get("prompt_token_ids") or [])
                if turn == 0:
                    prompt_ids = ids
                else:  # the observation: what the prompt added beyond the conversation so far
                    seen = len(prompt_ids) + len(response)
                    response += ids[seen:]
                    mask += [0] * len(ids[seen:])
                    logprobs += [0.0] * len(ids[seen:])
                gen = list(choice.get("token_ids") or [])
                response += gen
                mask += [1] * len(gen)
                logprobs += [float(x["logprob"]) for x in ((choice.get("logprobs") or {}).get("content") or [])]
                messages.append({"role": "assistant", "content": choice["message"]["content"] or ""})
            return {"prompt_token_ids": prompt_ids, "response_ids": response, "loss_masks": mask,
                    "rewards": float(w.traj_reward[t]), "stop_reasons": "length", "rollout_logprobs": logprobs}

    class TimedGauge:
        """Wraps the trainer's phase gauge: stamps c_k when the ``sync_weights`` phase ends."""

        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        @contextlib.contextmanager
        def timed_phase(self, name, timings):
            with self.inner.timed_phase(name, timings):
                yield
            if name == "sync_weights" and stamps:
                stamps[max(stamps)]["publish_end"] = now()
                published[0] = max(stamps)

    class TimedTrainer(FullyAsyncRayPPOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._phase_gauge = TimedGauge(self._phase_gauge)

        def convert_generation_group_mini_batch_to_training_input(self, cur_generation_group_mini_batch,
                                                                   dropped_groups=None):
            pending["groups"] = [int(x.uid) for x in cur_generation_group_mini_batch]
            pending["staleness"] = [self.global_step - x.global_step_when_scheduled
                                    for x in cur_generation_group_mini_batch]
            pending["dropped"] = len(dropped_groups or [])
            return super().convert_generation_group_mini_batch_to_training_input(
                cur_generation_group_mini_batch, dropped_groups)

        async def _run_training(self, training_input):
            k = self.global_step
            stamps[k] = {"d_k": now(), **pending}
            status = await super()._run_training(training_input)
            stamps[k]["train_end"] = now()
            return status

    class Exp(BasePPOExp):
        def get_generator(self, cfg, tokenizer, inference_engine_client):
            return BenchGenerator(inference_engine_client)

        def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client,
                        generator, colocate_pg):
            return TimedTrainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                generator=generator, colocate_pg=colocate_pg)

    dotlist = overrides(ctx, str(train_file), w.group_size(0))
    cfg = SkyRLTrainConfig.from_cli_overrides(dotlist)
    validate_cfg(cfg)
    initialize_ray(cfg)
    Exp(cfg).run()  # the trainer runs in this process: the stamps are ours
    for k in sorted(stamps):
        st = stamps[k]
        gids = st["groups"]
        iv = [[st["d_k"], st["train_end"]]]
        sink.update(k=k, d_k=st["d_k"], c_k=st["publish_end"], train_end=st["train_end"],
                    publish_end=st["publish_end"], policy_version=k, groups=len(gids),
                    trajectories=sum(w.group_size(g) for g in gids),
                    tokens=sum(int(w.call_completion_tokens[c]) for g in gids for t in w.group_trajs(g)
                               for c in w.traj_calls(t)),
                    group_ids=gids, rank_intervals={str(r): iv for r in range(int(ctx.settings["trainer_ranks"]))},
                    rank_intervals_native=False, staleness=st["staleness"],
                    discards={"stale": 0, "zero_variance": st["dropped"]}, native={})
    return BackendOutcome(exit_code=0, backend_version=P.UPSTREAM["skyrl"]["commit"],
                          native_config={"overrides": dotlist, "skyrl_source": ctx.skyrl_source,
                                         "cuda_compat": ctx.skyrl_cuda_compat,
                                         "rank_interval_source": "run_training phase, both ranks (not native)"},
                          clock={"kind": "monotonic", "origin_unix": origin_unix})
