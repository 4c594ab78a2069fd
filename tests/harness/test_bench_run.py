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


NATIVE_WORKER = """\
import sys
sys.path.insert(0, {tests!r})
import attrs, bench_synthetic, workloads
from harness import backends, pins

workloads.generate = bench_synthetic.fake_generate


class Driver:  # the synthetic driver, reporting the version and the clock the real ART driver reports
    @staticmethod
    def run(ctx, sink, log):
        out = bench_synthetic.run_monotonic(ctx, sink, log)
        return attrs.evolve(out, backend_version="openpipe-art " + pins.UPSTREAM["art"]["version"])


backends.load = lambda backend, runtime: Driver
from harness.worker import main
sys.exit(main(sys.argv[3:]))  # argv: worker.py -m harness.worker --context <path>
"""


def test_native_run_through_the_worker_is_valid(fake_smi, synthetic, tmp_path):
    """The native runtime end to end (worker process, outcome.json, its log lines in run.log, the
    model link): the checks that only native/container runs get pass on an honest run."""
    import sys
    from pathlib import Path

    from harness import pins as P
    from harness.validate import validate

    snap = tmp_path / "hf" / "hub" / f"models--{P.MODEL.replace('/', '--')}" / "snapshots" / P.MODEL_REVISION
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    worker = tmp_path / "worker.py"
    worker.write_text(NATIVE_WORKER.format(tests=str(Path(__file__).parent)))
    python = tmp_path / "python"  # the "backend interpreter": runs the worker with the synthetic driver
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {worker} \"$@\"\n")
    python.chmod(0o755)
    req = RunRequest(backend="art", workload="multi_turn", gpus="0,1,2,3", runtime="native", rank=1,
                     python=str(python), hf_cache=str(tmp_path / "hf"), results_dir=str(tmp_path / "results"),
                     argv=("bench", "run", "--backend", "art", "--rank", "1", "--runtime", "native"))
    run_dir, man = run_one(req, echo=lambda m: None)
    assert man["status"] == "valid", man["reasons"]
    assert {p.name for p in run_dir.iterdir()} >= {"outcome.json", "model"}
    v = validate(run_dir)
    assert v["verdict"] == "VALID", v["reasons"]
    # the worker's own outcome.json is one more copy of what the backend reported
    out = read_json(run_dir / "outcome.json")
    out["backend_version"] = "openpipe-art 0.9.9"
    (run_dir / "outcome.json").write_text(json.dumps(out))
    v = validate(run_dir)
    assert any(r.startswith("identity: outcome.json (what the worker wrote) has backend_version 'openpipe-art 0.9.9'")
               for r in v["reasons"]), v["reasons"]
