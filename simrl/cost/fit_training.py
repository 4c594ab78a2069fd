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
- ``fsdp``: compute = flops / (gpus * peak), communication = 3 weight passes (all-gather forward
  and backward, reduce-scatter of gradients) over the DP group's link; time = a + compute/mfu +
  comm/link_eff - overlap * min(compute, comm). Memory = gap + sharded states (16 bytes per
  parameter / dp) + activations per token with and without checkpointing.

``fixed``, ``linear`` and ``analytical`` fit memory as gap + k * s_max when memory observations
exist; without them ``peak_memory_bytes`` is 0 and the artifact says ``memory_fitted: false``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import attrs
import numpy as np

from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.base import CostModelError, ValidityDomain, finite_nonneg
from simrl.cost.fitting import nonneg_lstsq
from simrl.cost.hardware import GPUSpec, gpu_spec
from simrl.cost.observations import Observation

FAMILIES = ("fixed", "linear", "analytical", "hydraulis", "fsdp")
STATE_BYTES_PER_PARAM = 16.0  # bf16 params + fp32 grads/master + Adam moments (mixed precision)


@attrs.frozen
class TrainingLayout:
    """What the features need to know about the model, GPU and parallel layout."""

    arch: ModelArch
    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 1
    activation_checkpointing: bool = True

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


def layout_from_inputs(inputs: dict, provenance: dict, model: str | None, gpu: str | None) -> TrainingLayout:
    name = model or inputs.get("model")
    hw = gpu or inputs.get("gpu") or provenance.get("hardware")
    if not name:
        raise CostModelError("training observation has no inputs.model; pass --model")
    return TrainingLayout(
        arch=model_arch(name), gpu=gpu_spec(hw), tp=int(inputs["tp"]), pp=int(inputs["pp"]),
        dp=int(inputs["dp"]), zero_stage=int(inputs.get("zero_stage", 1)),
        activation_checkpointing=bool(inputs.get("activation_checkpointing", True)),
    )


def train_flops(seq_lens: Sequence[float], lay: TrainingLayout) -> float:
    """FLOPs of one optimizer step: 3x forward (4x with recomputation), causal attention."""
    mult = 4.0 if lay.activation_checkpointing else 3.0
    return mult * sum(lay.arch.flops_per_token(context=s / 2.0) * s for s in seq_lens)


def time_features(family: str, seq_lens: Sequence[float], lay: TrainingLayout) -> np.ndarray:
    s = np.asarray(seq_lens, float)
    if family == "fixed":
        return np.array([1.0])
    if family == "linear":
        return np.array([1.0, s.sum()])
    compute_s = train_flops(s, lay) / (lay.gpus * lay.gpu.bf16_flops_per_s)
    if family == "analytical":
        return np.array([1.0, compute_s])
    if family == "hydraulis":
        dp, warm, smax = lay.dp, lay.pp - 1, s.max()
        return np.array([(s**2).sum() / dp + warm * smax**2, s.sum() / dp + warm * smax, s.size / dp + warm])
    if family == "fsdp":
        n = lay.dp
        comm_s = 3.0 * lay.arch.weight_bytes(2) / (lay.tp * lay.pp) * (n - 1) / n / lay.gpu.link_bytes_per_s(n)
        return np.array([1.0, compute_s, comm_s, -min(compute_s, comm_s)])
    raise CostModelError(f"unknown training family {family!r}; expected one of {', '.join(FAMILIES)}")


def memory_features(family: str, seq_lens: Sequence[float], lay: TrainingLayout) -> np.ndarray:
    smax = float(max(seq_lens))
    if family == "hydraulis":
        return np.array([1.0, smax, lay.zero_fraction()])
    if family == "fsdp":
        state = STATE_BYTES_PER_PARAM * lay.arch.total_params / (lay.dp * lay.tp * lay.pp)
        act = smax * lay.arch.hidden * lay.arch.layers / (lay.tp * lay.pp)
        ckpt = lay.activation_checkpointing
        return np.array([1.0, state, 0.0 if ckpt else act, act if ckpt else 0.0])
    return np.array([1.0, smax])


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
    if family not in FAMILIES:
        raise CostModelError(f"unknown training family {family!r}; expected one of {', '.join(FAMILIES)}")
    rows = []
    for o in obs:
        if o.kind != "training_step":
            continue
        lay = layout_from_inputs(o.inputs, o.provenance, model, gpu)
        rows.append(([float(x) for x in o.inputs["seq_lens"]], lay, o.value, o.quantity))
    if not rows:
        raise CostModelError(f"{family}: no training_step observations")
    if family == "hydraulis":
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
    return {k: [float(min(v)), float(max(v))] for k, v in vals.items()}  # [lo, hi], as artifacts store it


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
        if self.family == "hydraulis":
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
