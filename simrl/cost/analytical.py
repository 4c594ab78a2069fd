"""Analytical training cost (Calculon-style closed form) and the fixed-step-time family.

`AnalyticalTraining` prices one optimizer step on a TP x PP x CP x DP layout:

- compute: forward FLOPs ``sum_s (2 * P_active * s + 2 * L_attn * heads * head_dim * s^2)``
  (causal attention) times the passes a step makes: 3 for full fine-tuning (forward + backward,
  which computes activation and weight gradients), 2 for LoRA (the frozen base needs activation
  gradients but no weight gradients), +1 with activation recompute (the 4/3 rule), +1 per extra
  log-prob forward (``logprob_forwards``: old-policy / reference passes an RL step may make);
  divided over the GPUs at ``mfu`` of dense BF16 peak; each DP rank gets at least its longest sample;
- pipeline bubble: the compute is stretched by ``1 + (pp - 1) / (m * vpp)`` (1F1B, ``m``
  micro-batches per DP rank: samples / micro_batch_size, or the rank's tokens over
  ``max_tokens_per_gpu`` with verl's dynamic batch size; ``vpp`` virtual stages per rank with
  Megatron's interleaved schedule);
- Ulysses sequence parallel (``ulysses_sp``): sequences split like CP, with all-to-alls of q, k, v
  and the attention output per layer and pass; HSDP (``fsdp_shard_size``, ZeRO-3 only): states
  sharded inside groups of that size, shard gradients all-reduced across the replicas;
- TP traffic (sequence parallel: two all-gathers + two reduce-scatters of the activations per layer
  and pass), the EP exchange of MoE layers (below), CP ring attention (each rank passes its K/V chunk ``cp - 1`` times per
  layer and pass; backward sends K/V and their gradients) and PP sends, over NVLink (or the NIC once
  a group leaves the node);
- gradient sync over the DP x CP group (NVLink inside a node; across nodes NCCL's rings use every
  NIC the group has in a node, `GPUSpec.collective_bytes_per_s`): all-reduce (ZeRO 0), reduce-scatter + parameter all-gather
  (ZeRO 1/2) once per optimizer step, or under ZeRO 3 (FSDP2) a parameter all-gather in the
  forward and another in the backward of every micro-batch (the recompute reuses the backward's)
  and a gradient reduce-scatter in every backward (verl accumulates micro-batches without
  ``no_sync``), and one gather per micro-batch of each forward-only pass; of the trainable
  parameters (LoRA: the adapters only; ZeRO 3 still gathers the frozen base); ``comm_overlap`` of
  it hides behind backward;
- DP barrier: every optimizer step ends in a collective all DP ranks join, so it lasts as long as
  its busiest rank; with ``dp_balance="batch"`` (verl's ``trainer.balance_batch``: the step's batch
  balanced once over the ranks, each rank then taking its share in mini-batch slices) the update
  passes cost the sum over optimizer steps of the busiest rank's FLOPs (`dp_imbalance_flops`);
  ``"minibatch"`` (default) spreads every optimizer step evenly;
- MoE layers (`simrl.cost.formulas.analytical_moe_pass_time`): the routed experts' FLOPs are in
  the pass FLOPs at the MFU like the rest; on top, per pass, the memory-bound token passes Megatron's
  alltoall dispatcher makes (permutation, sort by local expert, SwiGLU activation, unpermute, router
  softmax/top-k: `moe_bytes_per_token` over the DP rank's HBM bandwidth at
  ``moe_bandwidth_efficiency``), the grouped expert GEMMs' padding to whole ``moe_gemm_tile_rows``
  tiles at the per-expert token count of a micro-batch (``tokens per GPU * k * ep / E``), and the
  busiest EP rank's load (``moe_imbalance``, or the expected maximum of ``ep`` binomial loads);
  and the EP exchange (below). An optional host floor (``moe_host_s_per_layer``, 0 by default): a
  pass over a DP rank's micro-batches lasts at least ``micro-batches * MoE layers per stage *
  moe_host_s_per_layer``, for a dropless dispatcher bound by its per-layer host synchronisation
  (NVIDIA/Megatron-LM@a0908fcf ``token_dispatcher.py``, ``MoEAlltoAllTokenDispatcher.preprocess`` sets
  ``cuda_sync_point`` for dropless runs). Session 5 calibrated 2.935 ms on the row that now calibrates
  the exchange; Megatron-Bridge's H100 rows grow with the micro-batch's tokens (MBS 2 costs twice MBS 1
  per micro-batch), which a host floor cannot do, so it is off (docs/fidelity.md, "MoE cards, session 6");
- EP exchange (``moe_token_dispatcher_type``, `ep_copies`): dispatch and combine per MoE layer and
  pass, each TP rank sending its sequence-parallel 1/tp of the tokens (expert TP 1). The ``alltoall``
  dispatcher (Megatron's default) sends ``k`` copies of a token, one per chosen expert, with NCCL's
  all-to-all; ``flex`` (DeepEP / HybridEP) sends one per destination rank, across nodes one per
  destination node. Copies to ranks in the node go over the scale-up link, the others over the NIC,
  the two at once. The alltoall exchange moves its link share at ``moe_alltoall_efficiency`` of the
  link rate (0.19, calibrated on one published row that is not a card: Megatron-Bridge's performance
  archive, NVIDIA-NeMo/Megatron-Bridge@067f987d ``docs/performance-summary-archive.md``, 26.02
  container: Qwen3-30B-A3B dropless on 8 DGX-B200, EP 8, MBS 1, alltoall dispatcher per
  ``scripts/performance/configs/qwen/qwen3_llm_pretrain.py`` at that release, 9,691 tokens/s/GPU);
  held out, the same rate gives the archive's H100 alltoall rows (Qwen3-30B-A3B at MBS 1 and 2,
  GPT-OSS-120B in BF16) within 4-12 % where the link-rate exchange was 1.4-1.8x fast. Across nodes
  the NIC share runs at the NIC's rate (``comm_efficiency``): no row says otherwise;
- log-prob micro-batches: the forward-only passes (old log-prob, reference, value) may pack their
  own micro-batches (``logprob_max_tokens_per_gpu`` tokens per GPU, or ``logprob_micro_batch_size``
  samples; NeMo-RL ``sequence_packing.logprob_mb_tokens`` = max_total_sequence_length x
  ``logprob_batch_size``, or ``logprob_batch_size`` without packing; verl
  ``log_prob_max_token_len_per_gpu`` / ``log_prob_micro_batch_size_per_gpu``), which set their
  pipeline bubble, their ZeRO-3 gathers and the MoE host floor; unset, they use the update's;
- reference model on host (``reference_on_host``, NeMo-RL's Megatron worker): the reference
  weights live in host memory and are swapped in for the reference forward and out again, three
  copies of the parameter shard over the host link plus one DP parameter all-gather under the
  distributed optimizer (`reference_swap_time`), charged to ``ref_forward``;
- the last pipeline stage (``head_on_last_stage``): Megatron-core splits the transformer layers
  evenly over the PP stages and puts the output layer on the last one (``num_layers_in_last_pipeline_stage``
  unset, no ``account_for_loss_in_pipeline_split``), so with pp > 1 every pass runs at the last
  stage's pace: ``(F - H) / pp + H`` instead of ``F / pp`` for forward FLOPs ``F`` of which the LM
  head's are ``H = 2 * vocab * hidden`` per token, i.e. ``H (pp - 1) / flops_per_s`` more per pass
  (off: the work is spread evenly, as a parameter-balanced split would);
- fp32 log-softmax (``distributed_logprob``): NeMo-RL computes token log-probs from the
  vocabulary-parallel logits in eager PyTorch (NVIDIA-NeMo/RL@c751f811
  ``nemo_rl/distributed/model_utils.py`` ``DistributedLogprob``, via
  ``from_parallel_logits_to_logprobs_packed_sequences``), each op a pass over the ``vocab / tp``
  logits of a token on the last stage's GPUs: forward the in-place ``div_`` by
  ``generation.temperature`` (``megatron_policy_worker.py`` / ``megatron/common.py``, even at 1.0: read
  and write 2 B in BF16 with ``defer_fp32_logits``), ``.to(float32)`` (read 2 B, write 4 B), ``amax``
  (4), subtract the max (8), ``exp`` and ``sum`` (12), subtract the log-sum (8), ``exp`` for the
  softmax kept for backward (8, computed in inference too) = 50 B per vocabulary entry
  (`LOGPROB_FWD_BYTES_PER_VOCAB`; without ``defer_fp32_logits`` the model's own fp32 cast takes the
  cast's place and the ``div_`` moves 8 B, +4 B, not modelled apart); backward ``neg`` (8), ``mul_``
  (8) and the cast back to BF16 (6) = 22 B (`LOGPROB_BWD_BYTES_PER_VOCAB`). At the GPU's HBM bandwidth x
  ``optimizer_bandwidth_efficiency`` (the streaming figure), once per forward-only pass and once
  (forward + backward) per update;
- optimizer: Adam streams ~30 bytes per trainable parameter of the local shard through HBM;
- optimizer steps per batch: RL trainers split the batch into mini-batches and make one
  gradient sync and one Adam step per mini-batch (verl ``actor.ppo_mini_batch_size`` x
  ``rollout.n`` samples and ``ppo_epochs``, NeMo-RL ``train_global_batch_size``, AReaL
  ``ppo_n_minibatches``): ``mini_batch_samples`` trajectories per step (None: the whole batch is
  one step) and ``ppo_epochs`` passes over the batch give ``ppo_epochs * ceil(n / mini_batch_samples)``
  steps, each paying the gradient collectives (ZeRO 3: the parameter gathers of its forward and
  backward too) and the Adam update; with pipeline parallelism each mini-batch is its own 1F1B
  schedule, so the bubble uses the micro-batches of one mini-batch.

The step is a sequence of the phases RL trainers run (`phases` names them, `step_time` is their
sum): ``old_log_prob`` (verl's recompute of the behaviour policy's log-probs, one forward:
``recompute_old_logprob``), ``ref_forward`` (the KL reference model's forward: ``reference_model``),
``log_prob_forwards`` (the older catch-all count of extra forwards), ``critic_update`` (PPO: the
value forward, then the critic's forward/backward, gradient sync and optimizer step: ``critic``),
``actor_update`` (forward + backward, + recompute), ``pipeline_bubble`` (the 1F1B idle share of all
of those), ``grad_sync``, ``optimizer`` and ``overhead``. The reference and critic models are taken
to be the actor's size and layout, on the same GPUs (verl's colocated worker groups); their
memory is not added (verl offloads them between phases).

Peak memory per GPU = BF16 weights + gradients (``grad_dtype_bytes``, fp32 by default as in
Megatron's main_grad buffer) + fp32 master weights and Adam moments (12 bytes per trainable
parameter), each sharded over DP x CP according to ``zero_stage``, + activations of the in-flight
micro-batches at the longest sequences (layer inputs only with checkpointing, plus one layer's
working set) + fp32/bf16 logits + a fixed runtime reserve.
"""

from __future__ import annotations

import heapq
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

ADAM_BYTES_PER_PARAM = 12  # fp32 master weights + two fp32 moments
ADAM_TRAFFIC_BYTES_PER_PARAM = 30  # read grad 4; r/w master, m, v 24; write bf16 weight 2
LOGPROB_FWD_BYTES_PER_VOCAB = F.LOGPROB_FWD_BYTES_PER_VOCAB  # module doc, "fp32 log-softmax"
LOGPROB_BWD_BYTES_PER_VOCAB = F.LOGPROB_BWD_BYTES_PER_VOCAB


@attrs.define
class AnalyticalTraining:
    """Analytical `TrainingCost` of the trainer's GPUs."""

    model: ModelArch = attrs.field(converter=model_arch)
    gpu: GPUSpec = attrs.field(converter=gpu_spec)
    gpus: int = attrs.field(default=8, validator=_pos_int)
    tp: int = attrs.field(default=1, validator=_pos_int)
    pp: int = attrs.field(default=1, validator=_pos_int)
    cp: int = attrs.field(default=1, validator=_pos_int)
    ep: int = attrs.field(default=1, validator=_pos_int)
    micro_batch_size: int = attrs.field(default=1, validator=_pos_int)
    activation_checkpointing: bool = True
    zero_stage: int = attrs.field(default=1, validator=v.in_((0, 1, 2, 3)))
    mfu: float = attrs.field(default=0.4, validator=_eff)
    lora_rank: int = attrs.field(default=0, validator=v.ge(0))
    lora_experts: bool = False  # also put adapters on routed experts
    logprob_forwards: int = attrs.field(default=0, validator=v.ge(0))
    recompute_old_logprob: bool = False  # verl: actor.compute_log_prob before the update
    reference_model: bool = False  # a frozen reference forward for the KL term
    critic: bool = False  # PPO value model (same size and layout as the actor)
    virtual_pipeline_stages: int = attrs.field(default=1, validator=_pos_int)  # Megatron VPP
    ulysses_sp: int = attrs.field(default=1, validator=_pos_int)  # verl ulysses_sequence_parallel_size
    fsdp_shard_size: int | None = attrs.field(default=None, validator=v.optional(_pos_int))  # HSDP (verl fsdp_size)
    max_tokens_per_gpu: int | None = attrs.field(default=None, validator=v.optional(_pos_int))  # dynamic bsz
    # The forward-only passes' own micro-batches (module doc, "log-prob micro-batches"): samples per
    # micro-batch, or a token budget per GPU (NeMo-RL logprob_batch_size / logprob_mb_tokens, verl
    # log_prob_micro_batch_size_per_gpu / log_prob_max_token_len_per_gpu); None: the update's
    logprob_micro_batch_size: int | None = attrs.field(default=None, validator=v.optional(_pos_int))
    logprob_max_tokens_per_gpu: int | None = attrs.field(default=None, validator=v.optional(_pos_int))
    # NeMo-RL's Megatron worker keeps the reference weights in host memory and swaps them in for the
    # reference forward (module doc, "reference model on host")
    reference_on_host: bool = False
    # Megatron's default pipeline split (module doc, "the last pipeline stage"): layers evenly over the
    # stages, the output layer (LM head) on the last one, which sets the pace of every pass
    head_on_last_stage: bool = False
    # NeMo-RL's log-probs (module doc, "fp32 log-softmax"): the vocabulary-parallel logits cast to fp32 and
    # log-softmaxed in eager PyTorch (nemo_rl/distributed/model_utils.py DistributedLogprob)
    distributed_logprob: bool = False
    mini_batch_samples: int | None = attrs.field(default=None, validator=v.optional(_pos_int))  # per optimizer step
    ppo_epochs: int = attrs.field(default=1, validator=_pos_int)  # verl actor.ppo_epochs
    # How DP ranks get their samples: "minibatch" (each optimizer step's samples spread evenly),
    # "batch" (verl trainer.balance_batch: the whole step balanced once, then mini-batch slices).
    dp_balance: str = attrs.field(default="minibatch", validator=v.in_(("minibatch", "batch")))
    comm_efficiency: float = attrs.field(default=0.7, validator=_eff)
    comm_overlap: float = attrs.field(default=0.0, validator=v.and_(v.ge(0.0), v.le(1.0)))
    optimizer_bandwidth_efficiency: float = attrs.field(default=0.7, validator=_eff)
    # MoE layers (module doc, "MoE layers"): memory-bound passes at this share of HBM bandwidth (the
    # optimizer's streaming figure), grouped-GEMM tile rows, the busiest EP rank's measured load
    moe_bandwidth_efficiency: float = attrs.field(default=0.7, validator=_eff)
    moe_gemm_tile_rows: int = attrs.field(default=128, validator=v.and_(v.instance_of(int), v.ge(0)))
    moe_imbalance: float | None = attrs.field(default=None, validator=v.optional(v.ge(1.0)))
    # host seconds per MoE layer, micro-batch and forward-equivalent pass (a host-bound dropless dispatcher;
    # 0 by default since session 6: the rows it was calibrated on are explained by the EP exchange, module doc)
    moe_host_s_per_layer: float = attrs.field(default=0.0, validator=_nonneg)
    # Megatron's moe_token_dispatcher_type: "alltoall" (NCCL all-to-all of k copies per token, Megatron's
    # default) or "flex" (DeepEP / HybridEP: one copy per destination rank, one per destination node
    # across nodes); module doc, "EP exchange"
    moe_token_dispatcher_type: str = attrs.field(default="alltoall", validator=v.in_(("alltoall", "flex")))
    # share of the scale-up link the alltoall dispatcher's NCCL exchange reaches (after comm_efficiency);
    # calibrated on Megatron-Bridge's DGX-B200 Qwen3-30B-A3B MBS-1 row (module doc)
    moe_alltoall_efficiency: float = attrs.field(default=0.19, validator=_eff)
    param_dtype_bytes: float = attrs.field(default=2.0, validator=v.gt(0.0))
    grad_dtype_bytes: float = attrs.field(default=4.0, validator=v.gt(0.0))
    memory_reserve_bytes: float = attrs.field(default=4 * GiB, validator=_nonneg)  # CUDA ctx, NCCL, fragmentation
    overhead_s: float = attrs.field(default=0.2, validator=_nonneg)  # per step: data, sync, bookkeeping
    # Trainer offload (simrl.cost.offload; verl megatron/fsdp_config knobs, Megatron OptimizerConfig):
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = attrs.field(default=0.0, validator=v.and_(v.ge(0.0), v.le(1.0)))  # Megatron-core default
    host_link_efficiency: float = attrs.field(default=0.8, validator=_eff)
    cpu_optimizer_bytes_per_s: float = attrs.field(default=20e9, validator=v.gt(0.0))
    strict: bool = False
    domain: ValidityDomain = attrs.field(init=False)
    _q: F.AnalyticalParams | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        per = self.tp * self.pp * self.cp * self.ulysses_sp
        if self.gpus % per:
            raise CostModelError(f"training gpus={self.gpus} is not divisible by tp*pp*cp*ulysses_sp={per}")
        if self.ulysses_sp > 1 and self.model.heads % (self.tp * self.ulysses_sp):
            raise CostModelError(f"ulysses_sp={self.ulysses_sp}: the {self.model.heads} attention heads of "
                                 f"{self.model.name} must divide over tp*ulysses_sp={self.tp * self.ulysses_sp}")
        if self.fsdp_shard_size is not None:
            if self.zero_stage != 3:
                raise CostModelError("fsdp_shard_size (HSDP) needs zero_stage=3 (FSDP full sharding)")
            if self._shard_group % self.fsdp_shard_size:
                raise CostModelError(f"fsdp_shard_size={self.fsdp_shard_size} must divide the "
                                     f"{self._shard_group} data-parallel ranks")
        if self.reference_on_host and not self.reference_model:
            raise CostModelError("reference_on_host=true needs reference_model=true (there is no reference "
                                 "forward to swap the reference weights in for)")
        if self.ep > 1 and not self.model.is_moe:
            raise CostModelError(f"ep={self.ep} needs an MoE model; {self.model.name} is dense")
        if self.ep > 1 and (self.dp * self.cp * self.tp) % self.ep:
            raise CostModelError(f"ep={self.ep} must divide dp*cp*tp={self.dp * self.cp * self.tp}")
        if self.pp > self.model.layers:
            raise CostModelError(f"pp={self.pp} exceeds the {self.model.layers} layers of {self.model.name}")
        name = f"analytical[{self.model.name} on {self.gpu.name} x{self.gpus} tp{self.tp} pp{self.pp} cp{self.cp}]"
        self.domain = ValidityDomain(
            model=name, ranges={"seq_len": (1, self.model.max_position)}, strict=self.strict
        )
        static = self._static_bytes()
        if static > self.memory_capacity_bytes():
            raise CostModelError(
                f"{self.model.name} training does not fit {self.gpu.name} x{self.gpus} (tp={self.tp}, "
                f"pp={self.pp}, cp={self.cp}, zero_stage={self.zero_stage}, lora_rank={self.lora_rank}): "
                f"weights + gradients + optimizer + reserve need {static / GiB:.1f} GiB per GPU, "
                f"{self.memory_capacity_bytes() / GiB:.1f} GiB available; raise tp/pp, zero_stage or use LoRA"
            )

    # -- layout --------------------------------------------------------------------------------

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp * self.ulysses_sp)

    @property
    def _shard_group(self) -> int:
        """Ranks the gradients are reduced over (DP x CP x Ulysses SP)."""
        return self.dp * self.cp * self.ulysses_sp

    @property
    def _zero_group(self) -> int:
        """Ranks the ZeRO states are sharded over: the HSDP shard group, else all of DP x CP x SP."""
        return self.fsdp_shard_size or self._shard_group

    @property
    def _seq_split(self) -> int:
        """Ranks one sequence is split over (context parallel x Ulysses)."""
        return self.cp * self.ulysses_sp

    def params_per_gpu(self) -> float:
        """Model parameters one GPU holds before ZeRO-3 sharding (experts split by EP, else TP)."""
        m = self.model
        expert_shards = self.ep if self.ep > 1 else self.tp
        return m.non_expert_params / (self.tp * self.pp) + m.routed_expert_params / (self.pp * expert_shards)

    def trainable_params_per_gpu(self) -> float:
        if self.lora_rank > 0:
            return self.model.lora_params(self.lora_rank, self.lora_experts) / (self.tp * self.pp)
        return self.params_per_gpu()

    def state_bytes_per_gpu(self) -> float:
        """Weights, gradients and optimizer states on one GPU (what colocated placement offloads)."""
        return self._static_bytes() - self.memory_reserve_bytes

    def _static_bytes(self) -> float:
        """Weights, gradients, optimizer states and reserve: everything but activations."""
        n = self._zero_group
        weights = self.params_per_gpu() * self.param_dtype_bytes / (n if self.zero_stage >= 3 else 1)
        trainable = self.trainable_params_per_gpu()
        grads = trainable * self.grad_dtype_bytes / (n if self.zero_stage >= 2 else 1)
        optim = trainable * ADAM_BYTES_PER_PARAM / (n if self.zero_stage >= 1 else 1)
        optim *= 1 - self.offload().cpu_fraction  # Megatron's CPU optimizer keeps its states on host
        return weights + grads + optim + self.memory_reserve_bytes

    # -- the TrainingCost seam -----------------------------------------------------------------

    def memory_capacity_bytes(self) -> float:
        return float(self.gpu.hbm_bytes)

    def peak_memory_bytes(self, seq_lens: list[int]) -> float:
        if not seq_lens:
            return self._static_bytes()
        m = self.model
        lens = sorted(seq_lens, reverse=True)
        if self.max_tokens_per_gpu is None:
            tokens_mb = sum(lens[: self.micro_batch_size]) / self._seq_split  # the heaviest micro-batch
        else:  # dynamic batch size: micro-batches packed up to the token budget (or one longer sample)
            tokens_mb = max(lens[0], min(self.max_tokens_per_gpu, sum(lens) / self.dp)) / self._seq_split
        n_micro = self._micro_batches(seq_lens)
        in_flight = min(self.pp, n_micro)
        layers_here = m.layers / self.pp
        full_layer = self._layer_activation_bytes_per_token() * tokens_mb
        if self.activation_checkpointing:
            stored = layers_here * tokens_mb * m.hidden * self.param_dtype_bytes / self.tp
            acts = in_flight * stored + full_layer  # plus one layer being recomputed
        else:
            acts = in_flight * layers_here * full_layer
        logits = tokens_mb * m.vocab * (4 + self.param_dtype_bytes) / self.tp  # fp32 softmax + bf16 logits
        return self._static_bytes() + acts + logits

    def step_time(self, seq_lens: list[int]) -> float:
        if not seq_lens:
            return self.overhead_s
        return finite_nonneg("analytical step_time", sum(self.phases(seq_lens).values()))

    def phases(self, seq_lens: list[int]) -> dict[str, float]:
        """Seconds of each phase of one step, in the order a trainer runs them; `step_time` is
        their sum. Phases a configuration does not run are 0. The arithmetic is
        `simrl.cost.formulas.analytical_phase_values` (the formula both engines run)."""
        out = dict.fromkeys(F.ANALYTICAL_PHASES, 0.0)
        out["overhead"] = self.overhead_s
        if not seq_lens:
            return out
        self.domain.check("seq_len", max(seq_lens))
        q = self.array_params()
        fwd = [F.analytical_fwd_flops(F.PY, q, s) for s in seq_lens]
        # dp_balance="batch": the update passes wait for the busiest rank of each optimizer step
        # (`dp_imbalance_flops`, a partition of the sample lengths computed here; 0 otherwise)
        mini = self.optimizer_steps(len(seq_lens)) // self.ppo_epochs
        imb = (self.dp_imbalance_flops(seq_lens, mini)
               if self.dp_balance == "batch" and mini > 1 and self.dp > 1 else 0.0)
        vals = F.analytical_phase_values(F.PY, q, len(seq_lens), sum(seq_lens), sum(fwd), max(fwd), imb)
        out.update(zip(F.ANALYTICAL_PHASES, vals, strict=True))
        # Trainer offload: the copies run once around the step's phases; Megatron's CPU optimizer
        # steps once per optimizer step, like the GPU Adam it replaces (for its fraction).
        off = self._offload_phases()
        if off:
            out["cpu_optimizer"] = self.optimizer_steps(len(seq_lens)) * off["cpu_optimizer"]
            out["offload"] = off["offload"]
        return {k: finite_nonneg(f"analytical phase {k}", val) for k, val in out.items()}

    def array_params(self) -> F.AnalyticalParams:
        """The numbers of `simrl.cost.formulas.analytical_phase_values` (per-step constants -- gradient
        sync, optimizer, overhead -- from this model's methods)."""
        if self._q is None:
            self._q = F.analytical_params(self)
        return self._q

    def optimizer_steps(self, samples: int) -> int:
        """Optimizer steps (each with its gradient sync) for a batch of ``samples`` trajectories:
        ``ppo_epochs * ceil(samples / mini_batch_samples)``; one per epoch without mini-batches."""
        return int(F.analytical_optimizer_steps(F.PY, self.array_params(), samples))

    # -- trainer offload (simrl.cost.offload) ----------------------------------------------------

    def _offloads(self) -> bool:
        return self.param_offload or self.grad_offload or self.optimizer_offload or self.optimizer_cpu_offload

    def offload(self):
        """The `TrainerOffload` of this layout: per-GPU parameter bytes and optimizer shard."""
        from simrl.cost.offload import TrainerOffload

        n = self._zero_group
        return TrainerOffload(
            host_bytes_per_s=self.gpu.pcie_bytes_per_s * self.host_link_efficiency,
            param_bytes=self.params_per_gpu() * self.param_dtype_bytes / (n if self.zero_stage >= 3 else 1),
            optimizer_params=self.trainable_params_per_gpu() / (n if self.zero_stage >= 1 else 1),
            param_offload=self.param_offload, grad_offload=self.grad_offload,
            optimizer_offload=self.optimizer_offload, optimizer_cpu_offload=self.optimizer_cpu_offload,
            optimizer_offload_fraction=self.optimizer_offload_fraction,
            cpu_optimizer_bytes_per_s=self.cpu_optimizer_bytes_per_s)

    def _offload_phases(self) -> dict[str, float]:
        """``cpu_optimizer`` and ``offload`` seconds; absent when no offload knob is on."""
        if not self._offloads():
            return {}
        off = self.offload()
        actor_phases = 1 + int(self.recompute_old_logprob) + self.logprob_forwards
        return {"cpu_optimizer": off.cpu_optimizer_s(),
                "offload": off.transfer_s(actor_phases, int(self.reference_model))}

    # -- pieces --------------------------------------------------------------------------------

    def _micro_batches(self, seq_lens: list[int] | int) -> int:
        """Micro-batches per DP rank: samples / micro_batch_size, or with a token budget
        (``max_tokens_per_gpu``, verl's use_dynamic_bsz) the rank's tokens over the budget."""
        if isinstance(seq_lens, int):
            return max(1, math.ceil(seq_lens / (self.dp * self.micro_batch_size)))
        return F.analytical_micro_batches(F.PY, self.array_params(), len(seq_lens), sum(seq_lens))

    def _update_passes(self) -> int:
        """Forward-equivalent passes of one training update: forward + backward (activation and
        weight gradients; LoRA's frozen base needs no weight gradients) + recompute."""
        return (3 if self.lora_rank == 0 else 2) + int(self.activation_checkpointing)

    def _rank_flops(self, seq_lens: list[int]) -> float:
        """Forward FLOPs of the busiest DP rank (at least its longest sample)."""
        fwd = [F.analytical_fwd_flops(F.PY, self.array_params(), s) for s in seq_lens]  # causal: mean context s/2
        return max(sum(fwd) / self.dp, max(fwd))

    def dp_imbalance_flops(self, seq_lens: list[int], mini_batches: int) -> float:
        """Forward FLOPs the ``mini_batches`` optimizer steps of one epoch wait for, summed: per
        step, the largest of the DP ranks' FLOPs (``dp_balance="batch"``, verl's
        ``trainer.balance_batch``). The batch is balanced once for the whole step: split into
        ``gpus`` equal-count partitions of near-equal tokens (greedy, longest first, to the
        partition with the fewest tokens that has room, ties to the lower index; verl uses
        Karmarkar-Karp, ``get_seqlen_balanced_partitions(..., equal_size=True)``, which leaves the
        sums as even), each partition's samples in batch order, DP rank ``r`` taking the
        ``gpus / dp`` consecutive partitions from ``r * gpus / dp``; each rank then walks its share
        in mini-batch slices of ``ceil(share / mini_batches)`` samples (``DataProto.split``), so
        one slice of a rank can hold several long samples while another rank's holds none.
        Checked against volcengine/verl@b25bb7d4 ``verl/trainer/ppo/ray_trainer.py``
        (``_balance_batch``), ``verl/utils/seqlen_balancing.py``, ``verl/workers/actor/dp_actor.py``
        (``update_policy``: ``data.split(ppo_mini_batch_size)``)."""
        q = self.array_params()
        fwd = [F.analytical_fwd_flops(F.PY, q, s) for s in seq_lens]  # causal: mean context s/2
        n, dp = len(fwd), self.dp
        parts_n = self.gpus if n % self.gpus == 0 else dp
        cap = math.ceil(n / parts_n)
        heap = [(0, i) for i in range(parts_n)]
        parts: list[list[int]] = [[] for _ in range(parts_n)]
        for idx in sorted(range(n), key=lambda i: (-seq_lens[i], i)):
            load, p = heapq.heappop(heap)
            parts[p].append(idx)
            if len(parts[p]) < cap:
                heapq.heappush(heap, (load + seq_lens[idx], p))
        per_rank = parts_n // dp
        ranks = [[i for p in parts[r * per_rank:(r + 1) * per_rank] for i in sorted(p)] for r in range(dp)]
        size = math.ceil(max(len(r) for r in ranks) / mini_batches)
        total = 0.0
        for j in range(mini_batches):
            total += max(sum(fwd[i] for i in r[j * size:(j + 1) * size]) for r in ranks)
        return total

    def _flops_per_s(self) -> float:
        return self.tp * self.pp * self.cp * self.ulysses_sp * self.gpu.bf16_flops_per_s * self.mfu

    def _pass_compute(self, seq_lens: list[int]) -> float:
        """Seconds of one forward pass over the batch on the busiest DP rank (no bubble)."""
        return self._rank_flops(seq_lens) / self._flops_per_s()

    def _bubble(self, seq_lens: list[int], mini_batches: int = 1) -> float:
        """1F1B stretch ``1 + (pp - 1) / (m * vpp)`` (1 without pipeline parallelism), ``m`` the
        micro-batches of one of ``mini_batches`` equal mini-batches (each its own schedule)."""
        return F.analytical_bubble(F.PY, self.array_params(), len(seq_lens), sum(seq_lens), mini_batches)

    def _layer_activation_bytes_per_token(self) -> float:
        """Bytes one token leaves for backward in one layer (flash attention, sequence parallel):
        norm inputs, q/k/v, attention output, MLP input, gate/up outputs and activation output."""
        m = self.model
        kv_dim = m.kv_heads * m.head_dim
        if m.is_moe:
            width = m.experts_per_token * m.moe_intermediate + m.shared_experts * m.shared_expert_intermediate
            dispatch = m.experts_per_token * m.hidden  # permuted token copies
        else:
            width, dispatch = m.intermediate, 0
        return self.param_dtype_bytes * (6 * m.hidden + 2 * kv_dim + 3 * width + dispatch) / self.tp

    def moe_bytes_per_token(self) -> float:
        """HBM bytes one token moves through the memory-bound kernels of all MoE layers in one forward
        pass (0 for dense models), as Megatron's alltoall token dispatcher runs them
        (NVIDIA/Megatron-LM@bed33f89 ``megatron/core/transformer/moe/token_dispatcher.py``
        ``MoEAlltoAllTokenDispatcher``, ``moe_utils.py`` ``permute`` / ``unpermute`` /
        ``sort_chunks_by_idxs``; ``router.py`` ``TopKRouter``), per MoE layer:

        - ``k * H`` activations (BF16) read and written four times: the permutation into ``k`` copies
          grouped by destination rank, the sort by local expert after the dispatch all-to-all, the
          sort back before the combine, and the unpermute's read of the ``k`` copies, which writes
          one ``H`` vector (the probability-weighted sum): ``(7 k H + H) * 2`` bytes;
        - the SwiGLU activation over the ``k`` expert rows: reads gate and up (``2 I``), writes
          ``I``: ``3 k I * 2`` bytes;
        - the router's FP32 logits over ``E`` experts through softmax and top-k: ``3 E * 4`` bytes.

        The backward pass moves the gradients of the same tensors (priced with the FLOPs' pass count).
        Qwen3-30B-A3B (H 2048, I 768, k 8, E 128): 7 x 8 x 2048 + 2048 = 116,736 elements; + 3 x 8 x 768 =
        18,432; x 2 B = 270,336 B; + 1,536 B of logits = 271,872 B per layer, x 48 layers."""
        m = self.model
        if not m.is_moe:
            return 0.0
        k, h = m.experts_per_token, m.hidden
        act = (7 * k * h + h + 3 * k * m.moe_intermediate) * self.param_dtype_bytes
        return m.n_moe_layers * (act + 3 * m.num_experts * 4)

    def _bw(self, group: int) -> float:
        return self.gpu.link_bytes_per_s(group) * self.comm_efficiency

    def _ep_ranks_per_node(self) -> int:
        """EP ranks sharing a node: with expert TP 1 an EP group is ``ep`` consecutive ranks (Megatron's
        expert rank order), so ``min(ep, gpus_per_node)`` of them share the scale-up domain."""
        return max(1, min(self.ep, self.gpu.gpus_per_node))

    def ep_copies(self) -> tuple[float, float]:
        """Copies of one token a dispatch sends (the combine returns as many), as ``(over the scale-up
        link, over the NIC)``, for ``ep`` ranks in groups of ``l`` per node over ``n = ceil(ep / l)`` nodes;
        a token picks ``k`` of ``E`` experts, ``E / ep`` on each rank:

        - ``alltoall`` (Megatron's ``MoEAlltoAllTokenDispatcher``: NCCL ``all_to_all_single`` of the
          permuted tokens, one row per (token, expert) pair): ``k (l - 1) / ep`` over the link and
          ``k (ep - l) / ep`` over the NIC;
        - ``flex`` (``MoEFlexTokenDispatcher`` with DeepEP or HybridEP: a token goes once to each rank
          that holds one of its experts, across nodes once per node by RDMA and on over the link there):
          ``n (l - 1) p_rank`` over the link and ``(n - 1) p_node`` over the NIC, with ``p_rank = 1 -
          C(E - E/ep, k) / C(E, k)`` the chance a given rank holds one of a token's experts (uniform
          routing) and ``p_node`` the same for the ``E / n`` experts of a node.

        Checked against NVIDIA/Megatron-LM@a0908fcf ``megatron/core/transformer/moe/token_dispatcher.py``
        (``MoEAlltoAllTokenDispatcher.token_dispatch``: ``all_to_all`` of ``permutated_local_input_tokens``
        with ``input_splits`` per EP rank; ``_DeepepManager.dispatch`` / ``_HybridEPManager.dispatch``
        take the routing map, not the permuted copies). Qwen3-30B-A3B (k 8, E 128), EP 8 in one node:
        alltoall 8 x 7/8 = 7 copies over NVLink; flex 7 x (1 - C(112, 8) / C(128, 8)) = 7 x 0.66742 = 4.6719."""
        m = self.model
        if not m.is_moe or self.ep <= 1:
            return 0.0, 0.0
        k, e, ep = m.experts_per_token, m.num_experts, self.ep
        local = self._ep_ranks_per_node()
        nodes = math.ceil(ep / local)
        if self.moe_token_dispatcher_type == "alltoall":
            return k * (local - 1) / ep, k * (ep - local) / ep

        def hit(held: float) -> float:  # chance that one of the k distinct experts is among `held` of E
            miss = 1.0
            for i in range(k):
                miss *= max(0.0, e - held - i) / (e - i)
            return 1.0 - miss

        return nodes * (local - 1) * hit(e / ep), (nodes - 1) * hit(e / nodes)

    def ep_link_bytes_per_s(self) -> float:
        """Scale-up bytes/s one GPU's EP exchange moves: the link at ``comm_efficiency``, times
        ``moe_alltoall_efficiency`` for the alltoall dispatcher (module doc, "EP exchange")."""
        bw = self.gpu.link_bytes_per_s(self._ep_ranks_per_node()) * self.comm_efficiency
        return bw * (self.moe_alltoall_efficiency if self.moe_token_dispatcher_type == "alltoall" else 1.0)

    def _activation_comm_time(self, tokens_per_rank: float, passes: int) -> float:
        """TP, EP, PP, CP (ring) and Ulysses activation traffic (`simrl.cost.formulas`)."""
        return F.analytical_activation_comm_time(F.PY, self.array_params(), tokens_per_rank, passes)

    def grad_sync_time(self) -> float:
        """Seconds of the DP x CP gradient/parameter collectives of one optimizer step made of one
        micro-batch (not overlapped): the gradient reduction, plus under ZeRO-3 the parameter
        all-gathers of its forward and its backward (`param_gather_time`)."""
        gathers = 2 * self.param_gather_time() if self.zero_stage == 3 else 0.0
        return self.grad_reduce_time() + gathers

    def _dp_collective_s(self, inner_bytes: float, outer_bytes: float = 0.0) -> float:
        """Seconds of a ring collective moving ``inner_bytes`` per GPU inside the ZeRO shard group
        (all of DP x CP under full sharding) and ``outer_bytes`` across HSDP replicas. The DP x CP
        group: ranks tp apart (Megatron order tp, cp, dp, pp), NCCL rings over every NIC its
        members have in a node; HSDP replicas are shard-size x tp apart."""
        n, eff = self._shard_group, self.comm_efficiency
        s = self.fsdp_shard_size or n
        t = inner_bytes / (self.gpu.collective_bytes_per_s(s, stride=self.tp) * eff) if s > 1 else 0.0
        r = n // s
        if r > 1 and outer_bytes:
            t += outer_bytes / (self.gpu.collective_bytes_per_s(r, stride=self.tp * s) * eff)
        return t

    def param_gather_time(self) -> float:
        """ZeRO-3 (FSDP): seconds of one all-gather of every parameter, frozen ones included,
        inside the shard group, ``(s - 1) / s`` of the BF16 weights per GPU; 0 below ZeRO-3. FSDP2
        (``fully_shard``, ``reshard_after_forward=True``, verl's default) gathers once per forward
        of each micro-batch and once more in its backward; activation recompute inside that
        backward reuses the backward's gather (torch ``FSDPState._pre_forward`` returns early in
        ``PRE_BACKWARD``; checked against pytorch/pytorch@1fd469d0
        ``torch/distributed/fsdp/_fully_shard/_fsdp_state.py``)."""
        s = self._zero_group
        if self.zero_stage != 3 or s <= 1:
            return 0.0
        return self._dp_collective_s((s - 1) / s * self.params_per_gpu() * self.param_dtype_bytes)

    def grad_reduce_time(self) -> float:
        """Seconds of one gradient reduction over DP x CP: all-reduce (ZeRO 0), reduce-scatter +
        parameter all-gather (ZeRO 1/2), reduce-scatter inside the shard group (ZeRO 3; HSDP then
        all-reduces the shard's gradients across the replicas)."""
        n = self._shard_group
        if n <= 1:
            return 0.0
        grads = self.trainable_params_per_gpu() * self.grad_dtype_bytes
        params = self.trainable_params_per_gpu() * self.param_dtype_bytes
        frac = (n - 1) / n
        if self.zero_stage == 0:
            return self._dp_collective_s(2 * frac * grads)
        if self.zero_stage in (1, 2):
            return self._dp_collective_s(frac * (grads + params))
        s = self._zero_group
        r = n // s
        return self._dp_collective_s((s - 1) / s * grads, 2 * (r - 1) / r * grads / s)

    def reference_swap_time(self) -> float:
        """Seconds per step of swapping a host-resident reference model in and out around the
        reference forward (0 unless ``reference_on_host``): the policy's parameter shard copied to
        host, the reference's copied in, the policy's copied back -- three copies of the shard over
        the host link -- plus, under Megatron's distributed optimizer (ZeRO 1/2), one all-gather of
        the BF16 parameters over DP x CP when the forward pre-hook is disabled with ``param_sync``.

        As NeMo-RL v0.4.0 runs it (NVIDIA-NeMo/RL@c751f811
        ``nemo_rl/models/policy/megatron_policy_worker.py``): ``__init__`` copies the reference
        model's ``state_dict`` to CPU (``.to("cpu", non_blocking=True, copy=True)``: PyTorch pins a
        non-blocking device-to-host copy's destination); ``use_reference_model`` copies
        ``model.state_dict()`` to CPU the same way, ``load_state_dict(reference_state_dict)``
        (host to GPU), then after the forward ``load_state_dict`` of the saved policy weights; with
        ``use_distributed_optimizer`` and ``overlap_param_gather`` (``grpo_math_1B.yaml`` defaults)
        it first calls ``disable_forward_pre_hook()``, whose ``param_sync=True`` makes Megatron's
        DDP ``start_param_sync(force_sync=True)``: a parameter all-gather over the DP group.
        Pinned by hand in ``tests/cost/test_analytical.py``."""
        if not (self.reference_model and self.reference_on_host):
            return 0.0
        n = self._zero_group
        shard = self.params_per_gpu() * self.param_dtype_bytes / (n if self.zero_stage >= 3 else 1)
        host = 3 * shard / (self.gpu.pcie_bytes_per_s * self.host_link_efficiency)
        s = self._shard_group
        gather = 0.0
        if self.zero_stage in (1, 2) and s > 1:
            gather = self._dp_collective_s((s - 1) / s * self.params_per_gpu() * self.param_dtype_bytes)
        return host + gather

    def optimizer_time(self) -> float:
        shard = self.trainable_params_per_gpu() / (self._zero_group if self.zero_stage >= 1 else 1)
        shard *= 1 - self.offload().cpu_fraction if self._offloads() else 1  # the rest steps on the CPU
        bw = self.gpu.hbm_bytes_per_s * self.optimizer_bandwidth_efficiency
        return shard * ADAM_TRAFFIC_BYTES_PER_PARAM / bw


@attrs.define
class FixedTraining:
    """`TrainingCost` with a constant step time (a measured average, or a what-if)."""

    step_s: float = attrs.field(validator=v.gt(0.0))
    memory_capacity: float = attrs.field(default=math.inf, alias="memory_capacity_bytes")
    strict: bool = False
    domain: ValidityDomain = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.domain = ValidityDomain(model=f"fixed[{self.step_s:g} s/step]", strict=self.strict)

    def step_time(self, seq_lens: list[int]) -> float:
        return self.step_s

    def peak_memory_bytes(self, seq_lens: list[int]) -> float:
        return 0.0

    def memory_capacity_bytes(self) -> float:
        return self.memory_capacity
