"""`srl-sweep`: grid expansion, both engines, fallback, atomic CSV/JSON, clear errors."""

import csv
import json

import pytest
from click.testing import CliRunner

from simrl.cli.sweep import main
from simrl_fast.sweep import expand_grid

BASE = ["cost.rollout=linear", "cost.training=constant", "cost.weight_sync=fixed",
        "cost.weight_sync_knobs.publish_s=1", "deployment.rollout.max_num_batched_tokens=0",
        "deployment.rollout.kv_policy=reserve", "deployment.rollout.prefix_caching=false", "router.active_cap=0",
        "policy=bounded_async", "policy.batch_groups=2", "policy.inflight_rule=keep_pause",
        "workload.groups=6", "workload.group_size=2", "run.training_steps=2",
        "workload.knobs.completion_knots=[[0,20],[1,80]]"]


def test_expand_grid_is_cartesian_and_checks_syntax():
    combos = expand_grid(["a=1"], ["b=1,2", "c=x,y,z"])
    assert len(combos) == 6 and combos[0] == ["a=1", "b=1", "c=x"] and combos[-1] == ["a=1", "b=2", "c=z"]
    with pytest.raises(ValueError, match="KEY=V1,V2"):
        expand_grid([], ["nokey"])


def test_simpy_engine_writes_one_row_per_configuration(tmp_path):
    out = tmp_path / "s.json"
    r = CliRunner().invoke(main, [*BASE, "--grid", "policy.max_staleness=0,1", "--engine", "simpy", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    assert [row["policy.max_staleness"] for row in rows] == ["0", "1"]
    assert all(row["engine"] == "simpy" and row["complete"] for row in rows)
    assert "configs/s" in r.output and "max_staleness" in r.output


def test_unsupported_configuration_errors_or_falls_back(tmp_path):
    out = tmp_path / "s.csv"
    args = [*BASE, "--grid", "deployment.rollout.kv_policy=on_demand", "-o", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "kv_policy=on_demand" in r.output and not out.exists()
    r = CliRunner().invoke(main, [*args, "--fallback", "simpy"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert rows[0]["engine"] == "simpy"


def test_fast_engine_rows_match_simpy_rows(tmp_path):
    pytest.importorskip("jax")
    rows = {}
    for engine in ("fast", "simpy"):
        out = tmp_path / f"{engine}.json"
        r = CliRunner().invoke(main, [*BASE, "--grid", "deployment.rollout.instances=1,2", "--engine", engine,
                                      "--quiet", "-o", str(out)])
        assert r.exit_code == 0, r.output
        rows[engine] = json.loads(out.read_text())
    for f, s in zip(rows["fast"], rows["simpy"], strict=True):
        assert f["engine"] == "fast" and f["makespan_s"] == pytest.approx(s["makespan_s"], rel=1e-9)
        assert f["staleness_max"] == s["staleness_max"]


def test_bad_grid_and_missing_ray_are_clear(tmp_path):
    r = CliRunner().invoke(main, ["--grid", "oops", "-o", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "KEY=V1,V2" in r.output
    try:
        import ray  # noqa: F401
    except ImportError:
        r = CliRunner().invoke(main, [*BASE, "--ray", "auto", "-o", str(tmp_path / "y.csv")])
        assert r.exit_code == 2 and "ray" in r.output


def test_a_chunk_smaller_than_the_grid_compiles_once(tmp_path):
    """The last, shorter chunk is padded and every chunk shares one Static: one trace per sweep."""
    pytest.importorskip("jax")
    from simrl_fast.engine import TRACE_COUNT

    out = tmp_path / "c.json"
    before = TRACE_COUNT["run"]
    r = CliRunner().invoke(main, [*BASE, "--grid", "deployment.rollout.instances=1,2,3", "--grid",
                                  "deployment.rollout.max_num_seqs=4,8", "--chunk", "4", "--quiet", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert TRACE_COUNT["run"] == before + 1
    rows = json.loads(out.read_text())
    assert len(rows) == 6 and all(row["complete"] for row in rows)
    assert [(row["deployment.rollout.instances"], row["deployment.rollout.max_num_seqs"]) for row in rows][-2:] == \
        [("3", "4"), ("3", "8")]


def test_direct_grid_values_equal_per_point_lowering(monkeypatch):
    """Axes in DIRECT are written into the lowered Params: the rows equal those of lowering every
    point, while only one configuration per value of the other axes is parsed (plus one per value)."""
    pytest.importorskip("jax")
    from simrl_fast import sweep

    grid = ["deployment.rollout.max_num_seqs=2,8", "run.training_steps=1,2", "policy.max_staleness=0,1",
            "router.name=least_requests,round_robin"]
    combos = sweep.expand_grid([*BASE[:-2], "workload.knobs.completion_knots=[[0,20],[1,80]]"], grid)
    assert set(sweep.direct_columns(None, combos)) == {len(combos[0]) - 4, len(combos[0]) - 3, len(combos[0]) - 1}
    loads = []
    real = sweep.load_config
    monkeypatch.setattr(sweep, "load_config", lambda path, ov: loads.append(ov) or real(path, ov))
    rows = sweep.run_sweep(None, combos, chunk=16)
    # 1 base + 2 + 2 + 2 values to qualify the three direct axes, then 2 staleness values.
    assert len(loads) == 1 + 6 + 2
    monkeypatch.setattr(sweep, "DIRECT", {})
    assert rows == sweep.run_sweep(None, combos, chunk=16)
    assert {r["training_steps"] for r in rows} == {1, 2} and all(r["complete"] for r in rows)


def test_compilation_cache_is_on_by_default_and_can_be_moved_or_turned_off(monkeypatch, tmp_path):
    pytest.importorskip("jax")
    import jax

    from simrl_fast import engine

    assert jax.config.jax_compilation_cache_dir == engine.cache_dir()
    monkeypatch.delenv("SIMRL_FAST_CACHE_DIR", raising=False)
    monkeypatch.delenv("SIMRL_FAST_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert engine.cache_dir() == str(tmp_path / "simrl" / "jax")
    monkeypatch.setenv("SIMRL_FAST_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert engine.cache_dir() == str(tmp_path / "elsewhere")
    monkeypatch.setenv("SIMRL_FAST_CACHE", "0")
    assert engine.cache_dir() is None
