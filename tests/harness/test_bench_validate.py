"""Every validation rule, caught on a deliberately broken copy of a valid results dir."""

from __future__ import annotations

import json
import shutil

import pytest

from harness import manifest as M
from harness.fsio import read_json, read_jsonl, write_json
from harness.validate import validate


def _edit_jsonl(path, fn):
    rows = [r for r in (fn(r) for r in read_jsonl(path)) if r is not None]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _edit_manifest(d, fn):
    man = read_json(d / "manifest.json")
    fn(man)
    write_json(d / "manifest.json", man)


def _update(k, fn):
    def edit(u):
        if u["k"] == k:
            return fn(u)
        return u
    return edit


def _set(u, **kv):
    u.update(kv)
    return u


BREAKS = {
    "manifest": lambda d: _edit_manifest(d, lambda m: m.pop("pins")),
    "not_aborted": lambda d: _edit_manifest(d, lambda m: m.update(status="aborted", reasons=["x"])),
    "updates_complete": lambda d: _edit_jsonl(d / "updates.jsonl", _update(7, lambda u: None)),
    "updates_complete/c_k": lambda d: _edit_jsonl(
        d / "updates.jsonl", _update(10, lambda u: _set(u, c_k=90.0, publish_end=90.0, train_end=89.0, d_k=85.0))),
    "trainer_ranks": lambda d: _edit_jsonl(
        d / "updates.jsonl", _update(12, lambda u: _set(u, rank_intervals={"0": u["rank_intervals"]["0"]}))),
    "trainer_ranks/outside": lambda d: _edit_jsonl(
        d / "updates.jsonl", _update(12, lambda u: _set(u, rank_intervals={**u["rank_intervals"],
                                                                           "1": [[u["d_k"] - 5, u["c_k"]]]}))),
    "counts": lambda d: _edit_jsonl(d / "updates.jsonl", _update(4, lambda u: _set(u, groups=3))),
    "endpoints": lambda d: _edit_jsonl(d / "updates.jsonl", _update(17, lambda u: _set(u, eval=True))),
    "forced_lengths": lambda d: _edit_jsonl(
        d / "turns.jsonl", lambda t: _set(t, completion_tokens=t["forced_tokens"] - 1, finish_reason="stop")
        if t["trajectory"] == 5 and t["turn"] == 1 else t),
    "schedule": lambda d: _edit_manifest(d, lambda m: m["workload"].update(schedule_sha256="0" * 64)),
    "schedule/forced_L": lambda d: _edit_jsonl(
        d / "turns.jsonl", lambda t: _set(t, completion_tokens=t["forced_tokens"] + 1,
                                          forced_tokens=t["forced_tokens"] + 1) if t["trajectory"] == 3 else t),
    "schedule/tokens": lambda d: _edit_jsonl(d / "updates.jsonl", _update(9, lambda u: _set(u, tokens=u["tokens"] + 1))),
    "staleness": lambda d: _edit_jsonl(d / "updates.jsonl", _update(3, lambda u: _set(u, staleness=[9, 0, 0, 0]))),
    "gpu_hygiene": lambda d: _edit_manifest(
        d, lambda m: m["hardware"]["occupancy_after"].update(clean=False, problems=["pid 7 on GPU 2"])),
    "lease_held": lambda d: _edit_manifest(
        d, lambda m: m["lease"]["verified_at_end"].update(held=False, problems=["GPU-x: no lease record"])),
    "container_preflight": lambda d: _edit_manifest(
        d, lambda m: m["identity"].update(runtime="container", recipe_sha256_baked="stale")),
    "art_autotuner": lambda d: _edit_manifest(
        d, lambda m: (m["identity"].update(backend="art", runtime="native"),
                      m["results"].update(autotuner={"mode": "online", "healthy": False, "detail": "stalled"}))),
    "run_log": lambda d: (d / "run.log").open("a").write("Traceback (most recent call last):\n  boom\n"),
    "run_log/exit": lambda d: _edit_manifest(d, lambda m: m["backend_outcome"].update(exit_code=3)),
}


def test_valid_dir_passes(valid_run):
    v = validate(valid_run)
    assert v["verdict"] == "VALID", v["reasons"]
    assert {c["check"] for c in v["checks"]} >= {"manifest", "updates_complete", "trainer_ranks", "counts",
                                                 "endpoints", "forced_lengths", "schedule", "staleness",
                                                 "gpu_hygiene", "lease_held", "container_preflight",
                                                 "art_autotuner", "run_log"}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_rule_catches_its_break(valid_run, tmp_path, rule):
    broken = tmp_path / "broken"
    shutil.copytree(valid_run, broken)
    BREAKS[rule](broken)
    v = validate(broken)
    failed = {c["check"] for c in v["checks"] if not c["passed"]}
    assert v["verdict"] == "INVALID"
    assert rule.split("/")[0] in failed, (rule, v["reasons"])


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
