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


# -- the load-spike snapshot and the move-engines question ------------------------------------

@attrs.frozen
class Spike:
    """Where `spike_snapshot` took its snapshot, and what the run itself did next."""

    snapshot: Snapshot
    events: int  # SimPy events run before the snapshot
    in_flight: int  # requests in flight (running, waiting, router queue) at the snapshot
    step: int  # the training step whose batch the trainer is waiting for
    truth_batch_s: float  # when the run itself had that batch ready (absolute)


def _in_flight(sim) -> int:
    return sum(len(i.running) + len(i.waiting) for i in sim.instances) + len(sim.router.queue)


def spike_snapshot(cfg, costs=None, after_steps: int = 1, max_events: int = MAX_EVENTS_PER_DRAW) -> Spike:
    """Simulate ``cfg`` and snapshot its rollout load spike while the trainer is idle.

    The instant is found, not chosen: while the trainer waits for the batch of step
    ``after_steps + 1`` (after ``after_steps`` steps, so the run is past its cold start), the
    event boundary with the most requests in flight (the first one on ties). A second, identical
    run (same config and seed: deterministic) stops there and takes the snapshot.
    """
    from simrl.engine.sim import build_simulation
    from simrl.snapshot import take_snapshot

    if after_steps < 0 or after_steps >= cfg.run.training_steps:
        raise SnapshotError(f"after_steps={after_steps}: the run has {cfg.run.training_steps} training steps")
    if costs is None:
        from simrl.cost.build import build_costs

        costs = build_costs(cfg)

    sim = build_simulation(cfg, costs=costs)
    sim.start()
    best, n, seen, ready = None, 0, 0, None
    while n < max_events and sim.step():
        n += 1
        evs = sim.events
        ready = next((e["t"] for e in evs[seen:] if e["kind"] == "batch_ready" and e.get("step") == after_steps + 1),
                     None)
        seen = len(evs)
        if ready is not None:
            break
        idle = sim.trainer.phase.startswith(("waiting for a batch", "waiting for mini-batch"))
        if sim.st.steps_done >= after_steps and idle:
            load = _in_flight(sim)
            if best is None or load > best[0]:
                best = (load, n)
    if best is None or ready is None:
        raise SnapshotError(f"the run never waited for the batch of step {after_steps + 1} "
                            f"(within {n} events): no idle trainer to snapshot")
    sim = build_simulation(cfg, costs=costs)
    sim.start()
    for _ in range(best[1]):
        sim.step()
    return Spike(snapshot=take_snapshot(sim), events=best[1], in_flight=best[0], step=after_steps + 1,
                 truth_batch_s=float(ready))


@attrs.frozen
class MoveStudy:
    """How many rollout engines can move to training without stalling the next batch.

    ``predictions[i]`` is the prediction for ``ks[i]`` engines moved (``ks[0] == 0``: as is),
    all over the same draws: draw d of every k shares its seed, so the future prompts and the
    lengths of the calls in flight are the same and k is compared with k = 0 draw by draw.

    The trainer can start the next step at max(batch ready, trainer free): the batch needs the
    rollout, the trainer needs its resharding onto the moved GPUs. Moving k engines *stalls* the
    next batch when that start is later than as-is by more than ``tolerance_s`` in the median
    draw (the paired difference); the threshold drawn on the plot is the as-is p50 plus the
    tolerance.
    """

    t0: float
    ks: tuple[int, ...]
    predictions: tuple[Prediction, ...]
    tolerance_s: float

    def starts(self, i: int) -> np.ndarray:
        """Per draw: seconds after the snapshot at which the trainer can start the next step."""
        p = self.predictions[i]
        ready = np.array([b[0] for b in p.batch_times], dtype=float)
        ready = np.where(np.isnan(ready), math.inf, ready)
        return np.maximum(ready, p.trainer_free_s) - self.t0

    def quantiles(self, i: int) -> tuple[float, ...]:
        return _quantiles(self.starts(i))

    def delays(self, i: int) -> np.ndarray:
        """Per draw: how much later than as-is the trainer can start (paired by draw)."""
        a, b = self.starts(i), self.starts(0)
        with np.errstate(invalid="ignore"):
            return np.where(np.isinf(a) & np.isinf(b), 0.0, a - b)

    def delay_quantiles(self, i: int) -> tuple[float, ...]:
        return _quantiles(self.delays(i))

    @property
    def threshold_s(self) -> float:
        return self.quantiles(0)[1] + self.tolerance_s

    def stalls(self, i: int) -> bool:
        return not self.delay_quantiles(i)[1] <= self.tolerance_s

    @property
    def can_move(self) -> int:
        """The most engines that can move: every k up to it keeps the next batch on time."""
        best = 0
        for i, k in enumerate(self.ks):
            if self.stalls(i):
                break
            best = k
        return best

    @property
    def first_stall(self) -> int | None:
        """Index into ``ks`` of the first k that stalls (None: none of those tried)."""
        return next((i for i in range(len(self.ks)) if self.stalls(i)), None)

    def answer(self) -> str:
        k = self.can_move
        i = self.first_stall
        head = f"{k} engine{'s' if k != 1 else ''} can move to training"
        if i is None:
            return (f"{head} (every k tried, up to {self.ks[-1]}, keeps the next batch within "
                    f"{self.tolerance_s:g} s of as-is)")
        d = self.delay_quantiles(i)
        stall = "never forms within the horizon" if math.isinf(d[1]) else f"by {d[1]:.1f} s (p50; p10 {d[0]:.1f} s, p90 {d[2]:.1f} s)"
        return f"{head}; moving {self.ks[i]} stalls the next batch {stall}"

    def to_dict(self) -> dict:
        rows = []
        for i, k in enumerate(self.ks):
            q, d, p = self.quantiles(i), self.delay_quantiles(i), self.predictions[i]
            rows.append({"k": k, "p10_s": q[0], "p50_s": q[1], "p90_s": q[2], "delay_p10_s": d[0],
                         "delay_p50_s": d[1], "delay_p90_s": d[2], "reshard_s": p.reshard_s,
                         "trainer_free_s": p.trainer_free_s - self.t0, "stalls": self.stalls(i)})
        return {"snapshot_time_s": self.t0, "draws": self.predictions[0].draws, "tolerance_s": self.tolerance_s,
                "threshold_s": self.threshold_s, "can_move": self.can_move,
                "first_stall": None if self.first_stall is None else self.ks[self.first_stall],
                "answer": self.answer(), "moves": rows}


def _quantiles(xs: np.ndarray) -> tuple[float, ...]:
    """numpy's linear sample quantiles, except that a quantile touching an infinite value
    (a batch that never forms) is infinite instead of NaN."""
    xs = np.sort(np.asarray(xs, dtype=float))
    out = []
    for q in QUANTILES:
        pos = q * (len(xs) - 1)
        lo, frac = int(math.floor(pos)), pos - math.floor(pos)
        a, b = xs[lo], xs[min(lo + 1, len(xs) - 1)]
        out.append(float(a) if frac == 0 or a == b else float(b) if math.isinf(b) else float(a + (b - a) * frac))
    return tuple(out)


def move_engines(snap: Snapshot, ks, draws: int = 16, tolerance_s: float = 1.0, costs=None,
                 progress=None) -> MoveStudy:
    """Predict the next batch with k = 0 and each of ``ks`` rollout engines moved to training."""
    ks = tuple(sorted({0, *(int(k) for k in ks)}))
    if ks[0] < 0:
        raise SnapshotError(f"move-engines: k must be >= 0, got {ks[0]}")
    if not math.isfinite(tolerance_s) or tolerance_s < 0:
        raise SnapshotError(f"tolerance must be a finite number >= 0, got {tolerance_s}")
    preds = []
    for k in ks:
        preds.append(predict(snap, draws=draws, what_if=WhatIf(move_to_training=k), costs=costs))
        if progress is not None:
            progress(k, preds[-1])
    return MoveStudy(t0=snap.time_s, ks=ks, predictions=tuple(preds), tolerance_s=float(tolerance_s))
