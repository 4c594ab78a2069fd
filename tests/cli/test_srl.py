"""`srl` through click's CliRunner: default run, overrides, errors, step debugging, presets."""

import json

from click.testing import CliRunner

from simrl.cli.main import cli


def test_default_run_writes_outputs_and_prints_summary(tmp_path):
    res = CliRunner().invoke(cli, [f"run.output_dir={tmp_path}", "run.plots=false"])
    assert res.exit_code == 0, res.output
    assert "trained tokens/s" in res.output and "run directory:" in res.output
    run_dir = next(tmp_path.iterdir())
    for name in ("config.yaml", "report.json", "report.md", "telemetry.jsonl"):
        assert (run_dir / name).exists()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["totals"]["training_steps"] == 5


def test_same_run_twice_is_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        res = CliRunner().invoke(cli, [f"run.output_dir={d}", "run.plots=false", "run.name=x", "--quiet"])
        assert res.exit_code == 0, res.output
    for name in ("report.json", "report.md", "telemetry.jsonl"):
        assert (a / "x" / name).read_bytes() == (b / "x" / name).read_bytes()
    # The resolved config differs only in the output directory it names.
    assert (a / "x" / "config.yaml").read_text().replace(str(a), "D") == \
        (b / "x" / "config.yaml").read_text().replace(str(b), "D")


def test_bad_override_is_a_clean_error():
    res = CliRunner().invoke(cli, ["deployment.rollout.instances=zero"])
    assert res.exit_code == 2
    assert "deployment.rollout.instances" in res.output
    assert "Traceback" not in res.output


def test_impossible_scenario_is_a_clean_error(tmp_path):
    res = CliRunner().invoke(cli, [f"run.output_dir={tmp_path}", "deployment.rollout.kv_capacity_tokens=100"])
    assert res.exit_code == 2
    assert "KV tokens" in res.output


def test_help_shows_examples():
    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0 and "srl policy=sync" in res.output


def test_step_debugger_script():
    res = CliRunner().invoke(cli, ["step", "--do", "s 3; i 0; qu; k train_end; tr; b; q"])
    assert res.exit_code == 0, res.output
    assert "instance 0:" in res.output
    assert "router queue" in res.output
    assert "train_end" in res.output
    assert "trainer:" in res.output


def test_presets_listing_and_show():
    res = CliRunner().invoke(cli, ["presets"])
    assert res.exit_code == 0 and "bounded_async" in res.output and "sync" in res.output
    res = CliRunner().invoke(cli, ["presets", "show", "bounded_async"])
    assert res.exit_code == 0 and "policy.max_staleness = 1" in res.output
    res = CliRunner().invoke(cli, ["presets", "show", "nope"])
    assert res.exit_code == 2 and "unknown policy" in res.output
