"""Tamper classes beyond `test_bench_validate.TAMPERS`, each INVALID naming the check.

Most are made by a *full forger*: after the edit it rewrites every derived value it can
recompute without the run's history: the evidence hashes in the manifest, the results, both
summaries, run.log's per-update digests, its `evidence closed` and `manifest sealed` lines, and
the lease history's evidence event (in a private copy of the state dir). What still catches
those is a semantic check (bytes the writer never writes, a physically impossible timeline, a
lease timeline no run makes), not a digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

import pytest
from click.testing import CliRunner
from test_bench_validate import _edit_json, _edit_jsonl, _edit_manifest, _set

from harness import manifest as M
from harness import report
from harness.cli import main as bench
from harness.errors import ManifestError
from harness.fsio import read_json, read_jsonl, write_json
from harness.run import evidence_record
from harness.validate import validate


def _private_state(d):
    """Point the run at a private copy of its lease history (a forger's own state dir)."""
    state = d.parent / "forged_state"
    if not state.exists():
        shutil.copytree(read_json(d / "manifest.json")["lease"]["state_dir"], state)
        _edit_manifest(d, lambda m: m["lease"].update(state_dir=str(state)))
        _reseal_log_and_history(d)
    return state / "reservations.jsonl"


def _reseal_log_and_history(d):
    """run.log's `manifest sealed` line, the history's evidence event and both summaries, for the
    manifest as it is now."""
    man = read_json(d / "manifest.json")
    sha = M.sealed_sha256(man)
    sealed = f"manifest sealed: sha256={sha} " + " ".join(f"{k}={v}" for k, v in M.sealed_section_digests(man).items())
    log = d / "run.log"
    log.write_text(re.sub(r"manifest sealed: .*", lambda _m: sealed, log.read_text()))
    hist = _history(d)
    events = [json.loads(x) for x in hist.read_text().splitlines()]
    for e in events:
        if e["event"] == "evidence" and e["lease_id"] == man["lease"]["lease_id"]:
            e.update(evidence=man["evidence"], manifest_sha256=sha)
    hist.write_text("".join(json.dumps(e) + "\n" for e in events))
    write_json(d / "summary.json", report.summary(man))
    (d / "summary.md").write_text(report.summary_markdown(report.summary(man)))


def _history(d):
    return __import__("pathlib").Path(read_json(d / "manifest.json")["lease"]["state_dir"]) / "reservations.jsonl"


def _forge_everything(d):
    """Recompute every digest, hash, result and summary from the (edited) evidence."""
    _private_state(d)
    ru = (d / "updates.jsonl").read_bytes().splitlines(keepends=True)
    rt = (d / "turns.jsonl").read_bytes().splitlines(keepends=True)
    by_k = {}
    for raw in ru:
        try:
            u = json.loads(raw)
        except ValueError:  # a line the tamper made unreadable: the forger has nothing to reseal for it
            continue
        by_k[u["k"]] = (u, raw)

    def update_line(m):
        k, n = int(m.group(1)), min(int(m.group(2)), len(rt))
        u, raw = by_k[k]
        return (f"update {k}: c_k={u['c_k']:.3f} groups={u['groups']} trajectories={u['trajectories']} "
                f"tokens={u['tokens']} line_sha256={hashlib.sha256(raw).hexdigest()} turns={n} "
                f"turns_sha256={hashlib.sha256(b''.join(rt[:n])).hexdigest()}")

    text = (d / "run.log").read_text()
    text = re.sub(r"update (\d+): c_k=\S+ groups=\d+ trajectories=\d+ tokens=\d+ line_sha256=\S+ turns=(\d+) "
                  r"turns_sha256=\S+", update_line, text)
    text = re.sub(r"evidence closed: .*", lambda _m: (
        f"evidence closed: updates={len(ru)} updates_sha256={hashlib.sha256(b''.join(ru)).hexdigest()} "
        f"turns={len(rt)} turns_sha256={hashlib.sha256(b''.join(rt)).hexdigest()}"), text)
    (d / "run.log").write_text(text)
    _edit_manifest(d, lambda m: m.update(evidence=evidence_record(d)))
    try:
        rec = validate(d)["recomputed"]
    except ManifestError:  # a manifest that no longer loads keeps its results
        rec = None
    if rec:
        _edit_manifest(d, lambda m: m["results"].update(rec))
    _reseal_log_and_history(d)


def _raw(name, fn):
    return lambda d: (d / name).write_bytes(fn((d / name).read_bytes()))


def _scale_timeline(f):
    """Every evidence time (and the simulated clock's end) multiplied by ``f``: a unit change."""
    def tamper(d):
        def upd(u):
            for key in ("d_k", "c_k", "train_end", "publish_end"):
                u[key] *= f
            u["rank_intervals"] = {r: [[s * f, e * f] for s, e in ivs] for r, ivs in u["rank_intervals"].items()}
            return u
        _edit_jsonl(d / "updates.jsonl", upd)
        _edit_jsonl(d / "turns.jsonl", lambda t: _set(t, **{x: t[x] * f for x in ("arrival", "first_token", "finish")
                                                            if t[x] is not None}))
        _edit_manifest(d, lambda m: [c.update(end_s=c["end_s"] * f) for c in (m["clock"], m["backend_outcome"]["clock"])])
    return tamper


def _hist(fn):
    def tamper(d):
        hist = _private_state(d)
        man = read_json(d / "manifest.json")
        events = [json.loads(x) for x in hist.read_text().splitlines()]
        mine = {e["event"]: e for e in events if e.get("lease_id") == man["lease"]["lease_id"]}
        hist.write_text("".join(json.dumps(e) + "\n" for e in fn(events, mine, man)))
    return tamper


def _acquire_late(events, mine, man):
    mine["acquire"]["time_unix"] = man["identity"]["backend_finished_unix"] + 10.0
    return events


def _second_holder(events, mine, man):
    """Another lease acquired one of these GPUs while this run held them."""
    other = {**mine["acquire"], "lease_id": "99999999-9999-4999-8999-999999999999", "run_id": "someone-else",
             "gpu_uuids": mine["acquire"]["gpu_uuids"][1:2],
             "time_unix": (mine["acquire"]["time_unix"] + mine["release"]["time_unix"]) / 2}
    return [*events[:events.index(mine["acquire"]) + 1], other, *events[events.index(mine["acquire"]) + 1:]]


def _release_first(events, mine, man):
    i, j = events.index(mine["evidence"]), events.index(mine["release"])
    events[i], events[j] = events[j], events[i]
    mine["release"]["time_unix"] = mine["evidence"]["time_unix"] - 0.5
    return events


def _duplicate_key_event(d):
    hist = _private_state(d)
    man = read_json(d / "manifest.json")
    lines = [x.replace('"event": "release"', '"event": "acquire", "event": "release"')
             if man["lease"]["lease_id"] in x else x for x in hist.read_text().splitlines()]
    hist.write_text("\n".join(lines) + "\n")


def _hard_link_outside(d):
    os.link(d / "turns.jsonl", d.parent / "turns.jsonl.elsewhere")


def _dir_for(name):
    return lambda d: ((d / name).unlink(), (d / name).mkdir())


def _untrained_call_in_window(d):
    """A call of a group no update trained, added inside the headline window (more sampled tokens)."""
    import bench_synthetic

    wl = read_json(d / "manifest.json")["workload"]
    w = bench_synthetic.fake_generate(wl["name"], wl["groups"], wl["seed"])
    rows = list(read_jsonl(d / "turns.jsonl"))
    g = 1 + max(g for u in read_jsonl(d / "updates.jsonl") for g in u["group_ids"])
    tid = int(w.group_trajs(g)[0])
    call = w.traj_calls(tid)[0]
    L, prompt = int(w.call_completion_tokens[call]), int(w.call_prompt_tokens[call])
    rows.append({**rows[-1], "group": g, "trajectory": tid, "turn": 0, "arrival": 170.0, "first_token": 170.1,
                 "finish": 170.7, "policy_version_start": 16, "policy_version_end": 16, "seq": len(rows),
                 "forced_tokens": L, "completion_tokens": L, "prompt_tokens": prompt, "scheduled_prompt_tokens": prompt})
    (d / "turns.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def _swap_turn_lines(i, j):
    """Two calls' lines swapped, each keeping the other's seq and write time (order looks intact)."""
    def tamper(d):
        rows = list(read_jsonl(d / "turns.jsonl"))
        keep = ("seq", "wall_time_unix")
        a, b = rows[i], rows[j]
        rows[i] = {**b, **{k: a[k] for k in keep}}
        rows[j] = {**a, **{k: b[k] for k in keep}}
        (d / "turns.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return tamper


def _older_simulator(d):
    _edit_manifest(d, lambda m: (m["identity"].update(backend_version="synthetic-0.1"),
                                 m["backend_outcome"].update(backend_version="synthetic-0.1")))
    log = d / "run.log"
    log.write_text(log.read_text().replace("version synthetic\n", "version synthetic-0.1\n"))


def _hidden_busy_row(m):
    """A busy row for the first GPU, followed by a clean one for the same UUID (the last one wins)."""
    raw = m["hardware"]["occupancy_after"]["raw"]
    first = raw["query_gpu"].splitlines()[0].split(", ")
    busy = ", ".join([*first[:5], "130004", *first[6:]])
    raw["query_gpu"] = busy + "\n" + raw["query_gpu"]


def _restamp_log_line(index, hours):
    """One run.log line's stamp moved by ``hours`` (the line itself unchanged)."""
    import calendar
    import time

    def tamper(d):
        lines = (d / "run.log").read_text().splitlines(keepends=True)
        stamp = lines[index][:20]
        t = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) + 3600 * hours
        lines[index] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) + lines[index][20:]
        (d / "run.log").write_text("".join(lines))
    return tamper


# name -> (tamper, full forger afterwards, the check that must fail, what its detail says)
TAMPERS_2 = {
    # bytes the writer never writes: another program rewrote the file (two readers may disagree)
    "BOM before the first update line": (_raw("updates.jsonl", lambda b: b"\xef\xbb\xbf" + b), True, "evidence",
                                         "updates.jsonl:1: not the bytes the evidence sink writes"),
    "CRLF line ends in turns.jsonl": (_raw("turns.jsonl", lambda b: b.replace(b"\n", b"\r\n")), True, "evidence",
                                      "turns.jsonl:1: not the bytes"),
    "last turn line cut at its newline": (_raw("turns.jsonl", lambda b: b[:-1]), True, "evidence",
                                          "the last line has no newline"),
    "blank line appended": (_raw("turns.jsonl", lambda b: b + b"\n"), True, "evidence", "blank line"),
    "update lines respaced": (_raw("updates.jsonl", lambda b: b.replace(b'": ', b'":  ')), True, "evidence",
                              "updates.jsonl:1: not the bytes"),
    "a number respelled (10.0 as 1e1)": (_raw("updates.jsonl", lambda b: b.replace(b'"d_k": 10.0,', b'"d_k": 1e1,', 1)),
                                         True, "evidence", "updates.jsonl:1: not the bytes"),
    "unknown field in an update line": (lambda d: _edit_jsonl(d / "updates.jsonl", lambda u: _set(u, bonus=1) if u["k"] == 4
                                                               else u), True, "evidence", "updates.jsonl:4: bonus: unknown field"),
    "a negative discard count": (lambda d: _edit_jsonl(d / "updates.jsonl", lambda u: _set(
        u, discards={"stale": -3, "zero_variance": 0}) if u["k"] == 2 else u), True, "evidence",
        "updates.jsonl:2: discards: expected {\"stale\": n, \"zero_variance\": n} (n >= 0)"),
    "a discard kind no driver counts": (lambda d: _edit_jsonl(d / "updates.jsonl", lambda u: _set(
        u, discards={**u["discards"], "refunded": 5}) if u["k"] == 2 else u), True, "evidence",
        "updates.jsonl:2: discards:"),
    "context.json with a BOM": (_raw("context.json", lambda b: b"\xef\xbb\xbf" + b), True, "files",
                                "context.json:1: not the bytes the harness writes"),
    "manifest.json with CRLF": (_raw("manifest.json", lambda b: b.replace(b"\n", b"\r\n")), False, "files",
                                "manifest.json:1: not the bytes the harness writes"),
    "summary.json re-serialised": (lambda d: (d / "summary.json").write_text(json.dumps(read_json(d / "summary.json"))),
                                   False, "files", "summary.json:1: not the bytes"),
    "unknown top-level manifest key": (lambda d: _edit_manifest(d, lambda m: m.update(notes={"updates_per_hour": 1e4})),
                                       False, "manifest", "unknown top-level key 'notes'"),
    # files that are not the run's own
    "evidence hard-linked from outside the run": (_hard_link_outside, False, "files", "turns.jsonl: 2 hard links"),
    "run.log replaced by a directory": (_dir_for("run.log"), False, "files", "run.log: a directory, not a regular"),
    "summary.md replaced by a directory": (_dir_for("summary.md"), False, "files", "summary.md: a directory, not a"),
    "turns.jsonl replaced by a named pipe": (lambda d: ((d / "turns.jsonl").unlink(), os.mkfifo(d / "turns.jsonl")),
                                             False, "files", "turns.jsonl: a named pipe, not a regular file"),
    "summary.json a symlink to a named pipe": (lambda d: ((d / "summary.json").unlink(), os.mkfifo(d.parent / "fifo"),
                                                          (d / "summary.json").symlink_to(d.parent / "fifo")),
                                               False, "files", "summary.json: a named pipe (through a symlink)"),
    # the lease history's timeline
    "lease acquired after the backend started": (_hist(_acquire_late), False, "lease_held",
                                                 "after the backend started"),
    "another lease held one of the GPUs during the run": (_hist(_second_holder), False, "lease_held",
                                                          "while this run's lease held it"),
    "lease released before the evidence was hashed": (_hist(_release_first), False, "lease_held",
                                                      "this lease's events are ['acquire', 'release', 'evidence']"),
    "history event with a duplicate key": (_duplicate_key_event, False, "lease_held", "does not decode strictly"),
    "lease held at the end, with problems": (lambda d: _edit_manifest(d, lambda m: m["lease"]["verified_at_end"].update(
        problems=["GPU-x: held by lease y"])), True, "lease_held", "says held, but lists problems"),
    # physically impossible timelines
    "simulated clock extended past the last event": (lambda d: _edit_manifest(d, lambda m: [c.update(
        end_s=c["end_s"] + 50.0) for c in (m["clock"], m["backend_outcome"]["clock"])]), True, "timestamps",
        "clock.end_s 257.0"),
    "timeline in ms read as s (x0.001)": (_scale_timeline(0.001), True, "timestamps", "faster than any decoder"),
    "calls compressed to microseconds": (lambda d: _edit_jsonl(d / "turns.jsonl", lambda t: _set(
        t, first_token=t["arrival"] + 1e-6, finish=t["arrival"] + 2e-6)), True, "timestamps", "faster than any decoder"),
    "rank intervals narrowed to microseconds": (lambda d: _edit_jsonl(d / "updates.jsonl", lambda u: _set(
        u, rank_intervals={r: [[u["d_k"] + 1, u["d_k"] + 1 + 1e-6]] for r in u["rank_intervals"]})), True,
        "trainer_ranks", "faster than 2 trainer GPUs can"),
    "run.log's first line dated an hour later": (_restamp_log_line(0, 1), False, "run_log",
                                                 "run.log:2: stamped"),
    "a run.log line dated a day before the run": (_restamp_log_line(3, -24), False, "run_log",
                                                  "run.log:4: stamped"),
    # keys no writer writes, and two rows for one GPU
    "unknown key in the lease section": (lambda d: _edit_manifest(d, lambda m: m["lease"].update(trusted=True)), True,
                                         "manifest", "unknown key lease.trusted"),
    "unknown key in an occupancy snapshot": (lambda d: _edit_manifest(d, lambda m: m["hardware"]["occupancy_after"].update(
        verified_idle=True)), True, "manifest", "unknown key hardware.occupancy_after.verified_idle"),
    "a busy GPU row shadowed by a second, clean row": (lambda d: _edit_manifest(d, _hidden_busy_row), True,
                                                       "gpu_hygiene", "2 rows in one nvidia-smi output"),
    # a sim run is re-run from its context: whatever the forger keeps consistent, the simulator disagrees
    "sim timeline rescaled by half (plausible speeds)": (_scale_timeline(0.5), True, "resimulated",
                                                         "the simulator re-run from context.json gives"),
    "sim call of an untrained group added in the window": (_untrained_call_in_window, True, "resimulated",
                                                           "turns.jsonl: 961 lines, the simulator re-run"),
    "sim turn lines swapped, seq and write times kept": (_swap_turn_lines(3, 600), True, "resimulated",
                                                         "turns.jsonl line 4:"),
    "sim run claims another simulator version": (_older_simulator, True, "resimulated",
                                                 "backend_outcome.backend_version is 'synthetic-0.1'"),
}


@pytest.mark.parametrize("name", sorted(TAMPERS_2))
def test_tamper_class_is_invalid(valid_run, name):
    tamper, forge, check, said = TAMPERS_2[name]
    tamper(valid_run)
    if forge:
        _forge_everything(valid_run)
    v = validate(valid_run)
    assert v["verdict"] == "INVALID"
    failed = {c["check"]: c["detail"] for c in v["checks"] if not c["passed"]}
    assert check in failed and said in failed[check], (name, v["reasons"])


def test_full_forger_alone_keeps_a_valid_run_valid(valid_run):
    """The forger of these tests changes nothing by itself: what the tests catch is the tamper."""
    _forge_everything(valid_run)
    v = validate(valid_run)
    assert v["verdict"] == "VALID", v["reasons"]


def _rename_run(src, dest):
    """A copy of ``src`` under a new run id and lease id in every file (identity rewritten)."""
    shutil.copytree(src, dest, symlinks=True)
    man = read_json(src / "manifest.json")
    for old, new in ((man["identity"]["run_id"], man["identity"]["run_id"][:-6] + "abcdef"),
                     (man["lease"]["lease_id"], "22222222-2222-4222-8222-222222222222")):
        for name in ("updates.jsonl", "turns.jsonl", "context.json", "run.log", "manifest.json", "summary.json",
                     "summary.md"):
            (dest / name).write_text((dest / name).read_text().replace(old, new))


def test_report_refuses_a_copy_with_its_identity_rewritten(valid_run, tmp_path):
    copy = tmp_path / "copy" / "other"
    _rename_run(valid_run, copy)
    res = CliRunner().invoke(bench, ["report", str(valid_run), str(copy)])
    assert res.exit_code == 2 and "evidence" in res.output and "the same run twice" in res.output, res.output


def test_report_refuses_two_runs_on_one_lease(valid_run, tmp_path):
    copy = tmp_path / "copy" / valid_run.name
    shutil.copytree(valid_run, copy, symlinks=True)
    _edit_manifest(copy, lambda m: m["identity"].update(run_id=m["identity"]["run_id"][:-6] + "abcdef"))
    _edit_jsonl(copy / "turns.jsonl", lambda t: _set(t, arrival=t["arrival"]))  # same evidence, other id
    res = CliRunner().invoke(bench, ["report", str(valid_run), str(copy)])
    assert res.exit_code == 2 and "lease" in res.output and "the same run twice" in res.output, res.output


def test_summary_json_untouched_helper_is_canonical(valid_run):
    """`_edit_json` (the helpers' writer) writes what the harness writes: editing nothing stays VALID."""
    _edit_json(valid_run / "summary.json", lambda s: None)
    assert validate(valid_run)["verdict"] == "VALID"
    assert list(read_jsonl(valid_run / "updates.jsonl"))


@pytest.mark.parametrize("path, value", [
    (("lease", "verified_at_end", "held"), "false"),
    (("lease", "released"), 1),
    (("hardware", "occupancy_after", "clean"), "yes"),
])
def test_flag_of_another_type_is_refused(valid_run, path, value):
    """A flag read for its truth must be a JSON boolean ("false" is truthy), even fully forged."""
    def edit(m):
        node = m
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    _edit_manifest(valid_run, edit)
    _forge_everything(valid_run)
    with pytest.raises(ManifestError, match=re.escape(".".join(path))):
        validate(valid_run)


def test_report_refuses_a_copy_with_unmeasured_fields_edited(valid_run, tmp_path):
    """A copy under another run id and lease, with a field no figure depends on edited in every
    line (its `native` record), still has the run's timeline: the report refuses it."""
    copy = tmp_path / "copy" / "other"
    _rename_run(valid_run, copy)
    _edit_jsonl(copy / "updates.jsonl", lambda u: _set(u, native={"edited": True}))
    res = CliRunner().invoke(bench, ["report", str(valid_run), str(copy)])
    assert res.exit_code == 2 and "evidence" in res.output and "the same run twice" in res.output, res.output


@pytest.mark.parametrize("runtime", ["native", "container"])
def test_a_real_run_cannot_claim_a_simulated_clock(valid_run, runtime):
    """A simulated clock is bound to no wall time; only the sim runtime has one (the check itself,
    on this run's evidence with the manifest claiming a real runtime)."""
    from harness.validate import _read_evidence, check_timestamps

    man = read_json(valid_run / "manifest.json")
    lines = _read_evidence(valid_run)
    assert check_timestamps(man, lines["updates.jsonl"], lines["turns.jsonl"]) == []
    man["identity"]["runtime"] = runtime
    got = check_timestamps(man, lines["updates.jsonl"], lines["turns.jsonl"])
    assert any(f"clock.kind 'simulated': a {runtime} run's evidence clock is 'monotonic'" in x for x in got), got


def test_a_forged_history_copy_does_not_hide_the_controllers_own(valid_run, monkeypatch):
    """Validated on the controller's machine (its default state dir holds the real history), a
    fully forged run whose lease.state_dir points at a forged copy of the history is still held
    to the real one."""
    real = read_json(valid_run / "manifest.json")["lease"]["state_dir"]
    _edit_jsonl(valid_run / "updates.jsonl", lambda u: _set(u, native={"forged": True}) if u["k"] == 12 else u)
    _forge_everything(valid_run)
    monkeypatch.setenv("RL_BENCH_STATE_DIR", real)
    v = validate(valid_run)
    assert v["verdict"] == "INVALID"
    held = next(c["detail"] for c in v["checks"] if c["check"] == "lease_held")
    assert f"this run's lease history is in {real}" in held and "differ from manifest.evidence" in held, held
