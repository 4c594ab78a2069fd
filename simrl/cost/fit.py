"""Fit, evaluate and build every fitted family: the domain layer behind `srl-regress`.

`fit_artifact` turns observations into an artifact dict (coefficients, validity domain, fit
quality with optional k-fold cross-validation, provenance); `evaluate` predicts each observation
an artifact can answer and returns median / mean / max absolute percentage error overall and per
group (operator, collective or kind); `build_rollout` / `build_training` / `build_weight_sync`
turn an artifact into a cost-model object for a `SimConfig`. No file I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from simrl.cost import distserve, psrl_fit
from simrl.cost.artifact import SCHEMA, TARGETS, ArtifactError, domain_of
from simrl.cost.base import CostModelError
from simrl.cost.composed import ComposedRollout
from simrl.cost.fit_roofline import build_fitted_roofline, fit_roofline, roofline_predictions
from simrl.cost.fit_training import (
    FittedTraining,
    TrainingLayout,
    fit_training,
    layout_from_inputs,
    memory_features,
    time_features,
    training_domain,
)
from simrl.cost.fit_weight_sync import FittedWeightSync, fit_weight_sync
from simrl.cost.fitting import error_summary
from simrl.cost.kerneldb import CollectiveModel, KernelDB, LayerShape, fit_collectives, fit_kernel_db
from simrl.cost.observations import Observation

ALL_FAMILIES = {f: t for t, fams in TARGETS.items() for f in fams}


def target_of(family: str) -> str:
    if family not in ALL_FAMILIES:
        raise CostModelError(f"unknown family {family!r}; expected one of {', '.join(sorted(ALL_FAMILIES))}")
    return ALL_FAMILIES[family]


def _range(vals: Sequence[float]) -> list[float]:
    return [float(min(vals)), float(max(vals))]


def _provenance(obs: Sequence[Observation], files: Sequence[str], label: str) -> dict:
    return {
        "label": label,
        "observation_files": list(files),
        "n_observations": len(obs),
        "sources": sorted({o.provenance.get("source", "") for o in obs})[:50],
        "hardware": sorted({o.provenance.get("hardware", "") for o in obs}),
    }


def _kv_probe(obs: Sequence[Observation], tp: int, pp: int) -> float | None:
    vals = [o.value for o in obs if o.kind == "kv_probe" and int(o.inputs["tp"]) == tp and int(o.inputs["pp"]) == pp]
    return float(np.median(vals)) if vals else None


def fit_coefficients(family: str, obs: Sequence[Observation], opts: dict) -> tuple[dict, dict]:
    """(coefficients, validity domain) of one family from observations."""
    its = [o for o in obs if o.kind == "iteration"]
    it_dom = {k: _range([o.inputs[k] for o in its]) for k in ("batch_size", "kv_tokens", "prefill_tokens")} if its else {}
    if family == "composed":
        ops = [o for o in obs if o.kind == "operator"]
        db = fit_kernel_db(ops, with_tables=opts.get("with_tables", True))
        coefs = {"kernel_db": db.to_dict(opts.get("with_tables", True)),
                 "collectives": {k: c.to_dict() for k, c in fit_collectives(obs).items()},
                 "cpu_overhead_s": float(opts.get("cpu_overhead_s", 0.0)),
                 "attention_flops_fraction": float(opts.get("attention_flops_fraction", 0.75)),
                 "attention_bytes_fraction": float(opts.get("attention_bytes_fraction", 1.0))}
        dom = {"num_tokens": _range([o.inputs["num_tokens"] for o in ops]), "tp": _range([o.inputs["tp"] for o in ops])}
        return coefs, dom
    if family in ("distserve", "psrl"):
        coefs = distserve.fit_distserve(obs) if family == "distserve" else psrl_fit.fit_psrl(obs)
        kv = _kv_probe(obs, opts.get("tp", 1), opts.get("pp", 1))
        if kv is not None:
            coefs["kv_capacity_tokens"] = kv
        return coefs, it_dom
    if family == "roofline":
        return fit_roofline(obs, opts)
    if target_of(family) == "training":
        coefs = fit_training(family, obs, opts.get("model"), opts.get("gpu"))
        return coefs, training_domain(obs, family)
    coefs = fit_weight_sync(obs)
    ws = [o for o in obs if o.kind == "weight_sync"]
    return coefs, {"bytes": _range([o.inputs["bytes"] for o in ws]),
                   "n_instances": _range([o.inputs["n_instances"] for o in ws])}


def make_artifact(family: str, coefs: dict, dom: dict, obs: Sequence[Observation], files: Sequence[str],
                  opts: dict, label: str) -> dict:
    art = {"schema": SCHEMA, "target": target_of(family), "family": family, "coefficients": coefs,
           "validity_domain": dom, "fit_quality": {}, "provenance": _provenance(obs, files, label)}
    fitted_for = {k: opts[k] for k in ("model", "gpu", "tp", "pp") if opts.get(k) is not None}
    if fitted_for:
        art["fitted_for"] = fitted_for
    return art


def fit_artifact(family: str, obs: Sequence[Observation], files: Sequence[str] = (), kfold: int = 0,
                 seed: int = 0, label: str = "fitted on measured observations", **opts) -> dict:
    """Fit ``family`` on ``obs`` and return a complete artifact dict (optionally k-fold checked)."""
    if family == "weight_sync":
        family = "fitted"
    coefs, dom = fit_coefficients(family, obs, opts)
    art = make_artifact(family, coefs, dom, obs, files, opts, label)
    art["fit_quality"]["training"] = evaluate(art, obs, **opts)
    if kfold and kfold > 1:
        art["fit_quality"]["kfold"] = cross_validate(family, obs, kfold, seed, **opts)
    return art


# -- prediction of observations (evaluation) -------------------------------------------------

def predictions(art: dict, obs: Sequence[Observation], physics_only: bool = False,
                **opts) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(predicted, measured, group) for every observation the artifact can answer."""
    fam, coefs = art["family"], art["coefficients"]
    pred, act, grp = [], [], []
    if fam == "composed":
        db = KernelDB.from_dict(coefs["kernel_db"])
        colls = {k: CollectiveModel.from_dict(c) for k, c in coefs["collectives"].items()}
        for o in obs:
            if o.kind == "operator" and o.name in db.coefficients:
                shape, n, tp = LayerShape.from_inputs(o.inputs), o.inputs["num_tokens"], int(o.inputs["tp"])
                f = db.predict_physics if physics_only else db.predict
                pred.append(f(o.name, shape, n, tp))
            elif o.kind == "collective" and (c := colls.get(f"{o.name}/{int(o.inputs['num_workers'])}")) \
                    and c.matches(o):
                pred.append(c.predict(o.inputs["size_bytes"]))
            else:
                continue
            act.append(o.value)
            grp.append(o.name)
    elif fam in ("distserve", "psrl"):
        model_cls = distserve.DistServeRollout if fam == "distserve" else psrl_fit.PsrlRollout
        m = model_cls(coefs, 1)
        for o in obs:
            if o.kind == "iteration":
                i = o.inputs
                pred.append(m.iteration_time(int(i["batch_size"]), int(i["kv_tokens"]), int(i["prefill_tokens"])))
                act.append(o.value)
                grp.append("iteration")
    elif fam == "roofline":
        return roofline_predictions(art, obs, **opts)
    elif art["target"] == "training":
        for o in obs:
            if o.kind != "training_step":
                continue
            lay = layout_from_inputs(o.inputs, o.provenance, opts.get("model"), opts.get("gpu"))
            c = coefs["strategies"].get(lay.strategy) if fam == "hydraulis" else coefs
            key = "time" if o.quantity == "time" else "memory"
            if c is None or c.get(key) is None:
                continue
            feat = (time_features if key == "time" else memory_features)(fam, o.inputs["seq_lens"], lay)
            pred.append(max(float(feat @ np.asarray(c[key])), 0.0))
            act.append(o.value)
            grp.append(f"step_{key}")
    else:
        m = FittedWeightSync(coefs, 0.0)
        for o in obs:
            if o.kind == "weight_sync":
                i = o.inputs
                pred.append(m.time_for(i["bytes"], int(i["n_instances"]), i.get("buckets", 1)))
                act.append(o.value)
                grp.append("weight_sync")
    return np.array(pred), np.array(act), grp


def summarize(pred: np.ndarray, act: np.ndarray, grp: Sequence[str]) -> dict:
    by: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(grp):
        by[g].append(i)
    return {"overall": error_summary(pred, act),
            "per_group": {g: error_summary(pred[idx], act[idx]) for g, idx in sorted(by.items())}}


def evaluate(art: dict, obs: Sequence[Observation], physics_only: bool = False, **opts) -> dict:
    opts = {**art.get("fitted_for", {}), **opts}  # the model / GPU / layout the artifact was fitted for
    pred, act, grp = predictions(art, obs, physics_only=physics_only, **opts)
    if pred.size == 0:
        raise CostModelError(f"{art['family']}: none of the {len(obs)} observations can be evaluated "
                             "by this artifact (wrong kinds?)")
    return summarize(pred, act, grp)


def cross_validate(family: str, obs: Sequence[Observation], k: int, seed: int = 0, **opts) -> dict:
    """K-fold cross-validation over the observations the family is evaluated on."""
    rng = np.random.default_rng(seed)
    folds = rng.permutation(len(obs)) % k
    preds, acts, grps = [], [], []
    for f in range(k):
        train = [o for o, g in zip(obs, folds, strict=True) if g != f]
        test = [o for o, g in zip(obs, folds, strict=True) if g == f]
        coefs, dom = fit_coefficients(family, train, opts)
        art = make_artifact(family, coefs, dom, train, (), opts, "")
        p, a, g = predictions(art, test, **opts)
        preds.append(p)
        acts.append(a)
        grps += g
    out = summarize(np.concatenate(preds), np.concatenate(acts), grps)
    out["k"] = k
    out["seed"] = seed
    return out


# -- building cost-model objects for a run ---------------------------------------------------

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


def build_rollout(art: dict, cfg):
    from simrl.cost.architectures import model_arch
    from simrl.cost.hardware import gpu_spec

    fam, coefs, ro, strict = art["family"], art["coefficients"], cfg.deployment.rollout, cfg.cost.strict
    name = f"rollout/{fam}[{cfg.deployment.model} tp{ro.tp} pp{ro.pp}]"
    dom = domain_of(art, name, strict)
    if fam == "roofline":
        return build_fitted_roofline(art, cfg, dom)
    kv = rollout_kv_tokens(art, cfg)
    if fam == "composed":
        return ComposedRollout(
            db=KernelDB.from_dict(coefs["kernel_db"]), arch=model_arch(cfg.deployment.model), gpu=gpu_spec(ro.gpu),
            tp=ro.tp, pp=ro.pp, collectives={k: CollectiveModel.from_dict(c) for k, c in coefs["collectives"].items()},
            cpu_overhead_s=coefs["cpu_overhead_s"], attention_flops_fraction=coefs["attention_flops_fraction"],
            attention_bytes_fraction=coefs["attention_bytes_fraction"], kv_tokens=kv, domain=dom)
    if fam == "distserve":
        return distserve.DistServeRollout(coefs, kv, domain=dom)
    if fam == "psrl":
        return psrl_fit.PsrlRollout(coefs, kv, domain=dom)
    raise ArtifactError(f"rollout family {fam!r} cannot be built")


def build_training(art: dict, cfg):
    from simrl.cost.architectures import model_arch
    from simrl.cost.hardware import gpu_spec

    tr = cfg.deployment.training
    lay = TrainingLayout(arch=model_arch(cfg.deployment.model), gpu=gpu_spec(tr.gpu), tp=tr.tp, pp=tr.pp,
                         dp=tr.dp, zero_stage=tr.zero_stage, activation_checkpointing=tr.activation_checkpointing)
    dom = domain_of(art, f"training/{art['family']}[{cfg.deployment.model}]", cfg.cost.strict)
    return FittedTraining(art["family"], art["coefficients"], lay, lay.gpu.hbm_bytes, domain=dom)


def build_weight_sync(art: dict, cfg):
    from simrl.cost.architectures import model_arch

    dom = domain_of(art, f"weight_sync/fitted[{cfg.deployment.model}]", cfg.cost.strict)
    return FittedWeightSync(art["coefficients"], model_arch(cfg.deployment.model).weight_bytes(2), domain=dom)
