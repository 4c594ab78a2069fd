"""Snapshots from the bench harness's evidence (`srl-predict convert`, docs/predict.md).

A harness results directory holds ``updates.jsonl`` (one line per training update: ``k, d_k,
c_k, train_end, publish_end, policy_version, group_ids``) and ``turns.jsonl`` (one line per model
call: ``group, trajectory, turn, prompt_tokens, completion_tokens, arrival, first_token, finish,
policy_version_start``), both in the shape `harness/backends/base.py` writes (docs/harness.md).
`from_harness` rebuilds the pipeline at an instant T from what was knowable at T:

* trainer: updates published by T are done (``steps_done``, ``version``); an update with
  ``d_k <= T < train_end`` is training, ``train_end <= T < publish_end`` publishing; the expected
  duration of that phase is the mean of the earlier updates' (None for the first);
* a call is in flight when ``arrival <= T`` and it has not finished by T; it is running when its
  first token came by T, else waiting. Its tokens so far are interpolated between its first
  token and its finish (decode at a steady rate: the evidence does not record per-token times);
* the evidence names no rollout instance: calls in flight are spread over the configured
  instances in arrival order (round robin), which is what a least-requests router does to a
  steady arrival stream;
* a group is trained once an update with ``d_k <= T`` lists it; finished but untrained groups
  are the buffer; the rest that has started are running. Rewards are not in the evidence: the
  predictor takes them from its workload draw.

The configuration (deployment, policy, workload) is not in the evidence: it is the ``srl``
configuration given with the conversion (the manifest's ``backend`` is used as the policy
preset when it names one and no ``policy`` is given). Every missing key or wrong type is an
error naming the file, the line and the key.
"""

from __future__ import annotations

import math
from pathlib import Path

from simrl.snapshot import (
    SNAPSHOT_SCHEMA,
    SnapGroup,
    SnapInstance,
    SnapPipeline,
    SnapRequest,
    Snapshot,
    SnapshotError,
    SnapTrainer,
    SnapTraj,
    encode_value,
)

TURN_KEYS = {"group": int, "trajectory": int, "turn": int, "prompt_tokens": int, "completion_tokens": int,
             "arrival": float, "first_token": (float, None), "finish": (float, None),
             "policy_version_start": int}
UPDATE_KEYS = {"k": int, "d_k": float, "train_end": float, "publish_end": float, "group_ids": list[int]}
OPTIONAL_KEYS = {"policy_version": int}  # read where present (the update's version; default k)


def _fail(path: Path):
    def fail(line: int, field: str | None, message: str) -> SnapshotError:
        return SnapshotError(f"{path}: {f'line {line}: ' if line else ''}{f'{field}: ' if field else ''}{message}")
    return fail


def _lines(path: Path) -> list[tuple[int, dict]]:
    """The evidence file's records, strictly decoded (UTF-8, no duplicate keys, no NaN)."""
    from workloads.strictio import json_lines

    out = []
    for n, obj in json_lines(path, _fail(path)):
        if not isinstance(obj, dict):
            raise SnapshotError(f"{path}: line {n}: expected a JSON object")
        out.append((n, obj))
    return out


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check(path: Path, n: int, obj: dict, keys: dict) -> dict:
    """The record's ``keys`` (and the `OPTIONAL_KEYS` it has), each of its type: ``int`` a
    non-negative integer, ``float`` a finite time >= 0, ``list[int]`` a list of non-negative integers,
    a tuple with None also null. Other keys (the bench contract writes more) are not read."""
    out = {}
    for key, typ in {**keys, **{k: t for k, t in OPTIONAL_KEYS.items() if k in obj}}.items():
        if key not in obj:
            raise SnapshotError(f"{path}: line {n}: {key}: missing")
        v = obj[key]
        if typ == list[int]:
            if not isinstance(v, list) or not all(_count(x) for x in v):
                raise SnapshotError(f"{path}: line {n}: {key}: expected a list of non-negative integers, "
                                    f"got {v!r:.60}")
            out[key] = v
            continue
        nullable = isinstance(typ, tuple)
        base = typ[0] if nullable else typ
        if v is None and nullable:
            out[key] = None
            continue
        ok = (isinstance(v, int) and not isinstance(v, bool) and v >= 0) if base is int else \
            (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0) if base is float else \
            isinstance(v, base)
        if not ok:
            what = {int: "a non-negative integer", float: "a finite time >= 0 (seconds on the evidence's clock)",
                    list: "a list"}[base]
            raise SnapshotError(f"{path}: line {n}: {key}: expected {what}{' or null' if nullable else ''}, got {v!r}")
        out[key] = float(v) if base is float else v
    return out


def harness_config(evidence_dir: str | Path, config_path=None, overrides=()):
    """The configuration for a conversion: ``config_path`` and ``overrides``, with the manifest's
    backend as the policy preset when it names one and ``overrides`` set none."""
    from simrl.config import load_config

    d = Path(evidence_dir)
    extra = []
    man = d / "manifest.json"
    if man.exists() and not any(o.split("=", 1)[0] == "policy" for o in overrides):
        from workloads.strictio import load_json_file

        data = load_json_file(man, _fail(man))
        if not isinstance(data, dict):
            raise SnapshotError(f"{man}: not a JSON object")
        ident = data.get("identity")
        # a bench manifest names its backend under identity (harness/manifest.py); older files at the top
        backend = ident.get("backend") if isinstance(ident, dict) else data.get("backend")
        from simrl.policy import policy_kinds

        if backend in policy_kinds():
            extra.append(f"policy={backend}")
    return load_config(config_path, [*extra, *overrides])


def _check_consistent(upath: Path, updates: list[tuple[int, dict]], tpath: Path, turns: list[tuple[int, dict]]) -> None:
    """What the records say together: one line per update ``k`` and per call (group, trajectory,
    turn), phases in order (``d_k <= train_end <= publish_end``), and trained groups that have calls."""
    seen: dict = {}
    for n, t in turns:
        key = (t["group"], t["trajectory"], t["turn"])
        if key in seen:
            raise SnapshotError(f"{tpath}: line {n}: group {key[0]} trajectory {key[1]} turn {key[2]} repeated "
                                f"(first on line {seen[key]}); one line per call")
        seen[key] = n
    groups = {t["group"] for _, t in turns}
    ks: dict[int, int] = {}
    for n, u in updates:
        if u["k"] in ks:
            raise SnapshotError(f"{upath}: line {n}: k: update {u['k']} repeated (first on line {ks[u['k']]})")
        ks[u["k"]] = n
        if not u["d_k"] <= u["train_end"] <= u["publish_end"]:
            raise SnapshotError(f"{upath}: line {n}: expected d_k <= train_end <= publish_end, got "
                                f"{u['d_k']:g}, {u['train_end']:g}, {u['publish_end']:g}")
        unknown = sorted(set(u["group_ids"]) - groups)
        if unknown:
            raise SnapshotError(f"{upath}: line {n}: group_ids: group {unknown[0]} has no call in {tpath.name}")


def from_harness(evidence_dir: str | Path, at: float, cfg) -> Snapshot:
    """The snapshot of the harness run in ``evidence_dir`` at time ``at`` (the evidence's clock)."""
    import attrs

    from simrl.config import unstructure

    d = Path(evidence_dir)
    if not d.is_dir():
        raise SnapshotError(f"{d}: not a directory (expected a harness results directory)")
    upath, tpath = d / "updates.jsonl", d / "turns.jsonl"
    for p in (upath, tpath):
        if not p.exists():
            raise SnapshotError(f"{p}: missing (a harness results directory has updates.jsonl and turns.jsonl)")
    numbered = [(n, _check(upath, n, o, UPDATE_KEYS)) for n, o in _lines(upath)]
    turns = [(n, _check(tpath, n, o, TURN_KEYS)) for n, o in _lines(tpath)]
    if not turns:
        raise SnapshotError(f"{tpath}: no turns")
    _check_consistent(upath, numbered, tpath, turns)
    updates = sorted((u for _, u in numbered), key=lambda u: u["k"])
    for n, t in turns:
        if t["first_token"] is not None and t["first_token"] < t["arrival"]:
            raise SnapshotError(f"{tpath}: line {n}: first_token: {t['first_token']} is before arrival {t['arrival']}")
        if t["finish"] is not None and t["finish"] < (t["first_token"] or t["arrival"]):
            raise SnapshotError(f"{tpath}: line {n}: finish: {t['finish']} is before its first token / arrival")
    end = max([t["finish"] or t["arrival"] for _, t in turns] + [u["publish_end"] for u in updates])
    if not (math.isfinite(at) and 0 <= at <= end):
        raise SnapshotError(f"--at {at:g}: outside the evidence (0 .. {end:g} s)")
    if cfg.policy.kind == "psrl":
        raise SnapshotError("policy psrl keeps per-group reservations (group tags) that harness evidence does not "
                            "record; convert with the run's own policy (policy=skyrl, policy=art, ...)")
    ro = cfg.deployment.rollout
    group_size = max(len({t["trajectory"] for _, t in turns if t["group"] == g}) for g in {t["group"] for _, t in turns})
    if cfg.workload.group_size is None or cfg.workload.group_size < group_size:
        cfg = attrs.evolve(cfg, workload=attrs.evolve(cfg.workload, group_size=group_size))
    if cfg.workload.trace is None and cfg.workload.groups < 1:
        raise SnapshotError("workload.groups must be >= 1")

    # -- trainer ------------------------------------------------------------------------------
    done = [u for u in updates if u["publish_end"] <= at]
    version = max((int(u.get("policy_version", u["k"])) for u in done), default=0) if done else 0
    cur = next((u for u in updates if u["d_k"] <= at < u["publish_end"]), None)
    phase, started, expected = "waiting", None, None
    if cur is not None:
        training = at < cur["train_end"]
        phase = "training" if training else "publishing"
        started = cur["d_k"] if training else cur["train_end"]
        prev = [u for u in updates if u["publish_end"] <= cur["d_k"]]
        if prev:
            expected = sum((u["train_end"] - u["d_k"]) if training else (u["publish_end"] - u["train_end"])
                           for u in prev) / len(prev)
    trainer = SnapTrainer(phase=phase, steps_done=len(done), steps_total=max(cfg.run.training_steps, len(done) + 1),
                          version=version, phase_started_s=started, phase_expected_s=expected)
    if trainer.steps_total != cfg.run.training_steps:
        cfg = attrs.evolve(cfg, run=attrs.evolve(cfg.run, training_steps=trainer.steps_total))
    trained = {int(g) for u in updates if u["d_k"] <= at for g in u["group_ids"]}

    # -- groups, trajectories, calls in flight ---------------------------------------------------
    by_group: dict[int, list[dict]] = {}
    for _, t in turns:
        if t["arrival"] <= at:
            by_group.setdefault(t["group"], []).append(t)
    order = sorted((t for ts in by_group.values() for t in ts), key=lambda t: (t["arrival"], t["group"], t["trajectory"],
                                                                                t["turn"]))
    rid = {id(t): k for k, t in enumerate(order)}
    n_groups = cfg.workload.groups
    running_groups, buffer = [], []
    inflight: list[tuple[dict, SnapRequest]] = []
    for gid in sorted(by_group):
        ts = by_group[gid]
        tids = sorted({t["trajectory"] for t in ts})
        trajs = []
        for k, tid in enumerate(tids):
            calls = sorted((t for t in ts if t["trajectory"] == tid), key=lambda t: t["turn"])
            fin = [c for c in calls if c["finish"] is not None and c["finish"] <= at]
            live = [c for c in calls if c not in fin]
            later = any(t["arrival"] > at for _, t in turns if t["group"] == gid and t["trajectory"] == tid)
            vs = [c["policy_version_start"] for c in fin]
            finished = not live and not later
            trajs.append(SnapTraj(
                tid=k, calls_total=len(calls) + (1 if later and not live else 0), calls_done=len(fin),
                completion_tokens=sum(c["completion_tokens"] for c in fin),
                prompt_tokens=calls[0]["prompt_tokens"], wasted_tokens=0,
                min_version=min(vs) if vs else None, max_version=max(vs) if vs else None,
                finish_time_s=max(c["finish"] for c in fin) if finished else None,
                tool_wait_since_s=max(c["finish"] for c in fin) if (later and not live and fin) else None,
                reward=None))
            for c in live:
                gen = 0
                if c["first_token"] is not None and c["first_token"] <= at:
                    if c["finish"] is None:
                        raise SnapshotError(f"{tpath}: the call of group {gid} trajectory {tid} turn {c['turn']} "
                                            "has no finish: its tokens so far cannot be estimated")
                    span = c["finish"] - c["first_token"]
                    frac = (at - c["first_token"]) / span if span > 0 else 1.0
                    gen = min(c["completion_tokens"] - 1, 1 + int((c["completion_tokens"] - 1) * frac))
                    gen = max(gen, 1)
                inflight.append((c, SnapRequest(
                    rid=rid[id(c)], gid=gid, tid=k, turn=c["turn"], prompt_tokens=c["prompt_tokens"],
                    new_tokens=c["prompt_tokens"], shared_tokens=0, generated_tokens=gen, prefill_left_tokens=0,
                    version=c["policy_version_start"], version_start=c["policy_version_start"],
                    arrival_s=c["arrival"], aborts=0, preemptions=0, salted=False)))
        first = min(t["arrival"] for t in ts)
        g = SnapGroup(gid=gid, wg=gid % n_groups, epoch=gid // n_groups, dispatch_time_s=first,
                      dispatch_version=min(t["policy_version_start"] for t in ts), retries=0,
                      finish_time_s=max(t.finish_time_s for t in trajs) if all(t.finish_time_s is not None
                                                                                  for t in trajs) else None,
                      tag={}, trajs=tuple(trajs))
        if gid in trained:
            continue
        (buffer if g.finish_time_s is not None else running_groups).append(g)

    # -- instances: calls in flight spread round robin in arrival order ------------------------
    inflight.sort(key=lambda cq: cq[1].rid)
    running = [[] for _ in range(ro.instances)]
    waiting = [[] for _ in range(ro.instances)]
    for j, (_c, q) in enumerate(inflight):
        (running if q.generated_tokens > 0 else waiting)[j % ro.instances].append(q)
    cap = ro.kv_capacity_tokens
    if cap is None:
        from simrl.cost.build import build_costs

        cap = int(build_costs(cfg).rollout.kv_capacity_tokens())
    instances = tuple(SnapInstance(index=i, version=version,
                                   kv_used_tokens=sum(q.prompt_tokens + q.generated_tokens for q in running[i]),
                                   kv_capacity_tokens=int(cap), cached_prefix_tokens=0,
                                   running=tuple(running[i]), waiting=tuple(waiting[i]))
                      for i in range(ro.instances))
    pipeline = SnapPipeline(groups_dispatched=len(by_group), groups_accepted=len(trained) + len(buffer),
                            groups_dropped=0, groups_retried=0, next_gid=max(by_group, default=-1) + 1,
                            next_rid=len(order), dispatch_paused=False,
                            policy_state=encode_value(cfg.policy.init_state()))
    from simrl.snapshot import parse_snapshot, snapshot_dict

    snap = Snapshot(schema=SNAPSHOT_SCHEMA, time_s=float(at), config=unstructure(cfg), trainer=trainer,
                    pipeline=pipeline, instances=instances, router_queue=(), running_groups=tuple(running_groups),
                    buffer=tuple(buffer), retry=())
    return parse_snapshot(snapshot_dict(snap), f"{d} at {at:g} s")  # the strict reader's checks
