"""srl-sweep's setup: each distinct combination of a space's non-knob overrides is loaded once and the
cost knobs are set per point (`runner.PointLoader`); the configurations, the errors and the written
files are the same as loading every point whole."""

import pytest
import yaml
from click.testing import CliRunner
from simhelpers import SWEEP_BASE

from simrl.config import ConfigBase, ConfigError, load_config
from simrl_explore import runner
from simrl_explore.cli_sweep import main
from simrl_explore.runner import PointLoader, prepare
from simrl_explore.space import load_space

BASE = SWEEP_BASE  # a small fast-path-supported sweep base (tests/simhelpers.py)
AXES = [{"name": "inst", "key": "deployment.rollout.instances", "grid": [1, 2]},
        {"name": "rule", "key": "policy.inflight_rule", "grid": ["continue", "drain"]},
        {"name": "a", "key": "cost.rollout_knobs.a", "random": {"low": 0.004, "high": 0.008}},
        {"name": "b", "key": "cost.rollout_knobs.b", "random": {"low": 1.0e-5, "high": 4.0e-5}},
        {"name": "train_a", "key": "cost.training_knobs.a", "random": {"low": 0.5, "high": 2}},
        {"name": "publish_s", "key": "cost.weight_sync_knobs.publish_s", "random": {"low": 0.5, "high": 2}}]


def _space(tmp_path, **more):
    spec = {"name": "t", "base": {"set": BASE}, "axes": AXES, "samples": 3, "seed": 4, "top_k": 0, "checks": ["kv"],
            "objectives": ["step_time", "trained_tokens_per_s"], "surrogate": "off", **more}
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def test_points_equal_their_whole_configuration(tmp_path):
    space = load_space(str(_space(tmp_path)))
    base = ConfigBase(space.base_config, list(space.base_set))
    loader = PointLoader(base.load)
    points = space.points()
    for pt in points:
        ovs = [*pt.overrides, "run.telemetry=false"]
        got = loader(ovs)
        want = load_config(None, [*space.base_set, *ovs])
        assert got == want, pt.index
        assert got.cost.rollout_knobs["a"] == pt.variables["a"]
    # 2 x 2 grid rows: four skeletons loaded for the 12 points
    assert len(points) == 12 and len(loader.skeletons) == 4
    # each point owns its knob dicts (a later point's values do not leak into an earlier one)
    cfgs = [loader([*pt.overrides]) for pt in points]
    assert len({id(c.cost.rollout_knobs) for c in cfgs}) == 12
    assert [c.cost.rollout_knobs["a"] for c in cfgs] == [pt.variables["a"] for pt in points]


def test_a_bad_knob_value_is_the_error_a_whole_load_gives():
    base = ConfigBase(None, [f"{k}={v}" for k, v in (("cost.rollout", "linear"), ("cost.weight_sync", "fixed"))])
    loader = PointLoader(base.load)
    for ovs in (["deployment.rollout.instances=2", "cost.rollout_knobs.a=.inf"],
                ["cost.rollout_knobs.a=[1, .nan]"],
                ["deployment.rollout.instances=0", "cost.rollout_knobs.a=1"]):
        with pytest.raises(ConfigError) as want:
            base.load(ovs)
        with pytest.raises(ConfigError) as got:
            loader(ovs)
        assert str(got.value) == str(want.value) and str(got.value)
    # a knob key another override also sets (the whole dict, or a nested key): loaded whole
    ovs = ["cost.rollout_knobs={a: 1, b: 2}", "cost.rollout_knobs.a=3"]
    assert loader(ovs) == base.load(ovs) and loader(ovs).cost.rollout_knobs == {"a": 3, "b": 2}
    assert (ovs[0],) not in loader.skeletons and list(loader.skeletons) == [("deployment.rollout.instances=2",), ()]


def test_prepare_rows_and_files_are_those_of_whole_loads(tmp_path, monkeypatch):
    pytest.importorskip("jax")
    p = _space(tmp_path)
    space = load_space(str(p))
    new = prepare(space, space.points())[0]
    outs = []
    for whole in (False, True):
        if whole:  # the path before: every point loaded whole
            monkeypatch.setattr(runner.PointLoader, "__call__", lambda self, ovs: self.load(ovs))
            old = prepare(space, space.points())[0]
            assert [(j.cfg, j.workload_key, j.gpus, j.row) for j in old] == \
                [(j.cfg, j.workload_key, j.gpus, j.row) for j in new]
        out = tmp_path / f"o{int(whole)}"
        r = CliRunner().invoke(main, ["--space", str(p), "-q", "-o", str(out)])
        assert r.exit_code == 0, r.output
        outs.append(out)
    names = sorted(f.name for f in outs[0].iterdir())
    assert "points.csv" in names and names == sorted(f.name for f in outs[1].iterdir())
    for f in names:
        if f != "timing.json":
            assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f


def test_points_lowered_like_their_skeleton_equal_their_own_lowering(tmp_path):
    """Cost knobs drawn per point (groups of one cost object each): every Params row, engine and
    fallback reason is that of `lower` point by point, for every lowering mode of `route`; a draw
    the fast path refuses (a + b = 0 in the linear rollout form) falls back with `lower`'s reason."""
    pytest.importorskip("jax")
    from test_sweep_lowering import _check_against_reference

    axes = [*AXES, {"name": "seqs", "key": "deployment.rollout.max_num_seqs", "grid": [2, 4]},
            {"name": "kv", "key": "deployment.rollout.kv_capacity_tokens", "grid": [60, 100000]}]
    space = load_space(str(_space(tmp_path, axes=axes, checks=[])))
    points = space.points()
    ref = _check_against_reference(space, points)
    assert sorted(e for e, _, _ in ref.values()) == ["fast"] * 24 + ["simpy"] * 24
    # a skeleton whose third point's rollout form is refused: a = b = 0
    zero = {"name": "zero", "key": "cost.rollout_knobs.c", "random": {"low": 1e-9, "high": 2e-9}}
    spec_axes = [AXES[0], {"linked": [{"name": "a", "key": "cost.rollout_knobs.a", "values": [0.004, 0.005, 0.0]},
                                      {"name": "b", "key": "cost.rollout_knobs.b", "values": [1e-5, 2e-5, 0.0]}]},
                 zero]
    space = load_space(str(_space(tmp_path, axes=spec_axes, samples=2)))
    ref = _check_against_reference(space, space.points())
    simpy = [v for e, v, _ in ref.values() if e == "simpy"]
    assert len(simpy) == 4 and all("a + b = 0" in v for v in simpy)


def test_lower_like_is_lower_for_another_draw(tmp_path):
    pytest.importorskip("jax")
    from simrl_fast.grid import lower_like, same_params
    from simrl_fast.lowering import lower, lower_workload

    space = load_space(str(_space(tmp_path)))
    jobs, workloads, cache = prepare(space, space.points())
    first, other = jobs[0], jobs[2]  # inst=1, rule=continue: draws 0 and 2
    assert first.cfg.deployment is other.cfg.deployment and first.cfg.cost != other.cfg.cost
    w = workloads[first.workload_key]
    wa = lower_workload(w)
    row = lower(first.cfg, w, cache.costs(first.cfg), wa=wa)[1]
    want = lower(other.cfg, w, cache.costs(other.cfg), wa=wa)[1]
    got = lower_like(row, other.cfg, w, cache.costs(other.cfg), wa)
    assert same_params(got, want) and not same_params(row, want)
    assert float(got.a) == other.cfg.cost.rollout_knobs["a"] and float(got.sync_s) == pytest.approx(
        other.cfg.cost.weight_sync_knobs["publish_s"])


def _table_text_before(rows, columns):
    """`output.table_text` as it was: csv.DictWriter of `_fmt` of each cell, row by row."""
    import csv
    import io

    from simrl_explore.output import _fmt

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: _fmt(r.get(c, "")) for c in columns})
    return buf.getvalue()


def test_the_columnar_table_is_the_row_by_row_one():
    import math
    import random

    import numpy as np

    from simrl_explore.output import table_text

    rng = random.Random(3)
    rows = []
    for i in range(400):
        x = rng.uniform(-1, 1) * 10 ** rng.randint(-14, 20)
        rows.append({"point": i, "x": x, "np": np.float64(x / 3), "gone": x if i % 3 else "",
                     "nan": math.nan if i % 5 == 0 else x * 7, "flag": bool(i % 2), "n": rng.randint(-10**12, 10**12),
                     "mixed": [1, 2.5, "a,b", 'say "hi"', None, "line\nbreak", True][i % 7],
                     "reason": "memory: training peak 81.2 GiB per GPU > 80 GiB (8 GPUs, tp=2)" if i % 4 else ""})
    rows.append({"point": 400, "x": math.inf, "np": -math.inf, "gone": 0.0, "nan": -0.0, "flag": False,
                 "n": 2**70, "mixed": 1e16, "reason": "ok"})
    cols = ["point", "x", "np", "gone", "nan", "flag", "n", "mixed", "reason", "absent"]
    assert table_text(rows, cols) == _table_text_before(rows, cols)
    assert table_text(rows[:0], cols) == _table_text_before(rows[:0], cols)
    one = [{"r": ""}, {"r": "x"}, {"r": 1.5}]
    assert table_text(one, ["r"]) == _table_text_before(one, ["r"])


def test_parquet_column_by_column_is_the_row_by_row_file(tmp_path):
    import math

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from simrl_explore.output import write_parquet

    def before(rows, columns):  # write_parquet's tables as they were built, row by row
        cols = {c: [] for c in columns}
        for r in rows:
            for c in columns:
                v = r.get(c)
                cols[c].append(None if v == "" or (isinstance(v, float) and math.isnan(v)) else v)
        arrays = {}
        for c, vals in cols.items():
            try:
                arrays[c] = pa.array(vals)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                arrays[c] = pa.array([None if v is None else str(v) for v in vals])
        buf = pa.BufferOutputStream()
        pq.write_table(pa.table(arrays), buf, compression="zstd")
        return buf.getvalue().to_pybytes()

    rows = [{"point": i, "x": [0.5, math.nan, 2.0][i % 3], "s": ["a", "", "b"][i % 3], "m": [1, "x", 2.5][i % 3],
             "ok": bool(i % 2)} for i in range(30)]
    cols = ["point", "x", "s", "m", "ok", "absent"]
    assert write_parquet(str(tmp_path / "a.parquet"), rows, cols)
    write_parquet(str(tmp_path / "b.parquet"), rows, cols)
    got = (tmp_path / "a.parquet").read_bytes()
    assert got == (tmp_path / "b.parquet").read_bytes() == before(rows, cols)
    assert pq.read_table(tmp_path / "a.parquet").column("x").null_count == 10


def _inert_before(res):
    """`SweepResult.inert_axes` as it was: dicts of the other axes' values, row by row."""
    names = [a.name for a in res.space.axes]
    cols = ["step_time_s", "trained_tokens_per_s", "staleness_mean"]
    out = []
    for a in names:
        groups = {}
        for r in res.ok():
            key = tuple(r.get(n) for n in names if n != a)
            groups.setdefault(key, {})[r.get(a)] = tuple(round(float(r[c]), 9) for c in cols)
        compared = [g for g in groups.values() if len(g) > 1]
        if compared and all(len(set(g.values())) == 1 for g in compared):
            out.append(a)
    return out


def test_inert_axes_by_arrays_are_those_of_the_dicts(tmp_path):
    import random
    from collections import Counter

    from simrl_explore.sweep import SweepResult

    space = load_space(str(_space(tmp_path)))  # axes inst, rule, a, b, train_a, publish_s
    rng = random.Random(5)
    for trial in range(60):
        rows = []
        for i in range(rng.randint(0, 40)):
            v = {"inst": rng.choice([1, 2, 2.0, True]), "rule": rng.choice(["continue", "drain", None]),
                 "a": rng.choice([0.1, 0.2]), "b": rng.choice([1, 2, 3]), "train_a": 0.5,
                 "publish_s": rng.choice([1.0, 1.0 + 1e-12, 2.0])}
            inert = trial % 3 and rng.random() < 0.9
            t = 1.0 + (0 if inert else v["b"] * 0.25)
            rows.append({"point": i, **v, "status": rng.choice(["ok", "ok", "ok", "failed"]), "step_time_s": t,
                         "trained_tokens_per_s": 2.0 / t, "staleness_mean": 0.0})
        res = SweepResult(space=space, rows=rows, recheck=[], timings={}, engines=Counter(), fallbacks=Counter(),
                          dropped=Counter())
        assert res.inert_axes() == _inert_before(res), trial
