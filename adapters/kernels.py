"""`srl-profile kernels`: time one transformer layer's non-attention operators with torch.

For a model of `simrl.cost.architectures` and a tensor-parallel degree TP, each operator of one
layer is run on one TP rank's shapes, for each ``num_tokens`` of a grid, and timed:

==========================  ================================================================
operator                    what runs (T = num_tokens, E = hidden, per-rank widths / TP)
==========================  ================================================================
emb                         embedding lookup of T ids in a [ceil(vocab/TP), E] table
input_layernorm             RMSNorm of [T, E] (LayerNorm for GELU-MLP models such as phi-2)
attn_pre_proj               [T, E] x [E, (heads + 2 kv_heads) * head_dim / TP]   (QKV)
attn_rope                   neox rotary embedding of the q and k heads of one rank
attn_post_proj              [T, heads * head_dim / TP] x [heads * head_dim / TP, E]
post_attention_layernorm    RMSNorm of [T, E] (gated-MLP models only)
mlp_up_proj                 [T, E] x [E, (2 if gated else 1) * intermediate / TP]
mlp_act                     SiLU(gate) * up for gated MLPs, tanh-GELU otherwise
mlp_down_proj               [T, intermediate / TP] x [intermediate / TP, E]
add                         residual add (attn + mlp + residual for the parallel block)
==========================  ================================================================

This is Vidur's layer decomposition (``vidur/profiling/mlp``): GELU-MLP models use LayerNorm, a
parallel attention/MLP block and no post-attention norm, as Vidur's phi-2 configuration does;
gated models use RMSNorm before attention and before the MLP. Projections run as
``torch.nn.functional.linear`` (weight stored [out, in], as ``nn.Linear`` does) without bias.
The norms, rotary embedding and activation are eager torch, not the fused kernels of an
inference engine, so on a GPU those memory-bound operators are upper bounds for a fused stack.
Attention itself (QK^T, softmax, PV), q/k norms and communication are not timed here.

Timing: ``warmup`` untimed calls, then ``repeats`` timed calls; on CUDA each call sits between
two ``torch.cuda.Event`` records and the device is synchronised before the times are read; on
CPU each call is timed with ``time.perf_counter``. Every (operator, num_tokens) becomes one
``operator`` observation whose inputs are the Vidur shape columns (so `fit_kernel_db` and
``srl-regress fit --family composed`` read them unchanged) plus ``head_dim`` and ``dtype``;
value = median and spread = standard deviation (seconds), and ``provenance.timing`` keeps mean,
median, min, max, std, repeats and warmup. Nothing is estimated: each number is a clock reading.

torch is imported lazily (the ``profile-torch`` extra); everything above the timing loop is
pure and importable without it. The CPU branch is exercised by the tests (when torch is
installed); the CUDA branch (event timing) has not been run in this repository's development
environment, which has no GPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from adapters.extras import require
from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.observations import Observation, make

PROFILER = "srl-profile kernels"
DTYPES = ("bf16", "fp16", "fp32")
OPERATORS = (
    "emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
    "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add",
)
# Default grids: Vidur-like powers of two on a GPU; a CPU run stays a few seconds for a small model.
DEFAULT_TOKENS = {"cuda": tuple(2**i for i in range(13)), "cpu": tuple(2**i for i in range(8))}
DEFAULT_REPEATS = {"cuda": 20, "cpu": 5}
DEFAULT_WARMUP = 2
NORM_EPS = 1e-6


@attrs.frozen
class LayerDims:
    """One TP rank's widths of one dense transformer layer."""

    arch: ModelArch
    tp: int

    @property
    def hidden(self) -> int:
        return self.arch.hidden

    @property
    def q_heads(self) -> int:
        return self.arch.heads // self.tp

    @property
    def kv_heads(self) -> int:
        return self.arch.kv_heads // self.tp

    @property
    def head_dim(self) -> int:
        return self.arch.head_dim

    @property
    def qkv_out(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    @property
    def attn_out_in(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def mlp_width(self) -> int:
        return self.arch.intermediate // self.tp

    @property
    def up_out(self) -> int:
        return 2 * self.mlp_width if self.arch.gated_mlp else self.mlp_width

    @property
    def vocab_rows(self) -> int:
        return math.ceil(self.arch.vocab / self.tp)  # vocab-parallel shard (padded)

    @property
    def operators(self) -> tuple[str, ...]:
        """The operators this layer has (no post-attention norm in the parallel GELU block)."""
        if self.arch.gated_mlp:
            return OPERATORS
        return tuple(op for op in OPERATORS if op != "post_attention_layernorm")


def layer_dims(model: str | ModelArch, tp: int) -> LayerDims:
    """Resolve ``model`` and check that its dense layer splits evenly over ``tp`` ranks."""
    arch = model_arch(model)
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if arch.is_moe or arch.n_linear_attention:
        raise ValueError(f"{arch.name} is not a dense full-attention model; the kernel profiler times "
                         "the dense layer operators the kernel DB fits")
    for what, n in (("attention heads", arch.heads), ("KV heads", arch.kv_heads),
                    ("MLP width", arch.intermediate)):
        if n % tp:
            raise ValueError(f"{arch.name}: {what} ({n}) do not split evenly over tp={tp}")
    return LayerDims(arch, tp)


def parse_tokens(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4] (sorted, duplicates dropped); every entry a positive integer."""
    from adapters.listopt import parse_int_list

    return list(parse_int_list(text, "--tokens", 1, 1 << 24))


def timing_stats(times_s: Sequence[float]) -> dict[str, float]:
    """mean / median / min / max / std (population, as Vidur records it) of repeat times."""
    arr = np.asarray(times_s, dtype=float)
    if arr.size == 0:
        raise ValueError("no timed repeats")
    return {"mean": float(arr.mean()), "median": float(np.median(arr)), "min": float(arr.min()),
            "max": float(arr.max()), "std": float(arr.std())}


def operator_inputs(dims: LayerDims, num_tokens: int, dtype: str) -> dict:
    """The ``inputs`` of one observation: the Vidur shape columns plus head_dim, model, dtype."""
    a = dims.arch
    return {"num_tokens": int(num_tokens), "tp": dims.tp, "n_embd": a.hidden, "n_head": a.heads,
            "n_kv_head": a.kv_heads, "n_expanded_embd": a.intermediate, "vocab_size": a.vocab,
            "use_gated_mlp": a.gated_mlp, "head_dim": a.head_dim, "model": a.name, "dtype": dtype}


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def operator_details(dims: LayerDims, op: str, num_tokens: int, dtype: str) -> dict:
    """What one timed call of ``op`` runs: the torch call, operand shapes, FLOPs and bytes touched.

    FLOPs count 2 per multiply-add of the projections and one per element of the element-wise
    operators; bytes are operands read plus the result written, at the dtype's width (the
    embedding reads only the T looked-up rows). E.g. ``mlp_down_proj`` of a 4096-wide model at
    TP 1 with 11008 MLP width and T = 2: [2, 11008] x [11008, 4096] -> 2*2*11008*4096 = 180,355,072
    FLOPs and 2*(2*11008 + 11008*4096 + 2*4096) = 90,237,952 bytes in bf16.
    """
    t, e, b = int(num_tokens), dims.hidden, DTYPE_BYTES[dtype]
    gated = dims.arch.gated_mlp

    def linear(k, n):
        return {"call": "torch.nn.functional.linear", "shapes": {"input": [t, k], "weight": [n, k]},
                "flops": 2 * t * k * n, "bytes": b * (t * k + n * k + t * n)}

    if op == "emb":
        return {"call": "torch.nn.functional.embedding", "shapes": {"ids": [t], "table": [dims.vocab_rows, e]},
                "flops": 0, "bytes": 8 * t + 2 * b * t * e}
    if op in ("input_layernorm", "post_attention_layernorm"):
        call = "rms_norm (eager: pow, mean, rsqrt, mul)" if gated else "torch.nn.functional.layer_norm"
        return {"call": call, "shapes": {"input": [t, e], "weight": [e]}, "flops": 4 * t * e,
                "bytes": b * (2 * t * e + e)}
    if op == "attn_pre_proj":
        return linear(e, dims.qkv_out)
    if op == "attn_post_proj":
        return linear(dims.attn_out_in, e)
    if op == "mlp_up_proj":
        return linear(e, dims.up_out)
    if op == "mlp_down_proj":
        return linear(dims.mlp_width, e)
    if op == "attn_rope":
        n = t * (dims.q_heads + dims.kv_heads) * dims.head_dim
        return {"call": "neox rotary (eager: chunk, mul, cat)", "shapes": {"q": [t, dims.q_heads, dims.head_dim],
                "k": [t, dims.kv_heads, dims.head_dim]}, "flops": 3 * n, "bytes": b * 3 * n}
    if op == "mlp_act":
        f = dims.mlp_width
        call = "silu(gate) * up" if gated else "torch.nn.functional.gelu(approximate='tanh')"
        return {"call": call, "shapes": {"input": [t, dims.up_out]}, "flops": (2 if gated else 1) * t * f,
                "bytes": b * (t * dims.up_out + t * f)}
    if op == "add":
        k = 2 if gated else 3
        return {"call": "tensor add", "shapes": {"operands": [[t, e]] * k}, "flops": (k - 1) * t * e,
                "bytes": b * (k + 1) * t * e}
    raise KeyError(f"unknown operator {op!r}")


def operator_observation(dims: LayerDims, op: str, num_tokens: int, times_s: Sequence[float],
                         provenance: dict, dtype: str, warmup: int) -> Observation:
    """One ``operator`` observation from the measured repeat times of (op, num_tokens)."""
    stats = timing_stats(times_s)
    prov = dict(provenance)
    prov["timing"] = {**stats, "unit": "s", "repeats": len(times_s), "warmup": warmup}
    prov["operator"] = operator_details(dims, op, num_tokens, dtype)
    return make("operator", stats["median"], "s", operator_inputs(dims, num_tokens, dtype), prov,
                name=op, spread=stats["std"])


# -- the torch part ----------------------------------------------------------------------------

def require_torch():
    return require("torch", "profile-torch", PROFILER)


def resolve_device(torch, device: str):
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is an error."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: the CUDA-event timing path needs an NVIDIA GPU and a CUDA build "
                         f"of torch; torch {torch.__version__} sees no CUDA device. Use --device cpu, or run "
                         "on a GPU machine (third_party/install.sh installs the pinned stack)")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise ValueError(f"--device expects cpu or cuda[:N], got {device!r}")
    return torch.device(device)


def torch_provenance(torch, dev, dtype: str) -> dict:
    """hardware / source / date / driver / software of a torch run on ``dev`` (adapters.provenance)."""
    from adapters.provenance import collect

    if dev.type == "cuda":
        software = {"device": str(dev), "dtype": dtype, "clock": "torch.cuda.Event"}
        props = torch.cuda.get_device_properties(dev)
        extra = {"gpu_memory_bytes": int(props.total_memory), "sm_count": int(props.multi_processor_count),
                 "compute_capability": f"{props.major}.{props.minor}"}
    else:
        software = {"device": "cpu", "dtype": dtype, "threads": torch.get_num_threads(), "clock": "time.perf_counter"}
        extra = {}
    prov = collect(PROFILER, torch=torch, device=str(dev), extra_software=software)
    prov.update(extra)
    return prov


class _Layer:
    """Builds, per operator, its weights once and a zero-argument call for a token count."""

    def __init__(self, torch, dims: LayerDims, dtype, dev):
        self.torch, self.d, self.dtype, self.dev = torch, dims, dtype, dev
        self.F = torch.nn.functional

    def _rand(self, *shape):
        return self.torch.randn(*shape, dtype=self.dtype, device=self.dev)

    def weights(self, op: str) -> dict:
        d, r = self.d, self._rand
        if op == "emb":
            return {"table": r(d.vocab_rows, d.hidden)}
        if op in ("input_layernorm", "post_attention_layernorm"):
            w = {"weight": r(d.hidden)}
            if not d.arch.gated_mlp:
                w["bias"] = r(d.hidden)
            return w
        if op == "attn_pre_proj":
            return {"weight": r(d.qkv_out, d.hidden)}
        if op == "attn_post_proj":
            return {"weight": r(d.hidden, d.attn_out_in)}
        if op == "mlp_up_proj":
            return {"weight": r(d.up_out, d.hidden)}
        if op == "mlp_down_proj":
            return {"weight": r(d.hidden, d.mlp_width)}
        if op == "attn_rope":
            return {"cos_sin": self._rope_cache()}
        return {}

    def _rope_cache(self, base: float = 10000.0):
        torch, hd = self.torch, self.d.head_dim
        max_pos = min(self.d.arch.max_position, 1 << 16)
        inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float32, device=self.dev) / hd))
        freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32, device=self.dev), inv)
        return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(self.dtype)

    def call(self, op: str, w: dict, t: int) -> Callable[[], object]:
        torch, F, d, r = self.torch, self.F, self.d, self._rand
        if op == "emb":
            ids = torch.randint(0, d.vocab_rows, (t,), device=self.dev)
            return lambda: F.embedding(ids, w["table"])
        if op in ("input_layernorm", "post_attention_layernorm"):
            x = r(t, d.hidden)
            if not d.arch.gated_mlp:
                return lambda: F.layer_norm(x, (d.hidden,), w["weight"], w["bias"], NORM_EPS)
            return lambda: self._rms_norm(x, w["weight"])
        if op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"):
            x = r(t, w["weight"].shape[1])
            return lambda: F.linear(x, w["weight"])
        if op == "attn_rope":
            qkv = r(t, d.qkv_out)
            q_size, kv_size = d.q_heads * d.head_dim, d.kv_heads * d.head_dim
            q, k, _ = qkv.split([q_size, kv_size, kv_size], dim=-1)
            pos = torch.arange(t, device=self.dev) % w["cos_sin"].shape[0]
            return lambda: self._rope(pos, q, k, w["cos_sin"])
        if op == "mlp_act":
            x = r(t, d.up_out)
            if d.arch.gated_mlp:
                f = d.mlp_width
                return lambda: F.silu(x[..., :f]) * x[..., f:]
            return lambda: F.gelu(x, approximate="tanh")
        if op == "add":
            a, b = r(t, d.hidden), r(t, d.hidden)
            if d.arch.gated_mlp:
                return lambda: a + b
            c = r(t, d.hidden)
            return lambda: a + b + c
        raise KeyError(f"unknown operator {op!r}")

    def _rms_norm(self, x, weight):
        x32 = x.float()
        var = x32.pow(2).mean(dim=-1, keepdim=True)
        return (x32 * self.torch.rsqrt(var + NORM_EPS)).to(x.dtype) * weight

    def _rope(self, positions, q, k, cos_sin):
        torch, hd = self.torch, self.d.head_dim
        cos, sin = cos_sin[positions].chunk(2, dim=-1)
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)

        def rotate(x, heads):
            x = x.reshape(x.shape[0], heads, hd)
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        return rotate(q, self.d.q_heads), rotate(k, self.d.kv_heads)


def time_call(torch, fn: Callable[[], object], dev, warmup: int, repeats: int) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(dev)
        return [start.elapsed_time(end) * 1e-3 for start, end in events]  # ms -> s
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


@attrs.frozen
class KernelProfile:
    """What a run produced: the observations plus what was skipped and how it ran."""

    observations: list[Observation]
    device: str
    dtype: str
    tokens: tuple[int, ...]
    repeats: int
    warmup: int
    skipped: tuple[str, ...] = ()  # "op@num_tokens: why" for points with no usable time


def profile_kernels(model: str, tp: int = 1, tokens: Sequence[int] | None = None, device: str = "auto",
                    repeats: int | None = None, warmup: int = DEFAULT_WARMUP, dtype: str = "bf16",
                    operators: Sequence[str] | None = None, seed: int = 0, threads: int | None = None,
                    progress: Callable[[str], None] | None = None) -> KernelProfile:
    """Time every operator of one layer of ``model`` at TP ``tp`` for each token count.

    ``threads`` sets torch's CPU intra-op threads (``torch.set_num_threads``) for the run; on a
    CPU shared with other work, one thread gives steadier times than threads that wait on
    each other.
    """
    dims = layer_dims(model, tp)
    if dtype not in DTYPES:
        raise ValueError(f"--dtype expects one of {', '.join(DTYPES)}, got {dtype!r}")
    ops = tuple(operators) if operators else dims.operators
    unknown = [op for op in ops if op not in dims.operators]
    if unknown:
        raise ValueError(f"operators not in this layer: {', '.join(unknown)}; "
                         f"known: {', '.join(dims.operators)}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    torch = require_torch()
    dev = resolve_device(torch, device)
    if threads is not None:
        torch.set_num_threads(int(threads))
    if dev.type == "cuda" and dev.index is not None:
        torch.cuda.set_device(dev)  # events record on the current device's stream
    kind = "cuda" if dev.type == "cuda" else "cpu"
    grid = tuple(sorted(set(tokens))) if tokens else DEFAULT_TOKENS[kind]
    reps = DEFAULT_REPEATS[kind] if repeats is None else int(repeats)
    if reps < 1:
        raise ValueError(f"repeats must be >= 1, got {reps}")
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    prov = torch_provenance(torch, dev, dtype)
    torch.manual_seed(seed)
    layer = _Layer(torch, dims, torch_dtype, dev)
    obs: list[Observation] = []
    skipped: list[str] = []
    with torch.inference_mode():
        for op in ops:
            w = layer.weights(op)
            for t in grid:
                times = time_call(torch, layer.call(op, w, t), dev, warmup, reps)
                if not all(x > 0 and math.isfinite(x) for x in times):
                    skipped.append(f"{op}@{t}: a repeat read {min(times)!r} s (below the clock's resolution)")
                    continue
                obs.append(operator_observation(dims, op, t, times, prov, dtype, warmup))
                if progress:
                    progress(f"{op:<26} {t:>6} tokens  median {obs[-1].value * 1e6:10.1f} us")
            del w
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return KernelProfile(obs, str(dev), dtype, grid, reps, warmup, tuple(skipped))
