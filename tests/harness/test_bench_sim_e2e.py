"""`bench run --runtime sim` end to end through the real simulator (skyrl and art presets), then
`bench validate`, `bench report`, and `srl-compare` reading the evidence."""

from __future__ import annotations

import json

from click.testing import CliRunner

from harness.fsio import read_json, read_jsonl
from harness.run import RunRequest, run_one
from simrl.cli.compare import cli as compare_cli


def test_skyrl_multi_turn_through_the_simulator_is_valid_and_comparable(fake_smi, tmp_path):
    req = RunRequest(backend="skyrl", workload="multi_turn", gpus="0,1,2,3", runtime="sim",
                     results_dir=str(tmp_path / "results"), argv=("bench", "run"))
    run_dir, _ = run_one(req, echo=lambda m: None)
    man = read_json(run_dir / "manifest.json")
    assert man["validation"]["verdict"] == "VALID", man["validation"]
    updates = list(read_jsonl(run_dir / "updates.jsonl"))
    assert [u["k"] for u in updates] == list(range(1, 21))
    assert all(u["groups"] == 4 for u in updates)  # SkyRL B4: exactly B groups per update
    assert all(max(u["staleness"]) >= 0 for u in updates)
    turns = list(read_jsonl(run_dir / "turns.jsonl"))
    assert turns and all(t["completion_tokens"] == t["forced_tokens"] for t in turns
                         if t["finish_reason"] == "length")
    h = man["results"]["headline"]
    assert h["updates_per_hour"] > 0 and h["accepted_trained_tokens_per_s"] > 0
    # The harness's evidence is what srl-compare holds a simulation against: itself gives zero.
    res = CliRunner().invoke(compare_cli, [str(run_dir), str(run_dir), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["steps_compared"] == [1, 20]
    assert out["summary"]["step_time_s_ape_pct"]["max"] == 0.0


def test_art_through_the_simulator_is_valid(fake_smi, tmp_path):
    req = RunRequest(backend="art", workload="long_generation", gpus="0,1,2,3", runtime="sim",
                     results_dir=str(tmp_path / "results"), argv=("bench", "run"))
    run_dir, _ = run_one(req, echo=lambda m: None)
    man = read_json(run_dir / "manifest.json")
    assert man["validation"]["verdict"] == "VALID", man["validation"]
    assert all(u["groups"] == 4 for u in read_jsonl(run_dir / "updates.jsonl"))  # min == max pinned
