"""Build a run's cost models from its configuration: family registries, knob checking, artifacts.

`build_costs(cfg)` turns ``cfg.cost`` (a family name or a ``*.json`` artifact path per model, plus
knob dicts) and the deployment layout into a `Costs` record. Built-in families: rollout
``roofline`` and ``linear``; training ``analytical``, ``fixed`` and ``constant``; weight sync ``nccl``, ``checkpoint_engine``,
``filesystem``, ``lora`` and ``fixed``. Other modules add families with `register_rollout_family`
/ `register_training_family` / `register_weight_sync_family`; a factory takes
``(cfg: SimConfig, knobs: dict)`` and returns the model (use `check_knobs` to reject unknown knobs).
Layout values (GPU, TP, PP, ...) come from ``cfg.deployment``; knobs are the rest of a family's
keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from simrl.cost.analytical import AnalyticalTraining, FixedTraining
from simrl.cost.architectures import model_arch
from simrl.cost.base import CostModelError, RolloutCost, TrainingCost, ValidityDomain, WeightSyncCost
from simrl.cost.linear import ConstantTraining, LinearRollout
from simrl.cost.roofline import RooflineRollout
from simrl.cost.weight_sync import WEIGHT_SYNC_DEFAULTS, WeightSync

if TYPE_CHECKING:
    from simrl.config import SimConfig

Factory = Callable[["SimConfig", dict[str, Any]], Any]

_FAMILIES: dict[str, dict[str, Factory]] = {"rollout": {}, "training": {}, "weight_sync": {}}


@attrs.define
class Costs:
    """The three cost models of a run."""

    rollout: RolloutCost
    training: TrainingCost
    weight_sync: WeightSyncCost
    offload_s: float = 0.0  # offload + reload of both sides per step, charged when colocated

    def domains(self) -> list[ValidityDomain]:
        return [self.rollout.domain, self.training.domain, self.weight_sync.domain]

    def domain_reports(self) -> list[dict]:
        """Every out-of-domain record so far, all three models (for the run report)."""
        return [rec for d in self.domains() for rec in d.report()]


# -- registries ----------------------------------------------------------------------------------

def _register(section: str, name: str, factory: Factory) -> None:
    if name.endswith(".json"):
        raise ValueError(f"family name {name!r} may not end in .json (reserved for artifact paths)")
    _FAMILIES[section][name] = factory


def register_rollout_family(name: str, factory: Factory) -> None:
    _register("rollout", name, factory)


def register_training_family(name: str, factory: Factory) -> None:
    _register("training", name, factory)


def register_weight_sync_family(name: str, factory: Factory) -> None:
    _register("weight_sync", name, factory)


def families(section: str) -> list[str]:
    """Registered family names of ``section`` ('rollout', 'training' or 'weight_sync')."""
    return sorted(_FAMILIES[section])


def check_knobs(section: str, family: str, knobs: dict[str, Any], valid: list[str] | set[str]) -> None:
    """Raise `CostModelError` naming ``cost.<section>_knobs.<name>`` for the first unknown knob."""
    unknown = sorted(set(knobs) - set(valid))
    if unknown:
        raise CostModelError(
            f"cost.{section}_knobs.{unknown[0]}: unknown knob for {section} family {family!r}; "
            f"valid knobs: {', '.join(sorted(valid)) or '(none)'}"
        )


def knob_names(cls: type, layout: set[str]) -> list[str]:
    """An attrs class's constructor keywords minus those the layout supplies."""
    return sorted(a.alias for a in attrs.fields(cls) if a.init and a.alias not in layout)


def _construct(section: str, family: str, cls: type, knobs: dict[str, Any], **layout: Any) -> Any:
    check_knobs(section, family, knobs, knob_names(cls, set(layout)))
    try:
        return cls(**layout, **knobs)
    except CostModelError:
        raise
    except (TypeError, ValueError) as exc:
        raise CostModelError(f"cost.{section}_knobs ({section} family {family!r}): {exc}") from None


# -- built-in families ---------------------------------------------------------------------------

def _roofline(cfg: SimConfig, knobs: dict[str, Any]) -> RooflineRollout:
    r = cfg.deployment.rollout
    return _construct(
        "rollout", "roofline", RooflineRollout, knobs, model=cfg.deployment.model, gpu=r.gpu, tp=r.tp,
        pp=r.pp, dp=r.dp, ep=r.ep, gpu_memory_utilization=r.gpu_memory_utilization,
        kv_capacity_tokens=r.kv_capacity_tokens, max_num_seqs=r.max_num_seqs,
        max_num_batched_tokens=r.max_num_batched_tokens, strict=cfg.cost.strict,
    )


def _analytical(cfg: SimConfig, knobs: dict[str, Any]) -> AnalyticalTraining:
    t = cfg.deployment.training
    return _construct(
        "training", "analytical", AnalyticalTraining, knobs, model=cfg.deployment.model, gpu=t.gpu,
        gpus=t.gpus, tp=t.tp, pp=t.pp, cp=t.cp, ep=t.ep, micro_batch_size=t.micro_batch_size,
        activation_checkpointing=t.activation_checkpointing, zero_stage=t.zero_stage, strict=cfg.cost.strict,
    )


def _fixed_training(cfg: SimConfig, knobs: dict[str, Any]) -> FixedTraining:
    if "step_s" not in knobs:
        raise CostModelError("cost.training_knobs.step_s: required for training family 'fixed' (seconds per step)")
    return _construct("training", "fixed", FixedTraining, knobs, strict=cfg.cost.strict)


def _weight_sync_factory(mode: str) -> Factory:
    def build(cfg: SimConfig, knobs: dict[str, Any]) -> WeightSync:
        check_knobs("weight_sync", mode, knobs, WEIGHT_SYNC_DEFAULTS[mode])
        knobs = dict(knobs)
        lora_rank = cfg.cost.training_knobs.get("lora_rank", 0)
        if mode == "lora" and "rank" not in knobs and lora_rank:
            knobs["rank"] = lora_rank  # publish the adapter the trainer trains
        d = cfg.deployment  # the broadcast's link: receivers' GPU, same node or not
        return WeightSync(mode, d.model, strict=cfg.cost.strict, gpu=d.rollout.gpu, placement=d.placement,
                          trainer_gpus=d.training.gpus, rollout_gpus=d.rollout.gpus, **knobs)

    return build


def _linear_rollout(cfg: SimConfig, knobs: dict[str, Any]) -> LinearRollout:
    return _construct("rollout", "linear", LinearRollout, dict(knobs))


def _constant_training(cfg: SimConfig, knobs: dict[str, Any]) -> ConstantTraining:
    return _construct("training", "constant", ConstantTraining, dict(knobs))


register_rollout_family("roofline", _roofline)
register_rollout_family("linear", _linear_rollout)  # closed form; what simrl_fast supports
register_training_family("analytical", _analytical)
register_training_family("fixed", _fixed_training)
register_training_family("constant", _constant_training)
for _mode in WEIGHT_SYNC_DEFAULTS:
    register_weight_sync_family(_mode, _weight_sync_factory(_mode))


# -- artifacts and assembly ----------------------------------------------------------------------

def _load_artifact(section: str, path: str, cfg: SimConfig) -> Any:
    try:
        from simrl.cost import artifact
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("simrl."):
            raise
        raise CostModelError(
            f"cost.{section}={path!r}: fitted cost-model artifacts are not supported yet "
            f"({exc.name} is missing); use a built-in family"
        ) from None
    loader = getattr(artifact, f"load_{section}_artifact", None)
    if loader is None:
        raise CostModelError(f"cost.{section}={path!r}: artifacts are not supported for {section} models")
    return loader(path, cfg)


_PROTOCOLS = {"rollout": RolloutCost, "training": TrainingCost, "weight_sync": WeightSyncCost}


def _build_one(section: str, cfg: SimConfig) -> Any:
    family: str = getattr(cfg.cost, section)
    knobs: dict[str, Any] = getattr(cfg.cost, f"{section}_knobs")
    if family.endswith(".json"):
        model = _load_artifact(section, family, cfg)
    else:
        factory = _FAMILIES[section].get(family)
        if factory is None:
            raise CostModelError(
                f"cost.{section}: unknown family {family!r}; expected one of: "
                f"{', '.join(families(section))}, or the path of a fitted artifact (*.json)"
            )
        model = factory(cfg, dict(knobs))
    if not isinstance(model, _PROTOCOLS[section]):
        raise CostModelError(f"cost.{section}={family!r} built a {type(model).__name__}, not a {section} cost model")
    model.domain.strict = cfg.cost.strict
    return model


def colocated_offload_s(cfg: SimConfig, rollout: Any = None, training: Any = None) -> float:
    """Seconds of host offload and reload per training step when rollout and training share GPUs.

    Before training the engine's weights go to the host and the trainer's weights, gradients and
    optimizer states come back; after it, the reverse. Each GPU moves its own share over its host
    link at ``cost.offload_bytes_per_s``: ``2 * (engine weights + trainer state) / bandwidth``.
    Models that do not expose their bytes are estimated from the architecture (BF16 weights; mixed
    precision Adam state of 16 bytes per parameter spread over the training GPUs).
    """
    arch = model_arch(cfg.deployment.model)
    r, t = cfg.deployment.rollout, cfg.deployment.training
    engine = getattr(rollout, "weight_bytes_per_gpu", None)
    if engine is None:
        engine = arch.weight_bytes(2) / (r.tp * r.pp)
    state_fn = getattr(training, "state_bytes_per_gpu", None)
    trainer = state_fn() if state_fn is not None else 16 * arch.total_params / t.gpus
    return 2 * (engine + trainer) / cfg.cost.offload_bytes_per_s


def build_costs(cfg: SimConfig) -> Costs:
    """Build the rollout, training and weight-sync models of a run (once, before it starts)."""
    rollout = _build_one("rollout", cfg)
    training = _build_one("training", cfg)
    # The policy may fix the placement (e.g. trl sync, slime sync): the offload cost is known
    # either way, and the engine charges it only when the run is colocated.
    offload = colocated_offload_s(cfg, rollout, training)
    return Costs(rollout=rollout, training=training, weight_sync=_build_one("weight_sync", cfg), offload_s=offload)
