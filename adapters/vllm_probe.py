"""`srl-profile kv-probe`: the KV-cache capacity a vLLM engine allocates, as a ``kv_probe`` observation.

The probe starts ``vllm.LLM(model, tensor_parallel_size=TP, gpu_memory_utilization=F,
max_model_len=L)``, which loads the weights, profiles a forward pass and sizes the paged KV cache
from the memory left; it then reads the engine's cache config and records

    capacity (tokens) = cache_config.num_gpu_blocks * cache_config.block_size

with the layout (tp, pp), model, gpu_memory_utilization, max_model_len, block size and KV dtype
as inputs and the GPU, vLLM / torch versions, host and date as provenance. The cache config is
looked up as ``llm.llm_engine.vllm_config.cache_config`` (vLLM V1, >= 0.8: the front end copies
``num_gpu_blocks`` from the engine-core process's READY handshake) and, failing that,
``llm.llm_engine.cache_config`` (the V0 ``LLMEngine``).

The module has two parts. `kv_probe_observation` (with `find_cache_config` and `kv_capacity`)
is pure: it turns an engine-like object, or its cache-config numbers, into the observation and
is unit-tested with stand-in objects. `probe_vllm` is the only code that touches vLLM (imported
lazily; the ``profile-vllm`` extra) and torch. **It needs a GPU and has not been run in this
repository's development environment (no GPU, no vLLM); only the pure part is tested.**
"""

from __future__ import annotations

import datetime
import socket
import types
from typing import Any

from adapters.extras import require, require_cuda_gpus
from simrl.cost.observations import Observation, make

PROFILER = "srl-profile kv-probe"
# Where the cache config sits, tried in order, as attribute paths from the object handed in.
CACHE_CONFIG_PATHS = (
    ("llm_engine", "vllm_config", "cache_config"),  # vllm.LLM, V1 engine
    ("llm_engine", "cache_config"),                 # vllm.LLM, V0 engine
    ("vllm_config", "cache_config"),                # an LLMEngine handed in directly
    ("cache_config",),
    (),                                             # a cache config itself
)


def _walk(obj: Any, path: tuple[str, ...]) -> Any:
    for attr in path:
        obj = getattr(obj, attr, None)
        if obj is None:
            return None
    return obj


def find_cache_config(engine: Any) -> Any:
    """The first object along `CACHE_CONFIG_PATHS` that carries a set ``num_gpu_blocks``."""
    for path in CACHE_CONFIG_PATHS:
        cc = _walk(engine, path)
        if cc is not None and getattr(cc, "num_gpu_blocks", None) is not None \
                and getattr(cc, "block_size", None) is not None:
            return cc
    tried = ", ".join(".".join(p) or "<object>" for p in CACHE_CONFIG_PATHS)
    raise ValueError(f"no cache config with num_gpu_blocks and block_size found (tried {tried}); "
                     "was the engine initialised?")


def kv_capacity(num_gpu_blocks: Any, block_size: Any) -> int:
    """Tokens the paged KV cache holds: blocks x tokens per block (both positive integers)."""
    for name, val in (("num_gpu_blocks", num_gpu_blocks), ("block_size", block_size)):
        if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
            raise ValueError(f"cache config {name} must be a positive integer, got {val!r}")
    return num_gpu_blocks * block_size


def kv_probe_observation(engine: Any, *, model: str, tp: int = 1, pp: int = 1,
                         gpu_memory_utilization: float | None = None, max_model_len: int | None = None,
                         hardware: str = "unknown", software: dict | None = None,
                         date: str | None = None, host: str | None = None) -> Observation:
    """One ``kv_probe`` observation from an engine-like object, its cache config, or a dict of
    the cache-config numbers (``num_gpu_blocks``, ``block_size``, optional ``cache_dtype``).

    ``gpu_memory_utilization`` and ``max_model_len`` default to what the engine reports
    (``cache_config.gpu_memory_utilization``, ``model_config.max_model_len``).
    """
    if isinstance(engine, dict):  # the cache-config numbers themselves
        engine = types.SimpleNamespace(**engine)
    cc = find_cache_config(engine)
    blocks, block_size = cc.num_gpu_blocks, cc.block_size
    tokens = kv_capacity(blocks, block_size)
    if gpu_memory_utilization is None:
        gpu_memory_utilization = getattr(cc, "gpu_memory_utilization", None)
    if max_model_len is None:
        for path in (("llm_engine", "vllm_config", "model_config"), ("llm_engine", "model_config"),
                     ("vllm_config", "model_config"), ("model_config",)):
            mc = _walk(engine, path)
            if mc is not None and isinstance(getattr(mc, "max_model_len", None), int):
                max_model_len = mc.max_model_len
                break
    inputs: dict[str, Any] = {"tp": int(tp), "pp": int(pp), "model": model, "block_size": block_size}
    if gpu_memory_utilization is not None:
        inputs["gpu_memory_utilization"] = float(gpu_memory_utilization)
    if max_model_len is not None:
        inputs["max_model_len"] = int(max_model_len)
    cache_dtype = getattr(cc, "cache_dtype", None)
    if isinstance(cache_dtype, str):
        inputs["kv_cache_dtype"] = cache_dtype
    engine_info = {"num_gpu_blocks": blocks, "block_size": block_size}
    reported = getattr(cc, "kv_cache_size_tokens", None)  # newer vLLM reports its own figure
    if isinstance(reported, int) and not isinstance(reported, bool):
        engine_info["kv_cache_size_tokens"] = reported
    prov = {
        "hardware": hardware or "unknown",
        "source": f"{PROFILER} on {host}" if host else PROFILER,
        "date": date or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "software": {"profiler": PROFILER, **(software or {})},
        "engine": engine_info,
    }
    if host:
        prov["host"] = host
    return make("kv_probe", float(tokens), "tokens", inputs, prov)


# -- the vLLM part (GPU only; not run here) ------------------------------------------------------

def require_vllm():
    return require("vllm", "profile-vllm", PROFILER)


def require_gpus(tp: int) -> None:
    """The engine shards the model over ``tp`` GPUs: refuse, saying so, when they are not there."""
    require_cuda_gpus(tp, f"{PROFILER} starts a vLLM engine with tensor_parallel_size={tp}: it")


def _runtime_info(vllm) -> tuple[str, dict]:
    """(GPU name, software versions) of the process that started the engine."""
    import torch  # a dependency of vllm

    software = {"vllm": getattr(vllm, "__version__", "unknown"), "torch": torch.__version__,
                "cuda": torch.version.cuda}
    hardware = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "unknown"
    return hardware, software


def probe_vllm(model: str, tp: int = 1, gpu_memory_utilization: float | None = None,
               max_model_len: int | None = None, **engine_kwargs: Any) -> Observation:
    """Start a vLLM engine for ``model`` and record the KV capacity it allocated. Needs a GPU."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if max_model_len is not None and max_model_len < 1:
        raise ValueError(f"max_model_len must be >= 1, got {max_model_len}")
    vllm = require_vllm()
    require_gpus(tp)
    kwargs: dict[str, Any] = {"model": model, "tensor_parallel_size": tp, **engine_kwargs}
    if gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    llm = vllm.LLM(**kwargs)
    hardware, software = _runtime_info(vllm)
    return kv_probe_observation(llm, model=model, tp=tp, pp=1, gpu_memory_utilization=gpu_memory_utilization,
                                max_model_len=max_model_len, hardware=hardware, software=software,
                                host=socket.gethostname())
