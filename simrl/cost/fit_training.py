"""Fitted training families: step time and peak memory from ``training_step`` observations.

Every family is linear in a few physical features, fitted by non-negative least squares on
relative error (memory families on bytes). ``seq_lens`` are the total lengths of the samples in
one optimizer step; the layout (tp, pp, dp, ZeRO stage, activation checkpointing) comes from the
observation inputs when fitting and from the run configuration when predicting.

- ``fixed``: time = a.
- ``linear``: time = a + b * tokens.
- ``analytical``: time = a + flops / (gpus * peak) / mfu; ``1/mfu`` is the fitted slope. FLOPs
  are 3x the forward FLOPs (4x with activation checkpointing) including causal attention.
- ``hydraulis``: per parallel strategy (tp, pp) a sequence of length s costs ``a*s^2 + b*s + c``;
  a step is ``sum f(s_i) / dp + (pp - 1) * f(s_max)`` (the 1F1B warm-up and cool-down at the
  longest sequence). Memory = gap + k_act * s_max + k_state * zero_fraction.
- ``fsdp``: time = a + compute/MFU + the optimizer's sweep over its shard + FSDP2's staging copies
  (dp > 1) + the collectives' bytes on the wire / link (ring (n-1)/n; gloo's reduce-scatter is an
  all-reduce) + ring hops x latency - overlap * min(compute, comm); see `FsdpFamily`. Memory = gap
  + training state under the ZeRO stage + activations per token with and without checkpointing.

``fixed``, ``linear`` and ``analytical`` fit memory as gap + k * s_max when memory observations
exist; without them ``peak_memory_bytes`` is 0 and the artifact says ``memory_fitted: false``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import attrs
import numpy as np

from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.artifact import ArtifactError, check_coefficients, check_keys, domain_of
from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.family import FamilyBase, construct, knobs_of
from simrl.cost.fitting import nonneg_lstsq
from simrl.cost.hardware import GPUSpec, gpu_spec
from simrl.cost.observations import Observation

STATE_BYTES_PER_PARAM = 16.0  # bf16 params + fp32 grads/master + Adam moments (mixed precision)


@attrs.frozen
class TrainingLayout:
    """What the features need to know about the model, GPU and parallel layout.

    ``backend`` (nccl, gloo) and the bytes per parameter the collectives move (``param_bytes`` for
    the all-gathers, ``reduce_bytes`` for the gradient reduction) come from the observations'
    inputs (``backend``, ``dtype``) when fitting; a run's layout is NCCL with bf16 parameters and
    fp32 gradient reduction (FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``,
    verl's default).
    """

    arch: ModelArch
    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 1
    activation_checkpointing: bool = True
    backend: str = "nccl"
    param_bytes: int = 2
    reduce_bytes: int = 4

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def strategy(self) -> str:
        return f"tp{self.tp}_pp{self.pp}"

    def zero_fraction(self) -> float:
        """Fraction of the 16 bytes/param of training state one GPU holds under its ZeRO stage."""
        n = self.dp
        per = {0: 16.0, 1: 4.0 + 12.0 / n, 2: 2.0 + 14.0 / n, 3: 16.0 / n}[self.zero_stage]
        return per / STATE_BYTES_PER_PARAM


DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8": 1}
CPU_DEVICE = "CPU"  # the catalog entry a CPU run's features are scaled by (simrl/cost/catalog/gpus.yaml)


def observed_hardware(inputs: dict, provenance: dict) -> str | None:
    """The catalog name for an observation's hardware: ``inputs.gpu``, else the CPU entry for a
    CPU run (``inputs.device: cpu`` or a ``provenance.hardware`` ending in "(CPU)", as the
    profilers record it), else ``provenance.hardware`` (a GPU name the catalog resolves)."""
    if inputs.get("gpu"):
        return str(inputs["gpu"])
    hw = provenance.get("hardware")
    if inputs.get("device") == "cpu" or (isinstance(hw, str) and hw.rstrip().endswith("(CPU)")):
        return CPU_DEVICE
    return hw


def layout_from_inputs(inputs: dict, provenance: dict, model: str | None, gpu: str | None) -> TrainingLayout:
    name = model or inputs.get("model")
    hw = gpu or observed_hardware(inputs, provenance)
    if not name:
        raise CostModelError("training observation has no inputs.model; pass --model")
    if not hw:
        raise CostModelError("training observation names no hardware (inputs.gpu or provenance.hardware); "
                             "pass --gpu")
    dtype = str(inputs.get("dtype", "bf16")).lower()
    if dtype not in DTYPE_BYTES:
        raise CostModelError(f"training observation inputs.dtype: expected one of {', '.join(DTYPE_BYTES)}, "
                             f"got {dtype!r}")
    return TrainingLayout(
        arch=model_arch(name), gpu=gpu_spec(hw), tp=int(inputs["tp"]), pp=int(inputs["pp"]),
        dp=int(inputs["dp"]), zero_stage=int(inputs.get("zero_stage", 1)),
        activation_checkpointing=bool(inputs.get("activation_checkpointing", True)),
        backend=str(inputs.get("backend", "nccl")), param_bytes=DTYPE_BYTES[dtype],
    )


def train_flops(seq_lens: Sequence[float], lay: TrainingLayout) -> float:
    """FLOPs of one optimizer step: 3x forward (4x with recomputation), causal attention."""
    mult = 4.0 if lay.activation_checkpointing else 3.0
    return mult * sum(lay.arch.flops_per_token(context=s / 2.0) * s for s in seq_lens)


def _compute_s(s: np.ndarray, lay: TrainingLayout) -> float:
    return train_flops(s, lay) / (lay.gpus * lay.gpu.bf16_flops_per_s)


def time_features(family: str, seq_lens: Sequence[float], lay: TrainingLayout) -> np.ndarray:
    return training_family(family).time_features(np.asarray(seq_lens, float), lay)


def memory_features(family: str, seq_lens: Sequence[float], lay: TrainingLayout) -> np.ndarray:
    return training_family(family).memory_features(np.asarray(seq_lens, float), lay)


def _fit_group(family: str, rows: list[tuple[list[float], TrainingLayout, float, str]]) -> dict:
    t_rows = [(s, lay, y) for s, lay, y, q in rows if q == "time"]
    m_rows = [(s, lay, y) for s, lay, y, q in rows if q == "memory"]
    if not t_rows:
        raise CostModelError(f"{family}: no training_step time observations to fit")
    a = np.stack([time_features(family, s, lay) for s, lay, _ in t_rows])
    y = np.array([v for _, _, v in t_rows])
    out = {"time": nonneg_lstsq(a, y, weights=1.0 / y).tolist(), "memory": None}
    if m_rows:
        am = np.stack([memory_features(family, s, lay) for s, lay, _ in m_rows])
        ym = np.array([v for _, _, v in m_rows])
        out["memory"] = nonneg_lstsq(am, ym, weights=1.0 / ym).tolist()
    return out


def fit_training(family: str, obs: Sequence[Observation], model: str | None = None,
                 gpu: str | None = None) -> dict:
    """Coefficients of one training family; hydraulis fits one set per (tp, pp) strategy."""
    fam = training_family(family)
    rows = []
    for o in obs:
        if o.kind != "training_step":
            continue
        lay = layout_from_inputs(o.inputs, o.provenance, model, gpu)
        rows.append(([float(x) for x in o.inputs["seq_lens"]], lay, o.value, o.quantity))
    if not rows:
        raise CostModelError(f"{family}: no training_step observations")
    if fam.per_strategy:
        groups: dict[str, list] = defaultdict(list)
        for r in rows:
            groups[r[1].strategy].append(r)
        return {"strategies": {k: _fit_group(family, g) for k, g in sorted(groups.items())}}
    return _fit_group(family, rows)


def training_domain(obs: Sequence[Observation], name: str) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = defaultdict(list)
    for o in obs:
        if o.kind != "training_step":
            continue
        s = o.inputs["seq_lens"]
        vals["seq_len"] += [min(s), max(s)]
        vals["tokens"].append(sum(s))
        vals["n_seqs"].append(len(s))
        vals["activation_checkpointing"].append(float(bool(o.inputs.get("activation_checkpointing", True))))
        for k in ("tp", "pp", "dp"):
            vals[k].append(float(o.inputs[k]))
    return {k: [float(min(v)), float(max(v))] for k, v in vals.items()}  # lists: the artifact's JSON form


@attrs.define
class FittedTraining:
    """A fitted training family evaluated for one layout (the run's training deployment)."""

    family: str
    coefficients: dict
    layout: TrainingLayout
    capacity_bytes: float
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("training/fitted"))
    _time: np.ndarray = attrs.field(init=False)
    _mem: np.ndarray | None = attrs.field(init=False)

    def __attrs_post_init__(self):
        coefs = self.coefficients
        if training_family(self.family).per_strategy:
            strat = self.layout.strategy
            if strat not in coefs["strategies"]:
                raise CostModelError(f"hydraulis artifact has no strategy {strat} "
                                     f"(fitted: {', '.join(sorted(coefs['strategies']))})")
            coefs = coefs["strategies"][strat]
        self._time = np.asarray(coefs["time"], float)
        self._mem = None if coefs.get("memory") is None else np.asarray(coefs["memory"], float)

    def _check(self, seq_lens: Sequence[int]) -> None:
        if not seq_lens:
            raise CostModelError("training step with no sequences")
        d, lay = self.domain, self.layout
        d.check("seq_len", max(seq_lens))
        d.check("seq_len", min(seq_lens))
        d.check("tokens", sum(seq_lens))
        d.check("n_seqs", len(seq_lens))
        d.check("activation_checkpointing", float(lay.activation_checkpointing))
        for k in ("tp", "pp", "dp"):
            d.check(k, getattr(lay, k))

    def step_time(self, seq_lens: list[int]) -> float:
        self._check(seq_lens)
        t = float(time_features(self.family, seq_lens, self.layout) @ self._time)
        return finite_nonneg(f"{self.family} step_time", max(t, 0.0))

    def peak_memory_bytes(self, seq_lens: list[int]) -> float:
        if self._mem is None:
            return 0.0
        return finite_nonneg(f"{self.family} peak_memory_bytes",
                             float(memory_features(self.family, seq_lens, self.layout) @ self._mem))

    def memory_capacity_bytes(self) -> float:
        return self.capacity_bytes

    def linear_coefficients(self) -> tuple[float, float] | None:
        """(a, per_token) when the step time is exactly ``a + per_token * tokens`` and no fitted
        memory model has to be checked per batch (``fixed`` and ``linear`` without memory)."""
        if self._mem is not None:
            return None
        return training_family(self.family).linear_terms(self._time)


# -- the families ----------------------------------------------------------------------------

class TrainingFamily(FamilyBase):
    """A fitted training family: step time (and peak memory) linear in a few features."""

    target, fittable = "training", True
    domain_dims = ("seq_len", "tokens", "n_seqs", "activation_checkpointing", "tp", "pp", "dp")  # FittedTraining._check
    per_strategy = False  # one coefficient set per (tp, pp) strategy
    n_time: int
    n_memory = 2

    def time_features(self, s: np.ndarray, lay: TrainingLayout) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement time_features()")  # abstract

    def memory_features(self, s: np.ndarray, lay: TrainingLayout) -> np.ndarray:
        return np.array([1.0, float(s.max())])

    def linear_terms(self, time_coefs: np.ndarray) -> tuple[float, float] | None:
        """(a, per_token) if the step time is ``a + per_token * tokens`` for every layout."""
        return None

    def fit(self, obs, opts):
        return fit_training(self.name, obs, opts.get("model"), opts.get("gpu")), training_domain(obs, self.name)

    def predict(self, art, obs, opts):
        coefs = art["coefficients"]
        pred, act, grp = [], [], []
        for o in obs:
            if o.kind != "training_step":
                continue
            lay = layout_from_inputs(o.inputs, o.provenance, opts.get("model"), opts.get("gpu"))
            c = coefs["strategies"].get(lay.strategy) if self.per_strategy else coefs
            key = "time" if o.quantity == "time" else "memory"
            if c is None or c.get(key) is None:
                continue
            s = np.asarray(o.inputs["seq_lens"], float)
            feat = self.time_features(s, lay) if key == "time" else self.memory_features(s, lay)
            pred.append(max(float(feat @ np.asarray(c[key])), 0.0))
            act.append(o.value)
            grp.append(f"step_{key}")
        return np.array(pred), np.array(act), grp

    def check(self, coefficients, where):
        if self.per_strategy:
            check_coefficients(coefficients, {"strategies": "object"}, where)
        sets = coefficients.get("strategies") if self.per_strategy else {"": coefficients}
        if not isinstance(sets, dict) or not sets:
            raise ArtifactError(f"{where}: coefficients.strategies: expected a non-empty object")
        for strat, c in sets.items():
            key = f"coefficients.strategies.{strat}" if strat else "coefficients"
            if not isinstance(c, dict):
                raise ArtifactError(f"{where}: {key}: expected an object")
            check_keys(c, ("time", "memory"), where, key)
            for name, n in (("time", self.n_time), ("memory", self.n_memory)):
                v = c.get(name)
                if v is None and name == "memory":
                    continue
                if not isinstance(v, list) or len(v) != n or not all(
                        isinstance(x, int | float) and not isinstance(x, bool) for x in v):
                    raise ArtifactError(f"{where}: {key}.{name}: expected a list of {n} numbers "
                                        f"(the {self.name} features), got {v!r:.60}")

    def build(self, art, cfg):
        if art is None:
            return super().build(art, cfg)
        tr = cfg.deployment.training
        lay = TrainingLayout(arch=model_arch(cfg.deployment.model), gpu=gpu_spec(tr.gpu), tp=tr.tp, pp=tr.pp,
                             dp=tr.dp, zero_stage=tr.zero_stage, activation_checkpointing=tr.activation_checkpointing)
        dom = domain_of(art, f"training/{self.name}[{cfg.deployment.model}]", cfg.cost.strict)
        return FittedTraining(self.name, art["coefficients"], lay, lay.gpu.hbm_bytes, domain=dom)


class FixedFamily(TrainingFamily):
    """time = a. From knobs: ``cost.training=fixed cost.training_knobs.step_s=S``."""

    name, n_time, from_knobs, layout_keys = "fixed", 1, True, ("model",)
    basis = "constant step time given as cost.training_knobs.step_s"
    fitted_basis = "constant step time fitted on training steps of one layout"

    def time_features(self, s, lay):
        return np.array([1.0])

    def linear_terms(self, time_coefs):
        return float(time_coefs[0]), 0.0

    def build(self, art, cfg):
        if art is not None:
            return super().build(art, cfg)
        from simrl.cost.analytical import FixedTraining

        knobs = knobs_of(cfg, "training")
        if "step_s" not in knobs:
            raise CostModelError("cost.training_knobs.step_s: required for training family 'fixed' (seconds per step)")
        return construct("training", "fixed", FixedTraining, knobs, strict=cfg.cost.strict)


class LinearTrainingFamily(TrainingFamily):
    name, n_time, layout_keys = "linear", 2, ("model",)
    basis = "a + b*tokens fitted on training steps of one layout"

    def time_features(self, s, lay):
        return np.array([1.0, s.sum()])

    def linear_terms(self, time_coefs):
        return float(time_coefs[0]), float(time_coefs[1])


class AnalyticalFamily(TrainingFamily):
    """From knobs: `simrl.cost.analytical.AnalyticalTraining` (first principles, MFU assumed).
    From an artifact: a + FLOPs / (GPUs * peak) / MFU with ``a`` and ``1/MFU`` fitted."""

    name, n_time, from_knobs = "analytical", 2, True
    basis = ("first principles: FLOPs / (GPUs x peak BF16) / MFU + gradient sync + optimizer + overhead; "
             "memory: weights, states, activations (MFU and efficiencies assumed)")
    fitted_basis = "a + training FLOPs / (GPUs x peak BF16) / MFU, a and 1/MFU fitted"

    def time_features(self, s, lay):
        return np.array([1.0, _compute_s(s, lay)])

    def build(self, art, cfg):
        if art is not None:
            return super().build(art, cfg)
        from simrl.cost.analytical import AnalyticalTraining

        t = cfg.deployment.training
        return construct(
            "training", "analytical", AnalyticalTraining, knobs_of(cfg, "training"), model=cfg.deployment.model,
            gpu=t.gpu, gpus=t.gpus, tp=t.tp, pp=t.pp, cp=t.cp, ep=t.ep, micro_batch_size=t.micro_batch_size,
            activation_checkpointing=t.activation_checkpointing, zero_stage=t.zero_stage, strict=cfg.cost.strict,
        )


class HydraulisFamily(TrainingFamily):
    name, n_time, n_memory, per_strategy = "hydraulis", 3, 3, True
    basis = "per (tp, pp): sum f(s)/dp + (pp-1) f(s_max), f quadratic in sequence length"

    def time_features(self, s, lay):
        dp, warm, smax = lay.dp, lay.pp - 1, s.max()
        return np.array([(s**2).sum() / dp + warm * smax**2, s.sum() / dp + warm * smax, s.size / dp + warm])

    def memory_features(self, s, lay):
        return np.array([1.0, float(s.max()), lay.zero_fraction()])


def fsdp_collectives(lay: TrainingLayout) -> tuple[int, int]:
    """(all-gathers, gradient reductions) of parameters per optimizer step under ``lay.zero_stage``.

    ZeRO-3 (FSDP2 ``reshard_after_forward=True``) gathers every unit's parameters in forward and
    again in backward; ZeRO-1/2 (``False``) once; ZeRO-0 (DDP) never. Each step reduces the
    gradients once (reduce-scatter; an all-reduce under ZeRO-0).
    """
    return {3: 2, 2: 1, 1: 1, 0: 0}[lay.zero_stage], 1


def fsdp_comm_bytes(lay: TrainingLayout) -> tuple[float, float]:
    """(bytes on the wire, bytes staged) per rank and step of FSDP's collectives.

    A ring all-gather or reduce-scatter of M bytes over n ranks moves (n-1)/n * M per rank. Gloo has
    no reduce-scatter: ``ProcessGroupGloo::reduce_scatter_tensor_coalesced`` clones the input,
    all-reduces the whole buffer (2 (n-1)/n * M) and keeps its chunk; ZeRO-0 all-reduces on either
    backend. Staged: FSDP2 copies each gathered buffer out into the parameters and each gradient
    into the reduction's input, M bytes each, whenever the group has more than one rank (world 1
    skips the collectives and their copies).
    """
    n = lay.dp
    m_param = lay.arch.total_params / (lay.tp * lay.pp) * lay.param_bytes
    m_grad = lay.arch.total_params / (lay.tp * lay.pp) * lay.reduce_bytes
    gathers, reduces = fsdp_collectives(lay)
    allreduce = lay.backend == "gloo" or lay.zero_stage == 0
    wire = (gathers * m_param + reduces * m_grad * (2.0 if allreduce else 1.0)) * (n - 1) / n
    staged = (gathers * m_param + reduces * m_grad) if n > 1 else 0.0
    return wire, staged


class FsdpFamily(TrainingFamily):
    """FSDP / ZeRO data parallelism: a step is fixed overhead, compute, the optimizer's sweep over
    its shard, and the collectives, each a physical feature with a fitted coefficient.

    time = a + c_mfu * compute + c_opt * optimizer + c_stage * staging + c_bw * comm
           + c_lat * ring_steps - overlap * min(compute, comm)

    - compute: training FLOPs / (GPUs x peak), 1/MFU fitted;
    - optimizer: the 16 state bytes per parameter of this rank's shard / memory bandwidth (AdamW
      reads and writes every sharded state once a step);
    - staging: FSDP2's copy-out of gathered parameters and copy-in of gradients / memory bandwidth,
      only when dp > 1;
    - comm: the collectives' bytes on the wire (`fsdp_comm_bytes`: ring (n-1)/n, gloo's
      reduce-scatter an all-reduce) / the link the DP group spans;
    - ring_steps: each collective crosses n-1 ring hops; ``c_lat`` is the seconds per hop
      (per-message latency and launch), fitted;
    - overlap: the share of the smaller of compute and comm hidden behind the other.

    Memory = gap + training state under the ZeRO stage + activations per token (with and without
    recomputation).
    """

    name, n_time, n_memory = "fsdp", 7, 4
    basis = ("a + compute/MFU + optimizer shard sweep + staging copies + ring comm/eff + hops*latency "
             "- overlap*min(compute, comm) (FSDP / ZeRO)")

    def time_features(self, s, lay):
        n, g = lay.dp, lay.gpu
        compute_s = _compute_s(s, lay)
        wire, staged = fsdp_comm_bytes(lay)
        comm_s = wire / g.link_bytes_per_s(n)
        shard = lay.dp if lay.zero_stage >= 1 else 1  # ZeRO-1 and up shard the optimizer state over dp
        opt_s = STATE_BYTES_PER_PARAM * lay.arch.total_params / (lay.tp * lay.pp * shard) / g.hbm_bytes_per_s
        stage_s = staged / g.hbm_bytes_per_s
        units = lay.arch.layers + 1  # FSDP wraps each decoder layer and the root
        ring_steps = units * sum(fsdp_collectives(lay)) * (n - 1)
        return np.array([1.0, compute_s, opt_s, stage_s, comm_s, float(ring_steps), -min(compute_s, comm_s)])

    def memory_features(self, s, lay):
        smax = float(s.max())
        state = STATE_BYTES_PER_PARAM * lay.arch.total_params / (lay.tp * lay.pp) * lay.zero_fraction()
        act = smax * lay.arch.hidden * lay.arch.layers / (lay.tp * lay.pp)
        ckpt = lay.activation_checkpointing
        return np.array([1.0, state, 0.0 if ckpt else act, act if ckpt else 0.0])


FAMILIES = (FixedFamily(), LinearTrainingFamily(), AnalyticalFamily(), HydraulisFamily(), FsdpFamily())
_BY_NAME = {f.name: f for f in FAMILIES}


def training_family(name: str) -> TrainingFamily:
    fam = _BY_NAME.get(name)
    if fam is None:
        raise CostModelError(f"unknown training family {name!r}; expected one of {', '.join(_BY_NAME)}")
    return fam
