"""`srl-profile vllm`: per-iteration telemetry of a real vLLM engine under a forced-length workload.

Checked against vLLM 0.33.0 (the wheel ``vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl``, commit
``4ba787ec9`` per its ``vllm/_version.py``; third_party/pins.json):

- ``vllm.engine.arg_utils.EngineArgs`` fields ``model``, ``tensor_parallel_size``,
  ``gpu_memory_utilization``, ``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens``,
  ``enable_prefix_caching``, ``disable_log_stats`` and ``enable_logging_iteration_details``
  (``ObservabilityConfig``; when set, the engine core times each scheduled step and attaches a
  ``SchedulerIterationDetails`` to the step's ``SchedulerStats``: ``vllm/v1/engine/core.py``
  ``capture_iteration_details``).
- ``vllm.v1.engine.llm_engine.LLMEngine.from_engine_args(engine_args, usage_context,
  stat_loggers=[factory])``; ``add_request(request_id, prompt, params)``; ``step()``;
  ``has_unfinished_requests()``. A per-engine stat-logger factory is called as
  ``factory(vllm_config, engine_idx)`` and its ``record(scheduler_stats, iteration_stats,
  mm_cache_stats=None, engine_idx=0)`` receives every step's stats (``vllm/v1/metrics/loggers.py``
  ``StatLoggerManager`` / ``StatLoggerBase``).
- ``SchedulerStats.num_running_reqs``, ``num_waiting_reqs``, ``kv_cache_usage`` (fraction of the KV
  blocks in use) and ``iteration_details.{num_ctx_requests, num_ctx_tokens,
  num_generation_requests, num_generation_tokens, elapsed_ms}`` (``vllm/v1/metrics/stats.py``).
- ``SamplingParams(max_tokens=L, min_tokens=L, ignore_eos=True, temperature=0)`` and the
  ``{"prompt_token_ids": [...]}`` prompt (``vllm/sampling_params.py``, ``vllm/inputs/llm.py``).
- KV capacity: ``vllm_config.cache_config.kv_cache_size_tokens`` when the engine reports it, else
  ``num_gpu_blocks * block_size`` (adapters/vllm_probe.py, the kv-probe).

The workload forces lengths: every request has a prompt of exactly ``prompt_len`` random token ids
and generates exactly ``output_len`` tokens (``ignore_eos``, ``min_tokens = max_tokens``), so each
iteration's composition is known. Per scenario (requests, prompt_len, output_len) all requests are
added at once and the engine is stepped until done. Each engine step with scheduled tokens becomes
one ``iteration`` observation: ``value`` = the engine core's step time (``elapsed_ms``), inputs
``batch_size`` (requests scheduled), ``prefill_tokens``, ``decode_tokens``, ``kv_tokens`` (KV in
use: ``kv_cache_usage`` x capacity), ``running_requests``, ``waiting_requests``, the layout and
the scenario; the front end's wall time between steps is kept in provenance. Plus one
``kv_probe`` observation of the capacity. Nothing is modelled: every number is what the engine said.

**Needs a GPU and vLLM** (``pip install 'simrl[profile-vllm]'`` or third_party/install.sh); it has
not been run in this repository's development environment. The pure parts (workload, the
recorder, observation assembly, the driving loop) are tested with a fake engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from adapters.extras import MissingExtraError, require
from simrl.cost.observations import Observation, make

PROFILER = "srl-profile vllm"


@attrs.frozen
class Scenario:
    """One forced-length batch: ``requests`` prompts of ``prompt_len`` tokens, ``output_len`` out."""

    requests: int
    prompt_len: int
    output_len: int

    def __attrs_post_init__(self):
        for name in ("requests", "prompt_len", "output_len"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"scenario {name} must be a positive integer, got {val!r}")


def parse_scenarios(text: str) -> list[Scenario]:
    """``"8x512x128,32x128x256"`` -> scenarios (requests x prompt_len x output_len)."""
    from adapters.listopt import split_items

    out = []
    for item in split_items(text, "--scenarios", "REQUESTSxPROMPT_LENxOUTPUT_LEN items, e.g. 16x512x128"):
        parts = item.lower().split("x")
        try:
            if len(parts) != 3:
                raise ValueError
            vals = [int(p) for p in parts]
            if not all(1 <= v <= 1 << 24 for v in vals):
                raise ValueError
            out.append(Scenario(*vals))
        except ValueError:
            raise ValueError(f"--scenarios: {item!r} is not REQUESTSxPROMPT_LENxOUTPUT_LEN "
                             "(whole numbers in [1, 2**24], e.g. 16x512x128)") from None
    if not out:
        raise ValueError("--scenarios: no scenario given")
    return out


def forced_requests(sc: Scenario, vocab_size: int, seed: int = 0, reserved: int = 16) -> list[list[int]]:
    """``sc.requests`` prompts of exactly ``sc.prompt_len`` random ids in [reserved, vocab_size).

    Low ids (special tokens in most tokenizers) are avoided; prompts differ so prefix caching
    finds nothing to share.
    """
    if vocab_size <= reserved + 1:
        raise ValueError(f"vocab_size {vocab_size} too small")
    rng = np.random.default_rng(seed)
    return rng.integers(reserved, vocab_size, size=(sc.requests, sc.prompt_len)).tolist()


def sampling_kwargs(sc: Scenario) -> dict[str, Any]:
    """Exactly ``output_len`` tokens per request, greedy, end-of-sequence ignored."""
    return {"max_tokens": sc.output_len, "min_tokens": sc.output_len, "ignore_eos": True,
            "temperature": 0.0}


class IterationRecorder:
    """Keeps what the engine reports each step (duck-typed ``StatLoggerBase.record``)."""

    def __init__(self):
        self.rows: list[dict[str, Any]] = []
        self.scenario_index = -1

    def record(self, scheduler_stats, iteration_stats=None, mm_cache_stats=None, engine_idx: int = 0):
        if scheduler_stats is None:
            return
        det = getattr(scheduler_stats, "iteration_details", None)
        if det is None or getattr(det, "is_dummy", False):
            return
        self.rows.append({
            "scenario": self.scenario_index,
            "engine": int(engine_idx),
            "iteration": int(det.iteration_index),
            "ctx_requests": int(det.num_ctx_requests),
            "ctx_tokens": int(det.num_ctx_tokens),
            "gen_requests": int(det.num_generation_requests),
            "gen_tokens": int(det.num_generation_tokens),
            "elapsed_s": float(det.elapsed_ms) / 1e3,
            "running": int(scheduler_stats.num_running_reqs),
            "waiting": int(scheduler_stats.num_waiting_reqs),
            "kv_usage": float(scheduler_stats.kv_cache_usage),
        })

    # The rest of StatLoggerBase's interface.
    def log_engine_initialized(self):
        pass

    def log(self):
        pass

    def record_sleep_state(self, is_awake: int = 0, level: int = 0):
        pass


def iteration_observation(row: dict, sc: Scenario, kv_capacity_tokens: int, layout: dict,
                          provenance: dict) -> Observation:
    """One ``iteration`` observation from one recorded engine step."""
    if row["elapsed_s"] <= 0:
        raise ValueError(f"iteration {row['iteration']}: step time {row['elapsed_s']!r} s")
    if not 0.0 <= row["kv_usage"] <= 1.0:
        raise ValueError(f"iteration {row['iteration']}: kv_cache_usage {row['kv_usage']!r} outside [0, 1]")
    inputs = {
        "batch_size": row["ctx_requests"] + row["gen_requests"],
        "prefill_tokens": row["ctx_tokens"],
        "decode_tokens": row["gen_tokens"],
        "kv_tokens": int(round(row["kv_usage"] * kv_capacity_tokens)),
        "prefill_requests": row["ctx_requests"],
        "decode_requests": row["gen_requests"],
        "running_requests": row["running"],
        "waiting_requests": row["waiting"],
        "kv_cache_usage": row["kv_usage"],
        "kv_capacity_tokens": int(kv_capacity_tokens),
        "scenario": {"requests": sc.requests, "prompt_len": sc.prompt_len, "output_len": sc.output_len},
        **layout,
    }
    prov = {**provenance, "engine_iteration": row["iteration"], "clock": "engine core elapsed_ms"}
    if "wall_s" in row:
        prov["frontend_step_wall_s"] = row["wall_s"]
    return make("iteration", row["elapsed_s"], "s", inputs, prov)


@attrs.frozen
class VllmRun:
    observations: list[Observation]
    kv_capacity_tokens: int
    iterations: int


def drive(engine, recorder: IterationRecorder, scenarios: Sequence[Scenario], vocab_size: int,
          make_params: Callable[[Scenario], Any], seed: int = 0,
          progress: Callable[[str], None] | None = None, max_steps: int = 1_000_000) -> None:
    """Run each scenario to completion on ``engine`` (add_request / step / has_unfinished_requests).

    The wall time of each ``step()`` call is attached to the recorder rows that call produced.
    """
    for k, sc in enumerate(scenarios):
        if engine.has_unfinished_requests():
            raise RuntimeError("the engine has unfinished requests before scenario start")
        recorder.scenario_index = k
        params = make_params(sc)
        for i, ids in enumerate(forced_requests(sc, vocab_size, seed + k)):
            engine.add_request(f"s{k}-r{i}", {"prompt_token_ids": ids}, params)
        steps = 0
        while engine.has_unfinished_requests():
            before = len(recorder.rows)
            t0 = time.perf_counter()
            engine.step()
            wall = time.perf_counter() - t0
            for row in recorder.rows[before:]:
                row["wall_s"] = wall
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"scenario {sc}: still unfinished after {max_steps} steps")
        if progress:
            n = sum(1 for r in recorder.rows if r["scenario"] == k)
            progress(f"{sc.requests} x {sc.prompt_len} -> {sc.output_len}: {n} iterations")


def observations_from(recorder: IterationRecorder, scenarios: Sequence[Scenario], kv_capacity_tokens: int,
                      layout: dict, provenance: dict) -> list[Observation]:
    rows = [r for r in recorder.rows if r["ctx_tokens"] + r["gen_tokens"] > 0]
    if not rows:
        raise ValueError("the engine reported no iterations; was enable_logging_iteration_details set "
                         "and disable_log_stats False?")
    return [iteration_observation(r, scenarios[r["scenario"]], kv_capacity_tokens, layout, provenance)
            for r in rows]


def check_forced_lengths(recorder: IterationRecorder, scenarios: Sequence[Scenario]) -> list[str]:
    """Token totals per scenario against what forced lengths imply (prefix caching off):
    prefill = requests x prompt_len, decode = requests x (output_len - 1) (the first output token
    comes from the prefill step). Returns the mismatches, empty when the engine did as told."""
    bad = []
    for k, sc in enumerate(scenarios):
        rows = [r for r in recorder.rows if r["scenario"] == k]
        pre, dec = sum(r["ctx_tokens"] for r in rows), sum(r["gen_tokens"] for r in rows)
        want_pre, want_dec = sc.requests * sc.prompt_len, sc.requests * (sc.output_len - 1)
        if pre != want_pre or dec != want_dec:
            bad.append(f"{sc}: prefill {pre} tokens (expected {want_pre}), decode {dec} (expected {want_dec})")
    return bad


# -- the vLLM part (GPU only; not run here) ------------------------------------------------------

def require_vllm():
    return require("vllm", "profile-vllm", PROFILER)


def profile_vllm(model: str, scenarios: Sequence[Scenario], tp: int = 1, gpu_memory_utilization: float | None = None,
                 max_model_len: int | None = None, max_num_seqs: int | None = None,
                 max_num_batched_tokens: int | None = None, seed: int = 0,
                 progress: Callable[[str], None] | None = None) -> VllmRun:
    """Start a vLLM engine and record every iteration of the scenarios. Needs vLLM and a GPU."""
    from adapters.kernels import require_torch
    from adapters.provenance import collect
    from adapters.vllm_probe import find_cache_config, kv_probe_observation

    vllm = require_vllm()
    torch = require_torch()
    if not torch.cuda.is_available():
        raise MissingExtraError(f"{PROFILER} drives a vLLM engine and needs a CUDA GPU; torch "
                                f"{torch.__version__} sees none. Run it on a GPU machine "
                                "(third_party/install.sh installs the pinned stack).")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.llm_engine import LLMEngine

    kwargs: dict[str, Any] = {"model": model, "tensor_parallel_size": tp, "disable_log_stats": False,
                              "enable_logging_iteration_details": True, "enable_prefix_caching": False,
                              "seed": seed}
    for key, val in (("gpu_memory_utilization", gpu_memory_utilization), ("max_model_len", max_model_len),
                     ("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
        if val is not None:
            kwargs[key] = val
    recorder = IterationRecorder()
    engine = LLMEngine.from_engine_args(EngineArgs(**kwargs), usage_context=UsageContext.ENGINE_CONTEXT,
                                        stat_loggers=[lambda vllm_config, engine_idx=0: recorder])
    cc = find_cache_config(engine)
    reported = getattr(cc, "kv_cache_size_tokens", None)
    capacity = int(reported) if isinstance(reported, int) and reported > 0 else int(cc.num_gpu_blocks * cc.block_size)
    vocab = engine.model_config.get_vocab_size()
    drive(engine, recorder, scenarios, vocab, lambda sc: vllm.SamplingParams(**sampling_kwargs(sc)),
          seed=seed, progress=progress)
    prov = collect(PROFILER, torch=torch, device="cuda:0",
                   extra_software={"vllm": getattr(vllm, "__version__", "unknown")})
    mismatches = check_forced_lengths(recorder, scenarios)
    if mismatches:
        prov["forced_length_mismatches"] = mismatches
    layout = {"model": model, "tp": tp, "max_num_seqs": engine.vllm_config.scheduler_config.max_num_seqs,
              "max_num_batched_tokens": engine.vllm_config.scheduler_config.max_num_batched_tokens}
    obs = observations_from(recorder, scenarios, capacity, layout, prov)
    obs.append(kv_probe_observation(engine, model=model, tp=tp, pp=1, hardware=prov["hardware"],
                                    software=prov["software"], host=prov["host"]))
    return VllmRun(obs, capacity, len(obs) - 1)
