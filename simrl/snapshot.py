"""Live snapshots of an RL pipeline: the format, a strict reader, and a writer from a simulation.

A snapshot is one JSON object (schema ``simrl.snapshot.v1``, docs/predict.md) that says what a
running pipeline holds at one instant: per rollout instance the running and waiting requests
with the tokens generated so far, the KV in use and the weight version; the router queue;
the trainer's phase and progress; the in-flight groups, the buffer of finished groups and the
retry queue; the policy's own state; and the resolved configuration (policy and deployment).

What a live system cannot know is left out on purpose: the forced completion length of a
request in flight (the predictor draws it, `simrl.engine.restore`) and the rewards of
unfinished trajectories.

`read_snapshot` checks every key and type and names the file and the key path on error;
`take_snapshot` writes one from a `Simulation` at any event boundary (``srl step``'s ``snap``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs

from workloads.strictio import INT_MAX

SNAPSHOT_SCHEMA = "simrl.snapshot.v1"

TRAINER_PHASES = ("waiting", "training", "publishing", "done")


class SnapshotError(ValueError):
    """A snapshot file that does not follow the schema; the message names the file and key."""


# -- the typed snapshot ----------------------------------------------------------------------

@attrs.frozen
class SnapRequest:
    """One model call in flight: in a batch, a waiting queue or the router queue."""

    rid: int
    gid: int
    tid: int  # workload trajectory index
    turn: int  # call index within the trajectory
    prompt_tokens: int  # whole prompt, history included
    new_tokens: int  # prompt tokens appended since the previous call
    shared_tokens: int  # group-shared prefix (turn 0 only)
    generated_tokens: int  # tokens generated so far (kept across preemption / abort-resume)
    prefill_left_tokens: int  # uncached prompt tokens still to prefill (running requests)
    version: int  # weights version of its current tokens
    version_start: int | None
    arrival_s: float
    aborts: int
    preemptions: int
    salted: bool


@attrs.frozen
class SnapTraj:
    tid: int
    calls_total: int
    calls_done: int
    completion_tokens: int
    prompt_tokens: int
    wasted_tokens: int
    min_version: int | None
    max_version: int | None
    finish_time_s: float | None
    #: time its last call finished, when it waits for a tool before its next call (or its end)
    tool_wait_since_s: float | None
    reward: float | None  # known once the trajectory finished; None while it runs


@attrs.frozen
class SnapGroup:
    gid: int
    wg: int
    epoch: int
    dispatch_time_s: float
    dispatch_version: int
    retries: int
    finish_time_s: float | None
    tag: dict
    trajs: tuple[SnapTraj, ...]


@attrs.frozen
class SnapInstance:
    index: int
    version: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    cached_prefix_tokens: int
    running: tuple[SnapRequest, ...]  # admission order
    waiting: tuple[SnapRequest, ...]  # queue order


@attrs.frozen
class SnapTrainer:
    phase: str  # one of TRAINER_PHASES
    steps_done: int
    steps_total: int
    version: int
    phase_started_s: float | None  # start of the current training step or publication
    phase_expected_s: float | None  # its expected duration (training: mean of the earlier steps)


@attrs.frozen
class SnapPipeline:
    groups_dispatched: int
    groups_accepted: int
    groups_dropped: int
    groups_retried: int
    next_gid: int
    next_rid: int
    dispatch_paused: bool
    policy_state: Any  # the policy's typed state (`Policy.init_state()`), as plain data


@attrs.frozen
class Snapshot:
    schema: str
    time_s: float
    config: dict  # the resolved SimConfig (`simrl.config.unstructure`)
    trainer: SnapTrainer
    pipeline: SnapPipeline
    instances: tuple[SnapInstance, ...]
    router_queue: tuple[SnapRequest, ...]
    running_groups: tuple[SnapGroup, ...]
    buffer: tuple[SnapGroup, ...]
    retry: tuple[SnapGroup, ...]

    def sim_config(self):
        from simrl.config import structure

        return structure(self.config)

    def requests(self) -> list[tuple[int, str, SnapRequest]]:
        """Every request in flight as (instance or -1, where, request)."""
        out = [(i.index, "running", r) for i in self.instances for r in i.running]
        out += [(i.index, "waiting", r) for i in self.instances for r in i.waiting]
        out += [(-1, "router", r) for r in self.router_queue]
        return out


# -- plain-data encoding of policy state (dicts with int keys, infinities) -------------------

def encode_value(v):
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"__float__": repr(v)}
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            return {k: encode_value(x) for k, x in v.items()}
        return {"__items__": [[encode_value(k), encode_value(x)] for k, x in v.items()]}
    if isinstance(v, (list, tuple)):
        return [encode_value(x) for x in v]
    if attrs.has(type(v)):
        return {f.name: encode_value(getattr(v, f.name)) for f in attrs.fields(type(v))}
    raise SnapshotError(f"cannot write a value of type {type(v).__name__} into a snapshot: {v!r}")


def decode_value(v):
    if isinstance(v, dict):
        if set(v) == {"__float__"}:
            return float(v["__float__"])
        if set(v) == {"__items__"}:
            return {_hashable(decode_value(k)): decode_value(x) for k, x in v["__items__"]}
        return {k: decode_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    return v


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def policy_state_from(policy, data):
    """Rebuild the policy's typed state from its plain-data form."""
    state = policy.init_state()
    if data is None or not attrs.has(type(state)):
        return state
    cls = type(state)
    if not isinstance(data, dict):
        raise SnapshotError(f"pipeline.policy_state: expected an object (the {cls.__name__}), "
                            f"got {type(data).__name__}")
    names = {f.name for f in attrs.fields(cls)}
    extra = set(data) - names
    if extra:
        raise SnapshotError(f"pipeline.policy_state: unknown keys {sorted(extra)} for {cls.__name__}")
    hints = _state_hints(cls)
    for k, v in data.items():
        value = decode_value(v)
        if k in hints:
            bad = _type_error(value, hints[k])
            if bad:
                raise SnapshotError(f"pipeline.policy_state.{k}: {bad} ({cls.__name__}.{k} is {_hint_text(hints[k])})")
        setattr(state, k, value)
    return state


def _state_hints(cls) -> dict:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation not resolvable here: those fields are not checked
        return {}


def _hint_text(hint) -> str:
    return getattr(hint, "__name__", None) if not getattr(hint, "__args__", None) else str(hint).replace("typing.", "")


def _type_error(value, hint, at: str = "") -> str | None:
    """What is wrong with a decoded state value for its field's annotation (None: nothing, or a
    type this check does not know): a policy's state is restored as data, so a string where a
    count belongs or a list where a mapping belongs failed mid-prediction."""
    import types
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    where = f" at {at}" if at else ""
    if hint is typing.Any:
        return None
    if origin in (typing.Union, types.UnionType):
        errs = [_type_error(value, a, at) for a in args]
        return None if any(e is None for e in errs) else errs[0]
    if hint is type(None):
        return None if value is None else f"expected null{where}, got {value!r:.40}"
    if hint is bool:
        return None if type(value) is bool else f"expected true or false{where}, got {value!r:.40}"
    if hint is int:
        return None if type(value) is int else f"expected an integer{where}, got {value!r:.40}"
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"expected a number{where}, got {value!r:.40}"
    if hint is str:
        return None if isinstance(value, str) else f"expected a string{where}, got {value!r:.40}"
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return f"expected an object{where}, got {type(value).__name__}"
        if len(args) == 2:
            for k, x in value.items():
                e = _type_error(k, args[0], f"{at}[{k!r}] (key)") or _type_error(x, args[1], f"{at}[{k!r}]")
                if e:
                    return e
        return None
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, list | tuple):
            return f"expected a list{where}, got {type(value).__name__}"
        if origin is list and len(args) == 1:
            for i, x in enumerate(value):
                e = _type_error(x, args[0], f"{at}[{i}]")
                if e:
                    return e
        return None
    return None


# -- the strict reader -------------------------------------------------------------------------

class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, what: str):
        raise SnapshotError(f"{self.source}: {path}: {what}")

    def obj(self, d, path: str, cls):
        if not isinstance(d, dict):
            self.fail(path, f"expected an object, got {type(d).__name__}")
        fields = attrs.fields(cls)
        names = [f.name for f in fields]
        extra = sorted(set(d) - set(names))
        if extra:
            from simrl.strictio import did_you_mean

            self.fail(f"{path}.{extra[0]}" if path else extra[0],
                      f"unknown key{did_you_mean(extra[0], names)}; expected one of {names}")
        missing = [n for n in names if n not in d]
        if missing:
            self.fail(path or "(top)", f"missing key {missing[0]!r}")
        return {f.name: self.value(d[f.name], f"{path}.{f.name}" if path else f.name, f.type) for f in fields}

    def value(self, v, path: str, typ):
        t = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
        optional = t.endswith("| None")
        base = t.replace(" | None", "")
        if v is None:
            if optional:
                return None
            self.fail(path, f"expected {base}, got null")
        if base == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                self.fail(path, f"expected an integer, got {v!r}")
            if v < 0:
                self.fail(path, f"expected a non-negative integer, got {v}")
            if v > INT_MAX:
                self.fail(path, f"expected an integer that fits in 64 bits (at most {INT_MAX}), got {v}")
            return v
        if base == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                self.fail(path, f"expected a finite number, got {v!r}")
            return float(v)
        if base == "bool":
            if not isinstance(v, bool):
                self.fail(path, f"expected true or false, got {v!r}")
            return v
        if base == "str":
            if not isinstance(v, str):
                self.fail(path, f"expected a string, got {v!r}")
            return v
        if base == "dict":
            if not isinstance(v, dict):
                self.fail(path, f"expected an object, got {type(v).__name__}")
            return v
        if base == "Any":
            return v
        if base.startswith("tuple["):
            inner = base[len("tuple["):-len(", ...]")]
            if not isinstance(v, list):
                self.fail(path, f"expected a list, got {type(v).__name__}")
            cls = _CLASSES[inner]
            return tuple(cls(**self.obj(x, f"{path}[{k}]", cls)) for k, x in enumerate(v))
        cls = _CLASSES[base]
        return cls(**self.obj(v, path, cls))


_CLASSES = {c.__name__: c for c in (SnapRequest, SnapTraj, SnapGroup, SnapInstance, SnapTrainer, SnapPipeline)}


def parse_snapshot(data, source: str = "<snapshot>") -> Snapshot:
    r = _Reader(source)
    if not isinstance(data, dict):
        r.fail("(top)", f"expected a JSON object, got {type(data).__name__}")
    if data.get("schema") != SNAPSHOT_SCHEMA:
        r.fail("schema", f"expected {SNAPSHOT_SCHEMA!r}, got {data.get('schema')!r}")
    snap = Snapshot(**r.obj(data, "", Snapshot))
    if snap.trainer.phase not in TRAINER_PHASES:
        r.fail("trainer.phase", f"expected one of {list(TRAINER_PHASES)}, got {snap.trainer.phase!r}")
    gids = {g.gid for g in snap.running_groups}
    for _, where, q in snap.requests():
        if q.gid not in gids:
            r.fail(f"request rid {q.rid} ({where})", f"its group {q.gid} is not among running_groups")
    for i, inst in enumerate(snap.instances):
        if inst.index != i:
            r.fail(f"instances[{i}].index", f"expected {i} (instances in index order), got {inst.index}")
    try:
        cfg = snap.sim_config()
    except ValueError as exc:
        r.fail("config", str(exc))
    _check_workload(cfg, r)
    _check_consistent(snap, cfg, r)
    _check_tags(snap, cfg, r)
    return snap


def _check_workload(cfg, r: _Reader) -> None:
    """The configuration's workload can be drawn (the predictor redraws it): generator, knobs and
    trace checked on one group, before any prediction (a ValueError traceback mid-draw otherwise)."""
    from simrl.engine.errors import SimulationError
    from simrl.engine.sim import load_workload

    w = cfg.workload
    probe = cfg if w.trace else attrs.evolve(cfg, workload=attrs.evolve(w, groups=1))
    try:
        load_workload(probe)
    except SimulationError as exc:
        msg = str(exc)
        key, sep, rest = msg.partition(": ")
        r.fail(f"config.{key}" if sep and key.startswith("workload") else "config.workload", rest if sep else msg)


def _check_tags(snap: Snapshot, cfg, r: _Reader) -> None:
    """Each group's tags against what the configuration's policy keeps (`Policy.group_tags`)."""
    spec = type(cfg.policy).group_tags
    for name, groups in (("running_groups", snap.running_groups), ("buffer", snap.buffer), ("retry", snap.retry)):
        for k, g in enumerate(groups):
            where = f"{name}[{k}].tag"
            tag = decode_value(g.tag)
            if not isinstance(tag, dict):
                r.fail(where, f"expected an object, got {type(tag).__name__}")
            for key, val in tag.items():
                if key not in spec:
                    continue  # a tag the policy does not declare (plug-ins, shared helpers): not read here
                typ = spec[key][0]
                if type(val) is not typ:
                    r.fail(f"{where}.{key}", f"expected {'an integer' if typ is int else 'true or false'}, got "
                                             f"{val!r:.40}")
            for key, (_, required_in) in spec.items():
                if name in required_in and key not in tag:
                    r.fail(where, f"missing {key!r} (policy {cfg.policy.kind} keeps it on every group in {name})")


def _check_consistent(snap: Snapshot, cfg, r: _Reader) -> None:
    """What the restore relies on: unique ids, requests of known trajectories, counts that agree
    with the configuration, times not after the snapshot's instant. A snapshot breaking one of
    these was edited or corrupted; restoring it would crash or silently predict nonsense."""
    t = snap.time_s
    if t < 0:
        r.fail("time_s", f"expected a time >= 0 s, got {t}")
    where_groups = [("running_groups", snap.running_groups), ("buffer", snap.buffer), ("retry", snap.retry)]
    seen_gid: dict[int, str] = {}
    trajs: dict[int, dict[int, SnapTraj]] = {}
    for name, groups in where_groups:
        for k, g in enumerate(groups):
            path = f"{name}[{k}]"
            if g.gid in seen_gid:
                r.fail(f"{path}.gid", f"group {g.gid} appears twice (also at {seen_gid[g.gid]}); gids are unique")
            seen_gid[g.gid] = path
            if g.gid >= snap.pipeline.next_gid:
                r.fail(f"{path}.gid", f"group {g.gid} is not below pipeline.next_gid = {snap.pipeline.next_gid}")
            if not g.trajs:
                r.fail(f"{path}.trajs", "expected at least one trajectory, got none")
            if g.dispatch_time_s > t:
                r.fail(f"{path}.dispatch_time_s", f"{g.dispatch_time_s} is after the snapshot's time_s {t}")
            by_tid: dict[int, SnapTraj] = {}
            for j, tr in enumerate(g.trajs):
                if tr.tid in by_tid:
                    r.fail(f"{path}.trajs[{j}].tid", f"trajectory {tr.tid} appears twice in group {g.gid}")
                by_tid[tr.tid] = tr
                if tr.calls_done > tr.calls_total:
                    r.fail(f"{path}.trajs[{j}].calls_done",
                           f"{tr.calls_done} calls done of calls_total = {tr.calls_total}")
                for key in ("finish_time_s", "tool_wait_since_s"):
                    v = getattr(tr, key)
                    if v is not None and v > t:
                        r.fail(f"{path}.trajs[{j}].{key}", f"{v} is after the snapshot's time_s {t}")
            tids = sorted(by_tid)
            if tids != list(range(tids[0], tids[0] + len(tids))):
                r.fail(f"{path}.trajs", f"trajectory ids {tids} of group {g.gid} are not consecutive "
                                        "(a group's trajectories are numbered one after another)")
            if name == "running_groups":
                trajs[g.gid] = by_tid
    seen_rid: dict[int, str] = {}
    for inst, where, q in snap.requests():
        here = f"request rid {q.rid} ({where}{'' if inst < 0 else f' on instance {inst}'})"
        if q.rid in seen_rid:
            r.fail(here, f"rid {q.rid} appears twice (also {seen_rid[q.rid]}); request ids are unique")
        seen_rid[q.rid] = f"{where}{'' if inst < 0 else f' on instance {inst}'}"
        if q.rid >= snap.pipeline.next_rid:
            r.fail(here, f"rid {q.rid} is not below pipeline.next_rid = {snap.pipeline.next_rid}")
        if q.tid not in trajs.get(q.gid, {}):
            r.fail(here, f"its trajectory {q.tid} is not among group {q.gid}'s trajectories "
                         f"{sorted(trajs.get(q.gid, {}))}")
        if q.arrival_s > t:
            r.fail(here, f"arrival_s {q.arrival_s} is after the snapshot's time_s {t}")
    for i, inst in enumerate(snap.instances):
        if inst.kv_used_tokens > inst.kv_capacity_tokens:
            r.fail(f"instances[{i}].kv_used_tokens",
                   f"{inst.kv_used_tokens} exceeds kv_capacity_tokens = {inst.kv_capacity_tokens}")
    want = cfg.deployment.rollout.instances
    if len(snap.instances) != want:
        r.fail("instances", f"{len(snap.instances)} instances, but config deployment.rollout.instances = {want}")
    tr = snap.trainer
    if tr.steps_total != cfg.run.training_steps:
        r.fail("trainer.steps_total", f"{tr.steps_total}, but config run.training_steps = {cfg.run.training_steps}")
    if tr.steps_done > tr.steps_total:
        r.fail("trainer.steps_done", f"{tr.steps_done} steps done of steps_total = {tr.steps_total}")
    if tr.phase_started_s is not None and tr.phase_started_s > t:
        r.fail("trainer.phase_started_s", f"{tr.phase_started_s} is after the snapshot's time_s {t}")
    try:
        policy_state_from(cfg.policy, snap.pipeline.policy_state)
    except (ValueError, TypeError, AttributeError) as exc:
        key, sep, msg = str(exc).partition(": ")
        if sep and key.startswith("pipeline.policy_state"):
            r.fail(key, msg)
        r.fail("pipeline.policy_state", str(exc))


def read_snapshot(path: str | Path) -> Snapshot:
    """Read and check a snapshot file: strict JSON (UTF-8, no duplicate keys, no NaN), the schema,
    and the consistency the restore relies on; `SnapshotError` naming the file and key or line."""
    from workloads.strictio import load_json_file

    p = Path(path)

    def fail(line: int, field: str | None, message: str) -> SnapshotError:
        return SnapshotError(f"{p}: {f'line {line}: ' if line else ''}{field + ': ' if field else ''}{message}")

    return parse_snapshot(load_json_file(p, fail), str(p))


def _finite_or_null(v):
    """The configuration's infinities as null (JSON has none; ``time_horizon_s: null`` reads back as
    no limit), so a snapshot is standard JSON that the strict reader accepts."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite_or_null(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite_or_null(x) for x in v]
    return v


def snapshot_dict(snap: Snapshot) -> dict:
    d = attrs.asdict(snap, recurse=True)
    d["config"] = _finite_or_null(d["config"])
    return json.loads(json.dumps(d, allow_nan=False))  # plain lists, as read back


def write_snapshot(snap: Snapshot, path: str | Path) -> None:
    from simrl.atomic import atomic_write

    atomic_write(Path(path), json.dumps(snapshot_dict(snap), indent=1, sort_keys=False, allow_nan=False) + "\n")


# -- the writer: a snapshot of a simulation at an event boundary -------------------------------

def _req(inst, r, running: bool) -> SnapRequest:
    gen = inst.generated_of(r) if (running and inst is not None) else r.generated
    return SnapRequest(
        rid=r.rid, gid=r.group.gid, tid=r.traj.tid, turn=r.turn, prompt_tokens=r.prompt_tokens,
        new_tokens=r.new_tokens, shared_tokens=r.shared_tokens, generated_tokens=int(gen),
        prefill_left_tokens=int(r.prefill_remaining) if running else 0, version=r.version,
        version_start=r.version_start, arrival_s=float(r.arrival), aborts=r.aborts,
        preemptions=r.preemptions, salted=bool(r.salted),
    )


def _group(g, in_queue: set[tuple[int, int]], last_finish: dict[tuple[int, int], float]) -> SnapGroup:
    trajs = []
    for t in g.trajs:
        waiting_tool = (t.finish_time is None and (g.gid, t.tid) not in in_queue and t.calls_done > 0)
        trajs.append(SnapTraj(
            tid=t.tid, calls_total=t.calls_total, calls_done=t.calls_done,
            completion_tokens=t.completion_tokens, prompt_tokens=t.prompt_tokens,
            wasted_tokens=t.wasted_tokens, min_version=t.min_version, max_version=t.max_version,
            finish_time_s=t.finish_time,
            tool_wait_since_s=last_finish.get((g.gid, t.tid)) if waiting_tool else None,
            reward=float(t.reward) if t.finish_time is not None else None,
        ))
    return SnapGroup(gid=g.gid, wg=g.wg, epoch=g.epoch, dispatch_time_s=float(g.dispatch_time),
                     dispatch_version=g.dispatch_version, retries=g.retries, finish_time_s=g.finish_time,
                     tag=encode_value(dict(g.tag)), trajs=tuple(trajs))


def _trainer_wakeup(sim) -> float | None:
    """When the trainer's pending timeout (the training step, an offload) fires, if it waits on one.

    Read from SimPy's event queue (simpy 4.1.2: ``Environment._queue`` holds
    ``(time, priority, id, event)``; a waiting process is resumed through a callback bound to
    ``Process._resume``, and the process keeps its generator in ``Process._generator``).
    """
    from simrl.engine.trainer import Trainer

    for t, _prio, _eid, ev in getattr(sim.env, "_queue", ()):
        for cb in getattr(ev, "callbacks", None) or ():
            proc = getattr(cb, "__self__", None)
            gen = getattr(proc, "_generator", None)
            if gen is not None and getattr(gen, "gi_code", None) is Trainer.run.__code__:
                return float(t)
    return None


def _trainer(sim) -> SnapTrainer:
    phase_text = sim.trainer.phase
    st = sim.st
    now = sim.env.now
    evs = sim.events
    started = expected = None
    if phase_text == "done":
        phase = "done"
    elif phase_text.startswith("training") or phase_text.startswith("pausing"):
        phase = "training"
        started = next((e["t"] for e in reversed(evs) if e["kind"] in ("train_start", "batch_ready")), now)
        wake = _trainer_wakeup(sim) if phase_text.startswith("training") else None
        done = [s.train_end - s.train_start for s in sim.steps]
        if wake is not None:  # the step's end is already scheduled: its duration is known
            expected = wake - started
        else:
            expected = sum(done) / len(done) if done else None
    elif phase_text.startswith("publishing"):
        phase = "publishing"
        started = next((e["t"] for e in reversed(evs) if e["kind"] == "train_end"), now)
        expected = float(sim.weights.publish_s(len(sim.instances)))
    else:
        phase = "waiting"
    return SnapTrainer(phase=phase, steps_done=st.steps_done, steps_total=sim.cfg.run.training_steps,
                       version=st.version, phase_started_s=started, phase_expected_s=expected)


def take_snapshot(sim) -> Snapshot:
    """The state of a running `Simulation` now (between two SimPy events).

    Needs telemetry on (``run.telemetry``, the default) to date the trainer's current phase.
    """
    from simrl.config import unstructure

    in_queue: set[tuple[int, int]] = set()
    instances = []
    for inst in sim.instances:
        running = tuple(_req(inst, r, True) for r in inst.running)
        waiting = tuple(_req(inst, r, False) for r in inst.waiting)
        in_queue |= {(q.gid, q.tid) for q in running + waiting}
        instances.append(SnapInstance(index=inst.index, version=inst.version, kv_used_tokens=int(inst.kv_used),
                                      kv_capacity_tokens=int(inst.capacity),
                                      cached_prefix_tokens=int(inst.cache_tokens),
                                      running=running, waiting=waiting))
    router = tuple(_req(None, r, False) for r in sim.router.queue)
    in_queue |= {(q.gid, q.tid) for q in router}
    last_finish: dict[tuple[int, int], float] = {}
    for c in sim.calls:
        if c.finish is not None:
            last_finish[(c.gid, c.tid)] = c.finish
    book, st = sim.book, sim.st
    pipeline = SnapPipeline(
        groups_dispatched=st.groups_dispatched, groups_accepted=st.groups_accepted,
        groups_dropped=st.groups_dropped, groups_retried=sim.tally.groups_retried,
        next_gid=book.next_gid, next_rid=book.next_rid, dispatch_paused=bool(book.dispatch_paused),
        policy_state=encode_value(st.policy_state),
    )
    return Snapshot(
        schema=SNAPSHOT_SCHEMA, time_s=float(sim.env.now), config=_finite_or_null(unstructure(sim.cfg)),
        trainer=_trainer(sim), pipeline=pipeline, instances=tuple(instances), router_queue=router,
        running_groups=tuple(_group(g, in_queue, last_finish) for g in st.running.values()),
        buffer=tuple(_group(g, in_queue, last_finish) for g in st.buffer),
        retry=tuple(_group(g, in_queue, last_finish) for g in book.retry),
    )
