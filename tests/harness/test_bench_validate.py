"""Validation recomputes: a set of tampered copies of one VALID results dir, each INVALID.

Most tampers are made by a careful forger who also re-records the evidence sha256 and line
counts in the manifest (`_reseal`), so what catches them is the semantic check named, not only
the hash; one tamper leaves the hash stale to show the hash alone catches an edit.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from click.testing import CliRunner

from harness import manifest as M
from harness.cli import main as bench
from harness.errors import ManifestError
from harness.fsio import read_json, read_jsonl, write_json
from harness.validate import validate


def _edit_jsonl(path, fn):
    rows = [r for r in (fn(r) for r in read_jsonl(path)) if r is not None]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _append_jsonl(path, pick):
    rows = list(read_jsonl(path))
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, pick(rows)]))


def _edit_manifest(d, fn):
    man = read_json(d / "manifest.json")
    fn(man)
    write_json(d / "manifest.json", man)


def _reseal(d):
    """What a forger who knows the format does after editing evidence: re-record its hashes."""
    def fix(man):
        for name in ("updates.jsonl", "turns.jsonl", "context.json"):
            data = (d / name).read_bytes()
            man["evidence"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "lines": data.count(b"\n"),
                                     "bytes": len(data)}
    _edit_manifest(d, fix)


def _forge_all_but_the_log(d):
    """The most careful forger short of rewriting run.log: reseal every hash, rewrite the results
    and both summaries to what the edited evidence recomputes to, and rewrite the evidence and
    manifest hashes in the lease history (a private copy of the state dir the manifest points at)."""
    from harness import report

    _reseal(d)
    _forge_results(d)
    state = d.parent / "forged_state"
    shutil.copytree(read_json(d / "manifest.json")["lease"]["state_dir"], state)
    _edit_manifest(d, lambda m: m["lease"].update(state_dir=str(state)))
    man = read_json(d / "manifest.json")
    hist = state / "reservations.jsonl"
    events = [json.loads(x) for x in hist.read_text().splitlines()]
    for e in events:
        if e["event"] == "evidence" and e["lease_id"] == man["lease"]["lease_id"]:
            e.update(evidence=man["evidence"], manifest_sha256=M.sealed_sha256(man))
    hist.write_text("".join(json.dumps(e) + "\n" for e in events))
    write_json(d / "summary.json", report.summary(man))
    (d / "summary.md").write_text(report.summary_markdown(report.summary(man)))


def _forged(*tampers):
    return lambda d: ([t(d) for t in tampers], _forge_all_but_the_log(d))


def _turns_of(traj, fn):
    """Apply ``fn`` to every turn of trajectory ``traj`` (in turns.jsonl order)."""
    return lambda d: _edit_jsonl(d / "turns.jsonl", lambda t: fn(t) if t["trajectory"] == traj else t)


def _forge_lease_everywhere(d):
    old = read_json(d / "manifest.json")["lease"]["lease_id"]
    for name in ("updates.jsonl", "turns.jsonl", "context.json", "run.log", "manifest.json"):
        (d / name).write_text((d / name).read_text().replace(old, "11111111-1111-4111-8111-111111111111"))


def _relabel_rank(d):
    _edit_manifest(d, lambda m: m["model"]["lora"].update(rank=1, supplemental=True))
    _edit_context(d, lambda c: c.update(rank=1))


def _symlink_outside(d):
    outside = d.parent / "outside_turns.jsonl"
    shutil.copy(d / "turns.jsonl", outside)
    (d / "turns.jsonl").unlink()
    (d / "turns.jsonl").symlink_to(outside)


def _retarget_model(d):
    """A native run's model link, pointed at another directory named like the pinned snapshot."""
    from harness import pins as P

    snap = d.parent / "hf" / "hub" / f"models--{P.MODEL.replace('/', '--')}" / "snapshots" / P.MODEL_REVISION
    other = d.parent / "elsewhere" / P.MODEL_REVISION
    for p in (snap, other):
        p.mkdir(parents=True)
    (d / "model").symlink_to(other, target_is_directory=True)
    _edit_manifest(d, lambda m: m["model"].update(snapshot={"link": str(d / "model"), "target": str(snap),
                                                            "revision": P.MODEL_REVISION, "model": P.MODEL}))


def _rewrite_snapshot(m):
    """Raw nvidia-smi text and the rows judged from it, both rewritten (500 MiB on the first GPU)."""
    from harness import nvsmi

    snap = m["hardware"]["occupancy_after"]
    snap["raw"]["query_gpu"] = snap["raw"]["query_gpu"].replace("143771, 0,", "143771, 500,", 1)
    snap.update(nvsmi.judge(snap["raw"], m["lease"]["gpu_uuids"], snap["threshold_mib"]))


def _claim_sim_rank1(d):
    """native_config as the sim runtime records it, but with the overrides of a rank-1 run."""
    from harness.backends import sim
    from harness.backends.base import RunContext

    overrides = sim.overrides(RunContext.from_dict({**read_json(d / "context.json"), "rank": 1}))
    _edit_manifest(d, lambda m: [section.update(simrl_overrides=overrides) for section in (
        m["pipeline"]["native_config"], m["backend_outcome"]["native_config"])])


def _container_mismatch(m):
    m["identity"].update(runtime="container", recipe_sha256_baked="a", requested_recipe_sha256="a",
                         container_image_digest="sha256:x")
    m["provenance"]["container_preflight"] = {"image_id": "sha256:y", "baked": {"recipe": "a"}}


def _edit_jsonl_fn(name, fn):
    return lambda d: _edit_jsonl(d / name, fn)


def _edit_json(path, fn):
    obj = read_json(path)
    fn(obj)
    write_json(path, obj)


def _update(k, fn):
    return lambda u: fn(u) if u["k"] == k else u


def _set(u, **kv):
    u.update(kv)
    return u


def _shift_update(u, dt):
    for key in ("d_k", "c_k", "train_end", "publish_end"):
        u[key] += dt
    u["rank_intervals"] = {r: [[s + dt, e + dt] for s, e in ivs] for r, ivs in u["rank_intervals"].items()}
    return u


def _trained_turn(traj, turn):
    return lambda fn: (lambda t: fn(t) if t["trajectory"] == traj and t["turn"] == turn else t)


def _busy_snapshot(m):
    snap = m["hardware"]["occupancy_after"]
    uuid = m["lease"]["gpu_uuids"][2]
    snap["raw"]["query_compute_apps"] += f"{uuid}, 4242, /usr/bin/python3, 130004\n"


def _forge_results(d):
    """A forger who also rewrites the manifest's results to what the edited evidence recomputes to."""
    rec = validate(d)["recomputed"]
    _edit_manifest(d, lambda m: m["results"].update(rec))


def _reorder(name, i, j):
    """Swap lines i and j of an evidence file and renumber ``seq`` (so the sequence check passes)."""
    def tamper(d):
        rows = list(read_jsonl(d / name))
        rows[i], rows[j] = rows[j], rows[i]
        for n, r in enumerate(rows):
            r["seq"] = n
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tamper


def _clock_back(d):
    rows = list(read_jsonl(d / "turns.jsonl"))
    rows[11]["wall_time_unix"] = rows[10]["wall_time_unix"] - 30.0  # still inside the run
    (d / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _edit_context(d, fn):
    ctx = read_json(d / "context.json")
    fn(ctx)
    write_json(d / "context.json", ctx)


def _edit_log(d, old, new):
    text = (d / "run.log").read_text()
    assert old in text
    (d / "run.log").write_text(text.replace(old, new))


# name -> (tamper, reseal the evidence hashes afterwards, a check that must fail)
TAMPERS = {
    "edited headline": (lambda d: _edit_manifest(d, lambda m: m["results"]["headline"].update(
        updates_per_hour=9999.0)), False, "results_recomputed"),
    "edited trainer rate": (lambda d: _edit_manifest(d, lambda m: m["results"]["measured"].update(
        trainer_tokens_per_s=1e9)), False, "results_recomputed"),
    "c_15 shifted later": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(15, lambda u: _set(
        u, c_k=u["c_k"] + 2.5, publish_end=u["publish_end"] + 2.5))), True, "results_recomputed"),
    "update 20 shifted earlier": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(20, lambda u: _shift_update(
        u, -2.5))), True, "trained_calls"),
    "c_20 before its training ended": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(20, lambda u: _set(
        u, c_k=u["train_end"] - 0.5, publish_end=u["train_end"] - 0.5))), True, "updates_complete"),
    "all timestamps shifted out of the run": (lambda d: _edit_jsonl(d / "updates.jsonl", lambda u: _shift_update(
        u, 1000.0)), True, "timestamps"),
    "turn line replayed": (lambda d: _append_jsonl(d / "turns.jsonl", lambda rows: rows[5]), True, "evidence"),
    "update line duplicated": (lambda d: _append_jsonl(d / "updates.jsonl", lambda rows: rows[-1]), True,
                               "updates_complete"),
    "evidence copied from another run": (lambda d: (
        _edit_jsonl(d / "updates.jsonl", lambda u: _set(u, run_id="20250101-000000-other", lease_id="other")),
        _edit_jsonl(d / "turns.jsonl", lambda t: _set(t, run_id="20250101-000000-other", lease_id="other"))),
        True, "evidence"),
    "edited limit: groups per update": (lambda d: (
        _edit_manifest(d, lambda m: m["pipeline"].update(groups_per_update=3)),
        _edit_jsonl(d / "updates.jsonl", _update(4, lambda u: _set(u, groups=3, group_ids=u["group_ids"][:3],
                                                                     staleness=u["staleness"][:3])))),
        True, "counts"),
    "warm-up shortened (measured window widened)": (lambda d: _edit_manifest(d, lambda m: m["contract"].update(
        warmup_updates=3, measured_updates=17)), False, "pinned_settings"),
    "last update dropped (seq consistent)": (lambda d: _edit_jsonl(d / "updates.jsonl", lambda u: None if u["k"] == 20
                                                                   else u), True, "updates_complete"),
    "edited limit: staleness bound": (lambda d: _edit_manifest(d, lambda m: m["pipeline"].update(
        staleness_bound=99)), False, "pinned_settings"),
    "edited limit: trainer ranks": (lambda d: _edit_manifest(d, lambda m: m["pipeline"].update(
        trainer_ranks=1)), False, "pinned_settings"),
    "hygiene flag kept clean over a busy snapshot": (lambda d: _edit_manifest(d, _busy_snapshot), False,
                                                     "gpu_hygiene"),
    "missing turn": (lambda d: _edit_jsonl(d / "turns.jsonl", _trained_turn(30, 1)(lambda t: None)), True,
                     "trained_calls"),
    "short turn": (lambda d: _edit_jsonl(d / "turns.jsonl", _trained_turn(30, 2)(lambda t: _set(
        t, completion_tokens=t["forced_tokens"] - 3))), True, "forced_lengths"),
    "short turn with a shortened schedule claim": (lambda d: _edit_jsonl(d / "turns.jsonl", _trained_turn(30, 2)(
        lambda t: _set(t, completion_tokens=t["forced_tokens"] - 3, forced_tokens=t["forced_tokens"] - 3))),
        True, "trained_calls"),
    "wrong prompt length": (lambda d: _edit_jsonl(d / "turns.jsonl", _trained_turn(30, 1)(lambda t: _set(
        t, prompt_tokens=t["prompt_tokens"] - 20))), True, "trained_calls"),
    "finish null": (lambda d: _edit_jsonl(d / "turns.jsonl", _trained_turn(30, 0)(lambda t: _set(
        t, finish=None))), True, "forced_lengths"),
    "double-trained group": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(5, lambda u: _set(
        u, group_ids=[0, *u["group_ids"][1:]]))), True, "groups_unique"),
    "token count inflated": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(9, lambda u: _set(
        u, tokens=u["tokens"] + 1))), True, "trained_calls"),
    "token count inflated, hash left stale": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(
        9, lambda u: _set(u, tokens=u["tokens"] + 1))), False, "evidence"),
    "rank interval outside [d_k, c_k]": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(
        12, lambda u: _set(u, rank_intervals={**u["rank_intervals"], "1": [[u["d_k"] - 5, u["c_k"]]]}))), True,
        "trainer_ranks"),
    "a rank missing": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(12, lambda u: _set(
        u, rank_intervals={"0": u["rank_intervals"]["0"]}))), True, "trainer_ranks"),
    "eval step in the window": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(17, lambda u: _set(
        u, eval=True))), True, "endpoints"),
    "schedule hash edited": (lambda d: _edit_manifest(d, lambda m: m["workload"].update(
        schedule_sha256="0" * 64)), False, "schedule"),
    "trained stale group (ART)": (lambda d: (
        _edit_manifest(d, lambda m: (m["identity"].update(backend="art", skyrl_batch_size=None),
                                     m["pipeline"].clear(), m["pipeline"].update(__import__(
                                         "harness.pins", fromlist=["x"]).pipeline_settings("art")),
                                     m["pins"].update(), m["backend_outcome"].update())),
        _edit_jsonl(d / "updates.jsonl", _update(3, lambda u: _set(u, staleness=[9, 0, 0, 0])))),
        True, "staleness"),
    "lease not held at the end": (lambda d: _edit_manifest(d, lambda m: m["lease"]["verified_at_end"].update(
        held=False, problems=["GPU-x: no lease record"])), False, "lease_held"),
    "stale container recipe": (lambda d: _edit_manifest(d, lambda m: m["identity"].update(
        runtime="container", recipe_sha256_baked="stale")), False, "container_preflight"),
    "traceback in run.log": (lambda d: (d / "run.log").open("a").write("Traceback (most recent call last):\n"),
                             False, "run_log"),
    "aborted": (lambda d: _edit_manifest(d, lambda m: m.update(status="aborted", reasons=["x"])), False,
                "not_aborted"),
    # A forger who reseals the hashes AND rewrites the results: the raw run.log still disagrees.
    "c_15 shifted later, results rewritten": (lambda d: (
        _edit_jsonl(d / "updates.jsonl", _update(15, lambda u: _set(u, c_k=u["c_k"] + 2.5,
                                                                    publish_end=u["publish_end"] + 2.5))),
        _reseal(d), _forge_results(d)), False, "run_log"),
    "run.log update line edited": (lambda d: _edit_log(d, "update 9: c_k=97.000", "update 9: c_k=98.000"), False,
                                   "run_log"),
    "update lines reordered (seq renumbered)": (_reorder("updates.jsonl", 3, 4), True, "evidence"),
    "turn lines reordered (seq renumbered)": (_reorder("turns.jsonl", 3, 600), True, "evidence"),
    "wall clock goes backwards": (_clock_back, True, "evidence"),
    "evidence byte count edited": (lambda d: _edit_manifest(d, lambda m: m["evidence"]["turns.jsonl"].update(
        bytes=5)), False, "evidence"),
    "first token before arrival": (lambda d: _edit_jsonl(d / "turns.jsonl", lambda t: _set(
        t, first_token=t["arrival"] - 1.0) if t["seq"] == 5 else t), True, "timestamps"),
    "first token after finish": (lambda d: _edit_jsonl(d / "turns.jsonl", lambda t: _set(
        t, first_token=t["finish"] + 0.05) if t["seq"] == 5 else t), True, "timestamps"),
    "occupancy snapshot dated before the backend finished": (lambda d: _edit_manifest(
        d, lambda m: m["hardware"]["occupancy_after"].update(time_unix=m["identity"]["backend_started_unix"] - 100)),
        False, "timestamps"),
    "clock end edited": (lambda d: _edit_manifest(d, lambda m: m["clock"].update(end_s=9999.0)), False,
                         "timestamps"),
    # The manifest claims a configuration the run was not started with (context.json).
    "manifest claims another LoRA rank": (lambda d: _edit_manifest(d, lambda m: m["model"]["lora"].update(
        rank=64)), False, "run_context"),
    "manifest claims another seed": (lambda d: _edit_context(d, lambda c: c.update(seed=1)), False, "run_context"),
    "manifest claims other trainer GPUs": (lambda d: _edit_context(d, lambda c: c.update(
        trainer_uuids=list(reversed(c["trainer_uuids"])))), False, "run_context"),
    "manifest claims another batch size": (lambda d: _edit_context(d, lambda c: c["settings"].update(
        train_batch_size=8)), False, "run_context"),
    "simulator config claimed at another rank than the context": (_claim_sim_rank1, False, "run_context"),
    "context.json removed": (lambda d: (d / "context.json").unlink(), False, "run_context"),
    # run.log chains the evidence as it was written (line sha256 per update, running turns sha256):
    # a forger who reseals every hash, rewrites results, summaries and the lease history is still caught.
    "turn moved out of the window, all but run.log forged": (_forged(_turns_of(240, lambda t: _set(
        t, arrival=t["arrival"] - 1.0, first_token=t["first_token"] - 1.0, finish=t["finish"] - 1.0)
        if t["turn"] == 0 else t)), False, "run_log"),
    "rank intervals narrowed, all but run.log forged": (_forged(_edit_jsonl_fn("updates.jsonl", lambda u: _set(
        u, rank_intervals={"0": [[u["d_k"] + 1, u["d_k"] + 3]], "1": [[u["d_k"] + 1, u["d_k"] + 3]]})
        if u["k"] >= 16 else u)), False, "run_log"),
    # the lease history outside the results dir: acquire, the evidence hashes, release
    "lease id forged in every file": (_forge_lease_everywhere, True, "lease_held"),
    "evidence resealed, the lease history disagrees": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(
        12, lambda u: _set(u, native={"forged": True}))), True, "lease_held"),
    "identity.host is not where the lease was taken": (lambda d: _edit_manifest(d, lambda m: m["identity"].update(
        host="elsewhere")), False, "lease_held"),
    "backend start moved from when run.log logged it": (lambda d: _edit_manifest(d, lambda m: m["identity"].update(
        backend_started_unix=m["identity"]["backend_started_unix"] + 3.5)), False, "run_log"),
    "recorded VALID over a failed check": (lambda d: _edit_manifest(d, lambda m: m["validation"]["checks"][3].update(
        passed=False)), False, "identity"),
    "run.log lease line names another lease": (lambda d: _edit_log(
        d, read_json(d / "manifest.json")["lease"]["lease_id"], "00000000-0000-4000-8000-000000000000"), False,
        "run_log"),
    # the directory holds exactly the run's files
    "evidence file symlinked outside the run": (_symlink_outside, False, "files"),
    "unlisted extra file": (lambda d: (d / "updates.jsonl.orig").write_text("{}\n"), False, "files"),
    "summary.json edited": (lambda d: _edit_json(d / "summary.json", lambda s: s["headline"].update(
        updates_per_hour=9999.0)), False, "files"),
    "context.json edited (hash left stale)": (lambda d: _edit_context(d, lambda c: c.update(python="/x")), False,
                                               "files"),
    # every redundant copy of the identity agrees
    "rank relabelled in manifest and context.json": (_relabel_rank, True, "identity"),
    "argv names another backend": (lambda d: _edit_manifest(d, lambda m: m["identity"].update(
        argv=["bench", "run", "--backend", "art", "--gpus", "0,1,2,3"])), False, "identity"),
    "manifest claims another backend source": (lambda d: _edit_manifest(d, lambda m: m["identity"].update(
        backend_commit="0" * 40)), False, "identity"),
    "manifest claims another backend version than the backend reported": (lambda d: _edit_manifest(
        d, lambda m: m["identity"].update(backend_version="skyrl 0.9")), False, "identity"),
    "manifest and backend_outcome claim a version run.log does not record": (lambda d: _edit_manifest(d, lambda m: (
        m["identity"].update(backend_version="skyrl 0.9"), m["backend_outcome"].update(backend_version="skyrl 0.9"))),
        False, "run_log"),
    "model link retargeted to another snapshot": (_retarget_model, False, "pinned_settings"),
    "model dtype edited": (lambda d: _edit_manifest(d, lambda m: m["model"].update(dtype="fp8")), False,
                           "identity"),
    "run recorded invalid, status flipped": (lambda d: _edit_manifest(d, lambda m: m["validation"].update(
        verdict="INVALID")), False, "identity"),
    "a worker recorded for a sim run": (lambda d: _edit_manifest(d, lambda m: m.update(worker={
        "pid": 1, "pgid": 1, "started_unix": 0.0, "container": None})), False, "identity"),
    "container identity differs from its preflight": (lambda d: _edit_manifest(d, _container_mismatch), False,
                                                       "container_preflight"),
    # the hardware description is what nvidia-smi printed
    "GPU model edited": (lambda d: _edit_manifest(d, lambda m: [g.update(name="NVIDIA H100 80GB HBM3")
                                                                for g in m["hardware"]["gpus"]]), False, "hardware"),
    "requested GPUs edited": (lambda d: _edit_manifest(d, lambda m: m["hardware"].update(requested="4,5,6,7")),
                              False, "hardware"),
    "occupancy snapshot rewritten consistently (raw and rows)": (lambda d: _edit_manifest(d, _rewrite_snapshot), False,
                                                                 "run_log"),
    "occupancy rows edited over their raw output": (lambda d: _edit_manifest(
        d, lambda m: m["hardware"]["occupancy_after"]["gpus"][0].update(memory_used_mib=0 if
        m["hardware"]["occupancy_after"]["gpus"][0]["memory_used_mib"] else 5)), False, "hardware"),
    # the workload section is what the generator regenerates
    "workload description edited": (lambda d: _edit_manifest(d, lambda m: m["workload"].update(
        completion_tokens=1)), False, "schedule"),
    # what each call's record implies about the others
    "a turn arrives before the previous turn finished": (_turns_of(240, lambda t: _set(
        t, arrival=158.0, first_token=158.1, finish=158.8) if t["turn"] == 2 else t), True, "timestamps"),
    "calls labelled with a policy older than published": (_turns_of(240, lambda t: _set(
        t, policy_version_start=12, policy_version_end=12)), True, "timestamps"),
    "a call ends on an older policy than it began": (_turns_of(240, lambda t: _set(
        t, policy_version_end=t["policy_version_start"] - 1)), True, "timestamps"),
    "staleness below what the calls' policies say": (_turns_of(240, lambda t: _set(
        t, policy_version_start=14, policy_version_end=14) if t["turn"] == 0 else t), True, "trained_calls"),
    "steps overlap (c_15 after d_16)": (lambda d: _edit_jsonl(d / "updates.jsonl", _update(15, lambda u: _set(
        u, c_k=u["c_k"] + 4.0, publish_end=u["publish_end"] + 4.0))), True, "updates_complete"),
}


# Malformed evidence lines: INVALID (evidence unreadable, naming file:line and field), never a traceback.
BAD_EVIDENCE = {
    "rank_intervals a list": ("updates.jsonl", lambda r: _set(r, rank_intervals=[[1, 2]]), "rank_intervals"),
    "interval of three": ("updates.jsonl", lambda r: _set(r, rank_intervals={"0": [[1, 2, 3]]}), "rank_intervals"),
    "group id a string": ("updates.jsonl", lambda r: _set(r, group_ids=["x"]), "group_ids"),
    "staleness strings": ("updates.jsonl", lambda r: _set(r, staleness=["a"]), "staleness"),
    "k a float": ("updates.jsonl", lambda r: _set(r, k=7.5), "k"),
    "k missing": ("updates.jsonl", lambda r: {x: v for x, v in r.items() if x != "k"}, "k"),
    "finish a string": ("turns.jsonl", lambda r: _set(r, finish="abc"), "finish"),
    "policy version a string": ("turns.jsonl", lambda r: _set(r, policy_version_start="1"), "policy_version_start"),
    "tokens a bool": ("turns.jsonl", lambda r: _set(r, completion_tokens=True), "completion_tokens"),
    "discards a string count": ("updates.jsonl", lambda r: _set(r, discards={"stale": "abc"}), "discards"),
    "native flag a string": ("updates.jsonl", lambda r: _set(r, rank_intervals_native="yes"),
                             "rank_intervals_native"),
}


@pytest.mark.parametrize("name", sorted(BAD_EVIDENCE))
def test_malformed_evidence_is_invalid_not_a_traceback(valid_run, name):
    fname, edit, field = BAD_EVIDENCE[name]
    rows = list(read_jsonl(valid_run / fname))
    rows[5] = edit(rows[5])
    (valid_run / fname).write_text("".join(json.dumps(r) + "\n" for r in rows))
    _reseal(valid_run)
    v = validate(valid_run)
    assert v["verdict"] == "INVALID"
    assert any(c["check"] == "evidence" and f"{fname}:6: {field}:" in c["detail"] for c in v["checks"]), v["reasons"]
    res = CliRunner().invoke(bench, ["validate", str(valid_run)])
    assert res.exit_code == 1, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)


@pytest.mark.parametrize("raw, where", [
    (b'{"seq": 0, "seq": 1}\n', "duplicate key 'seq'"),
    (b'{"k": NaN}\n', "NaN"),
    (b'{"k": 1, "x": "\xff"}\n', "not UTF-8"),
    (b"[" * 50000 + b"]" * 50000 + b"\n", "nested too deeply"),
])
def test_undecodable_evidence_line_is_invalid(valid_run, raw, where):
    (valid_run / "updates.jsonl").write_bytes(raw + (valid_run / "updates.jsonl").read_bytes())
    _reseal(valid_run)
    v = validate(valid_run)
    assert v["verdict"] == "INVALID"
    assert any("updates.jsonl:1" in r and where in r for r in v["reasons"]), v["reasons"]


def test_valid_dir_passes(valid_run):
    v = validate(valid_run)
    assert v["verdict"] == "VALID", v["reasons"]
    assert {c["check"] for c in v["checks"]} >= {
        "manifest", "pinned_settings", "evidence", "updates_complete", "trainer_ranks", "counts", "groups_unique",
        "endpoints", "forced_lengths", "timestamps", "schedule", "trained_calls", "staleness", "gpu_hygiene",
        "lease_held", "results_recomputed", "container_preflight", "run_log"}
    assert v["recomputed"]["headline"]["updates_per_hour"] == pytest.approx(5 * 3600 / 50)  # c_20 - c_15 = 50 s


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_tampered_copy_is_invalid(valid_run, tmp_path, name):
    tamper, reseal, check = TAMPERS[name]
    broken = tmp_path / "broken"
    shutil.copytree(valid_run, broken, symlinks=True)
    tamper(broken)
    if reseal:
        _reseal(broken)
    v = validate(broken)
    failed = {c["check"] for c in v["checks"] if not c["passed"]}
    assert v["verdict"] == "INVALID"
    assert check in failed, (name, v["reasons"])
    if "all but run.log forged" in name:  # everything else was made consistent: the log catches it (and,
        assert failed == {"run_log", "resimulated"}, v["reasons"]  # this being a sim run, its re-run)


def test_two_runs_mixed(valid_run, fake_smi, tmp_path):
    """Another run's turns.jsonl, renamed to this run's ids and resealed, is caught by the digests
    run.log logged as this run's lines were written."""
    from harness.run import RunRequest, run_one

    other, _ = run_one(RunRequest(backend="skyrl", workload="multi_turn", gpus="4,5,6,7", runtime="sim",
                                  results_dir=str(tmp_path / "other"), argv=("bench", "run")), echo=lambda m: None)
    mine = read_json(valid_run / "manifest.json")["lease"]
    theirs = read_json(other / "manifest.json")["lease"]
    text = (other / "turns.jsonl").read_text()
    for key in ("run_id", "lease_id"):
        text = text.replace(theirs[key], mine[key])
    (valid_run / "turns.jsonl").write_text(text)
    _reseal(valid_run)
    v = validate(valid_run)
    assert v["verdict"] == "INVALID"
    # the synthetic driver writes update 1's turns first: 4 groups x 4 trajectories x 3 turns = 48 lines
    assert any(r.startswith("run_log:") and "turns.jsonl: its first 48 lines do not hash to the turns_sha256 "
               "run.log logged with update 1" in r for r in v["reasons"]), v["reasons"]


def test_lease_state_dir_pointed_away_from_the_history(valid_run, monkeypatch):
    """Validated where the controller ran (its default state dir holds the history), a manifest
    whose lease.state_dir points elsewhere does not hide the history."""
    state = read_json(valid_run / "manifest.json")["lease"]["state_dir"]
    monkeypatch.setenv("RL_BENCH_STATE_DIR", state)
    _edit_manifest(valid_run, lambda m: m["lease"].update(state_dir=str(valid_run / "nowhere")))
    v = validate(valid_run)
    assert v["verdict"] == "INVALID"
    assert any(r.startswith("lease_held: lease.state_dir is") and f"history is in {state}" in r
               for r in v["reasons"]), v["reasons"]


def test_report_refuses_the_same_run_twice(valid_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(valid_run, copy, symlinks=True)
    res = CliRunner().invoke(bench, ["report", str(valid_run), str(copy)])
    assert res.exit_code == 2 and "is already in this report" in res.output, res.output


def test_report_shows_the_recomputed_headline(valid_run):
    _edit_manifest(valid_run, lambda m: m["results"]["headline"].update(updates_per_hour=9999.0))
    res = CliRunner().invoke(bench, ["report", str(valid_run)])
    assert res.exit_code == 0, res.output
    assert "9999" not in res.output
    assert "360.00" in res.output  # 5 * 3600 / (c_20 - c_15 = 50 s), from the evidence
    assert "INVALID" in res.output


@pytest.mark.parametrize("content,key", [
    ("[1, 2, 3]", "top level"),
    ('{"schema": "bench.manifest.v1", "pipeline": {"groups_per_update": "4"}}', "pipeline.groups_per_update"),
    ('{"identity": {"run_id": 7}}', "identity.run_id"),
    ('{"results": {"headline": []}}', "results.headline"),
    ('{"status": "aborted", "status": "valid"}', "duplicate key 'status'"),
    ('{"backend_outcome": {"exit_code": NaN}}', "backend_outcome.exit_code"),
    ('{"hardware": {"occupancy_after": {"raw": {"query_gpu": 5}}}}', "hardware.occupancy_after.raw.query_gpu"),
])
def test_malformed_manifest_is_a_clean_error(tmp_path, content, key):
    d = tmp_path / "run"
    d.mkdir()
    (d / "manifest.json").write_text(content)
    with pytest.raises(ManifestError, match=key):
        validate(d)
    for cmd in ("validate", "report"):
        res = CliRunner().invoke(bench, [cmd, str(d)])
        assert res.exit_code == 2, res.output
        assert "manifest.json" in res.output and key in res.output and "Traceback" not in res.output


def test_manifest_schema_problems():
    man = M.skeleton(run_id="r", suite=None, backend="art", workload="multi_turn", runtime="sim", rank=1,
                     argv=["bench"], settings={"groups_per_update": 4, "staleness_bound": 4, "trainer_ranks": 2},
                     requested_recipe_sha256="a", python_sha256="b")
    assert M.problems(man) == ["workload.schedule_sha256 missing", "workload.name missing",
                               "workload.seed missing", "workload.groups missing"]
    assert man["model"]["lora"]["supplemental"] is True
    assert M.problems({**man, "status": "done", "workload": {"schedule_sha256": "x", "name": "m", "seed": 1,
                                                             "groups": 2}}) == [
        "status 'done' not one of ('running', 'valid', 'invalid', 'aborted')"]
    assert "missing key 'results'" in M.problems({k: v for k, v in man.items() if k != "results"})


@pytest.mark.parametrize("gpus, where", [
    ("0,0,1,2", "names the same device twice"),
    ("a,1,2,3", "'a' is neither a GPU index"),
    ("-1,0,1,2", "'-1' is neither a GPU index"),
    ("0,1,,2", "empty entry"),
    ("0,1,2", "4 distinct devices are required, got 3"),
])
def test_malformed_gpus_is_a_usage_error_before_any_results_dir(tmp_path, gpus, where):
    res = CliRunner().invoke(bench, ["run", "--backend", "art", "--workload", "multi_turn", "--gpus", gpus,
                                     "--runtime", "sim", "-o", str(tmp_path / "results")])
    assert res.exit_code == 2 and where in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "results").exists()  # was an ABORTED results directory per typo
