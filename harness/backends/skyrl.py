"""SkyRL driver (UNTESTED here: needs four H200s and SkyRL at the pinned commit, ``--skyrl-source``).

Runs SkyRL's native fully asynchronous trainer: B groups per update (4, or 1 with
``--skyrl-batch-size 1``), ``num_parallel_generation_workers`` 12 (3), ``max_staleness_steps`` 4,
Megatron TP1 CP1 EP2 DP2 on the two trainer GPUs, vLLM on the other two. A custom generator
issues each call with its forced length (per-request ``min_tokens = max_tokens = L``,
``ignore_eos``). The trainer subclass stamps d_k (batch converted and handed to training),
the native ``run_training`` interval per rank, and c_k at the end of ``sync_weights``.
"""

from __future__ import annotations

import asyncio
import sys
import time

from harness import pins as P
from harness.backends.base import BackendOutcome, EvidenceSink, RunContext
from harness.backends.forced import request_options, sized_text


def overrides(ctx: RunContext) -> list[str]:
    """SkyRL (Hydra-style) config overrides for this run; all pins in one list, recorded verbatim."""
    s = ctx.settings
    b, par = int(s["groups_per_update"]), s["parallel"]
    return [
        f"trainer.policy.model.path={P.MODEL}", f"+trainer.policy.model.revision={P.MODEL_REVISION}",
        f"trainer.policy.model.lora.rank={ctx.rank}", f"trainer.policy.model.lora.alpha={P.LORA_ALPHA}",
        "trainer.strategy=megatron", "trainer.bf16=true",
        f"trainer.policy.megatron_config.tensor_model_parallel_size={par['tp']}",
        f"trainer.policy.megatron_config.context_parallel_size={par['cp']}",
        f"trainer.policy.megatron_config.expert_model_parallel_size={par['ep']}",
        "trainer.placement.colocate_all=false", "trainer.placement.policy_num_gpus_per_node=2",
        "generator.num_inference_engines=1", "generator.inference_engine_tensor_parallel_size=1",
        "generator.inference_engine_data_parallel_size=2", "generator.inference_engine_expert_parallel_size=2",
        f"trainer.train_batch_size={b}", f"trainer.policy_mini_batch_size={b}",
        f"trainer.fully_async.max_staleness_steps={int(s['staleness_bound'])}",
        f"trainer.fully_async.num_parallel_generation_workers={int(s['workers'])}",
        f"trainer.max_steps={P.TOTAL_UPDATES}", "trainer.eval_interval=-1", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=-1", "trainer.hf_save_interval=-1",
        "generator.batched=false", "generator.async_engine=true", "trainer.algorithm.dynamic_sampling.type=none",
        "generator.use_cache_salt=true", f"generator.max_input_length={P.MAX_SEQ_LENGTH}",
        "+generator.chat_template_kwargs.enable_thinking=false",
        "+generator.chat_template_kwargs.preserve_thinking=true",
        "generator.sampling_params.temperature=1.0", "generator.sampling_params.top_p=1.0",
        "generator.sampling_params.additional_kwargs.ignore_eos=true",
    ]


def run(ctx: RunContext, sink: EvidenceSink, log) -> BackendOutcome:
    if ctx.skyrl_source:
        sys.path.insert(0, ctx.skyrl_source)
    from skyrl.train.config import load_config_with_overrides  # heavy: SkyRL environment only
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer
    from transformers import AutoTokenizer

    w = ctx.load_workload()
    clock0 = time.monotonic()
    now = lambda: time.monotonic() - clock0  # noqa: E731
    tok = AutoTokenizer.from_pretrained(P.MODEL, revision=P.MODEL_REVISION)
    stamps: dict[int, dict] = {}

    class TimedTrainer(FullyAsyncRayPPOTrainer):
        async def run_training(self, training_input):
            k = len(stamps) + 1
            st = stamps.setdefault(k, {"d_k": now(), "groups": list(getattr(training_input, "bench_groups", []))})
            result = await super().run_training(training_input)
            st["train_end"] = now()
            st["rank_intervals"] = getattr(self, "last_rank_intervals", None)  # native per-rank stamps if any
            st["metrics"] = dict(getattr(self, "all_metrics", {}) or {})
            return result

        async def sync_weights(self, *args, **kwargs):
            result = await super().sync_weights(*args, **kwargs)
            stamps[len(stamps)]["publish_end"] = now()
            return result

    async def generate_call(engine, g: int, t: int, turn: int, messages: list[dict], version: int) -> dict:
        c = w.traj_calls(t)[turn]
        L = int(w.call_completion_tokens[c])
        messages.append({"role": "user", "content": sized_text(tok, messages, int(w.call_new_tokens[c]))})
        opts = request_options(L, f"{ctx.run_id}/{t}/{turn}" if w.call_cache_salted[c] else None)
        arrival = now()
        out = await engine.chat_completion({"json": {"messages": messages, "max_tokens": L, **opts["extra_body"]}})
        choice, usage = out["choices"][0], out["usage"]
        sink.turn(group=g, trajectory=t, turn=turn, forced_tokens=L, completion_tokens=usage["completion_tokens"],
                  finish_reason=choice["finish_reason"], prompt_tokens=usage["prompt_tokens"], arrival=arrival,
                  first_token=None, finish=now(), policy_version_start=version, policy_version_end=version)
        messages.append({"role": "assistant", "content": choice["message"]["content"] or ""})
        return out

    class Exp(BasePPOExp):
        def get_trainer(self, *args, **kwargs):
            return TimedTrainer(*args, **kwargs)

    cfg = load_config_with_overrides(overrides(ctx) + [f"generator.n_samples_per_prompt={w.group_size(0)}"])
    exp = Exp(cfg)
    exp.bench_generate_call, exp.bench_workload = generate_call, w  # read by the benchmark generator
    asyncio.run(exp.run()) if asyncio.iscoroutinefunction(exp.run) else exp.run()
    for k in sorted(stamps):
        st = stamps[k]
        m = st["metrics"]
        ranks = st["rank_intervals"] or {str(r): [[st["d_k"], st["train_end"]]] for r in range(2)}
        gids = st["groups"]
        sink.update(k=k, d_k=st["d_k"], c_k=st["publish_end"], train_end=st["train_end"],
                    publish_end=st["publish_end"], policy_version=k, groups=len(gids),
                    trajectories=sum(w.group_size(g) for g in gids),
                    tokens=int(m.get("generate/num_tokens", 0)), group_ids=gids, rank_intervals=ranks,
                    staleness=[int(m.get("async/staleness_max", 0))],
                    discards={"stale": int(m.get("async/num_groups_dropped", 0)), "zero_variance": 0}, native=m)
    return BackendOutcome(exit_code=0, backend_version=P.SKYRL_COMMIT,
                          native_config={"overrides": overrides(ctx), "skyrl_source": ctx.skyrl_source,
                                         "cuda_compat": ctx.skyrl_cuda_compat})
