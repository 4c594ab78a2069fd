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
        for name in ("updates.jsonl", "turns.jsonl"):
            data = (d / name).read_bytes()
            man["evidence"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "lines": data.count(b"\n"),
                                     "bytes": len(data)}
    _edit_manifest(d, fix)


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
}


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
