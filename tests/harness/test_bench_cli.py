"""The `bench` CLI through click's CliRunner: exit codes and what users see."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.fsio import read_json
from harness.lease import LeaseStore


@pytest.fixture
def cli():
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args])


def test_plan(cli):
    r = cli("plan", "--suite", "comparison")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert "8 runs" in lines[0]
    assert " 1. art   multi_turn" in r.output and " 8. skyrl multi_turn_salted" in r.output
    assert "B4 workers12 staleness4 TP1 CP1 EP2 DP2" in r.output
    assert cli("plan", "--suite", "nope").exit_code == 2  # a user error (docs/cli.md)


def test_gpus_shows_lease_holder(cli, fake_smi):
    fake_smi.busy(5)
    LeaseStore().acquire([{"uuid": fake_smi.uuid(i), "index": i} for i in range(4)], "run-x", "/r", [])
    r = cli("gpus")
    assert r.exit_code == 0, r.output
    assert "run run-x" in r.output and "holder alive" in r.output
    assert "pid 4242 /usr/bin/python3 130004 MiB" in r.output
    assert r.output.count("free") == 4


def test_run_sim_then_validate_report(cli, fake_smi, synthetic, tmp_path):
    res = tmp_path / "results"
    r = cli("run", "--backend", "skyrl", "--workload", "multi_turn", "--gpus", "0,1,2,3", "--runtime", "sim",
            "--results-dir", res)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"results: {res}/") and "VALID" in r.output
    run1 = next(res.iterdir())
    r = cli("run", "--backend", "art", "--workload", "tool_history", "--gpus", "4,5,6,7", "--runtime", "sim",
            "--rank", "1", "--results-dir", res)
    assert r.exit_code == 0, r.output
    v = cli("validate", run1)
    assert v.exit_code == 0 and v.output.strip().endswith("VALID") and "PASS  lease_held" in v.output
    dirs = sorted(res.iterdir())
    rep = cli("report", *dirs)
    assert rep.exit_code == 0
    assert "## LoRA rank 8" in rep.output and "## LoRA rank 1 (supplemental" in rep.output
    assert "| multi_turn | skyrl | sim | 4 | VALID | 360.00 |" in rep.output


def test_busy_gpu_run_is_recorded_as_aborted(cli, fake_smi, synthetic, tmp_path):
    fake_smi.busy(2)
    r = cli("run", "--backend", "art", "--workload", "multi_turn", "--gpus", "0,1,2,3", "--runtime", "sim",
            "--results-dir", tmp_path / "res")
    assert r.exit_code == 1 and "ABORTED" in r.output and "compute processes running: pid 4242" in r.output
    man = read_json(next((tmp_path / "res").iterdir()) / "manifest.json")
    assert man["status"] == "aborted" and man["validation"]["verdict"] == "INVALID"
    assert LeaseStore().records() == []  # its own lease was released; nothing else touched


def test_held_lease_refuses_run_and_forced_release(cli, fake_smi, synthetic, tmp_path):
    lease = LeaseStore().acquire([{"uuid": fake_smi.uuid(3), "index": 3}], "other", "/r", [])
    r = cli("run", "--backend", "skyrl", "--workload", "multi_turn", "--gpus", "0,1,2,3", "--runtime", "sim",
            "--results-dir", tmp_path / "res")
    assert r.exit_code == 1 and "leased by run other" in r.output
    assert {x["run_id"] for x in LeaseStore().records()} == {"other"}  # rolled back, other untouched
    r = cli("release", "--lease-id", lease["lease_id"])
    assert r.exit_code == 2 and "without --force" in r.output
    r = cli("release", "--lease-id", lease["lease_id"], "--force")
    assert r.exit_code == 0 and fake_smi.uuid(3) in r.output
    assert cli("release", "--lease-id", "nope", "--force").exit_code == 2


@pytest.mark.parametrize("args,msg", [
    (["--backend", "art", "--workload", "multi_turn", "--gpus", "0,1,2"], "4 distinct devices"),
    (["--backend", "art", "--workload", "multi_turn", "--gpus", "0,1,2,3", "--skyrl-batch-size", "1"],
     "apply to --backend skyrl only"),
    (["--backend", "art", "--rank", "1", "--workload", "multi_turn", "--gpus", "0,1,2,3", "--runtime", "native"],
     "needs --python"),
    (["--backend", "art", "--workload", "multi_turn", "--gpus", "0,1,2,3", "--runtime", "native"], "rank 1 only"),
    (["--suite", "comparison", "--backend", "art", "--gpus", "0,1,2,3"], "drop --backend"),
    (["--workload", "multi_turn", "--gpus", "0,1,2,3"], "give --suite comparison"),
])
def test_run_user_errors(cli, fake_smi, synthetic, tmp_path, args, msg):
    r = cli("run", *args, "--runtime" if "--runtime" not in args else "--seed",
            "sim" if "--runtime" not in args else "1", "--results-dir", tmp_path / "res")
    assert r.exit_code != 0 and msg in r.output and "Traceback" not in r.output


def test_build_without_engine_prints_command(cli):
    r = cli("build", "--backend", "skyrl", "--engine", "no-such-engine")
    assert r.exit_code == 2
    assert "no-such-engine is not installed" in r.output
    assert "no-such-engine build -f containers/skyrl.Dockerfile --build-arg BENCH_PYTHON_SHA256=" in r.output


def test_container_preflight_fails_before_lease(cli, fake_smi, synthetic, tmp_path, monkeypatch):
    monkeypatch.setattr("harness.recipes.engine_problem", lambda engine="docker": None)
    monkeypatch.setattr("harness.recipes.image_labels", lambda image, engine="docker": {
        "org.rl-bench.python_sha256": "0" * 64, "org.rl-bench.recipe_sha256": "1" * 64})
    r = cli("run", "--backend", "art", "--rank", "1", "--workload", "multi_turn", "--gpus", "0,1,2,3",
            "--results-dir", tmp_path / "res")
    assert r.exit_code == 1 and "is stale: baked python hash" in r.output
    assert LeaseStore().history_events() == []  # no lease was ever attempted


def test_suite_runs_all_eight_serially(cli, fake_smi, synthetic, tmp_path):
    r = cli("run", "--suite", "comparison", "--runtime", "sim", "--gpus", "0,1,2,3", "--results-dir", tmp_path / "r")
    assert r.exit_code == 0, r.output
    assert "suite comparison: 8/8 valid" in r.output and len(list((tmp_path / "r").iterdir())) == 8


def test_common_options_of_the_cli_app(cli):
    """-h everywhere, --json where there is output, `bench k8s --help` lists the qualifier's options."""
    import json

    assert cli("-h").exit_code == 0 and "Examples:" in cli("-h").output
    for sub in ("plan", "gpus", "run", "validate", "report", "release", "build"):
        r = cli(sub, "-h")
        assert r.exit_code == 0 and "--quiet" in r.output, sub
    k8s = cli("k8s", "--help")
    assert k8s.exit_code == 0 and "--backend" in k8s.output and "-o, --output" in k8s.output
    plan = json.loads(cli("plan", "--json").output)
    assert plan["suite"] == "comparison" and len(plan["runs"]) == 8
    assert cli("plan", "--bogus").exit_code == 2
