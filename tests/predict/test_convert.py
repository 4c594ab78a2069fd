"""`srl-predict convert`: snapshots from the bench harness's evidence (tests/data/harness_sample:
update k has d_k = 12k + 3, train_end = d_k + 5, publish_end = d_k + 6.5; one call per group,
arrival a, first token a + 0.1, finish a + 0.8)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from simrl.cli.predict import main as predict_cli
from simrl.predict import predict
from simrl.snapshot import SnapshotError, read_snapshot
from simrl.snapshot_convert import from_harness, harness_config

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "harness_sample"
SETS = ["policy=skyrl", "workload.groups=12", "run.training_steps=3"]


def snap_at(at, d=SAMPLE):
    return from_harness(d, at, harness_config(d, None, SETS))


def test_trainer_phase_from_the_updates():
    assert snap_at(10.0).trainer.phase == "waiting"
    tr = snap_at(15.2).trainer  # d_1 = 15 <= 15.2 < train_end 20
    assert (tr.phase, tr.phase_started_s, tr.steps_done, tr.phase_expected_s) == ("training", 15.0, 0, None)
    tr = snap_at(33.0).trainer  # update 2: train_end 32 <= 33 < publish_end 33.5; update 1 synced 21.5 - 20
    assert (tr.phase, tr.phase_started_s, tr.steps_done, tr.version) == ("publishing", 32.0, 1, 1)
    assert tr.phase_expected_s == pytest.approx(1.5)


def test_calls_in_flight_and_the_buffer():
    s = snap_at(24.0)
    # Group 6 arrived 23.7, first token 23.8, finishes 24.5 with 1050 tokens:
    # 1 + int(1049 x (24.0 - 23.8) / 0.7) = 1 + int(299.71) = 300 tokens so far.
    (inst, where, q), = s.requests()
    assert (q.gid, where, q.generated_tokens, q.prompt_tokens, q.version) == (6, "running", 300, 200, 1)
    assert s.instances[inst].kv_used_tokens == 200 + 300
    # Groups 0-3 trained in update 1 (d_1 = 15); 4 and 5 finished at 22.5 and 23.5: the buffer.
    assert [g.gid for g in s.buffer] == [4, 5] and [g.gid for g in s.running_groups] == [6]
    assert s.buffer[0].finish_time_s == 22.5 and s.buffer[0].trajs[0].completion_tokens == 1050
    assert (s.pipeline.groups_dispatched, s.pipeline.groups_accepted, s.pipeline.next_rid) == (7, 6, 7)
    # A call that has arrived but has no first token yet waits (group 6 at 23.75).
    (_, where, q), = snap_at(23.75).requests()
    assert (where, q.generated_tokens) == ("waiting", 0)


def test_the_converted_snapshot_predicts(tmp_path):
    out = tmp_path / "s.json"
    res = CliRunner().invoke(predict_cli, ["convert", str(SAMPLE), "--at", "24", *[x for kv in SETS for x in ("--set", kv)],
                                           "-o", str(out)])
    assert res.exit_code == 0, res.output
    s = read_snapshot(out)
    assert s == snap_at(24.0)
    p = predict(s, draws=2)
    # The call in flight finishes after the snapshot; a batch forms after it.
    fin = [x for x in p.request_finish[6] if x == x]  # NaN: not finished when the batch formed
    assert all(x > 24.0 for x in fin) and p.batch_quantiles(0)[1] > 24.0


@pytest.mark.parametrize("edit, where", [
    (lambda t: t[0].pop("arrival"), "turns.jsonl: line 1: arrival: missing"),
    (lambda t: t[1].__setitem__("prompt_tokens", -5), "turns.jsonl: line 2: prompt_tokens: expected a non-negative"),
    (lambda t: t[2].__setitem__("first_token", "x"), "turns.jsonl: line 3: first_token: expected a finite time >= 0"),
    (lambda t: t[3].__setitem__("finish", 3.0), "turns.jsonl: line 4: finish: 3.0 is before"),
])
def test_bad_evidence_names_file_line_and_key(tmp_path, edit, where):
    d = tmp_path / "ev"
    shutil.copytree(SAMPLE, d)
    turns = [json.loads(x) for x in (d / "turns.jsonl").read_text().splitlines()]
    edit(turns)
    (d / "turns.jsonl").write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    with pytest.raises(SnapshotError) as exc:
        snap_at(24.0, d)
    assert str(exc.value).startswith(str(d / "turns.jsonl")) and where in str(exc.value)


def test_refusals(tmp_path):
    with pytest.raises(SnapshotError, match=r"--at 99: outside the evidence \(0 .. 45.5 s\)"):
        snap_at(99.0)
    with pytest.raises(SnapshotError, match="updates.jsonl: missing"):
        snap_at(1.0, tmp_path)
    with pytest.raises(SnapshotError, match="policy psrl keeps per-group reservations"):
        from_harness(SAMPLE, 24.0, harness_config(SAMPLE, None, ["policy=psrl"]))
    res = CliRunner().invoke(predict_cli, ["convert", str(tmp_path), "--at", "1", "-o", str(tmp_path / "s.json")])
    assert res.exit_code == 2 and "updates.jsonl: missing" in res.output
