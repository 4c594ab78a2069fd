"""Run validation (bench-contract.md section 6): named checks over a results dir, then a verdict.

Each check returns ``{check, passed, detail}``; the verdict is VALID only when all pass.
Run at the end of every run (before the lease is released) and by `bench validate`.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness import contract
from harness import manifest as M
from harness.fsio import read_json, read_jsonl
from harness.pins import HEADLINE_FIRST, HEADLINE_LAST, INTERVAL_EPSILON_S, TOTAL_UPDATES, WARMUP_UPDATES

LOG_ERROR = re.compile(r"Traceback \(most recent call last\)|^\S*\s*(ERROR|CRITICAL)\b|\bFATAL\b", re.M)


def _check(name: str, problems: list[str], ok_detail: str = "ok") -> dict:
    return {"check": name, "passed": not problems,
            "detail": ok_detail if not problems else "; ".join(problems[:8]) + (" ..." if len(problems) > 8 else "")}


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
        if prev is not None and float(u["c_k"]) <= prev:
            out.append(f"update {u['k']}: c_k not strictly increasing")
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
        lo, hi = float(u["d_k"]) - INTERVAL_EPSILON_S, float(u["c_k"]) + INTERVAL_EPSILON_S
        for r, lst in ivs.items():
            for s, e in lst:
                if not s < e:
                    out.append(f"update {u['k']} rank {r}: empty interval [{s}, {e})")
                elif s < lo or e > hi:
                    out.append(f"update {u['k']} rank {r}: [{s}, {e}) outside [d_k, c_k]")
    return out


def check_counts(updates: list[dict], per_update: int) -> list[str]:
    out = []
    for u in updates:
        if int(u["groups"]) != per_update:
            out.append(f"update {u['k']}: {u['groups']} groups, pinned {per_update}")
        if int(u["trajectories"]) < int(u["groups"]) or int(u["tokens"]) <= 0:
            out.append(f"update {u['k']}: trajectories/tokens inconsistent")
        if len(u.get("group_ids", [])) != int(u["groups"]):
            out.append(f"update {u['k']}: group_ids lists {len(u.get('group_ids', []))} groups")
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


def check_schedule(man: dict, updates: list[dict], turns: list[dict], workload) -> list[str]:
    out = []
    if workload.schedule_sha256() != man["workload"].get("schedule_sha256"):
        out.append("schedule_sha256 does not recompute from the workload generator")
    G = workload.n_groups
    for u in updates:
        gids = [int(g) for g in u.get("group_ids", [])]
        if any(not 0 <= g < G for g in gids):
            out.append(f"update {u['k']}: group ids outside the schedule")
            continue
        trajs = sum(workload.group_size(g) for g in gids)
        toks = sum(int(workload.call_completion_tokens[c]) for g in gids for t in workload.group_trajs(g)
                   for c in workload.traj_calls(t))
        disc = sum(int(v) for v in u.get("discards", {}).values())
        if not disc and (int(u["trajectories"]) != trajs or int(u["tokens"]) != toks):
            out.append(f"update {u['k']}: trained {u['trajectories']} traj/{u['tokens']} tokens, "
                       f"schedule says {trajs}/{toks}")
    for t in turns:
        tid, turn = int(t["trajectory"]), int(t["turn"])
        if not 0 <= tid < workload.n_trajectories or not 0 <= turn < len(workload.traj_calls(tid)):
            out.append(f"turn {tid}/{turn} not in the schedule")
        elif int(workload.call_completion_tokens[workload.traj_calls(tid)[turn]]) != int(t["forced_tokens"]):
            out.append(f"turn {tid}/{turn}: forced L {t['forced_tokens']} differs from the schedule")
    return out


def check_forced(turns: list[dict]) -> list[str]:
    if not turns:
        return ["no calls recorded in turns.jsonl"]
    bad = [t for t in turns if t.get("finish") is not None
           and (int(t["completion_tokens"]) != int(t["forced_tokens"]) or t["finish_reason"] != "length")]
    return [f"{len(bad)} of {len(turns)} calls missed their forced length, e.g. trajectory "
            f"{bad[0]['trajectory']} turn {bad[0]['turn']}: {bad[0]['completion_tokens']} of "
            f"{bad[0]['forced_tokens']} ({bad[0]['finish_reason']})"] if bad else []


def check_staleness(man: dict, updates: list[dict]) -> list[str]:
    bound = int(man["pipeline"]["staleness_bound"])
    sec = contract.secondary(updates, bound)
    reported = man.get("results", {}).get("secondary", {}).get("staleness_violations")
    if sec["staleness_max"] is None:
        return ["no staleness recorded"]
    if sec["staleness_violations"] and reported != sec["staleness_violations"]:
        return [f"max staleness {sec['staleness_max']} > bound {bound} and the {sec['staleness_violations']} "
                "violations are not reported in results.secondary"]
    return []


def check_hygiene(man: dict) -> list[str]:
    out = []
    for when in ("occupancy_before", "occupancy_after"):
        snap = man.get("hardware", {}).get(when)
        if not snap:
            out.append(f"hardware.{when} not recorded")
        elif not snap.get("clean"):
            out.append(f"{when}: " + "; ".join(snap.get("problems", ["not clean"])))
    return out


def check_lease(man: dict) -> list[str]:
    lease = man.get("lease", {})
    end = lease.get("verified_at_end") or {}
    if lease.get("run_id") != man["identity"].get("run_id") or not lease.get("lease_id"):
        return ["lease record does not name this run"]
    if not end.get("held"):
        return ["lease not held by this run at the end: " + "; ".join(end.get("problems", ["not verified"]))]
    return []


def check_container(man: dict) -> list[str]:
    ident = man["identity"]
    if ident.get("runtime") != "container":
        return []
    out = []
    if ident.get("recipe_sha256_baked") != ident.get("requested_recipe_sha256"):
        out.append("baked recipe hash differs from requested_recipe_sha256")
    if not ident.get("container_image_digest"):
        out.append("container image digest not recorded")
    return out


def check_autotuner(man: dict) -> list[str]:
    ident = man["identity"]
    if ident.get("backend") != "art" or ident.get("runtime") == "sim":
        return []
    tuner = man.get("results", {}).get("autotuner") or {}
    if tuner.get("mode") != "online" or not tuner.get("healthy"):
        return [f"ART autotuner unhealthy: {tuner.get('detail', 'no autotuner record')}"]
    return []


def check_log(run_dir: Path, man: dict) -> list[str]:
    log = run_dir / "run.log"
    if not log.exists():
        return ["run.log missing"]
    out = []
    m = LOG_ERROR.search(log.read_text(errors="replace"))
    if m:
        out.append(f"run.log contains {m.group(0).strip()!r}")
    code = man.get("backend_outcome", {}).get("exit_code")
    if code != 0:
        out.append(f"backend exit code {code}")
    return out


def validate(run_dir: Path, workload_loader=None) -> dict:
    """All checks on ``run_dir``; ``workload_loader(manifest_workload) -> Workload`` regenerates the schedule."""
    run_dir = Path(run_dir)
    try:
        man = read_json(run_dir / "manifest.json")
    except (OSError, ValueError) as exc:
        return _verdict([_check("manifest", [f"manifest.json unreadable: {exc}"])])
    checks = [_check("manifest", M.problems(man))]
    if man.get("status") == "aborted":
        checks.append(_check("not_aborted", ["run aborted: " + "; ".join(man.get("reasons", []))]))
    if not checks[0]["passed"]:
        return _verdict(checks)
    try:
        updates = sorted(read_jsonl(run_dir / "updates.jsonl"), key=lambda u: int(u["k"]))
        turns = list(read_jsonl(run_dir / "turns.jsonl"))
    except (OSError, ValueError, KeyError) as exc:
        return _verdict([*checks, _check("evidence", [f"evidence unreadable: {exc}"])])
    pipe = man["pipeline"]
    checks += [
        _check("updates_complete", check_updates(updates)),
        _check("trainer_ranks", check_ranks(updates, int(pipe["trainer_ranks"]))),
        _check("counts", check_counts(updates, int(pipe["groups_per_update"]))),
        _check("endpoints", check_endpoints(updates, turns)),
        _check("forced_lengths", check_forced(turns)),
    ]
    try:
        workload = (workload_loader or _load_workload)(man["workload"])
        checks.append(_check("schedule", check_schedule(man, updates, turns, workload)))
    except Exception as exc:  # noqa: BLE001 - any failure to regenerate is itself the finding
        checks.append(_check("schedule", [f"cannot regenerate the workload: {exc}"]))
    checks += [
        _check("staleness", check_staleness(man, updates)),
        _check("gpu_hygiene", check_hygiene(man)),
        _check("lease_held", check_lease(man)),
        _check("container_preflight", check_container(man)),
        _check("art_autotuner", check_autotuner(man)),
        _check("run_log", check_log(run_dir, man)),
    ]
    return _verdict(checks)


def _load_workload(section: dict):
    from harness.workload_source import generate

    return generate(section["name"], int(section["groups"]), int(section["seed"]),
                    group_size=section.get("group_size"), **section.get("knobs", {}))


def _verdict(checks: list[dict]) -> dict:
    reasons = [f"{c['check']}: {c['detail']}" for c in checks if not c["passed"]]
    return {"verdict": "INVALID" if reasons else "VALID", "checks": checks, "reasons": reasons}
