"""Run validation (bench-contract.md section 6): named checks over a results dir, then a verdict.

Validation recomputes, never reads. Limits (groups per update, trainer ranks, staleness bound,
memory threshold) come from `pins`, not from the manifest; the manifest's copy must equal them.
Every headline and measured figure is recomputed from the evidence and must equal the
manifest's; GPU hygiene is recomputed from the raw nvidia-smi snapshots; the evidence files
must hash to the sha256 the controller recorded and every line must name this run and lease, in
sequence. Timestamps must lie inside the run and agree with each other: a trained group's calls
finish before its update's batch is handed over, and a call that began on policy version v
arrived after update v finished training. Every call of every trained group has exactly one finished turn
record of its scheduled prompt and completion length with ``finish_reason == "length"``; no
group is trained twice. Each check returns ``{check, passed, detail}``; VALID only when all pass.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

from harness import contract, model_snapshot, nvsmi
from harness import manifest as M
from harness import pins as P
from harness.errors import BenchError
from harness.pins import HEADLINE_FIRST, HEADLINE_LAST, INTERVAL_EPSILON_S, TOTAL_UPDATES, WARMUP_UPDATES

LOG_ERROR = re.compile(r"Traceback \(most recent call last\)|^\S*\s*(ERROR|CRITICAL)\b|\bFATAL\b", re.M)
WALL_SLACK_S = 2.0  # clock slack between the controller's and the worker's wall clocks
EVIDENCE_FILES = ("updates.jsonl", "turns.jsonl")


def _guarded(name: str, run) -> dict:
    """``_check(name, run())``; a file the check cannot read (a directory, a broken link, bytes
    of the wrong shape) is that check's finding, not a traceback."""
    try:
        return _check(name, run())
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return _check(name, [f"could not be checked: {type(exc).__name__}: {exc}"])


def _check(name: str, problems: list[str], ok_detail: str = "ok") -> dict:
    return {"check": name, "passed": not problems,
            "detail": ok_detail if not problems else "; ".join(problems[:8]) + (" ..." if len(problems) > 8 else "")}


def pinned_settings(man: dict) -> dict:
    ident = man["identity"]
    return P.pipeline_settings(ident["backend"], ident.get("skyrl_batch_size") or 4)


def check_pins(man: dict, run_dir: Path) -> list[str]:
    """The manifest's limits, pins and contract are the pinned ones (validation uses the pinned copy)."""
    out = []
    try:
        settings = pinned_settings(man)
    except ValueError as exc:
        return [f"no pinned settings for this run: {exc}"]
    for key, want in settings.items():
        if man["pipeline"].get(key) != want:
            out.append(f"pipeline.{key} is {man['pipeline'].get(key)!r}, pinned {want!r}")
    for key, want in P.pins().items():
        if man["pins"].get(key) != want:
            out.append(f"pins.{key} is {man['pins'].get(key)!r}, pinned {want!r}")
    for key, want in P.CONTRACT.items():
        if man["contract"].get(key) != want:
            out.append(f"contract.{key} is {man['contract'].get(key)!r}, pinned {want!r}")
    if man["model"].get("revision") != P.MODEL_REVISION or man["model"].get("name") != P.MODEL:
        out.append(f"model {man['model'].get('name')}@{man['model'].get('revision')} is not the pinned "
                   f"{P.MODEL}@{P.MODEL_REVISION}")
    if man["identity"].get("runtime") != "sim" and not man["model"].get("snapshot"):
        out.append("no run-local model snapshot recorded (model.snapshot)")
    out += model_snapshot.check(run_dir, man["model"].get("snapshot"))
    return out


def check_evidence(run_dir: Path, man: dict, lines: dict[str, list[dict]]) -> list[str]:
    """sha256 and line counts as recorded; every line names this run and lease, in sequence."""
    out = []
    rec = man.get("evidence") or {}
    run_id, lease_id = man["identity"].get("run_id"), man["identity"].get("lease_id")
    if man["lease"].get("lease_id") != lease_id:
        out.append("identity.lease_id differs from lease.lease_id")
    for name in EVIDENCE_FILES:
        path = run_dir / name
        want = rec.get(name)
        if not isinstance(want, dict) or not isinstance(want.get("sha256"), str):
            out.append(f"evidence.{name}: no sha256 recorded")
            continue
        data = path.read_bytes() if path.exists() else b""
        if hashlib.sha256(data).hexdigest() != want["sha256"]:
            out.append(f"{name}: sha256 differs from the one recorded when the backend finished")
        n_lines = data.count(b"\n")
        if n_lines != want.get("lines"):
            out.append(f"{name}: {n_lines} lines, {want.get('lines')} recorded")
        if "bytes" in want and len(data) != want["bytes"]:
            out.append(f"{name}: {len(data)} bytes, {want['bytes']!r} recorded")
        prev_wall = None
        for i, row in enumerate(lines[name]):  # lines are appended as they happen: the clock never goes back
            wall = row.get("wall_time_unix")
            if prev_wall is not None and isinstance(wall, int | float) and wall < prev_wall:
                out.append(f"{name} line {i + 1}: written at {wall}, before line {i} ({prev_wall}): the wall "
                           "clock went backwards or the lines were reordered")
                break
            prev_wall = wall if isinstance(wall, int | float) else prev_wall
        ks = [row.get("k") for row in lines[name]] if name == "updates.jsonl" else []
        if ks != sorted(ks, key=lambda k: k if isinstance(k, int | float) else 0):
            out.append(f"{name}: updates are not in order of k ({ks[:25]}): lines reordered")
        for i, row in enumerate(lines[name]):
            if row.get("run_id") != run_id or row.get("lease_id") != lease_id:
                out.append(f"{name} line {i + 1}: run/lease {row.get('run_id')}/{row.get('lease_id')} is not this "
                           f"run's {run_id}/{lease_id}")
                break
            if row.get("seq") != i:
                out.append(f"{name} line {i + 1}: sequence number {row.get('seq')!r}, expected {i} "
                           "(a replayed, duplicated or reordered line)")
                break
    return out


def check_updates(updates: list[dict]) -> list[str]:
    ks = [int(u["k"]) for u in updates]
    out = []
    if ks != list(range(1, TOTAL_UPDATES + 1)):
        out.append(f"updates must be 1..{TOTAL_UPDATES} contiguous, got {ks[:25]}")
    prev = None
    for u in updates:
        if not float(u["d_k"]) <= float(u["train_end"]) <= float(u["publish_end"]):
            out.append(f"update {u['k']}: need d_k <= train_end <= publish_end")
        if float(u["c_k"]) != float(u["publish_end"]):
            out.append(f"update {u['k']}: c_k != publish_end")
        if int(u.get("policy_version", -1)) != int(u["k"]):
            out.append(f"update {u['k']}: publishes policy version {u.get('policy_version')}")
        if prev is not None and float(u["c_k"]) <= prev:
            out.append(f"update {u['k']}: c_k not strictly increasing")
        elif prev is not None and float(u["d_k"]) < prev - INTERVAL_EPSILON_S:
            out.append(f"update {u['k']}: handed to the trainer at d_k={u['d_k']}, before update {int(u['k']) - 1} "
                       f"was published (c_k={prev}); the trainer runs one update at a time, so steps cannot overlap")
        prev = float(u["c_k"])
    return out


def check_ranks(updates: list[dict], ranks: int) -> list[str]:
    out = []
    for u in updates:
        if int(u["k"]) <= WARMUP_UPDATES:
            continue
        ivs = u.get("rank_intervals", {})
        missing = [r for r in range(ranks) if not ivs.get(str(r))]
        if missing:
            out.append(f"update {u['k']}: no intervals for trainer ranks {missing}")
        extra = sorted(set(ivs) - {str(r) for r in range(ranks)})
        if extra:
            out.append(f"update {u['k']}: intervals for ranks {extra} beyond the pinned {ranks}")
        lo, hi = float(u["d_k"]) - INTERVAL_EPSILON_S, float(u["c_k"]) + INTERVAL_EPSILON_S
        for r, lst in ivs.items():
            for s, e in lst:
                if not s < e:
                    out.append(f"update {u['k']} rank {r}: empty interval [{s}, {e})")
                elif s < lo or e > hi:
                    out.append(f"update {u['k']} rank {r}: [{s}, {e}) outside [d_k, c_k]")
    return out


def check_train_speed(updates: list[dict]) -> list[str]:
    """No update trains its tokens faster than the trainer GPUs could (a physical ceiling,
    `pins.MAX_TRAIN_TOKENS_PER_S_PER_GPU`): rank intervals or a whole timeline compressed."""
    ceiling = P.MAX_TRAIN_TOKENS_PER_S_PER_GPU * P.TRAINER_GPUS
    for u in updates:  # the ranks' busy time, or the training span where no rank interval was recorded
        span = contract.union_length(contract.update_intervals(u)) or float(u["train_end"]) - float(u["d_k"])
        if float(u["tokens"]) > max(span, 0.0) * ceiling:
            return [f"updates.jsonl update {u['k']}: {u['tokens']} tokens trained in {span:.6g} s, faster than "
                    f"{P.TRAINER_GPUS} trainer GPUs can ({ceiling:.0f} tokens/s, pins.MAX_TRAIN_TOKENS_PER_S_PER_GPU)"]
    return []


def check_counts(updates: list[dict], per_update: int) -> list[str]:
    out = []
    for u in updates:
        if int(u["groups"]) != per_update:
            out.append(f"update {u['k']}: {u['groups']} groups, pinned {per_update}")
        if len(u.get("group_ids", [])) != int(u["groups"]):
            out.append(f"update {u['k']}: group_ids lists {len(u.get('group_ids', []))} groups")
        if len(u.get("staleness", [])) != int(u["groups"]):
            out.append(f"update {u['k']}: {len(u.get('staleness', []))} staleness values for {u['groups']} groups")
    return out


def check_groups_unique(updates: list[dict]) -> list[str]:
    seen: dict[int, int] = {}
    out = []
    for u in updates:
        for g in u.get("group_ids", []):
            if int(g) in seen:
                out.append(f"group {g} trained in update {seen[int(g)]} and again in update {u['k']}")
            else:
                seen[int(g)] = int(u["k"])
    return out


def check_endpoints(updates: list[dict], turns: list[dict]) -> list[str]:
    rates = contract.window_rates(updates, turns, HEADLINE_FIRST, HEADLINE_LAST)
    out = []
    if not rates.get("complete"):
        out.append("headline window (c_15, c_20] missing or of zero length")
    elif rates["accepted_trained_tokens"] <= 0:
        out.append("no accepted trained tokens in the headline window")
    for u in updates:
        if HEADLINE_FIRST <= int(u["k"]) <= HEADLINE_LAST and (u.get("eval") or u.get("checkpoint")):
            out.append(f"update {u['k']} in the headline window was an eval/checkpoint step")
    return out


def check_trained_calls(updates: list[dict], turns: list[dict], workload) -> list[str]:
    """Every call of every trained group: one finished record of its scheduled lengths, before d_k."""
    out = []
    by_call: dict[tuple[int, int], list[dict]] = {}
    for t in turns:
        by_call.setdefault((int(t["trajectory"]), int(t["turn"])), []).append(t)
    dup = [key for key, rows in by_call.items() if len(rows) > 1]
    if dup:
        out.append(f"{len(dup)} call(s) recorded more than once, e.g. trajectory {dup[0][0]} turn {dup[0][1]}")
    G = workload.n_groups
    for u in updates:
        d_k = float(u["d_k"])
        gids = [int(g) for g in u.get("group_ids", [])]
        if any(not 0 <= g < G for g in gids):
            out.append(f"update {u['k']}: group ids outside the schedule")
            continue
        trajs = sum(workload.group_size(g) for g in gids)
        toks = sum(int(workload.call_completion_tokens[c]) for g in gids for t in workload.group_trajs(g)
                   for c in workload.traj_calls(t))
        if int(u["trajectories"]) != trajs or int(u["tokens"]) != toks:
            out.append(f"update {u['k']}: trained {u['trajectories']} traj/{u['tokens']} tokens, the schedule of "
                       f"its groups says {trajs}/{toks}")
        starts = {g: [int(r["policy_version_start"]) for t in workload.group_trajs(g)
                      for j in range(len(workload.traj_calls(t)))
                      for r in by_call.get((int(t), j), [])[:1] if isinstance(r.get("policy_version_start"), int)]
                  for g in gids}
        for g, st in zip(gids, u.get("staleness", []), strict=False):
            if starts[g] and int(st) < int(u["k"]) - 1 - min(starts[g]):
                out.append(f"update {u['k']} group {g}: staleness {st}, but its first call began on policy "
                           f"{min(starts[g])}, {int(u['k']) - 1 - min(starts[g])} versions before this update")
        for g in gids:
            for t in workload.group_trajs(g):
                for j, c in enumerate(workload.traj_calls(t)):
                    rows = by_call.get((int(t), j))
                    L, prompt = int(workload.call_completion_tokens[c]), int(workload.call_prompt_tokens[c])
                    where = f"update {u['k']} group {g} trajectory {t} turn {j}"
                    if not rows:
                        out.append(f"{where}: no turn record")
                        continue
                    r = rows[0]
                    if r.get("finish") is None or r.get("finish_reason") != "length":
                        out.append(f"{where}: not finished by length (finish {r.get('finish')}, "
                                   f"{r.get('finish_reason')})")
                    elif float(r["finish"]) > d_k + INTERVAL_EPSILON_S:
                        out.append(f"{where}: finished at {r['finish']} after its batch was handed over at {d_k}")
                    if int(r.get("group", -1)) != g:
                        out.append(f"{where}: recorded under group {r.get('group')}")
                    if not int(r["completion_tokens"]) == int(r["forced_tokens"]) == L:
                        out.append(f"{where}: {r['completion_tokens']} of forced {r['forced_tokens']} tokens, "
                                   f"scheduled {L}")
                    if not int(r["prompt_tokens"]) == int(r.get("scheduled_prompt_tokens", -1)) == prompt:
                        out.append(f"{where}: prompt {r['prompt_tokens']} tokens, scheduled {prompt}")
    return out


def check_forced(turns: list[dict]) -> list[str]:
    """Every finished call produced exactly its forced length; unfinished calls carry no length verdict."""
    if not turns:
        return ["no calls recorded in turns.jsonl"]
    bad = [t for t in turns if (t.get("finish") is None) == (t.get("finish_reason") == "length")
           or (t.get("finish") is not None and int(t["completion_tokens"]) != int(t["forced_tokens"]))]
    return [f"{len(bad)} of {len(turns)} calls missed their forced length or are half-finished, e.g. trajectory "
            f"{bad[0]['trajectory']} turn {bad[0]['turn']}: {bad[0]['completion_tokens']} of "
            f"{bad[0]['forced_tokens']} ({bad[0].get('finish_reason')}, finish {bad[0].get('finish')})"] if bad else []


def _times(updates: list[dict], turns: list[dict]):
    for u in updates:
        yield f"update {u['k']}", [float(u[x]) for x in ("d_k", "train_end", "publish_end", "c_k")] + [
            float(v) for ivs in u.get("rank_intervals", {}).values() for iv in ivs for v in iv]
    for t in turns:
        yield f"trajectory {t['trajectory']} turn {t['turn']}", [
            float(t[x]) for x in ("arrival", "first_token", "finish") if t.get(x) is not None]


def check_timestamps(man: dict, updates: list[dict], turns: list[dict]) -> list[str]:
    """Evidence times lie inside the run and agree: versions are published before calls start on them."""
    out = []
    ident, clock = man["identity"], man.get("clock") or {}
    start, end = ident.get("backend_started_unix"), ident.get("backend_finished_unix")
    if start is None or end is None:
        return ["the backend's start/finish wall times are not recorded"]
    for name, rows in (("updates.jsonl", updates), ("turns.jsonl", turns)):
        for r in rows:
            w = r.get("wall_time_unix")
            if not isinstance(w, int | float) or not start - WALL_SLACK_S <= w <= end + WALL_SLACK_S:
                out.append(f"{name}: a line written at {w}, outside the backend's run [{start}, {end}]")
                break
    kind = clock.get("kind")
    # the runtime decides the clock: the simulator's own, or a driver's monotonic clock tied to the
    # wall clock (a real run claiming a simulated clock would escape every wall-time bound)
    want_kind = "simulated" if ident.get("runtime") == "sim" else "monotonic"
    if kind != want_kind:
        out.append(f"clock.kind {kind!r}: a {ident.get('runtime')} run's evidence clock is {want_kind!r}")
    if kind == "monotonic":
        origin = clock.get("origin_unix")
        if not isinstance(origin, int | float) or origin < start - WALL_SLACK_S:
            return [*out, f"clock origin {origin} precedes the backend's start {start}"]
        horizon = end - origin + WALL_SLACK_S
        for u in updates:
            if origin + float(u["c_k"]) > float(u["wall_time_unix"]) + WALL_SLACK_S:
                out.append(f"update {u['k']}: c_k lies after its evidence line was written")
        for t in turns:  # a call's line is written when it finishes
            if t.get("finish") is not None and origin + float(t["finish"]) > float(t["wall_time_unix"]) + WALL_SLACK_S:
                out.append(f"trajectory {t['trajectory']} turn {t['turn']}: finish {t['finish']} lies after its "
                           f"evidence line was written ({t['wall_time_unix']})")
                break
    elif kind == "simulated":
        horizon = clock.get("end_s")
        if not isinstance(horizon, int | float):
            return [*out, "simulated clock without end_s"]
        # the simulator's clock ends at its last publication or call event (backends/sim._horizon)
        last = max([float(u["publish_end"]) for u in updates] + [
            float(t[x]) for t in turns for x in ("arrival", "first_token", "finish") if t.get(x) is not None],
            default=0.0)
        if not math.isclose(float(horizon), last, rel_tol=1e-12, abs_tol=1e-9):
            out.append(f"clock.end_s {horizon}: the simulated run's last publication or call event in the "
                       f"evidence is at {last}")
    else:
        return [*out, f"unknown evidence clock {clock!r}"]
    for where, ts in _times(updates, turns):
        if any(not 0.0 <= t <= horizon for t in ts):
            out.append(f"{where}: a time outside the run [0, {horizon:.3f}] s")
            break
    trained = {int(u["k"]): float(u["train_end"]) for u in updates}
    for t in turns:
        v = t.get("policy_version_start")
        began = float(t["first_token"]) if t.get("first_token") is not None else float(t["arrival"])
        if isinstance(v, int) and v >= 1 and v in trained and began < trained[v] - INTERVAL_EPSILON_S:
            out.append(f"trajectory {t['trajectory']} turn {t['turn']}: began on policy {v} at {began}, "
                       f"before update {v} finished training ({trained[v]})")
            break
        if t.get("finish") is not None and float(t["finish"]) < float(t["arrival"]):
            out.append(f"trajectory {t['trajectory']} turn {t['turn']}: finished before it arrived")
            break
        if t.get("first_token") is not None and not (
                float(t["arrival"]) <= float(t["first_token"])
                <= (float(t["finish"]) if t.get("finish") is not None else math.inf)):
            out.append(f"trajectory {t['trajectory']} turn {t['turn']}: first token at {t['first_token']} is not "
                       f"between its arrival {t['arrival']} and finish {t.get('finish')}")
            break
    for i, t in enumerate(turns):  # below a physical floor: the timeline was compressed
        if t.get("finish") is None or int(t["completion_tokens"]) <= 1:
            continue
        # from the first token, or (drivers that see no first token) from arrival: a longer span, a
        # lower rate, so the ceiling still holds
        span = float(t["finish"]) - float(t["first_token"] if t.get("first_token") is not None else t["arrival"])
        if span * P.MAX_DECODE_TOKENS_PER_S < int(t["completion_tokens"]) - 1:
            out.append(f"turns.jsonl line {i + 1} (trajectory {t['trajectory']} turn {t['turn']}): "
                       f"{int(t['completion_tokens']) - 1} tokens after the first in {span:.6g} s, faster than "
                       f"any decoder ({P.MAX_DECODE_TOKENS_PER_S:.0f} tokens/s per sequence, pins."
                       "MAX_DECODE_TOKENS_PER_S): times in another unit or compressed")
            break
    out += _check_calls(updates, turns)
    hw = man.get("hardware") or {}
    order = [("identity.created_at_unix", ident.get("created_at_unix")),
             ("hardware.occupancy_before.time_unix", (hw.get("occupancy_before") or {}).get("time_unix")),
             ("identity.backend_started_unix", start), ("identity.backend_finished_unix", end),
             ("hardware.occupancy_after.time_unix", (hw.get("occupancy_after") or {}).get("time_unix"))]
    known = [(k, v) for k, v in order if isinstance(v, int | float)]
    for (k1, v1), (k2, v2) in zip(known, known[1:], strict=False):
        if v2 < v1 - WALL_SLACK_S:
            out.append(f"{k2} ({v2}) is before {k1} ({v1}): the recorded times go backwards")
    outcome_clock = (man.get("backend_outcome") or {}).get("clock")
    if isinstance(outcome_clock, dict) and outcome_clock != clock:
        out.append(f"clock {clock!r} differs from the backend's own backend_outcome.clock {outcome_clock!r}")
    return out


VERSION_SLACK_S = 1.0  # a driver reads the published version when it issues a call; stamps may differ


def _check_calls(updates: list[dict], turns: list[dict]) -> list[str]:
    """What every call's record implies about the others: a trajectory's turns run one after
    another (turn j + 1 is sent with turn j's completion, so it arrives after turn j finished,
    and no turn is recorded without the turn before it), and a call's policy versions are ones
    the trainer had published: it began on at least every version published before it arrived,
    and ended on a version no older than its start and already published when it finished (it
    may keep the version it began on: a LoRA request in flight keeps its adapter)."""
    import bisect

    out: list[str] = []
    published = sorted(float(u["c_k"]) for u in updates)
    by_traj: dict[int, dict[int, dict]] = {}
    for t in turns:
        by_traj.setdefault(int(t["trajectory"]), {})[int(t["turn"])] = t
        where = f"trajectory {t['trajectory']} turn {t['turn']}"
        v0, v1 = t.get("policy_version_start"), t.get("policy_version_end")
        floor0 = bisect.bisect_left(published, float(t["arrival"]) - VERSION_SLACK_S)
        if isinstance(v0, int) and v0 < floor0:
            out.append(f"{where}: began on policy {v0}, but {floor0} versions were published before it arrived at "
                       f"{t['arrival']}")
        if isinstance(v0, int) and isinstance(v1, int) and v1 < v0:
            out.append(f"{where}: ended on policy {v1}, older than the policy {v0} it began on")
        if isinstance(v1, int) and t.get("finish") is not None:
            ceil1 = bisect.bisect_right(published, float(t["finish"]) + VERSION_SLACK_S)
            if v1 > ceil1:
                out.append(f"{where}: ended on policy {v1} at {t['finish']}, when only {ceil1} versions were "
                           "published")
        if len(out) >= 3:
            return out
    for tid, rows in sorted(by_traj.items()):
        for j in sorted(rows):
            if j and j - 1 not in rows:
                out.append(f"trajectory {tid}: turn {j} recorded without turn {j - 1}")
                break
            prev = rows.get(j - 1)
            if prev is not None and (prev.get("finish") is None
                                     or float(rows[j]["arrival"]) < float(prev["finish"]) - INTERVAL_EPSILON_S):
                out.append(f"trajectory {tid}: turn {j} arrived at {rows[j]['arrival']}, before turn {j - 1} "
                           f"finished ({prev.get('finish')}); a trajectory's turns run one after another")
                break
        if len(out) >= 3:
            break
    return out


def check_context(run_dir: Path, man: dict) -> list[str]:
    """The manifest describes the run the worker was given: context.json, which the backend read,
    names the same backend, workload, seed, settings, GPUs, lease and LoRA rank."""
    from workloads.strictio import load_json_file

    path = run_dir / "context.json"
    if not path.exists():
        return ["context.json (the run context the backend was started with) is missing"]
    try:
        ctx = load_json_file(path, lambda line, field, msg: ValueError(
            f"{path}{f':{line}' if line else ''}: {f'{field}: ' if field else ''}{msg}"))
    except ValueError as exc:
        return [str(exc)]
    if not isinstance(ctx, dict):
        return [f"{path}: expected a JSON object"]
    ident, wl, hw = man["identity"], man["workload"], man.get("hardware") or {}
    pairs = [("run_id", "identity.run_id", ident.get("run_id")), ("backend", "identity.backend", ident.get("backend")),
             ("workload", "identity.workload", ident.get("workload")),
             ("runtime", "identity.runtime", ident.get("runtime")), ("lease_id", "identity.lease_id",
                                                                     ident.get("lease_id")),
             ("seed", "workload.seed", wl.get("seed")), ("rank", "model.lora.rank", man["model"].get("lora", {}).get(
                 "rank")),
             ("trainer_uuids", "hardware.trainer_uuids", hw.get("trainer_uuids")),
             ("inference_uuids", "hardware.inference_uuids", hw.get("inference_uuids"))]
    if ident.get("backend") == "skyrl":
        pairs.append(("skyrl_batch_size", "identity.skyrl_batch_size", ident.get("skyrl_batch_size")))
    got = dict(ctx)  # context values by the dotted name the messages use
    settings = ctx.get("settings") if isinstance(ctx.get("settings"), dict) else {}
    for key, val in settings.items():  # the pipeline adds what the backend reported (native_config)
        pairs.append((f"settings.{key}", f"pipeline.{key}", man["pipeline"].get(key)))
        got[f"settings.{key}"] = val
    params = ctx.get("workload_params")
    if isinstance(params, dict):
        pairs.append(("workload_params.groups", "workload.groups", wl.get("groups")))
        got["workload_params.groups"] = params.get("groups")
    out = [f"manifest {mkey} is {mval!r:.80}, but the run was started with {key} = {got.get(key)!r:.80} "
           "(context.json)" for key, mkey, mval in pairs if got.get(key) != mval]
    ran = (man["pipeline"].get("native_config") or {}).get("simrl_overrides")
    if ident.get("runtime") == "sim" and ran is not None:  # the simulator's config is a function of the context
        from harness.backends import sim
        from harness.backends.base import RunContext

        try:
            want = sim.overrides(RunContext.from_dict(ctx))
        except (TypeError, KeyError, ValueError) as exc:
            want = f"unbuildable from context.json ({exc})"
        if ran != want:
            extra = [x for x in ran if x not in want] if isinstance(ran, list) and isinstance(want, list) else ran
            missing = [x for x in want if x not in ran] if isinstance(ran, list) and isinstance(want, list) else want
            out.append(f"pipeline.native_config.simrl_overrides has {extra!r:.160} where context.json makes the "
                       f"simulator run with {missing!r:.160}")
    return out


# What a re-run of the simulator cannot reproduce: when each line was written.
RESIM_UNREPRODUCIBLE = ("wall_time_unix",)


def check_resimulated(run_dir: Path, man: dict, lines: dict[str, list[dict]]) -> list[str]:
    """A sim run is a function of its context: the simulator is deterministic, so validation runs
    it again from context.json (which hashes as recorded and names the manifest's configuration)
    and every evidence line but its write time, and the backend's outcome, must be what the
    re-run gives. Any edit of a sim run's evidence, however consistently resealed (a rescaled
    timeline, a call added or dropped, lines reordered, evidence of another seed or simulator
    version), is caught here."""
    if man["identity"].get("runtime") != "sim":
        return []
    import tempfile

    import attrs

    from harness import backends
    from harness.backends.base import EvidenceSink, RunContext
    from harness.fsio import read_jsonl
    from workloads.strictio import load_json_file

    path = run_dir / "context.json"
    try:
        ctx = RunContext.from_dict(load_json_file(path, lambda line, field, msg: ValueError(f"{path}: {msg}")))
    except (ValueError, TypeError) as exc:
        return [f"context.json: cannot rebuild the run context to re-run the simulator ({exc})"]
    with tempfile.TemporaryDirectory(prefix="bench-resim-") as tmp:
        ctx = attrs.evolve(ctx, run_dir=tmp)
        sink = EvidenceSink(Path(tmp), None, run_id=ctx.run_id, lease_id=ctx.lease_id, durable=False)
        try:
            outcome = backends.load(ctx.backend, "sim").run(ctx, sink, lambda msg: None)
        except Exception as exc:  # noqa: BLE001 - a context the simulator cannot run is the finding
            return [f"the simulator re-run from context.json fails: {type(exc).__name__}: {exc}"]
        finally:
            sink.close()
        again = {name: list(read_jsonl(Path(tmp) / name)) for name in EVIDENCE_FILES}
    out = []
    for name in EVIDENCE_FILES:
        got, want = lines[name], again[name]
        for i, (a, b) in enumerate(zip(got, want, strict=False)):
            diff = sorted(k for k in set(a) | set(b) if k not in RESIM_UNREPRODUCIBLE and a.get(k) != b.get(k))
            if diff:
                out.append(f"{name} line {i + 1}: {diff[0]} is {a.get(diff[0])!r:.60}, the simulator re-run from "
                           f"context.json gives {b.get(diff[0])!r:.60}")
                break
        else:
            if len(got) != len(want):
                out.append(f"{name}: {len(got)} lines, the simulator re-run from context.json writes {len(want)}")
    recorded = man.get("backend_outcome") or {}
    for key, val in outcome.to_dict().items():
        if key != "notes" and recorded.get(key) != val:
            out.append(f"backend_outcome.{key} is {recorded.get(key)!r:.80}, the simulator re-run gives {val!r:.80}")
    return out


def check_schedule(man: dict, turns: list[dict], workload) -> list[str]:
    from harness.workload_source import describe

    out = []
    wl = man["workload"]
    if workload.schedule_sha256() != wl.get("schedule_sha256"):
        out.append("schedule_sha256 does not recompute from the workload generator")
    if wl.get("name") != man["identity"].get("workload"):
        out.append(f"workload.name {wl.get('name')!r} is not identity.workload {man['identity'].get('workload')!r}")
    try:
        need = P.groups_needed(pinned_settings(man))
    except ValueError:
        need = None
    if need is not None and wl.get("groups") != need:
        out.append(f"workload.groups {wl.get('groups')!r}, but the pinned pipeline needs {need} groups")
    want = describe(workload, wl.get("groups"), wl.get("group_size"), wl.get("knobs") or {})
    diffs: list[str] = []
    _differences(wl, want, "workload", diffs)
    out += [f"{d} (from the regenerated workload)" for d in diffs[:3]]
    for t in turns:
        tid, turn = int(t["trajectory"]), int(t["turn"])
        if not 0 <= tid < workload.n_trajectories or not 0 <= turn < len(workload.traj_calls(tid)):
            out.append(f"turn {tid}/{turn} not in the schedule")
        elif int(workload.call_completion_tokens[workload.traj_calls(tid)[turn]]) != int(t["forced_tokens"]):
            out.append(f"turn {tid}/{turn}: forced L {t['forced_tokens']} differs from the schedule")
    return out


def check_staleness(backend: str, updates: list[dict], bound: int) -> list[str]:
    """Against the pinned bound. ART discards stale groups, so a trained stale group is an error;
    SkyRL logs a violation and trains the group, so violations are allowed and reported in the
    (recomputed) secondary results, as the contract asks."""
    sec = contract.secondary(updates, bound)
    if sec["staleness_max"] is None:
        return ["no staleness recorded"]
    if sec["staleness_violations"] and backend == "art":
        return [f"{sec['staleness_violations']} trained group(s) staler than the pinned bound {bound} "
                f"(max {sec['staleness_max']}); ART discards such groups"]
    return []


def check_hygiene(man: dict) -> list[str]:
    """Recompute each occupancy verdict from its raw nvidia-smi output, for the leased UUIDs."""
    out = []
    uuids = man["lease"].get("gpu_uuids") or []
    if sorted(uuids) != sorted(man["hardware"].get("trainer_uuids", []) + man["hardware"].get("inference_uuids", [])):
        out.append("leased GPUs differ from the trainer + inference GPUs")
    for when in ("occupancy_before", "occupancy_after"):
        snap = man.get("hardware", {}).get(when)
        if not snap:
            out.append(f"hardware.{when} not recorded")
            continue
        raw = snap.get("raw")
        if not isinstance(raw, dict):
            out.append(f"hardware.{when}: no raw nvidia-smi output to recompute from")
            continue
        got = nvsmi.judge(raw, uuids, P.MEMORY_USED_THRESHOLD_MIB)
        if not got["clean"]:
            out.append(f"{when}: " + "; ".join(got["problems"]))
        if bool(snap.get("clean")) != got["clean"]:
            out.append(f"{when}: recorded clean={snap.get('clean')} but the snapshot says clean={got['clean']}")
    return out


def check_lease(man: dict, final: bool = True) -> list[str]:
    lease = man.get("lease", {})
    end = lease.get("verified_at_end") or {}
    if lease.get("run_id") != man["identity"].get("run_id") or not lease.get("lease_id"):
        return ["lease record does not name this run"]
    if end.get("held") is not True:
        return ["lease not held by this run at the end: " + "; ".join(end.get("problems", ["not verified"]))]
    if end.get("problems") != []:  # held means no problem was found (run.py: held = not problems)
        return [f"lease.verified_at_end says held, but lists problems {end.get('problems')!r:.120}"]
    if final and lease.get("released") is not True:
        return ["the run did not release its lease (lease.released)"]
    return []


def _differences(recorded, recomputed, path: str, out: list[str]) -> None:
    if isinstance(recomputed, dict):
        if not isinstance(recorded, dict):
            out.append(f"{path}: recorded {recorded!r}")
            return
        for key in sorted(set(recomputed) | set(recorded)):
            _differences(recorded.get(key), recomputed.get(key), f"{path}.{key}", out)
    elif isinstance(recomputed, list):
        if not isinstance(recorded, list) or len(recorded) != len(recomputed):
            out.append(f"{path}: recorded {recorded!r}")
            return
        for i, (a, b) in enumerate(zip(recorded, recomputed, strict=True)):
            _differences(a, b, f"{path}[{i}]", out)
    elif isinstance(recomputed, float) and isinstance(recorded, int | float) and not isinstance(recorded, bool):
        if not math.isclose(recorded, recomputed, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{path}: recorded {recorded}, recomputed {recomputed}")
    elif recorded != recomputed:
        out.append(f"{path}: recorded {recorded!r}, recomputed {recomputed!r}")


def check_results(man: dict, recomputed: dict) -> list[str]:
    out: list[str] = []
    recorded = {k: v for k, v in man.get("results", {}).items() if k != "autotuner"}
    _differences(recorded, recomputed, "results", out)
    return out


def check_container(man: dict) -> list[str]:
    ident = man["identity"]
    if ident.get("runtime") != "container":
        return []
    out = []
    if ident.get("recipe_sha256_baked") != ident.get("requested_recipe_sha256"):
        out.append("baked recipe hash differs from requested_recipe_sha256")
    if not ident.get("container_image_digest"):
        out.append("container image digest not recorded")
    pre = (man.get("provenance") or {}).get("container_preflight") or {}
    if pre.get("image_id") != ident.get("container_image_digest") or (pre.get("baked") or {}).get(
            "recipe") != ident.get("recipe_sha256_baked"):
        out.append("identity's image digest or baked recipe hash differs from provenance.container_preflight "
                   "(what the preflight read from the image)")
    return out


LOG_UPDATE = re.compile(r"\bupdate (\d+): c_k=(\S+) groups=(\d+) trajectories=(\d+) tokens=(\d+)"
                        r"(?: line_sha256=([0-9a-f]{64}) turns=(\d+) turns_sha256=([0-9a-f]{64}))?")
LOG_CLOSED = re.compile(r"\bevidence closed: updates=(\d+) updates_sha256=([0-9a-f]{64}) turns=(\d+) "
                        r"turns_sha256=([0-9a-f]{64})")
LOG_LEASE = re.compile(r"\blease (\S+) on (GPU-\S+(?:, GPU-\S+)*)\s*$", re.M)
LOG_BACKEND = re.compile(r"\bbackend (\S+) \((\S+)\) on workload (\S+), (\d+) groups, schedule ([0-9a-f]{12})")
LOG_EXITED = re.compile(r"\bbackend exited (-?\d+), version (.*?)\s*$", re.M)
LOG_WORKER = re.compile(r"\bworker pid (\d+) in its own process group (\d+)\s*$", re.M)
LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) INFO (backend \S+ \(|backend exited )", re.M)
LOG_SEALED = re.compile(r"\bmanifest sealed: sha256=([0-9a-f]{64})((?: [a-z_]+=[0-9a-f]{16})*)\s*$", re.M)
LOG_STATUS = re.compile(r"\bstatus (\S+); verdict (\S+)\s*$", re.M)


def _raw_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def _prefix_digests(lines: list[bytes], wanted: set[int]) -> dict[int, str]:
    """sha256 of the first n lines, for each n in ``wanted`` (one pass)."""
    h, out = hashlib.sha256(), {}
    for n in range(len(lines) + 1):
        if n in wanted:
            out[n] = h.hexdigest()
        if n < len(lines):
            h.update(lines[n])
    return out


def _check_log_times(text: str, ident: dict) -> list[str]:
    """The controller logged the backend line just before the backend started and the exit line
    just after it finished (one-second stamps): the manifest's start/finish times agree."""
    import calendar
    import time as _time

    stamps = {m.group(2).startswith("backend exited"): calendar.timegm(_time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ"))
              for m in LOG_STAMP.finditer(text)}
    out = []
    for finished, key in ((False, "backend_started_unix"), (True, "backend_finished_unix")):
        t, logged = ident.get(key), stamps.get(finished)
        if logged is None or not isinstance(t, int | float):
            continue  # a missing line is reported by the copies check
        if not logged - WALL_SLACK_S <= t <= logged + 1 + WALL_SLACK_S:
            out.append(f"identity.{key} {t} is not when run.log logged the backend "
                       f"{'exiting' if finished else 'starting'} ({_time.strftime('%Y-%m-%dT%H:%M:%SZ', _time.gmtime(logged))})")
    return out


LOG_ANY_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) [A-Z]+ ")


def _check_log_order(text: str, ident: dict) -> list[str]:
    """run.log is appended as the run goes: its stamps never go back, and none precedes the run's
    creation (a line moved, or dated, elsewhere in the log)."""
    import calendar
    import time as _time

    created, prev = ident.get("created_at_unix"), None
    for line, raw in enumerate(text.splitlines(), 1):
        m = LOG_ANY_STAMP.match(raw)
        if m is None:  # a worker's own output, appended unstamped
            continue
        t = calendar.timegm(_time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ"))
        if isinstance(created, int | float) and t < int(created) - WALL_SLACK_S:
            return [f"run.log:{line}: stamped {m.group(1)}, before the run was created (identity.created_at_unix "
                    f"{created})"]
        if prev is not None and t < prev[0] - WALL_SLACK_S:
            return [f"run.log:{line}: stamped {m.group(1)}, before line {prev[1]} ({prev[2]}): the log's clock goes "
                    "back (lines moved or re-dated)"]
        prev = (t, line, m.group(1)) if prev is None or t >= prev[0] else prev
    return []


def check_log(run_dir: Path, man: dict, updates: list[dict] | None = None, final: bool = True) -> list[str]:
    """No error in run.log, and run.log is a second witness of the evidence as it was written.

    EvidenceSink logged, for each update as it happened, its c_k, groups, trajectories and tokens,
    the sha256 of its updates.jsonl line and the count and running sha256 of the turns.jsonl lines
    before it, and on closing both files' line counts and sha256 (see `backends.base`). Every
    update line, every turn line (added, dropped, edited or reordered) and both files' hashes are
    checked against the log, so evidence edited after the run and resealed in the manifest is
    still caught, and so is a log line edited alone. The lease line names the manifest's lease.
    """
    log = run_dir / "run.log"
    if not log.exists():
        return ["run.log missing"]
    if not log.is_file():
        return ["run.log is not a regular file"]
    out = []
    text = log.read_text(errors="replace")
    m = LOG_ERROR.search(text)
    if m:
        out.append(f"run.log contains {m.group(0).strip()!r}")
    lease = man.get("lease") or {}
    said = [(g.group(1), g.group(2).split(", ")) for g in LOG_LEASE.finditer(text)]
    want_uuids = (man.get("hardware") or {}).get("trainer_uuids", []) + (man.get("hardware") or {}).get(
        "inference_uuids", [])
    if lease.get("lease_id") and said != [(lease.get("lease_id"), want_uuids)]:
        out.append(f"run.log: lease line(s) {said!r:.200} do not name the manifest's lease {lease.get('lease_id')} "
                   f"on {', '.join(want_uuids)}")
    ident, wl, outcome = man["identity"], man.get("workload") or {}, man.get("backend_outcome") or {}
    copies = [("backend line", LOG_BACKEND.findall(text), [(
        ident.get("backend"), ident.get("runtime"), ident.get("workload"), str(wl.get("groups")),
        str(wl.get("schedule_sha256"))[:12])], "identity.backend/runtime/workload, workload.groups/schedule_sha256"),
        ("backend exit line", LOG_EXITED.findall(text), [(str(outcome.get("exit_code")), str(
            ident.get("backend_version")))], "backend_outcome.exit_code, identity.backend_version")]
    sealed = LOG_SEALED.findall(text)
    if len(sealed) != 1:
        out.append(f"run.log: {len(sealed)} 'manifest sealed' lines, expected 1 (the manifest's digest when the "
                   "backend finished)")
    elif sealed[0][0] != M.sealed_sha256(man):
        logged = dict(pair.split("=") for pair in sealed[0][1].split())
        now = M.sealed_section_digests(man)
        edited = [k for k in M.SEALED_SECTIONS if logged.get(k) != now[k]] or ["its sealed sections"]
        out.append(f"manifest.json: {', '.join(edited)} {'differs' if len(edited) == 1 else 'differ'} from the "
                   "manifest run.log sealed when the backend "
                   f"finished (sha256 {sealed[0][0][:16]}..., now {M.sealed_sha256(man)[:16]}...): edited after "
                   "the run")
    if ident.get("runtime") in ("native", "container"):
        w = man.get("worker") or {}
        copies.append(("worker line", LOG_WORKER.findall(text), [(str(w.get("pid")), str(w.get("pgid")))],
                       "worker.pid/pgid"))
    if final:
        copies.append(("final status line", LOG_STATUS.findall(text), [(
            man.get("status"), (man.get("validation") or {}).get("verdict"))], "status, validation.verdict"))
    for what, got, want, keys in copies:
        if got != want:
            out.append(f"run.log: {what} says {got!r:.160}; the manifest's {keys} say {want!r:.160}")
    out += _check_log_times(text, ident)
    out += _check_log_order(text, ident)
    if updates is not None:
        raw_u, raw_t = _raw_lines(run_dir / "updates.jsonl"), _raw_lines(run_dir / "turns.jsonl")
        logged: dict[int, list[tuple]] = {}
        for g in LOG_UPDATE.finditer(text):
            logged.setdefault(int(g.group(1)), []).append(g.groups()[1:])
        pending = []  # (update k, turns count logged, turns sha256 logged)
        for i, u in enumerate(updates):
            rows = logged.pop(int(u["k"]), [])
            want = (f"{float(u['c_k']):.3f}", str(u["groups"]), str(u["trajectories"]), str(u["tokens"]))
            if len(rows) != 1 or rows[0][:4] != want:
                said_u = "; ".join("c_k={} groups={} trajectories={} tokens={}".format(*r[:4]) for r in rows) or "no line"
                out.append(f"update {u['k']}: run.log logged {said_u}, updates.jsonl says "
                           "c_k={} groups={} trajectories={} tokens={}".format(*want))
                continue
            line_sha, n_turns, turns_sha = rows[0][4:]
            if line_sha is None:
                out.append(f"run.log: the line for update {u['k']} carries no evidence digest "
                           "(line_sha256, turns, turns_sha256)")
                continue
            if i >= len(raw_u) or hashlib.sha256(raw_u[i]).hexdigest() != line_sha:
                out.append(f"updates.jsonl line {i + 1} (update {u['k']}): its sha256 differs from the line_sha256 "
                           "run.log logged when it was written (the line was edited, moved or replaced)")
            pending.append((u["k"], int(n_turns), turns_sha))
        if logged:
            out.append(f"run.log logged updates {sorted(logged)} that updates.jsonl does not have")
        prefix = _prefix_digests(raw_t, {n for _, n, _ in pending})
        last = 0
        for k, n, sha in pending:
            if n < last:
                out.append(f"run.log: update {k} logged {n} turn lines written, fewer than an earlier update ({last})")
            last = max(last, n)
            if prefix.get(n) != sha:
                out.append(f"turns.jsonl: its first {n} lines do not hash to the turns_sha256 run.log logged with "
                           f"update {k} (turn lines before it were edited, added, dropped or reordered)")
                break
        closed = LOG_CLOSED.findall(text)
        files = {"updates.jsonl": raw_u, "turns.jsonl": raw_t}
        if len(closed) != 1:
            out.append(f"run.log: {len(closed)} 'evidence closed' lines, expected 1 (line counts and sha256 of "
                       "updates.jsonl and turns.jsonl as the backend closed them)")
        else:
            n_u, sha_u, n_t, sha_t = closed[0]
            for name, n, sha in (("updates.jsonl", n_u, sha_u), ("turns.jsonl", n_t, sha_t)):
                data = b"".join(files[name])
                if int(n) != len(files[name]) or hashlib.sha256(data).hexdigest() != sha:
                    out.append(f"{name}: {len(files[name])} lines, sha256 {hashlib.sha256(data).hexdigest()[:16]}..., "
                               f"but run.log logged {n} lines, sha256 {sha[:16]}... when the backend closed it")
    code = man.get("backend_outcome", {}).get("exit_code")
    if code != 0:
        out.append(f"backend exit code {code}")
    return out


# What a results directory may hold: the controller's files (regular files, never links), the
# run-local model link, and what a native/container worker leaves. Anything else is unlisted.
RUN_FILES = ("manifest.json", "run.log", "context.json", "updates.jsonl", "turns.jsonl")
FINAL_FILES = ("summary.json", "summary.md")
WORKER_FILES = {"outcome.json": ("native", "container"), "skyrl_train_prompts.jsonl": ("native", "container")}
SEALED = (*EVIDENCE_FILES, "context.json")  # hashed into manifest.evidence when the backend finished


def check_files(run_dir: Path, man: dict, final: bool = True) -> list[str]:
    """The directory holds exactly the run's files: no symlinked evidence (its bytes would live, and
    could change, outside the run), no unlisted extra file, summaries that say what the manifest
    says, and setup manifests that hash as recorded."""
    import os
    import stat

    from harness import summary as report

    out = []
    runtime = man["identity"].get("runtime")
    expected = set(RUN_FILES) | (set(FINAL_FILES) if final else set())
    allowed = expected | {name for name, rts in WORKER_FILES.items() if runtime in rts}
    if (man.get("model") or {}).get("snapshot"):
        allowed.add(model_snapshot.LINK_NAME)
    setup = ((man.get("provenance") or {}).get("native") or {}).get("setup_manifests")
    if isinstance(setup, dict):
        allowed.add("setup_manifests")
    for entry in sorted(os.listdir(run_dir)):
        path = run_dir / entry
        if entry not in allowed:
            out.append(f"{entry}: not a file this run writes (unlisted {'directory' if path.is_dir() else 'file'})")
        elif entry in expected | set(WORKER_FILES) and not stat.S_ISREG(os.lstat(path).st_mode):
            kind = f"a symlink to {os.readlink(path)}" if path.is_symlink() else "not a regular file"
            out.append(f"{entry}: {kind}; evidence must be a regular file inside the results directory")
        elif entry in expected | set(WORKER_FILES) and os.lstat(path).st_nlink != 1:
            # a hard link shares the file's bytes with a name outside the run (writes are atomic
            # replaces, so the controller never leaves one): they can change from there
            out.append(f"{entry}: {os.lstat(path).st_nlink} hard links; evidence must be a file of its own "
                       "inside the results directory")
        elif entry in CANONICAL_JSON:
            out += _check_canonical_json(path)
    out += [f"{name}: missing" for name in sorted(expected) if not (run_dir / name).exists()]
    recorded = man.get("evidence") or {}
    extra = sorted(set(recorded) - set(SEALED))
    if extra:
        out.append(f"manifest evidence lists {extra}, which this run does not write")
    want = recorded.get("context.json")
    ctx = run_dir / "context.json"
    if not isinstance(want, dict):
        out.append("evidence.context.json: no sha256 recorded")
    elif ctx.exists() and hashlib.sha256(ctx.read_bytes()).hexdigest() != want.get("sha256"):
        out.append("context.json: sha256 differs from the one recorded when the backend finished")
    if isinstance(setup, dict):
        root = run_dir / "setup_manifests"
        got = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() and not root.is_symlink() else {}
        if got != setup:
            out.append("setup_manifests/: files or their sha256 differ from provenance.native.setup_manifests")
        links = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink()) if root.is_dir() else []
        if root.is_symlink() or links:
            out.append(f"setup_manifests/: symlinks ({(links or ['setup_manifests'])[0]}); its files must live "
                       "inside the results directory")
    if final and (run_dir / "summary.json").exists():
        from workloads.strictio import load_json_file

        try:
            s = load_json_file(run_dir / "summary.json", lambda line, field, msg: ValueError(msg))
        except ValueError as exc:
            s = f"unreadable ({exc})"
        want_s = report.summary(man)
        if s != want_s:
            out.append("summary.json differs from the summary of manifest.json "
                       f"(e.g. {_first_difference(s, want_s)})")
        elif (run_dir / "summary.md").is_file() and (run_dir / "summary.md").read_text(
                errors="replace") != report.summary_markdown(want_s):
            out.append("summary.md differs from the summary of manifest.json")
    return out


# JSON files the controller or worker writes with `fsio.write_json` (sorted keys, indent 1, a final
# newline): any other bytes for the same document (a BOM, CRLF, respacing, reordered keys,
# respelled numbers) were written by something else.
CANONICAL_JSON = ("manifest.json", "context.json", "summary.json", "outcome.json")


def _check_canonical_json(path: Path) -> list[str]:
    from harness.fsio import dumps
    from workloads.strictio import load_json_file

    try:
        obj = load_json_file(path, lambda line, field, msg: ValueError(
            f"{path.name}{f':{line}' if line else ''}: {f'{field}: ' if field else ''}{msg}"))
    except ValueError as exc:
        return [str(exc)]
    raw, want = path.read_bytes(), dumps(obj).encode()
    if raw == want:
        return []
    at = next((i for i, (a, b) in enumerate(zip(raw, want, strict=False)) if a != b), min(len(raw), len(want)))
    line = raw[:at].count(b"\n") + 1
    return [f"{path.name}:{line}: not the bytes the harness writes (json.dumps(sort_keys=True, "
            "indent=1) + newline; a BOM, CR, respacing, reordered keys or respelled numbers): rewritten by another "
            "writer"]


def _first_difference(got, want) -> str:
    diffs: list[str] = []
    _differences(got, want, "summary", diffs)
    return diffs[0] if diffs else f"{got!r:.80}"


CREATED_AFTER_ID_S = 300.0
RUN_ID = re.compile(r"^(\d{8}-\d{6})-([a-z]+)-([a-z_]+)-r(\d+)-[0-9a-f]{6}$")
# bench run flags whose value the manifest must repeat: flag -> (what, the manifest's value)
_ARGV_FLAGS = ("--backend", "--workload", "--runtime", "--rank", "--seed", "--skyrl-batch-size", "--gpus", "--suite")


def _argv_values(argv: list) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        if not isinstance(a, str):
            continue
        flag, eq, val = a.partition("=")
        if flag in _ARGV_FLAGS:
            if eq:
                out[flag] = val
            elif i + 1 < len(argv) and isinstance(argv[i + 1], str):
                out[flag] = argv[i + 1]
    return out


def check_identity(run_dir: Path, man: dict, final: bool = True) -> list[str]:
    """Every redundant copy of the run's identity agrees: the run id (made from the backend,
    workload, rank and start time), the command line, the pinned backend source, the model
    section, the backend's own outcome (outcome.json for a worker), the recorded verdict."""
    import calendar
    import time as _time

    out = []
    ident, model, outcome = man["identity"], man["model"], man.get("backend_outcome") or {}
    backend, rank = ident.get("backend"), (model.get("lora") or {}).get("rank")
    m = RUN_ID.match(str(ident.get("run_id")))
    if not m:
        out.append(f"identity.run_id {ident.get('run_id')!r} is not <time>-<backend>-<workload>-r<rank>-<hex6>")
    else:
        stamp, b, w, r = m.groups()
        if (b, w, r) != (backend, ident.get("workload"), str(rank)):
            out.append(f"identity.run_id {ident['run_id']} names backend {b}, workload {w}, rank {r}; the manifest "
                       f"says {backend}, {ident.get('workload')}, {rank}")
        # the manifest is created right after the run id (git and the recipe hashes in between)
        t0 = calendar.timegm(_time.strptime(stamp, "%Y%m%d-%H%M%S"))
        created = ident.get("created_at_unix")
        if not isinstance(created, int | float) or not 0 <= created - t0 <= CREATED_AFTER_ID_S:
            out.append(f"identity.created_at_unix {created} is not the time the run id was made ({stamp} UTC)")
        try:
            t1 = calendar.timegm(_time.strptime(str(ident.get("created_at")), "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            t1 = None
        if t1 is None or not 0 <= t1 - t0 <= CREATED_AFTER_ID_S or (
                isinstance(created, int | float) and not 0 <= int(created) - t1 <= 1):
            out.append(f"identity.created_at {ident.get('created_at')!r} is not the time the run id was made "
                       f"({stamp} UTC)")
    if backend in P.BACKENDS and ident.get("backend_commit") != P.source_id(backend):
        out.append(f"identity.backend_commit {ident.get('backend_commit')!r} is not the pinned "
                   f"{P.source_id(backend)}")
    if isinstance(rank, int):
        want = {"name": P.MODEL, "revision": P.MODEL_REVISION, "dtype": P.DTYPE, "lora": P.lora_settings(rank),
                "chat_template_kwargs": dict(P.CHAT_TEMPLATE_KWARGS), "max_seq_length": P.MAX_SEQ_LENGTH}
        out += [f"model.{k} is {model.get(k)!r}, pinned {v!r}" for k, v in want.items() if model.get(k) != v]
    argv = ident.get("argv") if isinstance(ident.get("argv"), list) else []
    ctx_seed = (man.get("workload") or {}).get("seed")
    said = {"--backend": backend, "--workload": ident.get("workload"), "--runtime": ident.get("runtime"),
            "--rank": str(rank), "--seed": str(ctx_seed), "--skyrl-batch-size": str(ident.get("skyrl_batch_size")),
            "--gpus": (man.get("hardware") or {}).get("requested"), "--suite": ident.get("suite")}
    for flag, val in _argv_values(argv).items():
        if flag == "--skyrl-batch-size" and backend != "skyrl":
            continue  # a suite's ART runs ignore it
        if val != said[flag]:
            out.append(f"identity.argv gives {flag} {val}, but the manifest says {said[flag]}")
    for key, mine in (("backend_version", ident.get("backend_version")),
                      ("native_config", (man.get("pipeline") or {}).get("native_config")),
                      ("autotuner", (man.get("results") or {}).get("autotuner"))):
        if mine != outcome.get(key):
            where = {"backend_version": "identity.backend_version", "native_config": "pipeline.native_config",
                     "autotuner": "results.autotuner"}[key]
            out.append(f"{where} is {mine!r:.80}, but the backend reported {outcome.get(key)!r:.80} "
                       "(backend_outcome)")
    runtime = ident.get("runtime")
    path = run_dir / "outcome.json"
    if runtime in ("native", "container"):
        if backend in P.BACKENDS and outcome.get("backend_version") != _pinned_version(backend):
            out.append(f"backend_outcome.backend_version {outcome.get('backend_version')!r} is not the pinned "
                       f"{_pinned_version(backend)!r}")
        if path.exists():
            from workloads.strictio import load_json_file

            try:
                worker = load_json_file(path, lambda line, field, msg: ValueError(f"{path}: {msg}"))
            except ValueError as exc:
                worker = {"unreadable": str(exc)}
            for key in ("backend_version", "native_config", "autotuner", "clock"):
                if not isinstance(worker, dict) or worker.get(key) != outcome.get(key):
                    out.append(f"outcome.json (what the worker wrote) has {key} "
                               f"{(worker.get(key) if isinstance(worker, dict) else worker)!r:.80}; the manifest's "
                               f"backend_outcome has {outcome.get(key)!r:.80}")
        w = man.get("worker") or {}
        start, end = ident.get("backend_started_unix"), ident.get("backend_finished_unix")
        if w.get("pid") != w.get("pgid") or not isinstance(w.get("pid"), int):
            out.append(f"worker pid {w.get('pid')!r} does not lead its own process group {w.get('pgid')!r}")
        su = w.get("started_unix")
        if not all(isinstance(x, int | float) for x in (start, end, su)) or not (
                start - WALL_SLACK_S <= su <= end + WALL_SLACK_S):
            out.append(f"worker.started_unix {su!r} is not inside the backend's run [{start}, {end}]")
    elif "worker" in man or path.exists():
        out.append(f"a {runtime} run starts no worker, but the manifest or outcome.json records one")
    status, verdict = man.get("status"), (man.get("validation") or {}).get("verdict")
    val = man.get("validation") or {}
    if final and verdict == "VALID" and (val.get("reasons") or man.get("reasons") or not isinstance(
            val.get("checks"), list) or not all(isinstance(c, dict) and c.get("passed") is True for c in val["checks"])):
        out.append("validation: recorded VALID, but its checks or reasons say otherwise")
    if final and (status != "valid" or verdict != "VALID"):
        out.append(f"the run was recorded status {status!r}, verdict {verdict!r} when it finished"
                   + (f" ({'; '.join(map(str, man.get('reasons', [])))[:200]})" if man.get("reasons") else ""))
    return out


def _pinned_version(backend: str) -> str:
    """What the real driver reports as backend_version (backends/art.py, backends/skyrl.py)."""
    up = P.UPSTREAM[backend]
    return f"openpipe-art {up['version']}" if backend == "art" else up["commit"]


def check_hardware(man: dict) -> list[str]:
    """The GPUs the manifest describes are what nvidia-smi reported: ``hardware.requested``
    resolves, in the raw snapshot taken before launch, to the trainer + inference UUIDs; each
    GPU's description equals its raw row; each snapshot's per-GPU rows and problems are what its
    raw output says."""
    hw = man.get("hardware") or {}
    snap = hw.get("occupancy_before") or {}
    raw = snap.get("raw") if isinstance(snap.get("raw"), dict) else None
    if raw is None:
        return ["hardware.occupancy_before: no raw nvidia-smi output to check the GPUs against"]
    out = []
    try:
        listed = nvsmi.parse_gpus(raw.get("query_gpu", ""))
        picked = nvsmi.resolve(str(hw.get("requested")), listed)
    except Exception as exc:  # noqa: BLE001 - an unparsable or unresolvable record is the finding
        return [f"hardware.requested {hw.get('requested')!r} does not resolve in the raw snapshot: {exc}"]
    uuids = [g.uuid for g in picked]
    if uuids != hw.get("trainer_uuids", []) + hw.get("inference_uuids", []):
        out.append(f"hardware.requested {hw.get('requested')!r} resolves to {uuids}, but the trainer + inference "
                   "GPUs are " + ", ".join(hw.get("trainer_uuids", []) + hw.get("inference_uuids", [])))
    if len(hw.get("trainer_uuids", [])) != P.TRAINER_GPUS or len(uuids) != P.GPUS_PER_RUN:
        out.append(f"{len(hw.get('trainer_uuids', []))} trainer GPUs of {len(uuids)}, pinned {P.TRAINER_GPUS} of "
                   f"{P.GPUS_PER_RUN}")
    static = ("index", "uuid", "name", "pci_bus_id", "memory_total_mib", "driver_version")
    described = [{k: g.get(k) for k in static} if isinstance(g, dict) else g for g in hw.get("gpus") or []]
    rows = [{k: g.to_dict()[k] for k in static} for g in picked]
    if described != rows:
        out.append("hardware.gpus does not describe the GPUs nvidia-smi reported (name, bus id, memory, driver, "
                   "index or count differ from occupancy_before.raw)")
    for when in ("occupancy_before", "occupancy_after"):
        s = hw.get(when) or {}
        if isinstance(s.get("raw"), dict):
            got = nvsmi.judge(s["raw"], man["lease"].get("gpu_uuids") or [], P.MEMORY_USED_THRESHOLD_MIB)
            if s.get("gpus") != got["gpus"] or s.get("problems") != got["problems"]:
                out.append(f"hardware.{when}: per-GPU rows or problems differ from what its raw output says")
            if s.get("threshold_mib") != P.MEMORY_USED_THRESHOLD_MIB:
                out.append(f"hardware.{when}.threshold_mib {s.get('threshold_mib')!r}, pinned "
                           f"{P.MEMORY_USED_THRESHOLD_MIB}")
    return out


def check_lease_history(man: dict, final: bool = True) -> list[str]:
    """The lease against its history (``<state_dir>/reservations.jsonl``, outside the results dir),
    when that state directory is reachable from here: an ``acquire`` of this lease for this run
    and these GPUs, the evidence hashes the controller logged there when the backend finished,
    and, for a finished run, this run's own release (not a forced one) after the backend ended."""
    from harness.lease import default_state_dir
    from workloads.strictio import StrictInputError
    from workloads.strictio import loads as strict_loads

    lease = man.get("lease") or {}
    run_id, lease_id = man["identity"].get("run_id"), lease.get("lease_id")
    found = []
    # the recorded state dir and the default one: every reachable history that names this run or
    # lease must bear it out (a manifest pointing its state_dir at a forged copy does not hide
    # the controller's own history)
    for state in dict.fromkeys(str(x) for x in (lease.get("state_dir"), default_state_dir()) if x):
        path = Path(state) / "reservations.jsonl"
        if not path.is_file():
            continue
        mine, everyone, bad = [], [], []
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            try:
                ev = strict_loads(line)
            except (ValueError, StrictInputError) as exc:
                # another writer's torn line is skipped, but one that could read two ways is not
                if lease_id and lease_id in line or run_id and run_id in line:
                    bad.append(f"{path}:{n}: an event of this run that does not decode strictly ({exc})")
                continue
            if not isinstance(ev, dict):
                continue
            everyone.append((n, ev))
            if ev.get("lease_id") == lease_id or ev.get("run_id") == run_id:
                mine.append(ev)
        if mine or bad:
            found.append((path, mine, everyone, bad))
    # none: validated away from the controller's machine, the history cannot be consulted
    return [x for path, mine, everyone, bad in found for x in (
        bad + _check_history(man, final, path, mine, everyone))]


def _check_history(man: dict, final: bool, hist: Path, events: list[dict], history: list[tuple[int, dict]]
                   ) -> list[str]:
    """One lease history's account of this run (see `check_lease_history`)."""
    lease = man.get("lease") or {}
    run_id, lease_id = man["identity"].get("run_id"), lease.get("lease_id")
    out: list[str] = []
    if str(hist.parent) != str(lease.get("state_dir")):
        out.append(f"lease.state_dir is {lease.get('state_dir')!r}, but this run's lease history is in {hist.parent}")
    strangers = sorted({e.get("lease_id") for e in events} - {lease_id}, key=str)
    if strangers:
        out.append(f"{hist}: run {run_id} holds lease(s) {strangers}, not the manifest's {lease_id}")
    events = [e for e in events if e.get("lease_id") == lease_id]
    kinds = [e.get("event") for e in events]
    acq = [e for e in events if e.get("event") == "acquire"]
    if len(acq) != 1:
        return [*out, f"{hist}: {len(acq)} acquire events for lease {lease.get('lease_id')} (expected 1): "
                      "the lease was not taken by this controller"]
    a = acq[0]
    if a.get("run_id") != man["identity"].get("run_id") or a.get("gpu_uuids") != sorted(lease.get("gpu_uuids") or []):
        out.append(f"{hist}: lease {lease.get('lease_id')} was acquired by run {a.get('run_id')} on "
                   f"{a.get('gpu_uuids')}, not by this run on {sorted(lease.get('gpu_uuids') or [])}")
    if a.get("host") != man["identity"].get("host"):
        out.append(f"{hist}: lease {lease_id} was acquired on host {a.get('host')!r}; identity.host is "
                   f"{man['identity'].get('host')!r}")
    ev = [e for e in events if e.get("event") == "evidence"]
    if len(ev) != 1 or ev[0].get("evidence") != man.get("evidence"):
        out.append(f"{hist}: the evidence hashes logged for lease {lease.get('lease_id')} when the backend finished "
                   "differ from manifest.evidence" if ev else f"{hist}: no evidence hashes logged for this lease")
    elif ev[0].get("manifest_sha256") != M.sealed_sha256(man):
        out.append(f"{hist}: the manifest sealed when the backend finished hashed to "
                   f"{str(ev[0].get('manifest_sha256'))[:16]}..., the manifest now to {M.sealed_sha256(man)[:16]}...: "
                   "it was edited after the run")
    if "force-release" in kinds:
        out.append(f"{hist}: lease {lease.get('lease_id')} was force-released (by someone else)")
    out += _lease_timeline(hist, man, events, history, final)
    if final:
        rel = [e for e in events if e.get("event") == "release"]
        end = man["identity"].get("backend_finished_unix")
        if len(rel) != 1 or not isinstance(end, int | float) or rel[0].get("time_unix", 0) < end - WALL_SLACK_S:
            out.append(f"{hist}: lease events {kinds}: expected one release by the run after its backend finished")
    return out


def _lease_timeline(hist: Path, man: dict, events: list[dict], history: list[tuple[int, dict]],
                    final: bool) -> list[str]:
    """The lease's events happen in the order a run makes them, at times that bracket the run:
    acquire before the GPUs were checked and the backend started, the evidence hashes after the
    backend finished, the release after that; and no other lease held any of these GPUs while
    this one did (records are exclusive, so a second holder means the history or the run lies)."""
    out: list[str] = []
    ident = man["identity"]
    start, end = ident.get("backend_started_unix"), ident.get("backend_finished_unix")
    before = ((man.get("hardware") or {}).get("occupancy_before") or {}).get("time_unix")
    order = [e.get("event") for e in events if e.get("event") in ("acquire", "evidence", "release")]
    want = ["acquire", "evidence", "release"] if final else ["acquire", "evidence"]
    if order[:len(want)] != want or len(order) != len(want) and final:
        out.append(f"{hist}: this lease's events are {order}, in that order; a run makes {want}")
    t = {e.get("event"): e.get("time_unix") for e in events}
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in t.values()):
        return [*out, f"{hist}: an event of this lease has no numeric time_unix"]
    acq, ev = t.get("acquire"), t.get("evidence")
    for what, when, bound, earlier in (
            ("acquired", acq, before, "its GPUs were checked (hardware.occupancy_before.time_unix)"),
            ("acquired", acq, start, "the backend started (identity.backend_started_unix)")):
        if isinstance(when, int | float) and isinstance(bound, int | float) and when > bound + WALL_SLACK_S:
            out.append(f"{hist}: lease {man['lease'].get('lease_id')} {what} at {when}, after {earlier} {bound}")
    if isinstance(ev, int | float) and isinstance(end, int | float) and ev < end - WALL_SLACK_S:
        out.append(f"{hist}: the evidence hashes were logged at {ev}, before the backend finished "
                   f"(identity.backend_finished_unix {end})")
    # overlap by the history's line order (appended under the lease mutex, so it is the order
    # things happened in, whatever the clock did)
    mine, lease_id = set(man["lease"].get("gpu_uuids") or []), man["lease"].get("lease_id")
    own = {e.get("event"): n for n, e in history if e.get("lease_id") == lease_id}
    if "acquire" in own:
        ours = (own["acquire"], own.get("release", own.get("force-release", math.inf)))
        held: dict[str, list] = {}  # another lease -> [acquire line, release line, its GPUs]
        for n, e in history:
            other = e.get("lease_id")
            if other == lease_id:
                continue
            if e.get("event") == "acquire" and isinstance(e.get("gpu_uuids"), list):
                held[other] = [n, math.inf, set(map(str, e["gpu_uuids"]))]
            elif e.get("event") in ("release", "force-release") and other in held:
                held[other][1] = min(held[other][1], n)
        for other, (got, freed, gpus) in sorted(held.items(), key=lambda x: x[1][0]):
            shared = sorted(gpus & mine)
            if shared and got < ours[1] and freed > ours[0]:
                out.append(f"{hist}:{got}: lease {other} acquired {shared[0]} "
                           f"{'and never released it' if freed == math.inf else f'until line {freed}'}, while this "
                           f"run's lease held it (lines {ours[0]} to {ours[1]})")
                break
    return out


_INT, _NUM, _STR = "integer", "number", "string"
# The type of every evidence field validation reads, as EvidenceSink writes it; ``?`` allows null.
# Fields the checks index directly are required; the rest are checked when present.
EVIDENCE_SCHEMA = {
    "updates.jsonl": ({"k", "d_k", "c_k", "train_end", "publish_end", "groups", "trajectories", "tokens"}, {
        "k": _INT, "d_k": _NUM, "c_k": _NUM, "train_end": _NUM, "publish_end": _NUM, "policy_version": _INT,
        "groups": _INT, "trajectories": _INT, "tokens": _INT, "group_ids": "list of integers",
        "staleness": "list of integers", "rank_intervals": "intervals", "seq": _INT, "run_id": _STR,
        "lease_id": _STR + "?", "wall_time_unix": _NUM, "eval": "boolean", "checkpoint": "boolean",
        "rank_intervals_native": "boolean", "discards": "discard counts", "native": "object"}),
    "turns.jsonl": ({"trajectory", "turn", "forced_tokens", "completion_tokens", "prompt_tokens", "arrival"}, {
        "group": _INT, "trajectory": _INT, "turn": _INT, "forced_tokens": _INT, "completion_tokens": _INT,
        "finish_reason": _STR + "?", "prompt_tokens": _INT, "scheduled_prompt_tokens": _INT, "arrival": _NUM,
        "first_token": _NUM + "?", "finish": _NUM + "?", "policy_version_start": _INT + "?",
        "policy_version_end": _INT + "?", "seq": _INT, "run_id": _STR, "lease_id": _STR + "?",
        "wall_time_unix": _NUM}),
}


_KIND_TEXT = {_INT: "a non-negative integer", "discard counts": "{\"stale\": n, \"zero_variance\": n} (n >= 0)", _NUM: "a finite number", "intervals": "an object {rank: [[start, end], ...]}",
              "boolean": "true or false", "object": "a JSON object", "object of integers": "an object of integers"}


def _is(kind: str, v) -> bool:
    if isinstance(v, bool):
        return kind == "boolean"
    if kind == _INT:  # every integer the sink writes is a count, an id, a version or a sequence number
        return isinstance(v, int) and v >= 0
    if kind == _NUM:
        return isinstance(v, int | float) and math.isfinite(v)
    if kind == _STR:
        return isinstance(v, str)
    if kind == "object":
        return isinstance(v, dict)
    if kind == "object of integers":
        return isinstance(v, dict) and all(_is(_INT, x) for x in v.values())
    if kind == "discard counts":  # what the drivers count: stale and zero-variance groups
        return isinstance(v, dict) and set(v) == {"stale", "zero_variance"} and all(_is(_INT, x) for x in v.values())
    if kind == "list of integers":
        return isinstance(v, list) and all(_is(_INT, x) for x in v)
    if kind == "intervals":  # {"rank": [[start, end], ...]}
        return isinstance(v, dict) and all(
            isinstance(ivs, list) and all(isinstance(iv, list) and len(iv) == 2 and all(_is(_NUM, x) for x in iv)
                                          for iv in ivs) for ivs in v.values())
    return False


def _read_evidence(run_dir: Path) -> dict[str, list[dict]]:
    """Both evidence files, strictly decoded (UTF-8, no duplicate keys, no NaN) and typed; a
    ValueError naming the file, line and field otherwise."""
    from workloads.strictio import json_lines

    out = {}
    for name in EVIDENCE_FILES:
        path = run_dir / name
        rows: list[dict] = []
        if path.exists():
            def fail(line: int, field: str | None, message: str, path=path) -> ValueError:
                return ValueError(f"{path}{f':{line}' if line else ''}: {f'{field}: ' if field else ''}{message}")

            _, types = EVIDENCE_SCHEMA[name]
            required = set(types)  # the sink writes every field, null where it has no value
            raw_lines = path.read_bytes().split(b"\n") if path.is_file() else []
            for n, row in json_lines(path, fail):
                if not isinstance(row, dict):
                    raise fail(n, None, f"expected a JSON object, got {type(row).__name__}")
                for key in sorted(required - set(row)):
                    raise fail(n, key, "missing")
                for key in sorted(set(row) - set(types)):  # the sink writes a closed set of fields
                    raise fail(n, key, f"unknown field (the evidence sink writes only {', '.join(sorted(types))})")
                for key, kind in types.items():
                    if key in row and not (kind.endswith("?") and row[key] is None) and not _is(kind.rstrip("?"),
                                                                                                 row[key]):
                        raise fail(n, key, f"expected {'null or ' if kind.endswith('?') else ''}"
                                           f"{_KIND_TEXT.get(kind.rstrip('?'), 'a ' + kind.rstrip('?'))}, "
                                           f"got {row[key]!r:.60}")
                # byte for byte what the sink wrote (json.dumps(sort_keys=True) + "\n"): a BOM, CR,
                # spaces, reordered keys or another spelling of a number means another writer
                if n > len(raw_lines) or raw_lines[n - 1] != json.dumps(row, sort_keys=True).encode():
                    raise fail(n, None, "not the bytes the evidence sink writes (one json.dumps(sort_keys=True) "
                                        "object per line: no BOM, CR, extra spaces, reordered keys or respelled "
                                        "numbers); the line was rewritten by another writer")
                rows.append(row)
            if raw_lines and raw_lines[-1] != b"":
                raise fail(len(raw_lines), None, "the last line has no newline (truncated, or not written by the "
                                                 "evidence sink)")
            blank = [i + 1 for i, raw in enumerate(raw_lines[:-1]) if not raw.strip()]
            if blank:
                raise fail(blank[0], None, "blank line (the evidence sink writes one object per line)")
        out[name] = rows
    return out


def _not_regular(run_dir: Path) -> list[str]:
    """The files validation reads that are, or link to, something other than a regular file."""
    from harness.fsio import special_kind

    out = []
    for name in (*RUN_FILES, *FINAL_FILES, *WORKER_FILES):
        path = run_dir / name
        try:
            kind = special_kind(path)
        except OSError as exc:
            out.append(f"{name}: cannot be examined ({exc.strerror or exc})")
            continue
        if kind:
            out.append(f"{name}: {kind}{' (through a symlink)' if path.is_symlink() else ''}, not a regular file; "
                       "evidence must be a regular file inside the results directory")
    return out


def validate(run_dir: Path, workload_loader=None, final: bool = True) -> dict:
    """All checks on ``run_dir``; ``workload_loader(manifest_workload) -> Workload`` regenerates the schedule.

    A manifest that is not an object or has a mistyped field raises `ManifestError` (exit 2).
    The verdict carries ``recomputed``: the contract results recomputed from the evidence, which
    is what `bench report` shows. ``final=False`` is the controller's own check before it records
    the verdict, writes the summaries and releases the lease; every other caller validates a
    finished run, which must also have been recorded VALID, summarised and released.
    """
    run_dir = Path(run_dir)
    special = _not_regular(run_dir)
    if special:  # read nothing through a pipe, device or directory (a FIFO would hang every reader)
        return _verdict([_check("files", special)])
    man = M.load(run_dir / "manifest.json")
    checks = [_check("manifest", M.problems(man))]
    if man.get("status") == "aborted":
        checks.append(_check("not_aborted", ["run aborted: " + "; ".join(man.get("reasons", []))]))
    if not checks[0]["passed"]:
        return _verdict(checks)
    try:
        lines = _read_evidence(run_dir)
        updates = sorted(lines["updates.jsonl"], key=lambda u: int(u["k"]))
        turns = lines["turns.jsonl"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _verdict([*checks, _check("evidence", [f"evidence unreadable: {exc}"])])
    try:
        settings = pinned_settings(man)
    except ValueError as exc:
        return _verdict([*checks, _check("pinned_settings", [str(exc)])])
    recomputed = contract.results(updates, turns, int(settings["staleness_bound"]))
    checks += [
        _guarded("pinned_settings", lambda: check_pins(man, run_dir)),
        _guarded("evidence", lambda: check_evidence(run_dir, man, lines)),
        _guarded("updates_complete", lambda: check_updates(updates)),
        _guarded("trainer_ranks", lambda: check_ranks(updates, int(settings["trainer_ranks"])) + check_train_speed(
            updates)),
        _guarded("counts", lambda: check_counts(updates, int(settings["groups_per_update"]))),
        _guarded("groups_unique", lambda: check_groups_unique(updates)),
        _guarded("endpoints", lambda: check_endpoints(updates, turns)),
        _guarded("forced_lengths", lambda: check_forced(turns)),
        _guarded("timestamps", lambda: check_timestamps(man, updates, turns)),
        _guarded("run_context", lambda: check_context(run_dir, man)),
        _guarded("files", lambda: check_files(run_dir, man, final)),
        _guarded("identity", lambda: check_identity(run_dir, man, final)),
    ]
    try:
        workload = (workload_loader or _load_workload)(man["workload"])
        checks.append(_guarded("schedule", lambda: check_schedule(man, turns, workload)))
        checks.append(_guarded("trained_calls", lambda: check_trained_calls(updates, turns, workload)))
    except Exception as exc:  # noqa: BLE001 - any failure to regenerate is itself the finding
        checks.append(_check("schedule", [f"cannot regenerate the workload: {exc}"]))
    checks += [
        _guarded("staleness", lambda: check_staleness(man["identity"]["backend"], updates, int(settings["staleness_bound"]))),
        _guarded("gpu_hygiene", lambda: check_hygiene(man)),
        _guarded("hardware", lambda: check_hardware(man)),
        _guarded("lease_held", lambda: check_lease(man, final) + check_lease_history(man, final)),
        _guarded("results_recomputed", lambda: check_results(man, recomputed)),
        _guarded("container_preflight", lambda: check_container(man)),
        _guarded("run_log", lambda: check_log(run_dir, man, lines["updates.jsonl"], final)),
        _guarded("resimulated", lambda: check_resimulated(run_dir, man, lines)),
    ]
    return _verdict(checks, recomputed)


def _load_workload(section: dict):
    from harness.workload_source import generate

    return generate(section["name"], int(section["groups"]), int(section["seed"]),
                    group_size=section.get("group_size"), **section.get("knobs", {}))


def _verdict(checks: list[dict], recomputed: dict | None = None) -> dict:
    reasons = [f"{c['check']}: {c['detail']}" for c in checks if not c["passed"]]
    return {"verdict": "INVALID" if reasons else "VALID", "checks": checks, "reasons": reasons,
            "recomputed": recomputed}


def validate_or_error(run_dir: Path) -> dict:
    """`validate` for the CLI: a missing directory or manifest is a BenchError, not a traceback."""
    if not (Path(run_dir) / "manifest.json").exists():
        raise BenchError(f"{run_dir}: not a results directory (no manifest.json)")
    return validate(run_dir)

