"""Runtime prediction from a live snapshot: per-request and per-batch finish-time quantiles,
and what-ifs (move engines between rollout and training, change rollout TP, change the
staleness bound). docs/predict.md describes the method and its limits.

Each prediction restores the engine from the snapshot N times (`simrl.engine.restore`, one
seeded draw of the unknown lengths and future prompts each), runs it until the next
``batches`` training batches are ready, and reports quantiles over the draws.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from simrl.engine.restore import restore
from simrl.snapshot import Snapshot, SnapshotError

QUANTILES = (0.1, 0.5, 0.9)
#: SimPy events one draw may run before the predictor gives up on it (no hang)
MAX_EVENTS_PER_DRAW = 20_000_000


@attrs.frozen
class WhatIf:
    """A change applied at the snapshot instant. All zero/None: the baseline."""

    move_to_training: int = 0  # rollout engines moved to training (negative: training -> rollout)
    tp: int | None = None  # new rollout TP, keeping the rollout GPU count
    staleness: int | None = None  # new staleness bound of the policy

    @property
    def label(self) -> str:
        parts = []
        if self.move_to_training:
            k = self.move_to_training
            parts.append(f"move {abs(k)} engine{'s' if abs(k) != 1 else ''} to {'training' if k > 0 else 'rollout'}")
        if self.tp is not None:
            parts.append(f"rollout TP {self.tp}")
        if self.staleness is not None:
            parts.append(f"staleness bound {self.staleness}")
        return ", ".join(parts) or "as is"


@attrs.frozen
class Prediction:
    label: str
    t0: float
    draws: int
    trainer_free_s: float  # when the trainer could take its next batch
    reshard_s: float  # the what-if's resharding / reload cost (weight-sync model)
    batch_times: tuple[tuple[float, ...], ...]  # [draw][k]: absolute time batch k is ready (nan: never)
    request_finish: dict[int, tuple[float, ...]]  # rid -> per-draw absolute finish time (nan: not by then)

    def batch_quantiles(self, k: int = 0) -> tuple[float, ...]:
        xs = np.array([b[k] for b in self.batch_times], dtype=float)
        if np.isnan(xs).any():
            return tuple(math.nan for _ in QUANTILES)
        return tuple(float(x) for x in np.quantile(xs, QUANTILES))

    def request_quantiles(self, rid: int) -> tuple[float, ...]:
        xs = np.array(self.request_finish[rid], dtype=float)
        xs = xs[~np.isnan(xs)]
        if not len(xs):
            return tuple(math.nan for _ in QUANTILES)
        return tuple(float(x) for x in np.quantile(xs, QUANTILES))

    def stalls(self) -> bool:
        """Does the trainer wait for its next batch (median draw)?"""
        p50 = self.batch_quantiles(0)[1]
        return math.isnan(p50) or p50 > self.trainer_free_s + 1e-9

    def to_dict(self) -> dict:
        nb = len(self.batch_times[0]) if self.batch_times else 0
        return {
            "what_if": self.label,
            "snapshot_time_s": self.t0,
            "draws": self.draws,
            "trainer_free_s": self.trainer_free_s,
            "reshard_s": self.reshard_s,
            "stalls": self.stalls(),
            "batches": [dict(zip(("p10_s", "p50_s", "p90_s"), self.batch_quantiles(k), strict=True))
                        for k in range(nb)],
            "requests": {str(rid): dict(zip(("p10_s", "p50_s", "p90_s"), self.request_quantiles(rid), strict=True))
                         for rid in sorted(self.request_finish)},
        }


def what_if_config(snap: Snapshot, w: WhatIf):
    """The configuration after ``w``, and the what-if's reshard/reload cost inputs."""
    cfg = snap.sim_config()
    dep = cfg.deployment
    ro, trn = dep.rollout, dep.training
    if w.move_to_training:
        k = w.move_to_training
        instances = ro.instances - k
        if instances < 1:
            raise SnapshotError(f"cannot move {k} engines to training: rollout has {ro.instances}")
        gpus = trn.gpus + k * ro.gpus_per_instance
        if gpus < 1:
            raise SnapshotError(f"cannot move {-k} engines to rollout: training has {trn.gpus} GPUs")
        try:
            trn = attrs.evolve(trn, gpus=gpus)
        except ValueError as exc:
            raise SnapshotError(f"moving {k} engines gives training {gpus} GPUs: {exc}") from None
        ro = attrs.evolve(ro, instances=instances)
    if w.tp is not None:
        gpus = ro.gpus
        per = w.tp * ro.pp * ro.dp
        if gpus % per:
            raise SnapshotError(f"rollout TP {w.tp}: {gpus} rollout GPUs are not divisible by tp*pp*dp={per}")
        ro = attrs.evolve(ro, tp=w.tp, instances=gpus // per, kv_capacity_tokens=None
                          if ro.kv_capacity_tokens is None else ro.kv_capacity_tokens * w.tp // ro.tp)
    policy = cfg.policy
    if w.staleness is not None:
        policy = with_staleness(policy, w.staleness)
    return attrs.evolve(cfg, deployment=attrs.evolve(dep, rollout=ro, training=trn), policy=policy)


def with_staleness(policy, bound: int):
    """The policy with the knob that sets its declared staleness bound changed to ``bound``.

    Presets name that knob differently (``staleness``, ``max_staleness``, ``lag``, ...): the
    knob is found by trying each integer field and keeping the one that moves the bound.
    """
    cur = policy.staleness_spec.bound
    if cur is None:
        raise SnapshotError(f"policy {policy.kind} declares no staleness bound to change")
    for f in attrs.fields(type(policy)):
        v = getattr(policy, f.name)
        if isinstance(v, bool) or not isinstance(v, int):
            continue
        try:
            p2 = attrs.evolve(policy, **{f.name: v + (bound - cur)})
        except (ValueError, TypeError):
            continue
        if p2.staleness_spec.bound == bound:
            return p2
    raise SnapshotError(f"policy {policy.kind}: no knob sets the staleness bound to {bound} (it is {cur})")


def predict(snap: Snapshot, draws: int = 20, batches: int = 1, what_if: WhatIf | None = None,
            costs=None) -> Prediction:
    """Run ``draws`` restored futures of ``snap`` until ``batches`` more batches are ready."""
    if draws < 1 or batches < 1:
        raise SnapshotError("draws and batches must be at least 1")
    w = what_if or WhatIf()
    cfg = what_if_config(snap, w)
    rebuilt = w.tp is not None
    moved = abs(w.move_to_training)
    reload_s = trainer_delay = 0.0
    if costs is None:
        from simrl.cost.build import build_costs

        costs = build_costs(cfg)
    if rebuilt:
        reload_s = float(costs.weight_sync.publish_time(cfg.deployment.rollout.instances))
    elif w.move_to_training < 0:
        reload_s = float(costs.weight_sync.publish_time(moved))
    elif w.move_to_training > 0:
        trainer_delay = float(costs.weight_sync.publish_time(moved))
    batch_times, finish, free = [], {}, snap.time_s
    for d in range(draws):
        rs = restore(snap, d, cfg, costs, relayout=rebuilt, reload_s=reload_s, trainer_delay_s=trainer_delay)
        free = rs.trainer_free_s
        times = _run_until_batches(rs, batches)
        batch_times.append(tuple(times + [math.nan] * (batches - len(times))))
        for rid, r in rs.requests.items():
            finish.setdefault(rid, []).append(math.nan if r.finish is None else float(r.finish))
    return Prediction(label=w.label, t0=snap.time_s, draws=draws, trainer_free_s=free,
                      reshard_s=reload_s or trainer_delay, batch_times=tuple(batch_times),
                      request_finish={k: tuple(v) for k, v in finish.items()})


def _run_until_batches(rs, batches: int) -> list[float]:
    sim = rs.sim
    horizon = sim.cfg.run.time_horizon_s
    times: list[float] = []
    seen = len(sim.events)
    n = 0
    while len(times) < batches and n < MAX_EVENTS_PER_DRAW:
        if sim.env.peek() > horizon or not sim.step():
            break
        n += 1
        evs = sim.events
        if len(evs) > seen:
            times += [e["t"] for e in evs[seen:] if e["kind"] == "batch_ready"]
            seen = len(evs)
    return times[:batches]
