"""`srl-sweep`: grid mode, space files, engine routing and fallback, oracle re-check, outputs, errors."""

import csv
import json

import pytest
import yaml
from click.testing import CliRunner

from simrl_explore.cli_sweep import Progress, main

BASE = ["cost.rollout=linear", "cost.training=constant", "cost.weight_sync=fixed",
        "cost.weight_sync_knobs.publish_s=1", "deployment.rollout.max_num_batched_tokens=0",
        "deployment.rollout.kv_policy=reserve", "deployment.rollout.prefix_caching=false", "router.active_cap=0",
        "policy=bounded_async", "policy.batch_groups=2", "policy.inflight_rule=keep_pause",
        "workload.groups=6", "workload.group_size=2", "run.training_steps=2",
        "workload.knobs.completion_knots=[[0,20],[1,80]]"]


def _set(base):
    return {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in base)}


def test_grid_mode_simpy_writes_one_row_per_configuration(tmp_path):
    out = tmp_path / "s.json"
    r = CliRunner().invoke(main, [*BASE, "--grid", "policy.max_staleness=0,1", "--engine", "simpy", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    assert [row["policy_max_staleness"] for row in rows] == [0, 1]
    assert all(row["engine"] == "simpy" and row["status"] == "ok" and row["complete"] for row in rows)
    assert "points/s" in r.output and "engines: simpy 2" in r.output


def test_unsupported_points_error_on_fast_and_fall_back_on_auto(tmp_path):
    out = tmp_path / "s.csv"
    args = [*BASE, "--grid", "router.name=throughput_balance", "-o", str(out)]
    r = CliRunner().invoke(main, [*args, "--engine", "fast"])
    assert r.exit_code == 2 and "router.name=throughput_balance" in r.output and not out.exists()
    r = CliRunner().invoke(main, args)  # auto
    assert r.exit_code == 0, r.output
    row = next(csv.DictReader(out.open()))
    assert row["engine"] == "simpy" and "router.name=throughput_balance" in row["fallback"]
    assert "simpy fallback x1" in r.output


def test_fast_points_match_simpy_and_the_recheck_agrees(tmp_path):
    pytest.importorskip("jax")
    # 8 groups, not BASE's 6: another compiled shape than tests/fast's (which count their own traces).
    spec = {"name": "t", "base": {"set": {**_set(BASE), "workload.groups": 8}}, "top_k": 2,
            "axes": [{"name": "inst", "key": "deployment.rollout.instances", "grid": [1, 2]},
                     {"name": "stale", "key": "policy.max_staleness", "grid": [0, 1]}]}
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(spec))
    rows = {}
    for engine in ("fast", "simpy"):
        r = CliRunner().invoke(main, ["--space", str(p), "--engine", engine, "-q", "-o", str(tmp_path / engine)])
        assert r.exit_code == 0, r.output
        rows[engine] = list(csv.DictReader((tmp_path / engine / "points.csv").open()))
    for f, s in zip(rows["fast"], rows["simpy"], strict=True):
        assert f["engine"] == "fast" and s["engine"] == "simpy"
        assert float(f["step_time_s"]) == pytest.approx(float(s["step_time_s"]), rel=1e-8)
        assert f["binding"] == s["binding"] and f["staleness_max"] == s["staleness_max"]
    rc = list(csv.DictReader((tmp_path / "fast" / "recheck.csv").open()))
    assert len(rc) == 2 and all(c["agrees"] == "True" and float(c["step_time_rel_err"]) < 1e-8 for c in rc)
    assert "2/2 agree" in (tmp_path / "fast" / "report.md").read_text()


def test_space_outputs_are_complete_and_byte_identical(tmp_path):
    spec = {"name": "t", "base": {"set": _set(BASE)}, "seed": 1, "samples": 2, "top_k": 0,
            "axes": [{"name": "inst", "key": "deployment.rollout.instances", "grid": [1, 2]},
                     {"name": "seqs", "key": "deployment.rollout.max_num_seqs",
                      "lhs": {"low": 2, "high": 8, "integer": True}}],
            "derived": [{"name": "tp", "key": "deployment.rollout.tp", "expr": "4 if inst == 2 else 3"},
                        {"name": "fit_tp", "key": "cost.rollout_knobs.fitted_for.tp", "expr": "tp"}],
            "plot": {"x": "inst", "y": "seqs"}}
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(spec))
    outs = []
    for k in range(2):
        out = tmp_path / f"o{k}"
        r = CliRunner().invoke(main, ["--space", str(p), "--engine", "simpy", "--jobs", "2", "-o", str(out)])
        assert r.exit_code == 0, r.output
        outs.append(out)
    names = {f.name for f in outs[0].iterdir()}
    assert {"points.csv", "pareto.csv", "report.md", "sweep.html", "timing.json"} <= names
    for f in ("points.csv", "pareto.csv", "report.md", "sweep.html"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    rows = list(csv.DictReader((outs[0] / "points.csv").open()))
    # tp=3 does not divide Qwen3-8B's 32 heads: dropped before simulation, with the reason.
    assert [r["status"] for r in rows] == ["dropped", "dropped", "ok", "ok"]
    assert "tp=3 does not divide the 32 attention heads" in rows[0]["reason"]
    assert all(r["binding"] in ("rollout", "training", "weight_sync") for r in rows[2:])
    assert any(r["pareto"] == "True" for r in rows[2:])


def test_a_space_whose_every_point_is_dropped_is_an_error(tmp_path):
    # tp=3 does not divide Qwen3-8B's 32 heads: both points are dropped before simulation; the sweep
    # exits 2 with the reason and writes nothing (an empty front is not a result)
    spec = {"name": "t", "base": {"set": _set(BASE)}, "seed": 1, "top_k": 0,
            "axes": [{"name": "inst", "key": "deployment.rollout.instances", "grid": [1, 2]}],
            "derived": [{"name": "tp", "key": "deployment.rollout.tp", "expr": "3"}]}
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(spec))
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["--space", str(p), "--engine", "simpy", "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert "none of the 2 points could be simulated" in r.output and "tp=3 does not divide" in r.output
    assert not out.exists()


def test_a_point_whose_workload_does_not_build_is_dropped_with_the_generator_reason(tmp_path):
    # max_completion=-5 is the point's own override: that point is dropped with the generator's message, the
    # other runs (before, the generator's ValueError stopped the whole sweep)
    spec = {"name": "t", "base": {"set": _set(BASE)}, "seed": 1, "top_k": 0,
            "axes": [{"name": "mc", "key": "workload.knobs.max_completion", "grid": [-5, 256]}]}
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(spec))
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["--space", str(p), "--engine", "simpy", "--jobs", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((out / "points.csv").open()))
    assert [r["status"] for r in rows] == ["dropped", "ok"]
    assert rows[0]["reason"] == "workload: rl_math: knob max_completion=-5 must be >= 1"


def test_bad_input_is_clear(tmp_path):
    r = CliRunner().invoke(main, ["--grid", "oops", "-o", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "KEY=V1,V2" in r.output
    r = CliRunner().invoke(main, ["--grid", "run.seed=1", "--grid", "run.seed=2", "-o", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "run_seed' repeated" in r.output
    p = tmp_path / "bad.yaml"
    p.write_text("axes:\n  - {name: a, grid: [1], stride: 2}\n")
    r = CliRunner().invoke(main, ["--space", str(p), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "axes[0].stride: unknown key" in r.output
    try:
        import ray  # noqa: F401
    except ImportError:
        r = CliRunner().invoke(main, [*BASE, "--grid", "run.seed=1", "--engine", "fast", "--ray", "auto",
                                      "-o", str(tmp_path / "y.csv")])
        assert r.exit_code == 2 and "ray" in r.output


def test_progress_is_quiet_off_a_terminal():
    assert Progress(quiet=False).bar is None  # pytest's stderr is not a TTY
    with Progress(quiet=True) as p:
        p.task("x", 3)(1)  # a no-op tick


def test_an_axis_the_cost_model_ignores_is_reported(tmp_path):
    # Under the constant training family the ZeRO stage has no effect (the model has no layout): say so.
    r = CliRunner().invoke(main, [*BASE, "cost.training_knobs.a=0.1", "policy.max_staleness=0",
                                  "--grid", "deployment.training.zero_stage=1,2",
                                  "--grid", "deployment.rollout.instances=1,2",
                                  "--engine", "simpy", "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "change no simulated outcome" in r.output and "deployment_training_zero_stage" in r.output
    assert "deployment_rollout_instances" not in r.output.split("change no simulated outcome")[1].splitlines()[0]


def test_the_shared_cli_style_h_q_json(tmp_path):
    import json

    assert CliRunner().invoke(main, ["-h"]).exit_code == 0
    r = CliRunner().invoke(main, [*BASE, "--grid", "deployment.rollout.instances=1,2", "--engine", "simpy",
                                  "--json", "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["points"], out["simulated"], out["engines"]) == (2, 2, {"simpy": 2})
    r = CliRunner().invoke(main, [*BASE, "--grid", "deployment.rollout.instances=1,2", "--engine", "simpy",
                                  "-q", "-o", str(tmp_path / "q")])
    assert r.exit_code == 0 and "top " not in r.output  # -q: no table
