"""The cost-model family protocol: one object per family, registered once in `simrl.cost.registry`.

A family owns everything about one form of cost model:

- ``fit(obs, opts) -> (coefficients, validity_domain)`` from observations (fittable families);
- ``predict(art, obs, opts) -> (predicted, measured, group)`` for every observation an artifact
  can answer (used by ``srl-regress eval`` and k-fold cross-validation);
- ``check(coefficients, where)``: the artifact's coefficients have the keys and types ``build``
  reads (an `ArtifactError` naming the file and key otherwise);
- ``build(art, cfg) -> model``: the object a run queries, from an artifact dict, or with
  ``art=None`` from ``cfg.cost.<target>_knobs`` (families that need no fit: analytical and
  closed-form models).

``layout_keys`` names the ``fitted_for`` keys (model, tp, pp) whose values must equal the run's
deployment: a layout-specific fit loaded for another layout is an error, never ignored.
``basis`` is one line saying what the model is, for the run's cost-provenance table
(``fitted_basis`` when an artifact of the family is a different form than the knob-built one).

This module also holds the knob helpers every knob-built family uses (`check_knobs`,
`knob_names`, `construct`) and the rollout KV-capacity rule of fitted families.
"""

from __future__ import annotations

import math
import re
import sys
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs
import numpy as np

from simrl.cost.artifact import TARGETS, ArtifactError, check_coefficients
from simrl.cost.base import CostModelError

Predictions = tuple[np.ndarray, np.ndarray, list[str]]


@runtime_checkable
class Family(Protocol):
    target: str  # rollout | training | weight_sync
    name: str
    fittable: bool  # fit / predict exist (srl-regress fit --family NAME)
    from_knobs: bool  # cost.<target>=NAME builds it without an artifact
    layout_keys: tuple[str, ...]  # fitted_for keys that must equal the run's deployment
    basis: str

    def fit(self, obs: Sequence, opts: dict) -> tuple[dict, dict]: ...

    def predict(self, art: dict, obs: Sequence, opts: dict) -> Predictions: ...

    def check(self, coefficients: dict, where: str) -> None: ...

    def build(self, art: dict | None, cfg) -> Any: ...


class FamilyBase:
    """Defaults for a family: not fittable, artifact-only, coefficients checked against a spec.

    Subclasses set ``target``, ``name``, ``basis`` and override what they support;
    ``coefficients`` maps each top-level coefficient key to ``number``, ``object``, ``list``
    (a trailing ``?`` makes it optional; ``object|null`` allows null).
    """

    target: ClassVar[str]
    name: ClassVar[str]
    basis: ClassVar[str] = ""
    fitted_basis: ClassVar[str] = ""  # what an artifact of it is, when that differs from ``basis``
    fittable: ClassVar[bool] = False
    from_knobs: ClassVar[bool] = False
    layout_keys: ClassVar[tuple[str, ...]] = ()
    fit_requires: ClassVar[tuple[str, ...]] = ()  # fit options srl-regress demands (the layout fitted)
    coefficients: ClassVar[dict[str, str]] = {}
    # the validity_domain dimensions the built model checks queries against (`ValidityDomain.check`);
    # None: not declared (a plug-in family), any dimension is accepted
    domain_dims: ClassVar[tuple[str, ...] | None] = None

    def fit(self, obs: Sequence, opts: dict) -> tuple[dict, dict]:
        raise CostModelError(f"{self.target} family {self.name!r} is not fitted from observations")

    def predict(self, art: dict, obs: Sequence, opts: dict) -> Predictions:
        raise CostModelError(f"{self.target} family {self.name!r} does not predict observations")

    def check(self, coefficients: dict, where: str) -> None:
        check_coefficients(coefficients, self.coefficients, where)

    def check_domain(self, domain: dict, where: str) -> None:
        """A validity_domain dimension the model never checks (a typo such as ``batch_sise``)
        would bound nothing: refused with the dimensions it reads."""
        if self.domain_dims is None:
            return
        extra = sorted(set(domain) - set(self.domain_dims), key=str)
        if extra:
            from simrl.strictio import did_you_mean

            known = ", ".join(self.domain_dims) or "none (leave validity_domain empty: {})"
            raise ArtifactError(f"{where}: validity_domain.{extra[0]}: unknown dimension"
                                f"{did_you_mean(str(extra[0]), self.domain_dims)}; the {self.target} family "
                                f"{self.name!r} checks: {known}")

    def build(self, art: dict | None, cfg) -> Any:
        if art is None:
            raise CostModelError(
                f"cost.{self.target}={self.name}: this family is fitted from observations; give the path of "
                f"its artifact (srl-regress fit --family {self.name} ... -o FILE.json; cost.{self.target}=FILE.json)")
        raise ArtifactError(f"{self.target} family {self.name!r} cannot be built from an artifact")

    def __repr__(self) -> str:
        return f"<{self.target} family {self.name!r}>"


@attrs.frozen
class KnobFamily(FamilyBase):
    """A family given as a factory ``(cfg, knobs) -> model`` (built-in modes and plug-ins)."""

    target: str  # type: ignore[misc]
    name: str  # type: ignore[misc]
    factory: Callable[[Any, dict[str, Any]], Any]
    basis: str = "registered factory"  # type: ignore[misc]
    from_knobs: bool = True  # type: ignore[misc]

    def build(self, art: dict | None, cfg) -> Any:
        if art is not None:
            return super().build(art, cfg)
        return self.factory(cfg, dict(getattr(cfg.cost, f"{self.target}_knobs")))


def check_target(target: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"unknown cost-model target {target!r}; expected one of {', '.join(TARGETS)}")


# -- knobs ---------------------------------------------------------------------------------------

def knobs_of(cfg, target: str) -> dict[str, Any]:
    return dict(getattr(cfg.cost, f"{target}_knobs"))


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


def _knob_type_error(hint: Any, value: Any) -> str | None:
    """What is wrong with ``value`` for a field annotated ``hint`` (None: nothing, or a type this
    check does not know). Exact types, as the config loader's: a bool is not a number, a string
    is not a number, a float is never truncated to an integer, NaN and infinity are refused."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        known = [a for a in args if a is not type(None)]
        if len(known) != 1:
            return None
        hint = known[0]
    if typing.get_origin(hint) is typing.Literal:
        return None if value in args and type(value) in {type(a) for a in args} else \
            f"expected one of {', '.join(repr(a) for a in args)}, got {value!r}"
    shown = f"{value!r} ({type(value).__name__})"
    quoted = "; write it without quotes" if isinstance(value, str) else ""
    if hint is bool:
        return None if type(value) is bool else f"expected true or false, got {shown}{quoted}"
    if hint is int:
        return None if type(value) is int else f"expected an integer, got {shown}{quoted}"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"expected a number, got {shown}{quoted}"
        return None if math.isfinite(value) else f"expected a finite number, got {value!r}"
    if hint is str:
        return None if isinstance(value, str) else f"expected a string, got {shown}"
    return None


def _field_hints(cls: type) -> dict[str, Any]:
    """Each attrs field's annotation, resolved one by one (one unresolvable annotation, e.g. a
    name imported only for type checking, leaves the others checked)."""
    ns = {**vars(typing), **vars(sys.modules[cls.__module__]), **{"float": float, "int": int}}
    out: dict[str, Any] = {}
    for a in attrs.fields(cls):
        hint = a.type
        if isinstance(hint, str):
            try:
                hint = eval(hint, ns)  # noqa: S307 - the class's own annotation text
            except Exception:  # noqa: BLE001 - not resolvable here: not checked here
                continue
        out[a.name] = hint
    return out


def check_knob_types(section: str, family: str, cls: type, knobs: dict[str, Any]) -> None:
    """Raise `CostModelError` naming ``cost.<section>_knobs.<name>`` for the first knob whose value
    does not have its field's annotated type (bool, int, float, str, optional, Literal)."""
    hints = _field_hints(cls)
    alias = {a.alias: a.name for a in attrs.fields(cls)}
    for k in sorted(knobs):
        hint = hints.get(alias.get(k, k))
        err = _knob_type_error(hint, knobs[k]) if hint is not None else None
        if err:
            raise CostModelError(f"cost.{section}_knobs.{k}: {err} ({section} family {family!r})")


def _validator_text(exc: BaseException) -> str:
    """An attrs validator's message without its ``Attribute(...)`` tail."""
    if len(exc.args) > 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


def knob_message(section: str, family: str, message: str, knobs: dict[str, Any]) -> str:
    """``message`` prefixed with the config key of the knob it is about, where it names one."""
    for k in sorted(knobs, key=len, reverse=True):
        if re.match(rf"'?{re.escape(k)}\b'?", message) or f"'{k}'" in message:
            return f"cost.{section}_knobs.{k}: {message} ({section} family {family!r})"
    return f"cost.{section}_knobs ({section} family {family!r}): {message}"


def construct(section: str, family: str, cls: type, knobs: dict[str, Any], **layout: Any) -> Any:
    """``cls(**layout, **knobs)`` with unknown knobs, wrong types and bad values named by their
    config key (``cost.<section>_knobs.<name>``)."""
    check_knobs(section, family, knobs, knob_names(cls, set(layout)))
    check_knob_types(section, family, cls, knobs)
    try:
        return cls(**layout, **knobs)
    except CostModelError as exc:
        msg = str(exc)
        if msg.startswith("cost."):
            raise
        raise CostModelError(knob_message(section, family, msg, knobs)) from None
    except (TypeError, ValueError) as exc:
        raise CostModelError(knob_message(section, family, _validator_text(exc), knobs)) from None


# -- shared by the fitted rollout families -------------------------------------------------------

def rollout_name(family: str, cfg) -> str:
    ro = cfg.deployment.rollout
    return f"rollout/{family}[{cfg.deployment.model} tp{ro.tp} pp{ro.pp}]"


def rollout_kv_tokens(art: dict, cfg) -> int:
    """Instance KV capacity: the config's value, else a measured kv_probe, else the roofline rule."""
    from simrl.cost.roofline import RooflineRollout

    ro = cfg.deployment.rollout
    if ro.kv_capacity_tokens is not None:
        return int(ro.kv_capacity_tokens)
    if "kv_capacity_tokens" in art["coefficients"]:
        return int(art["coefficients"]["kv_capacity_tokens"])
    return RooflineRollout(cfg.deployment.model, ro.gpu, tp=ro.tp, pp=ro.pp, dp=ro.dp, ep=ro.ep,
                           gpu_memory_utilization=ro.gpu_memory_utilization, max_num_seqs=ro.max_num_seqs,
                           max_num_batched_tokens=ro.max_num_batched_tokens).kv_capacity_tokens()


def value_range(vals: Sequence[float]) -> list[float]:
    return [float(min(vals)), float(max(vals))]


def kv_probe(obs: Sequence, tp: int, pp: int) -> float | None:
    """Median measured KV capacity (``kv_probe`` observations) of one (tp, pp) layout."""
    vals = [o.value for o in obs if o.kind == "kv_probe" and int(o.inputs["tp"]) == tp and int(o.inputs["pp"]) == pp]
    return float(np.median(vals)) if vals else None


def iteration_domain(obs: Sequence) -> dict:
    its = [o for o in obs if o.kind == "iteration"]
    if not its:
        return {}
    return {k: value_range([o.inputs[k] for o in its]) for k in ("batch_size", "kv_tokens", "prefill_tokens")}


# -- what a fit belongs to: layout and GPU -------------------------------------------------------

def run_layout(cfg, target: str) -> dict[str, Any]:
    """The run's values of the keys a ``fitted_for`` may name, with their config keys."""
    d = cfg.deployment
    side = "training" if target == "training" else "rollout"
    part = getattr(d, side)
    return {"model": (d.model, "deployment.model"), "gpu": (part.gpu, f"deployment.{side}.gpu"),
            "tp": (part.tp, f"deployment.{side}.tp"), "pp": (part.pp, f"deployment.{side}.pp")}


def check_fitted_for(fitted_for: dict, keys: Sequence[str], cfg, target: str, where: str,
                     hint: str | None = None) -> None:
    """A layout-specific fit (``keys`` of its ``fitted_for``) must match the run: else an error.

    The GPU is not a layout key here: a fit from another GPU is `check_gpu`'s warning."""
    from simrl.cost.architectures import model_arch

    run = run_layout(cfg, target)
    for key in keys:
        if key == "gpu" or fitted_for.get(key) is None:
            continue
        want, (have, cfg_key) = fitted_for[key], run[key]
        if key == "model":
            if model_arch(str(want)).name != model_arch(have).name:
                raise ArtifactError(
                    f"{where}: fitted_for.model is {want!r} but the run deploys {have!r} ({cfg_key}); "
                    "refit for this model or use a family that predicts from shape (composed)")
        elif int(want) != int(have):
            fix = (hint or "refit for {key}={have}").format(key=key, have=have)
            raise ArtifactError(
                f"{where}: fitted_for.{key}={want} but the run uses {cfg_key}={have}; the coefficients "
                f"describe a {key}={want} deployment: {fix} (the fast path and SimPy both refuse another layout)")


def fitted_gpu(art: dict) -> str | None:
    """The GPU an artifact was fitted on: ``fitted_for.gpu``, else the one GPU its observations'
    ``provenance.hardware`` names (None when it names none we know, or several)."""
    from simrl.cost.hardware import gpu_spec

    ff = art.get("fitted_for") or {}
    names = [ff["gpu"]] if ff.get("gpu") else list(art.get("provenance", {}).get("hardware") or [])
    if isinstance(names, str):
        names = [names]
    found = set()
    for n in names:
        base = "CPU" if str(n).rstrip().endswith("(CPU)") else str(n).split("(")[0].strip()  # profilers' CPU form
        try:
            found.add(gpu_spec(base).name)
        except CostModelError:
            continue
    return found.pop() if len(found) == 1 else None


def check_gpu(gpu: str | None, cfg, target: str, where: str) -> None:
    """A fit from another GPU: a `CostModelWarning` (an `ArtifactError` under ``cost.strict``)."""
    import warnings

    from simrl.cost.base import CostModelWarning
    from simrl.cost.hardware import gpu_spec

    if gpu is None:
        return
    have, cfg_key = run_layout(cfg, target)["gpu"]
    if gpu_spec(have).name == gpu:
        return
    msg = (f"{where}: fitted on {gpu} but the run uses {cfg_key}={have}; its predictions carry {gpu} "
           f"behaviour (refit on {have} measurements; cost.strict=true makes this an error)")
    if cfg.cost.strict:
        raise ArtifactError(msg)
    warnings.warn(msg, CostModelWarning, stacklevel=2)


class IterationFamily(FamilyBase):
    """A rollout family fitted on per-iteration telemetry of one layout (psrl, distserve): the
    fitted coefficients plus the KV capacity a kv-probe observation gives, and predictions of
    iteration observations. Subclasses give `fit_coefficients(obs)` and `model(coefs, kv_tokens)`."""

    target, fittable = "rollout", True
    layout_keys = ("model", "tp", "pp")
    domain_dims = ("batch_size", "kv_tokens", "prefill_tokens")
    fit_requires = ("model", "tp")

    def fit(self, obs, opts):
        coefs = self.fit_coefficients(obs)
        kv = kv_probe(obs, opts.get("tp", 1), opts.get("pp", 1))
        if kv is not None:
            coefs["kv_capacity_tokens"] = kv
        return coefs, iteration_domain(obs)

    def predict(self, art, obs, opts):
        import numpy as np

        m = self.model(art["coefficients"], 1)
        pred, act = [], []
        for o in obs:
            if o.kind == "iteration":
                i = o.inputs
                pred.append(m.iteration_time(int(i["batch_size"]), int(i["kv_tokens"]), int(i["prefill_tokens"])))
                act.append(o.value)
        return np.array(pred), np.array(act), ["iteration"] * len(pred)

