"""Build a run's cost models from its configuration, and say where each came from.

`build_costs(cfg)` turns ``cfg.cost`` (a family name or a ``*.json`` artifact path per model, plus
knob dicts) and the deployment layout into a `Costs` record. Families are the objects of
`simrl.cost.registry` (one per family, in the module of its model). Built-in families built from
knobs: rollout ``roofline`` and ``linear``; training ``analytical``, ``fixed`` and ``constant``;
weight sync ``nccl``, ``checkpoint_engine``, ``filesystem``, ``lora`` and ``fixed``. Fitted
families come as artifacts (``srl-regress fit``): rollout ``composed``, ``distserve``, ``psrl``,
``roofline``; training ``fixed``, ``linear``, ``analytical``, ``hydraulis``, ``fsdp``; weight sync
``fitted``.

An artifact is checked before it is used: its family and coefficients (`registry.read`), the
layout a layout-specific fit belongs to (``fitted_for`` model / tp / pp: another one is an error),
and the GPU it was fitted on (another GPU is a `CostModelWarning`, an error under
``cost.strict``). Knobs are not accepted beside an artifact (they would be silently unused).

`Costs.provenance()` says, per role, which family answered, from what (knobs or an artifact and
the data it was fitted on), for which GPU and layout, and how many queries left its validity
domain; the run report renders it as the cost-provenance table.

Plug-ins add knob-built families with `register_rollout_family` /
`register_training_family` / `register_weight_sync_family`; a factory takes
``(cfg: SimConfig, knobs: dict)`` and returns the model (use `check_knobs` to reject unknown knobs).
Layout values (GPU, TP, PP, ...) come from ``cfg.deployment``; knobs are the rest of a family's
keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from simrl.cost import registry
from simrl.cost.artifact import ArtifactError
from simrl.cost.base import CostModelError, RolloutCost, TrainingCost, ValidityDomain, WeightSyncCost
from simrl.cost.colocated import ColocatedCost, colocated_cost
from simrl.cost.family import (  # noqa: F401  (check_knobs / knob_names: the plug-in API)
    KnobFamily,
    check_fitted_for,
    check_gpu,
    check_knobs,
    fitted_gpu,
    knob_message,
    knob_names,
    run_layout,
)

if TYPE_CHECKING:
    from simrl.config import SimConfig

Factory = Callable[["SimConfig", dict[str, Any]], Any]
ROLES = ("rollout", "training", "weight_sync")


@attrs.frozen
class CostSource:
    """Where one role's cost model came from (the static half of a cost-provenance row)."""

    role: str
    family: str
    spec: str  # the configured value: a family name or the artifact path
    basis: str  # what the model is
    data: str  # what it was fitted on ("not fitted: ..." for knob-built families)
    n_observations: int = 0
    fitted_gpu: str | None = None  # GPU of the fit's observations (None: not fitted / unknown)
    fitted_for: dict[str, Any] = attrs.field(factory=dict)  # model / gpu / tp / pp of a layout-specific fit
    run_gpu: str = ""
    run_layout: dict[str, Any] = attrs.field(factory=dict)  # the run's model / tp / pp for this role


@attrs.define
class Costs:
    """The three cost models of a run, and where each came from."""

    rollout: RolloutCost
    training: TrainingCost
    weight_sync: WeightSyncCost
    offload_s: float = 0.0  # colocated overhead per step (the sum of the colocated phases), charged when colocated
    sources: dict[str, CostSource] = attrs.field(factory=dict)  # by role; empty when built in code
    colocated: ColocatedCost | None = None  # the phases of offload_s; None when built in code

    @property
    def colocated_phases(self) -> dict[str, float]:
        """Seconds of each colocated phase per step, in order (empty when built in code)."""
        return self.colocated.phases() if self.colocated is not None else {}

    def offload_before_s(self) -> float:
        """Colocated: from the pause of rollout to the start of training (sleep, trainer state in)."""
        return self.colocated.before_s() if self.colocated is not None else self.offload_s / 2

    def offload_after_s(self, instances: int) -> float:
        """Colocated: from the end of training to the resume of rollout (trainer state out, wake,
        reshard into the engine, KV rebuild). Built in code: half of ``offload_s`` plus a publish
        of the weight-sync model."""
        if self.colocated is not None:
            return self.colocated.after_s()
        return self.offload_s / 2 + self.weight_sync.publish_time(instances)

    def domains(self) -> list[ValidityDomain]:
        return [self.rollout.domain, self.training.domain, self.weight_sync.domain]

    def domain_reports(self) -> list[dict]:
        """Every out-of-domain record so far, all three models (for the run report)."""
        return [rec for d in self.domains() for rec in d.report()]

    def provenance(self) -> list[dict]:
        """Per role: family, source, what it was fitted on, fitted-for vs run GPU and layout, and
        the out-of-domain queries so far (for the run report's cost-provenance table)."""
        rows = []
        for role in ROLES:
            model = getattr(self, role)
            src = self.sources.get(role)
            if src is None:  # built in code (tests, benchmarks): say so instead of guessing
                src = CostSource(role=role, family=type(model).__name__, spec="(constructed in code)",
                                 basis="", data="(constructed in code)")
            rows.append({**attrs.asdict(src), **model.domain.outside()})
        return rows


# -- plug-in registration ------------------------------------------------------------------------

def _register(section: str, name: str, factory: Factory) -> None:
    registry.register(KnobFamily(section, name, factory))


def register_rollout_family(name: str, factory: Factory) -> None:
    _register("rollout", name, factory)


def register_training_family(name: str, factory: Factory) -> None:
    _register("training", name, factory)


def register_weight_sync_family(name: str, factory: Factory) -> None:
    _register("weight_sync", name, factory)


def families(section: str) -> list[str]:
    """Family names ``cost.<section>=NAME`` accepts ('rollout', 'training' or 'weight_sync')."""
    return registry.names(section, from_knobs=True)


# -- artifacts and assembly ----------------------------------------------------------------------

def load_artifact(section: str, path: str, cfg: SimConfig) -> tuple[Any, dict]:
    """(model, artifact) for ``cost.<section>=path``: family, coefficients, layout and GPU checked.

    Malformed coefficients the family's check did not catch still end as an `ArtifactError`
    naming the file, never as a KeyError inside the engine."""
    art, fam = registry.read(path)
    if art["target"] != section:
        raise ArtifactError(f"{path}: target is {art['target']!r}, expected {section!r} (cost.{section})")
    check_fitted_for(art.get("fitted_for") or {}, fam.layout_keys, cfg, section, path)
    check_gpu(fitted_gpu(art), cfg, section, path)
    try:
        return fam.build(art, cfg), art
    except CostModelError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ArtifactError(f"{path}: coefficients of {section} family {fam.name!r} are malformed "
                            f"({type(exc).__name__}: {exc})") from None


def _source(section: str, spec: str, fam_name: str, basis: str, art: dict | None, cfg: SimConfig) -> CostSource:
    run = {k: v for k, (v, _) in run_layout(cfg, section).items()}
    run_gpu = run.pop("gpu")
    if art is None:
        given = f"cost.{section}_knobs" if getattr(cfg.cost, f"{section}_knobs") else "the family's defaults"
        data, n, gpu, ff = f"none (not fitted; built from {given})", 0, None, {}
    else:
        prov = art["provenance"]
        data = str(prov.get("label") or "fitted (no label)")
        files = prov.get("observation_files") or []
        if files:
            data += f" [{', '.join(str(f) for f in files)}]"
        n, gpu, ff = int(prov.get("n_observations") or 0), fitted_gpu(art), dict(art.get("fitted_for") or {})
    return CostSource(role=section, family=fam_name, spec=spec, basis=basis, data=data, n_observations=n,
                      fitted_gpu=gpu, fitted_for=ff, run_gpu=str(run_gpu), run_layout=run)


_PROTOCOLS = {"rollout": RolloutCost, "training": TrainingCost, "weight_sync": WeightSyncCost}


def _build_one(section: str, cfg: SimConfig) -> tuple[Any, CostSource]:
    spec: str = getattr(cfg.cost, section)
    knobs: dict[str, Any] = getattr(cfg.cost, f"{section}_knobs")
    if spec.endswith(".json"):
        if knobs:
            raise CostModelError(f"cost.{section}_knobs.{sorted(knobs)[0]}: knobs are not used with an artifact "
                                 f"(cost.{section}={spec}); remove them or use a built-in family")
        model, art = load_artifact(section, spec, cfg)
        fam = registry.family(section, art["family"])
        fam_name, basis = fam.name, fam.fitted_basis or fam.basis
    else:
        names = families(section)
        if spec not in names:
            fitted = registry.names(section, fittable=True, from_knobs=False)
            hint = f"; {spec!r} is fitted: give its artifact path" if spec in fitted else ""
            raise CostModelError(
                f"cost.{section}: unknown family {spec!r}; expected one of: {', '.join(names)}, "
                f"or the path of a fitted artifact (*.json){hint}"
            )
        fam = registry.family(section, spec)
        try:
            model = fam.build(None, cfg)
        except CostModelError as exc:  # name the knob by its config key where the message names one
            msg = str(exc)
            if msg.startswith("cost.") or not knobs:
                raise
            raise CostModelError(knob_message(section, spec, msg, knobs)) from None
        art, fam_name, basis = None, spec, fam.basis
    if not isinstance(model, _PROTOCOLS[section]):
        raise CostModelError(f"cost.{section}={spec!r} built a {type(model).__name__}, not a {section} cost model")
    model.domain.strict = cfg.cost.strict
    return model, _source(section, spec, fam_name, basis, art, cfg)


def colocated_offload_s(cfg: SimConfig, rollout: Any = None, training: Any = None) -> float:
    """Seconds of colocated overhead per training step: the sum of `ColocatedCost.phases`
    (sleep, trainer state to and from host, wake, reshard, KV rebuild; ``simrl.cost.colocated``)."""
    return colocated_cost(cfg, rollout, training).total_s()


def _is_colocated(cfg: SimConfig) -> bool:
    from simrl.policy.rules import Placement

    spec = getattr(cfg.policy, "sync_spec", None)
    placement = getattr(spec, "placement", None) or Placement(cfg.deployment.placement)
    return placement is Placement.COLOCATED


def build_costs(cfg: SimConfig) -> Costs:
    """Build the rollout, training and weight-sync models of a run (once, before it starts)."""
    rollout, r_src = _build_one("rollout", cfg)
    training, t_src = _build_one("training", cfg)
    # The policy may fix the placement (e.g. trl sync, slime sync): the offload cost is known
    # either way, and the engine charges it only when the run is colocated.
    colocated = colocated_cost(cfg, rollout, training)
    if _is_colocated(cfg) and (errs := colocated.memory_errors()):
        raise CostModelError("; ".join(errs))
    weight_sync, w_src = _build_one("weight_sync", cfg)
    return Costs(rollout=rollout, training=training, weight_sync=weight_sync, offload_s=colocated.total_s(),
                 colocated=colocated, sources={"rollout": r_src, "training": t_src, "weight_sync": w_src})
