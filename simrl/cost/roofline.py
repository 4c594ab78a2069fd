"""Roofline rollout cost: one continuous-batching iteration of a vLLM-like engine, from first principles.

An iteration is the sum of per-operator-class rooflines on the busiest GPU, each
``max(FLOPs / (peak * compute_efficiency), bytes / (HBM bandwidth * bandwidth_efficiency))``:

- linear projections (GEMMs): all dense weights are read once per iteration per TP shard; MoE
  layers read only the experts the iteration's tokens touch, ``E * (1 - (1 - k/E)^T)`` per layer for
  T tokens (uniform top-k routing; under EP, T is the whole EP group's batch), plus shared experts,
  router and attention; 2 FLOPs per active parameter per token (prefill tokens included, so big
  prefills go compute-bound). Under EP the busiest rank carries ``expert_load_imbalance`` times the
  mean routed load (the expected maximum under uniform routing, or a measured ``moe_imbalance``);
- decode attention: reads the resident KV of the batch (2 FLOPs per q/k and per v head dim per
  cached token; MLA in the absorbed form, over the compressed latent, which every TP rank holds;
  sliding-window layers read at most the window per sequence and, as in vLLM's hybrid KV manager,
  reserve a window per sequence instead of growing with the context);
- prefill attention: causal over the new chunk (compute-bound);
- linear-attention layers (Gated DeltaNet): read and write each sequence's fixed recurrent state;
- elementwise work (norms, activations, residuals): activation bytes, memory-bound.

Plus communication: two ring all-reduces of the token activations per layer over TP (NVLink inside
a node, the NIC across), two all-to-alls per MoE layer when EP spans DP ranks (dispatch and
combine of k copies per token, scaled by the load imbalance; under TP + EP the TP all-reduce
combines), one activation send per pipeline
boundary; each collective pays ``allreduce_latency_s``. Pipeline parallelism runs the batch as up
to ``pp`` micro-batches (vLLM's virtual engines): an iteration costs ``pp`` stage times of one
micro-batch. DP ranks inside an instance split the batch evenly. A fixed CPU/launch overhead
(scheduling, sampling, detokenization) is added per iteration, plus a per-sequence term (calibrated, see below).

Eager mode (``enforce_eager``: vLLM's ``--enforce-eager``, verl ``rollout.enforce_eager``, NeMo-RL
``vllm_cfg.enforce_eager``): without CUDA graphs the engine's host thread launches every kernel of
the forward pass one by one through PyTorch and vLLM's Python modules, and the GPU cannot run ahead
of it, so a pipeline stage takes ``max(GPU time, host launch time)``. The host time is
``layers x kernels per layer x eager_launch_s``; kernels per layer are counted from the
architecture as vLLM launches them: input norm, QKV projection, rotary, KV-cache write, attention,
output projection (+ q/k norms where the model has them), two TP all-reduces when ``tp > 1``, the
post-attention norm, then either a dense MLP (gate/up projection, activation, down projection) or a
fused MoE block (router GEMM, top-k softmax, ``moe_align_block_size``, the two grouped expert GEMMs,
activation and the top-k sum; + a shared expert's 3) (vllm-project/vllm@000d1458
``model_executor/layers/fused_moe/fused_moe.py`` ``fused_experts_impl``). ``eager_launch_s`` =
70 us is derived from one published eager-vs-graph measurement that is not a card
(vllm-project/vllm-omni issue 7960, Qwen2.5-Omni-7B on A800: thinker, a Qwen2.5-7B decoder of 28
layers, 22-23 ms per token eager vs 13 ms with graphs; talker, 24 layers, 19-20 ms vs 5.4-6 ms):
eager per-token time less the engine's per-iteration overhead (3 ms), over 28 x 10 (resp. 24 x 10)
launches, is 70 (resp. 69) us per launch. CUDA graphs (the default) make the launch time ~0.

In-process engine core (``engine_core="inprocess"``): vLLM V1 runs its engine core (scheduler,
model runner, ``update_from_output``) in a background process and the output processing (the
per-request ``OutputProcessor``: incremental detokenization, the requested logprobs made into Python
objects, stop checks, ``RequestOutput``) in the caller's process, so the latter overlaps the next GPU
step. With ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` the ``LLM`` class drives an ``InprocClient``: each
``LLMEngine.step`` runs the engine core step and then the output processing of its outputs, one after
the other, and the GPU idles through the second. NeMo-RL's synchronous vLLM worker sets the variable
for every worker (NVIDIA-NeMo/RL@v0.4.0 ``nemo_rl/models/generation/vllm/vllm_worker.py``,
``configure_worker``); vLLM sets it itself for ``distributed_executor_backend="external_launcher"``
(``ParallelConfig.__post_init__``, vllm 0.10 series ``vllm/config.py``), which verl's SPMD rollout uses
(volcengine/verl@1fc52bb5 ``verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py``). Each sequence
in the iteration's batch then adds ``inprocess_s_per_seq`` of serial host time to the iteration (on
top of ``overhead_per_seq_s``). ``inprocess_s_per_seq`` = 20 us is derived from the one published
A/B of the switch, which is not a card (vllm-project/vllm PR 10241, V1 on Qwen2.5-1.5B,
``benchmark_throughput.py`` on ShareGPT, 1000 requests: 27.81 req/s with multiprocessing, 25.98
without): ``1/25.98 - 1/27.81`` = 2.533 ms per request over a mean of 126.9 generated tokens per
request for that benchmark's ShareGPT sample (1000 prompts, 126,886 output tokens: sgl-project/sglang
PR 1968's run of the same sampling rule) = 20.0 us per generated token, i.e. per sequence per decode
iteration. It includes detokenization, which verl's rollout turns off (``detokenize=False``), so
there it is an upper bound; its logprob (``logprobs=0``, as NeMo-RL and verl request) is not in the
benchmark, so there it is a lower bound; the benchmark's short requests spread per-request work over
fewer tokens than RL responses do (an upper bound in that respect).

Defaults describe vLLM V1 with CUDA graphs on H100 (calibrated against the Vidur H100 operator
measurements shipped in simrl/cost/data/vidur, see tests/cost/test_roofline.py):

- ``compute_efficiency=0.6``: achieved/peak dense BF16 for the engine's GEMMs and attention
  (large cuBLAS GEMMs reach ~0.75; small and odd shapes less);
- ``bandwidth_efficiency=0.8``: achieved/peak HBM bandwidth for weight and KV streaming (Vidur's
  1-token Llama-2-7B layer reads its weights at ~0.78 of 3.35 TB/s);
- ``overhead_s=0.003`` + ``overhead_per_seq_s=30e-6``: per-iteration CPU/launch time, fixed plus per
  decoding sequence (module doc, "Engine overhead per sequence");
- ``comm_efficiency=0.8`` and ``allreduce_latency_s=10e-6`` (vLLM's custom all-reduce).

Engine overhead per sequence: ``overhead_per_seq_s`` = 30 us per decoding sequence per iteration is
calibrated, not derived: it is the least-squares fit (relative error of the inter-token latency, the
fixed ``overhead_s`` kept at 3 ms) to the six dense large-batch rows of the ML.ENERGY leaderboard data
(github.com/ml-energy/leaderboard 0cd52da, ``public/data/tasks/lm-arena-chat.json``: Qwen3-32B, vLLM
v0.11.1's default multiprocess engine, on 1 x B200 at batch 128 / 256 / 456 and on 2 x H100 TP 2 at
batch 128 / 256 / 340; median ITL), with 1,200 tokens of context per sequence as docs/catalog.md
assumes. Fitted per GPU it is 28.0 us (B200) and 33.9 us (2 x H100); fitting ``overhead_s`` as well is
not stable across the two (6.4 ms + 14.6 us vs 4.8 ms + 26.0 us), so only the per-sequence term was
fitted. It stands for the engine work that grows with the batch outside the GPU kernels the roofline
prices (vLLM's scheduler and ``update_from_output``, input preparation, sampling), not measured term
by term. Held out (docs/catalog.md, "MoE rollout"): the MoE rows of the same data set move from 23-33 %
to 1-19 % low, the small-batch H100 rows (batch 8-64) stay within 12 %. No fidelity card was used.
The context is the main uncertainty: with each row's context capped at what the KV cache holds the
fit is 38 us; with 900 or 1,500 tokens it is 43 or 17 us.

KV capacity per instance follows vLLM's rule: ``hbm * gpu_memory_utilization - weights -
activation reserve`` per GPU, divided by the KV bytes each GPU holds per token, summed over DP
ranks; hybrid models first reserve ``max_num_seqs`` recurrent states.
"""

from __future__ import annotations

import math

import attrs
from attrs import validators as v

from simrl.cost import formulas as F
from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.hardware import GiB, GPUSpec, gpu_spec

_eff = v.and_(v.gt(0.0), v.le(1.0))
_pos_int = v.and_(v.instance_of(int), v.ge(1))
_nonneg = v.ge(0.0)


@attrs.define
class RooflineRollout:
    """Analytical `RolloutCost` of one rollout instance (TP x PP x DP GPUs)."""

    model: ModelArch = attrs.field(converter=model_arch)
    gpu: GPUSpec = attrs.field(converter=gpu_spec)
    tp: int = attrs.field(default=1, validator=_pos_int)
    pp: int = attrs.field(default=1, validator=_pos_int)
    dp: int = attrs.field(default=1, validator=_pos_int)
    ep: int = attrs.field(default=1, validator=_pos_int)
    gpu_memory_utilization: float = attrs.field(default=0.9, validator=_eff)
    kv_capacity_given: int | None = attrs.field(default=None, alias="kv_capacity_tokens")
    max_num_seqs: int = attrs.field(default=256, validator=_pos_int)
    max_num_batched_tokens: int = attrs.field(default=8192, validator=v.ge(0))
    compute_efficiency: float = attrs.field(default=0.6, validator=_eff)
    bandwidth_efficiency: float = attrs.field(default=0.8, validator=_eff)
    comm_efficiency: float = attrs.field(default=0.8, validator=_eff)
    allreduce_latency_s: float = attrs.field(default=10e-6, validator=_nonneg)
    overhead_s: float = attrs.field(default=0.003, validator=_nonneg)
    overhead_per_seq_s: float = attrs.field(default=30e-6, validator=_nonneg)  # calibrated: module doc
    weight_dtype_bytes: float = attrs.field(default=2.0, validator=v.gt(0.0))
    kv_dtype_bytes: float = attrs.field(default=2.0, validator=v.gt(0.0))
    nontorch_reserve_bytes: float = attrs.field(default=1.5 * GiB, validator=_nonneg)  # NCCL, cuBLAS, graphs
    activation_reserve_bytes: float | None = None  # None: derived from max_num_batched_tokens
    moe_imbalance: float | None = attrs.field(default=None, validator=v.optional(v.ge(1.0)))
    compute_dtype: str = attrs.field(default="bf16", validator=v.in_(("bf16", "fp8")))  # GEMM peak used
    # FP8 block-scaled grouped expert GEMMs at decode shapes reach ~0.61 of HBM bandwidth (DeepGEMM's
    # published H800 table, masked layout, 256 tokens per expert: 2047-2064 GB/s of 3.35 TB/s)
    fp8_moe_bandwidth_efficiency: float = attrs.field(default=0.61, validator=_eff)
    enforce_eager: bool = False  # vLLM --enforce-eager: no CUDA graphs, kernels launched from the host
    eager_launch_s: float = attrs.field(default=70e-6, validator=_nonneg)  # host seconds per kernel launch, eager
    # Where vLLM V1's engine core runs (module doc, "In-process engine core"): "multiprocess" (AsyncLLM, or
    # the LLM class with VLLM_ENABLE_V1_MULTIPROCESSING=1, vLLM's default) overlaps the output processing
    # with the next GPU step; "inprocess" (VLLM_ENABLE_V1_MULTIPROCESSING=0: NeMo-RL's sync vLLM worker,
    # verl's SPMD rollout through distributed_executor_backend="external_launcher") runs it serially.
    engine_core: str = attrs.field(default="multiprocess", validator=v.in_(("multiprocess", "inprocess")))
    inprocess_s_per_seq: float = attrs.field(default=20e-6, validator=_nonneg)  # serial host s per seq per iteration
    strict: bool = False
    domain: ValidityDomain = attrs.field(init=False)
    weight_bytes_per_gpu: float = attrs.field(init=False)
    _capacity: int = attrs.field(init=False)
    _q: F.RooflineParams | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        m = self.model
        if self.ep > 1 and not m.is_moe:
            raise CostModelError(f"ep={self.ep} needs an MoE model; {m.name} is dense")
        if self.ep > 1 and (self.tp * self.dp) % self.ep:
            raise CostModelError(f"ep={self.ep} must divide tp*dp={self.tp * self.dp}")
        if self.pp > m.layers:
            raise CostModelError(f"pp={self.pp} exceeds the {m.layers} layers of {m.name}")
        self.weight_bytes_per_gpu = self.weight_dtype_bytes * (
            m.non_expert_params / (self.tp * self.pp) + m.routed_expert_params / (self.pp * self._expert_shards)
        )
        self._capacity = self._derive_capacity() if self.kv_capacity_given is None else int(self.kv_capacity_given)
        if self._capacity <= 0:
            raise CostModelError(f"kv_capacity_tokens must be > 0, got {self._capacity}")
        chunk_hi = self.max_num_batched_tokens if self.max_num_batched_tokens > 0 else self._capacity
        name = f"roofline[{m.name} on {self.gpu.name} tp{self.tp} pp{self.pp} dp{self.dp} ep{self.ep}]"
        self.domain = ValidityDomain(
            model=name,
            ranges={
                "batch_size": (0, self.max_num_seqs),
                "kv_tokens": (0, self._capacity),
                "prefill_tokens": (0, max(chunk_hi, 1)),
            },
            strict=self.strict,
        )

    # -- layout helpers ------------------------------------------------------------------------

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def _expert_shards(self) -> int:
        # vLLM: experts are TP-sharded unless expert parallelism spreads whole experts over ranks.
        return self.ep if self.ep > 1 else self.tp

    def _kv_bytes_per_token_per_gpu(self) -> float:
        m = self.model
        layers = m.n_full_attention / self.pp
        if m.is_mla:  # one latent per token, replicated on every TP rank (vLLM MLA backends)
            return layers * m.kv_elements_per_token_per_layer() * self.kv_dtype_bytes
        kv_heads_here = math.ceil(m.kv_heads / self.tp)  # replicated when tp > kv_heads
        return layers * kv_heads_here * (m.head_dim + m.value_head_dim) * self.kv_dtype_bytes

    def _swa_fraction(self) -> float:
        """Share of the attention layers that slide (keep only the last ``sliding_window`` tokens)."""
        m = self.model
        if not m.sliding_window or not m.sliding_window_layers or not m.n_full_attention:
            return 0.0
        return m.sliding_window_layers / m.n_full_attention

    def _state_bytes_per_seq_per_gpu(self) -> float:
        return self.model.linear_state_bytes_per_seq(self.kv_dtype_bytes) / (self.tp * self.pp)

    def _activation_reserve_per_gpu(self) -> float:
        if self.activation_reserve_bytes is not None:
            return self.activation_reserve_bytes
        m = self.model
        tokens = self.max_num_batched_tokens or 8192
        width = m.intermediate if not m.is_moe else m.experts_per_token * m.moe_intermediate
        # Profile-run peak: a layer's hidden states and MLP intermediates for a full chunk, plus
        # the sampler's fp32 logits for every sequence.
        layer = tokens * (6 * m.hidden + 3 * width) * self.weight_dtype_bytes / self.tp
        logits = 2 * self.max_num_seqs * m.vocab * 4 / self.tp
        return layer + logits

    def _derive_capacity(self) -> int:
        budget = self.gpu.hbm_bytes * self.gpu_memory_utilization
        reserve = self.nontorch_reserve_bytes + self._activation_reserve_per_gpu()
        free = budget - self.weight_bytes_per_gpu - reserve
        states = math.ceil(self.max_num_seqs / self.dp) * self._state_bytes_per_seq_per_gpu()
        swa = self._swa_fraction()
        if swa:  # vLLM's hybrid KV manager: sliding layers hold at most a window per sequence
            window = (math.ceil(self.max_num_seqs / self.dp) * self.model.sliding_window
                      * swa * self._kv_bytes_per_token_per_gpu())
            # Reserving a whole window for every sequence only pays when the pool holds that many
            # tokens (free / bytes-per-token >= seqs x window); otherwise (long windows: Gemma 2's
            # 4,096) pricing the sliding layers as full is the larger of the two safe bounds.
            if free - states - window > (free - states) * (1 - swa):
                states += window
            else:
                swa = 0.0
        free -= states
        if free <= 0:
            raise CostModelError(
                f"{self.model.name} does not fit {self.gpu.name} x{self.gpus} (tp={self.tp}, pp={self.pp}, "
                f"ep={self.ep}) at gpu_memory_utilization={self.gpu_memory_utilization}: per GPU "
                f"{budget / GiB:.1f} GiB budget, {self.weight_bytes_per_gpu / GiB:.1f} GiB weights, "
                f"{reserve / GiB:.1f} GiB activation/runtime reserve, {states / GiB:.1f} GiB recurrent states "
                f"for max_num_seqs={self.max_num_seqs}; raise tp/pp or the utilization"
            )
        per_tok = self._kv_bytes_per_token_per_gpu() * (1 - swa)
        if per_tok == 0:  # no full-attention layer: capacity is bounded by states, not tokens
            return 2**40
        return int(self.dp * free // per_tok)

    # -- the RolloutCost seam ------------------------------------------------------------------

    def kv_capacity_tokens(self) -> int:
        return self._capacity

    def iteration_time(self, batch_size: int, kv_tokens: int, prefill_tokens: int) -> float:
        self.domain.check("batch_size", batch_size)
        self.domain.check("kv_tokens", kv_tokens)
        self.domain.check("prefill_tokens", prefill_tokens)
        if batch_size <= 0 and prefill_tokens <= 0:
            return 0.0
        t = F.roofline_iteration_time(F.PY, self.array_params(), batch_size, kv_tokens, prefill_tokens)
        return finite_nonneg("roofline iteration_time", t)

    def kv_slope(self, batch_size: int) -> float | None:
        """Growth of ``iteration_time(batch_size, kv, 0)`` per KV token (``kv`` > 0), for the engines'
        closed-form iteration boundaries (`simrl.engine.instance.boundary_time`): the decode-attention
        roofline, proportional to the KV (`simrl.cost.formulas.roofline_kv_slope`). None where the
        time is not affine in the KV: sliding-window layers (``min(context, window)``) or
        ``enforce_eager`` (``max(GPU time, host launch time)``)."""
        q = self.array_params()
        if q.swa > 0 or q.eager > 0:
            return None
        return F.roofline_kv_slope(F.PY, q, batch_size)

    def array_params(self) -> F.RooflineParams:
        """The numbers of `simrl.cost.formulas.roofline_iteration_time` (the formula both engines run)."""
        if self._q is None:
            self._q = F.roofline_params(self)
        return self._q

    # -- pieces (public for tests and for the composed families to compare against) -------------
    # The arithmetic lives in simrl.cost.formulas (written once for SimPy and the JAX fast path).

    def _roof(self, flops: float, bytes_: float) -> float:
        return F.roofline_roof(F.PY, self.array_params(), flops, bytes_)

    def eager_kernels_per_layer(self, moe: bool) -> int:
        """Kernels vLLM launches for one decoder layer in eager mode (module doc)."""
        m = self.model
        attn = 6 + (2 if m.qk_norm else 0)  # norm, qkv, rotary, cache write, attention, o_proj (+ q/k norms)
        comm = 2 if self.tp > 1 else 0  # all-reduce after attention and after the MLP
        if moe:
            mlp = 7 + (3 if m.shared_experts else 0)  # router, top-k, align, w13, act, w2, sum (+ shared MLP)
        else:
            mlp = 3  # gate/up, activation, down
        return attn + comm + 1 + mlp  # + the post-attention norm

    def eager_host_time(self, layers: float) -> float:
        """Host seconds to launch ``layers`` layers' kernels in eager mode (0 with CUDA graphs)."""
        if not self.enforce_eager:
            return 0.0
        m = self.model
        moe_share = m.n_moe_layers / m.layers if m.is_moe else 0.0
        per_layer = (moe_share * self.eager_kernels_per_layer(True)
                     + (1 - moe_share) * self.eager_kernels_per_layer(False))
        return layers * per_layer * self.eager_launch_s

    def _experts_touched(self, tokens: float) -> float:
        """Expected distinct experts a layer's ``tokens`` select (uniform top-k routing):
        ``E * (1 - (1 - k/E)^tokens)``; each expert is missed by one token with probability 1 - k/E."""
        return F.roofline_experts_touched(F.PY, self.array_params(), tokens)

    def expert_load_imbalance(self, ep_tokens: float) -> float:
        """Busiest EP rank's routed-token load over the mean (1 without expert parallelism).

        ``moe_imbalance`` when given (a measured max/mean, e.g. from expert-load telemetry);
        otherwise the expected maximum of ``ep`` ranks under uniform routing: ``T*k`` assignments
        land binomially on the ranks, mean ``mu = T*k/ep``, and the largest of ``ep`` is about
        ``mu + sqrt(2 ln(ep) * mu * (1 - 1/ep))``. Real routers are skewed beyond this; DeepSeek's
        EPLB exists to bring them back towards it.
        """
        return F.roofline_expert_load_imbalance(F.PY, self.array_params(), ep_tokens)

    def _ep_tokens(self, tokens: float) -> float:
        """Tokens the EP group routes when one rank holds ``tokens``: EP spans the DP ranks, so
        their batches meet in the experts."""
        return tokens * (self.dp if self.ep > 1 else 1)

    def gemm_time(self, tokens: float, layers: float, with_lm_head: bool = False) -> float:
        """Seconds for the linear projections of ``layers`` layers over ``tokens`` on one GPU."""
        return F.roofline_gemm_time(F.PY, self.array_params(), tokens, layers, with_lm_head)

    def stage_time(self, decode_seqs: float, kv_tokens: float, prefill_tokens: float) -> float:
        """Seconds for one pipeline stage (``layers / pp``) of one micro-batch on one GPU."""
        return F.roofline_stage_time(F.PY, self.array_params(), decode_seqs, kv_tokens, prefill_tokens)

    def comm_time(self, tokens: float, layers: float) -> float:
        """Collectives of one stage: TP all-reduces, EP all-to-alls, the pipeline send."""
        return F.roofline_comm_time(F.PY, self.array_params(), tokens, layers)
