"""The snapshot format: what it holds, round trips, and the strict reader's errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from predict_helpers import SMALL, small_cfg, snapshot_at

from simrl.cli.main import cli as srl_cli
from simrl.snapshot import (
    SNAPSHOT_SCHEMA,
    SnapshotError,
    parse_snapshot,
    read_snapshot,
    snapshot_dict,
    write_snapshot,
)


def test_snapshot_holds_the_pipeline_state(psrl_run):
    cfg, full = psrl_run
    t = full.steps[0].batch_ready * 0.5
    snap, sim = snapshot_at(cfg, t)
    assert snap.schema == SNAPSHOT_SCHEMA and snap.time_s == sim.env.now
    assert snap.trainer.phase == "waiting" and snap.trainer.steps_done == 0
    # Every in-flight request, with its tokens so far as the instance counts them.
    for inst, si in zip(sim.instances, snap.instances, strict=True):
        assert [q.rid for q in si.running] == [r.rid for r in inst.running]
        assert [q.generated_tokens for q in si.running] == [inst.generated_of(r) for r in inst.running]
        assert si.kv_used_tokens == inst.kv_used and si.version == inst.version
    assert {g.gid for g in snap.running_groups} == set(sim.st.running)
    assert [g.gid for g in snap.buffer] == [g.gid for g in sim.st.buffer]
    assert snap.pipeline.groups_dispatched == sim.st.groups_dispatched
    # The forced length of an unfinished call is not in the snapshot (a live system does not know it).
    text = json.dumps(snapshot_dict(snap))
    assert "completion_tokens\": " in text  # trajectories' finished tokens only
    assert all("completion" not in k for k in snapshot_dict(snap)["instances"][0]["running"][0]) \
        if snap.instances[0].running else True


def test_round_trip_is_exact(psrl_run, tmp_path):
    cfg, full = psrl_run
    snap, _ = snapshot_at(cfg, full.steps[0].batch_ready * 0.7)
    path = tmp_path / "s.json"
    write_snapshot(snap, path)
    back = read_snapshot(path)
    assert back == snap
    write_snapshot(back, tmp_path / "t.json")
    assert (tmp_path / "t.json").read_bytes() == path.read_bytes()


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d.__setitem__("schema", "simrl.snapshot.v0"), "schema: expected 'simrl.snapshot.v1'"),
    (lambda d: d["trainer"].__setitem__("phse", "x"), "trainer.phse: unknown key"),
    (lambda d: d["trainer"].pop("version"), "trainer: missing key 'version'"),
    (lambda d: d["trainer"].__setitem__("phase", "sleeping"), "trainer.phase: expected one of"),
    (lambda d: d["pipeline"].__setitem__("next_rid", -3), "pipeline.next_rid: expected a non-negative integer"),
    (lambda d: d["instances"][0].__setitem__("version", "1"), "instances[0].version: expected an integer"),
    (lambda d: d.__setitem__("time_s", None), "time_s: expected float, got null"),
    (lambda d: d["config"]["deployment"]["rollout"].__setitem__("tp", 0), "config:"),
])
def test_strict_reader_names_file_and_key(psrl_run, tmp_path, mutate, where):
    cfg, full = psrl_run
    snap, _ = snapshot_at(cfg, full.steps[0].batch_ready * 0.5)
    d = snapshot_dict(snap)
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SnapshotError) as exc:
        read_snapshot(path)
    assert str(exc.value).startswith(f"{path}: ") and where in str(exc.value)


def test_reader_rejects_a_request_of_an_unknown_group(psrl_run):
    cfg, full = psrl_run
    snap, _ = snapshot_at(cfg, full.steps[0].batch_ready * 0.5)
    d = snapshot_dict(snap)
    inst = next(i for i in d["instances"] if i["running"])
    inst["running"][0]["gid"] = 99999
    with pytest.raises(SnapshotError, match="its group 99999 is not among running_groups"):
        parse_snapshot(d, "x.json")


def test_bad_json_names_the_line(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{\n "schema": "simrl.snapshot.v1",\n oops\n}')
    with pytest.raises(SnapshotError, match=r"s.json: line 3: not valid JSON"):
        read_snapshot(path)


def test_srl_step_writes_a_snapshot(tmp_path):
    out = tmp_path / "snap.json"
    cfg_args = [*SMALL, "run.training_steps=2", "run.seed=0"]
    res = CliRunner().invoke(srl_cli, ["step", "--do", f"t 5; snap {out}; tr", *cfg_args])
    assert res.exit_code == 0, res.output
    assert f"written to {out}" in res.output
    snap = read_snapshot(out)
    assert 0 < snap.time_s <= 5.0
    assert snap.sim_config() == small_cfg(steps=2)
    res = CliRunner().invoke(srl_cli, ["step", "--do", "snap", *cfg_args])
    assert "snap needs a file path" in res.output
