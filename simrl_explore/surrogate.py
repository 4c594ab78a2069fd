"""Linear surrogates that let the fast path take points whose costs are not linear.

`simrl_fast` takes only `LinearRollout` (``a + b*batch + c*kv + p*prefill`` per iteration) and
`ConstantTraining` (``a + per_token*tokens`` per step). For a point whose costs come from
another family (e.g. the bundled real-data artifacts: the roofline efficiencies fitted on
Vidur's H100 timings, the analytical training model), `linearise` fits those forms to the
point's own cost models by least squares on relative error, over the operating range of the
point:

- rollout: batch sizes 1..max_num_seqs (geometric), resident KV per sequence from the
  workload's (prompt + completion / 2) quantiles, capped by the KV capacity, prefill of 0..128
  admitted prompts (up to the batch size) (unchunked prefill, as the fast path requires). ``a, b, c`` are fitted on
  the decode iterations (no prefill; most iterations of a run), then ``p`` on the prefill
  iterations' residual: prefill is compute-bound where decode is bandwidth-bound, and one
  plane cannot follow both, so the decode plane is kept exact-ish and prefill approximate;
- training: batches of ``batch_groups`` workload groups drawn with a fixed seed, and the same
  batches with every length scaled by 0.5 and 1.5.

Coefficients are constrained to be >= 0 (a negative one is dropped and the rest refitted). The
KV capacity and the weight-sync model are the point's own. The fit's relative errors over its
samples are returned (and written per point), and `srl-sweep` re-simulates the top-k on the
SimPy engine with the original models, which measures what the surrogate costs in accuracy.
"""

from __future__ import annotations

import warnings

import attrs
import numpy as np

from simrl.cost.analytical import FixedTraining
from simrl.cost.build import Costs
from simrl.cost.linear import ConstantTraining, LinearRollout


@attrs.frozen
class Fit:
    coef: tuple[float, ...]
    median_rel_err: float
    max_rel_err: float


def nonneg_fit(x: np.ndarray, y: np.ndarray) -> Fit:
    """min sum(((x @ coef) - y) / y)^2 with coef >= 0 (drop negative columns, refit)."""
    w = 1.0 / np.maximum(y, 1e-12)
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    err = np.abs(x @ coef - y) * w
    return Fit(tuple(float(c) for c in coef), float(np.median(err)), float(err.max()))


def _rollout_samples(ro, max_num_seqs: int, capacity: int, workload) -> tuple[np.ndarray, np.ndarray]:
    prompts = workload.call_prompt_tokens.astype(float)
    ctx = prompts + workload.call_completion_tokens.astype(float) / 2
    per_seq = np.quantile(ctx, [0.1, 0.3, 0.5, 0.7, 0.9])
    pf_unit = float(np.median(prompts))
    batches = np.unique(np.round(np.geomspace(1, max_num_seqs, 10)).astype(int))
    rows, ys = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in batches:
            for c in per_seq:
                kv = int(min(capacity, b * c))
                for n_pf in (0, 1, 2, 4, 8, 32, 128):
                    pf = int(n_pf * pf_unit)
                    if n_pf > b:
                        continue
                    rows.append((1.0, b, kv, pf))
                    ys.append(ro.iteration_time(int(b), kv, pf))
    return np.array(rows, dtype=float), np.array(ys, dtype=float)


def _training_samples(tr, workload, batch_groups: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    per_traj = np.add.reduceat(workload.call_prompt_tokens + workload.call_completion_tokens,
                               workload.traj_call_start[:-1])
    rng = np.random.default_rng(seed)
    G = workload.n_groups
    rows, ys = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(12):
            gs = rng.choice(G, size=min(batch_groups, G), replace=False)
            lens = np.concatenate([per_traj[workload.group_traj_start[g]:workload.group_traj_start[g + 1]] for g in gs])
            for scale in (0.5, 1.0, 1.5):
                seq = [max(1, int(x * scale)) for x in lens]
                rows.append((1.0, float(sum(seq))))
                ys.append(tr.step_time(seq))
    return np.array(rows), np.array(ys)


def linear_rollout(cfg, workload, ro) -> tuple[LinearRollout, dict]:
    cap = cfg.deployment.rollout.kv_capacity_tokens or int(ro.kv_capacity_tokens())
    x, y = _rollout_samples(ro, cfg.deployment.rollout.max_num_seqs, cap, workload)
    # Decode iterations (no prefill) are the vast majority: fit a, b, c on them alone, then the
    # per-prefill-token p on the prefill iterations' residual.
    dec = x[:, 3] == 0
    fit = nonneg_fit(x[dec, :3], y[dec])
    a, b, c = fit.coef
    pre = ~dec
    resid = y[pre] - x[pre, :3] @ np.array(fit.coef)
    p = max(0.0, float(np.sum(resid * x[pre, 3] / y[pre] ** 2) / np.sum((x[pre, 3] / y[pre]) ** 2)))
    err = np.abs(x @ np.array([a, b, c, p]) - y) / y
    if a + b <= 0:
        a = float(np.min(y))  # degenerate: keep the iteration time positive
    info = {"surrogate_rollout_med_err": float(np.median(err[dec])),
            "surrogate_rollout_prefill_med_err": float(np.median(err[pre])),
            "surrogate_rollout_max_err": float(err.max())}
    return LinearRollout(a=a, b=b, c=c, p=p, kv_tokens=cap), info


def linear_training(cfg, workload, tr) -> tuple[ConstantTraining, dict]:
    batch = int(getattr(cfg.policy, "batch_groups", 32))
    x, y = _training_samples(tr, workload, batch)
    fit = nonneg_fit(x, y)
    a, per_tok = fit.coef
    info = {"surrogate_training_med_err": fit.median_rel_err, "surrogate_training_max_err": fit.max_rel_err}
    return ConstantTraining(a=a if a + per_tok > 0 else float(np.min(y)), per_token=per_tok), info


class Surrogates:
    """`linearise` with the fits cached per rollout layout and per training layout."""

    def __init__(self):
        self.cache: dict[str, tuple] = {}

    def _get(self, key: str, make):
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def linearise(self, cfg, workload, costs: Costs, workload_key: str = "") -> tuple[Costs, dict]:
        """(fast-path costs, fit report); costs already linear are kept as they are."""
        import json

        from simrl.config import unstructure

        d = unstructure(cfg)
        info: dict = {}
        ro, tr = costs.rollout, costs.training
        if type(ro) is not LinearRollout:
            section = {k: v for k, v in d["deployment"]["rollout"].items() if k != "instances"}
            key = json.dumps(["r", d["deployment"]["model"], section, d["cost"]["rollout"], d["cost"]["rollout_knobs"],
                              workload_key or id(workload)], sort_keys=True, default=str)
            ro, more = self._get(key, lambda: linear_rollout(cfg, workload, costs.rollout))
            info.update(more)
        if type(tr) not in (ConstantTraining, FixedTraining):
            key = json.dumps(["t", d["deployment"]["model"], d["deployment"]["training"], d["cost"]["training"],
                              d["cost"]["training_knobs"], getattr(cfg.policy, "batch_groups", None),
                              workload_key or id(workload)], sort_keys=True, default=str)
            tr, more = self._get(key, lambda: linear_training(cfg, workload, costs.training))
            info.update(more)
        if not info:
            return costs, info
        return Costs(rollout=ro, training=tr, weight_sync=costs.weight_sync, offload_s=costs.offload_s), info


def linearise(cfg, workload, costs: Costs) -> tuple[Costs, dict]:
    """(fast-path costs, fit report) for one point; costs already linear are kept as they are."""
    return Surrogates().linearise(cfg, workload, costs)
