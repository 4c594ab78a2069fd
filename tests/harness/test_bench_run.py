"""A whole run through the real run path with the synthetic backend and the fake nvidia-smi."""

from __future__ import annotations

import json

from harness import manifest as M
from harness.fsio import read_json, read_jsonl
from harness.lease import LeaseStore
from harness.run import RunRequest, run_one


def test_run_makes_a_valid_results_dir(fake_smi, synthetic, tmp_path):
    req = RunRequest(backend="skyrl", workload="multi_turn", gpus="0,1,2,3", runtime="sim",
                     results_dir=str(tmp_path / "results"), argv=("bench", "run"))
    valid_run, _ = run_one(req, echo=lambda m: None)
    files = {p.name for p in valid_run.iterdir()}
    assert {"manifest.json", "run.log", "updates.jsonl", "turns.jsonl", "summary.json", "summary.md",
            "context.json"} <= files
    man = read_json(valid_run / "manifest.json")
    assert M.problems(man) == []
    assert man["status"] == "valid" and man["validation"]["verdict"] == "VALID"
    assert man["identity"]["lease_id"] and man["lease"]["verified_at_end"]["held"]
    assert man["lease"]["released"] is True
    assert man["hardware"]["trainer_uuids"] == [fake_smi.uuid(0), fake_smi.uuid(1)]
    assert man["model"]["lora"] == {"rank": 8, "alpha": 32, "scope": "per-expert", "supplemental": False}
    assert man["model"]["chat_template_kwargs"] == {"enable_thinking": False, "preserve_thinking": True}
    # synthetic: c_k = 10k + 7, so T_H = 50 s; 4 groups/update
    h = man["results"]["headline"]
    assert h["window_s"] == 50.0 and h["updates_per_hour"] == 360.0
    assert len(list(read_jsonl(valid_run / "updates.jsonl"))) == 20
    # the lease is gone after the run, and the history shows acquire then release
    store = LeaseStore()
    assert store.records() == []
    events = store.history_events()
    assert [e["event"] for e in events] == ["acquire", "evidence", "release"]
    assert events[1]["evidence"] == man["evidence"]  # the witness outside the results dir
    assert json.loads((valid_run / "summary.json").read_text())["verdict"] == "VALID"
