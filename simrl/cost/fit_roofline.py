"""The `roofline` rollout family: the analytical `RooflineRollout`, its knobs given or fitted.

``cost.rollout=roofline`` builds it from the deployment layout and ``cost.rollout_knobs``
(efficiencies, overheads; the defaults are assumptions, not fits). An artifact of this family
holds fitted knobs.

Two sources of observations, used in this order:

- ``iteration`` observations of one deployment (``fitted_for`` model, GPU, TP): compute and
  bandwidth efficiency, the per-iteration and per-sequence overheads (and the comm efficiency
  when tp > 1) are fitted by Levenberg-Marquardt on log-error of `RooflineRollout.iteration_time`.
- ``operator`` observations (e.g. the Vidur H100 tables): for every measured (model, TP,
  num_tokens) the layer's non-attention operators are summed and compared with the roofline's
  GEMM and elementwise terms for that model's architecture; compute and bandwidth efficiency are
  fitted on log-error. ``all_reduce`` collectives, when present, fit the comm efficiency and
  latency. The overheads are not in such data and keep the roofline defaults (recorded so).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from simrl.cost.architectures import model_arch
from simrl.cost.artifact import domain_of
from simrl.cost.base import CostModelError, ValidityDomain
from simrl.cost.family import FamilyBase, construct, knobs_of, rollout_name
from simrl.cost.fitting import levenberg_marquardt, nonneg_lstsq
from simrl.cost.hardware import gpu_spec
from simrl.cost.kerneldb import DTYPE_BYTES, KNOWN_OPS
from simrl.cost.observations import Observation
from simrl.cost.roofline import RooflineRollout

DEFAULTS = {"compute_efficiency": 0.6, "bandwidth_efficiency": 0.8, "comm_efficiency": 0.8,
            "allreduce_latency_s": 10e-6, "overhead_s": 0.003, "overhead_per_seq_s": 30e-6}


def _sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-np.clip(x, -40, 40))))


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def layer_sums(obs: Sequence[Observation]) -> list[tuple[str, int, float, float]]:
    """(model, tp, num_tokens, summed seconds of the layer's non-embedding operators)."""
    acc: dict[tuple[str, int, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for o in obs:
        if o.kind == "operator" and o.name in KNOWN_OPS and o.name != "emb" and o.inputs.get("model"):
            acc[(o.inputs["model"], int(o.inputs["tp"]), float(o.inputs["num_tokens"]))][o.name].append(o.value)
    return [(m, tp, n, sum(float(np.median(v)) for v in ops.values())) for (m, tp, n), ops in sorted(acc.items())]


def _layer_time(rr: RooflineRollout, tokens: float) -> float:
    m = rr.model
    elementwise = tokens * (8 * m.hidden + 3 * m.intermediate / rr.tp) * DTYPE_BYTES
    return rr.gemm_time(tokens, 1) + elementwise / (rr.gpu.hbm_bytes_per_s * rr.bandwidth_efficiency)


def _rr(model: str, gpu: str, tp: int, knobs: dict) -> RooflineRollout:
    return RooflineRollout(model, gpu, tp=tp, kv_capacity_tokens=10**9, **knobs)


def fit_roofline(obs: Sequence[Observation], opts: dict) -> tuple[dict, dict]:
    gpu = opts.get("gpu") or "H100"
    its = [o for o in obs if o.kind == "iteration"]
    if its:
        model, tp = opts.get("model"), int(opts.get("tp", 1))
        if not model:
            raise CostModelError("roofline fit from iteration observations needs --model (and --tp)")
        y = np.log([o.value for o in its])

        def knobs(x):
            return {"compute_efficiency": _sigmoid(x[0]), "bandwidth_efficiency": _sigmoid(x[1]),
                    "overhead_s": float(np.exp(x[2])), "overhead_per_seq_s": float(np.exp(x[3]))}

        def resid(x):
            rr = _rr(model, gpu, tp, knobs(x))
            return np.log([max(rr.iteration_time(int(o.inputs["batch_size"]), int(o.inputs["kv_tokens"]),
                                                 int(o.inputs["prefill_tokens"])), 1e-12) for o in its]) - y

        x0 = np.array([_logit(0.6), _logit(0.8), np.log(3e-3), np.log(1e-5)])
        coefs = {**DEFAULTS, **knobs(levenberg_marquardt(resid, x0, iters=60)[0])}
        dom = {k: [float(min(o.inputs[k] for o in its)), float(max(o.inputs[k] for o in its))]
               for k in ("batch_size", "kv_tokens", "prefill_tokens")}
        return coefs, dom
    rows = [r for r in layer_sums(obs) if _known(r[0])]
    if not rows:
        raise CostModelError("roofline fit needs iteration observations or operator observations of "
                             "models with a known architecture")
    y = np.log([r[3] for r in rows])

    def resid_ops(x):
        knobs = {"compute_efficiency": _sigmoid(x[0]), "bandwidth_efficiency": _sigmoid(x[1])}
        return np.log([_layer_time(_rr(m, gpu, tp, knobs), n) for m, tp, n, _ in rows]) - y

    x, _ = levenberg_marquardt(resid_ops, np.array([_logit(0.6), _logit(0.8)]), iters=60)
    coefs = {**DEFAULTS, "compute_efficiency": _sigmoid(x[0]), "bandwidth_efficiency": _sigmoid(x[1])}
    coefs.update(_fit_comm(obs, gpu))
    ntok = [r[2] for r in rows]
    dom = {"batch_size": [0.0, max(ntok)], "prefill_tokens": [0.0, max(ntok)]}
    return coefs, dom


def _known(model: str) -> bool:
    try:
        model_arch(model)
    except CostModelError:
        return False
    return True


def _fit_comm(obs: Sequence[Observation], gpu: str) -> dict:
    """Comm efficiency and latency from intra-node all-reduce timings (ring: 2(n-1)/n bytes)."""
    ar = [o for o in obs if o.kind == "collective" and o.name == "all_reduce"
          and int(o.inputs.get("devices_per_node", 0)) >= int(o.inputs["num_workers"]) > 1]
    if len(ar) < 2:
        return {}
    spec = gpu_spec(gpu)
    a = np.array([[1.0, 2 * (o.inputs["num_workers"] - 1) / o.inputs["num_workers"] * o.inputs["size_bytes"]
                   / spec.link_bytes_per_s(int(o.inputs["num_workers"]))] for o in ar])
    y = np.array([o.value for o in ar])
    lat, inv_eff = nonneg_lstsq(a, y, weights=1.0 / y)
    return {"allreduce_latency_s": float(lat), "comm_efficiency": float(min(1.0, 1.0 / inv_eff)) if inv_eff > 0 else 1.0}


def _knobs(coefs: dict) -> dict:
    return {k: coefs[k] for k in DEFAULTS}


def roofline_predictions(art: dict, obs: Sequence[Observation], **opts):
    opts = {k: v for k, v in opts.items() if k != "physics_only"}
    coefs = art["coefficients"]
    ff = art.get("fitted_for", {})
    gpu = opts.get("gpu") or ff.get("gpu") or "H100"
    pred, act, grp = [], [], []
    its = [o for o in obs if o.kind == "iteration"]
    if its:
        model = opts.get("model") or ff.get("model")
        if not model:
            raise CostModelError("roofline evaluation on iterations needs --model")
        rr = _rr(model, gpu, int(opts.get("tp") or ff.get("tp", 1)), _knobs(coefs))
        for o in its:
            i = o.inputs
            pred.append(rr.iteration_time(int(i["batch_size"]), int(i["kv_tokens"]), int(i["prefill_tokens"])))
            act.append(o.value)
            grp.append("iteration")
    for m, tp, n, t in (r for r in layer_sums(obs) if _known(r[0])):
        pred.append(_layer_time(_rr(m, gpu, tp, _knobs(coefs)), n))
        act.append(t)
        grp.append("layer")
    return np.array(pred), np.array(act), grp


def build_fitted_roofline(art: dict, cfg, dom: ValidityDomain) -> RooflineRollout:
    ro = cfg.deployment.rollout
    rr = RooflineRollout(cfg.deployment.model, ro.gpu, tp=ro.tp, pp=ro.pp, dp=ro.dp, ep=ro.ep,
                         gpu_memory_utilization=ro.gpu_memory_utilization, kv_capacity_tokens=ro.kv_capacity_tokens,
                         max_num_seqs=ro.max_num_seqs, max_num_batched_tokens=ro.max_num_batched_tokens,
                         strict=cfg.cost.strict, **_knobs(art["coefficients"]))
    rr.domain.model = dom.model
    for d, rng in dom.ranges.items():  # the fitted ranges narrow the roofline's own
        lo, hi = rr.domain.ranges.get(d, rng)
        rr.domain.ranges[d] = (max(lo, rng[0]), min(hi, rng[1]))
    return rr


def build_roofline(cfg, knobs: dict) -> RooflineRollout:
    """`RooflineRollout` for ``cfg.deployment`` with ``knobs`` (``cost.rollout_knobs``)."""
    r = cfg.deployment.rollout
    return construct(
        "rollout", "roofline", RooflineRollout, knobs, model=cfg.deployment.model, gpu=r.gpu, tp=r.tp,
        pp=r.pp, dp=r.dp, ep=r.ep, gpu_memory_utilization=r.gpu_memory_utilization,
        kv_capacity_tokens=r.kv_capacity_tokens, max_num_seqs=r.max_num_seqs,
        max_num_batched_tokens=r.max_num_batched_tokens, strict=cfg.cost.strict,
    )


class RooflineFamily(FamilyBase):
    """From knobs (analytical, default efficiencies) or from an artifact of fitted efficiencies.
    A fit from iteration observations belongs to one model and TP (its ``fitted_for``)."""

    target, name, fittable, from_knobs = "rollout", "roofline", True, True
    domain_dims = ("batch_size", "kv_tokens", "prefill_tokens")
    layout_keys = ("model", "tp", "pp")
    basis = ("analytical roofline per operator class on the busiest GPU + TP all-reduces + overheads "
             "(efficiencies assumed)")
    fitted_basis = "the analytical roofline with its efficiencies (and overheads) fitted"
    coefficients = {k: "number" for k in DEFAULTS}

    def fit(self, obs, opts):
        return fit_roofline(obs, opts)

    def predict(self, art, obs, opts):
        return roofline_predictions(art, obs, **opts)

    def build(self, art, cfg) -> RooflineRollout:
        if art is None:
            return build_roofline(cfg, knobs_of(cfg, "rollout"))
        return build_fitted_roofline(art, cfg, domain_of(art, rollout_name(self.name, cfg), cfg.cost.strict))


FAMILY = RooflineFamily()
