"""The sweep driver (`engine.run_params`): sorting by expected work, equal batches, sharding over
local devices. None of them may change a result: every field is compared byte for byte."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from simhelpers import linear_costs, random_workload  # noqa: E402

from simrl_fast.grid import lower_grid  # noqa: E402

BASE = ["deployment.rollout.max_num_batched_tokens=0", "deployment.rollout.prefix_caching=false",
        "deployment.rollout.kv_policy=reserve", "policy=bounded_async", "policy.batch_groups=2",
        "run.training_steps=2"]
COLS = {  # 10 points; staleness (the expected work) deliberately out of order
    "policy.max_staleness": [2, 0, 1, 2, 0, 1, 0, 2, 1, 0],
    "deployment.rollout.instances": [1, 2, 3, 2, 1, 3, 3, 1, 2, 2],
    "policy.inflight_rule": ["continue", "drain", "keep_pause", "abort_resume", "continue"] * 2,
    "deployment.rollout.max_num_seqs": [4, 8, 4, 8, 4, 8, 4, 8, 4, 8],
    "cost.rollout.a": [0.004, 0.006, 0.005, 0.007, 0.004, 0.006, 0.005, 0.007, 0.0045, 0.0065],
}


def grid():
    wl = random_workload(groups=6, n=2, seed=3, completion=(5, 60))
    return lower_grid(wl, linear_costs(kv_tokens=50_000), COLS, base=BASE)


def dump(res) -> dict:
    return {f: np.asarray(getattr(res, f)) for f in res._fields}


def assert_identical(a: dict, b: dict) -> None:
    for f in a:
        assert a[f].dtype == b[f].dtype and a[f].shape == b[f].shape, f
        assert a[f].tobytes() == b[f].tobytes(), f  # byte-identical (NaN where NaN)


def test_expected_work_and_order():
    """group_bound x group size, by hand: bounded_async with max_staleness s admits while
    accepted + running < (s + 1) * batch per version, i.e. budget base (s + 1) * 2 and 2 more per
    version: bound = ceil(2(s + 1) + 2 * (steps - 1)) + batch = 2s + 2 + 2 + 2 = 2s + 6 groups,
    x 2 calls: s = 0 -> 12, 1 -> 16, 2 -> 20."""
    from simrl_fast.engine import expected_work, work_order

    _, params, _ = grid()
    work = expected_work(params, 2)
    assert work.tolist() == [2 * (2 * s + 6) for s in COLS["policy.max_staleness"]]
    order = work_order(params, 2)
    assert sorted(order.tolist()) == list(range(10))
    assert np.all(np.diff(work[order]) >= 0)
    # ties: by instances, then max_num_seqs (s = 0: points 1, 4, 6, 9 with instances 2, 1, 3, 2)
    assert order[:4].tolist() == [4, 1, 9, 6]


def test_sorted_and_batched_runs_are_identical():
    from simrl_fast.engine import TRACE_COUNT, batch_size, run_params

    static, params, wa = grid()
    ref = dump(run_params(params, wa, chunk=10, sort=False, static=static, devices=1))
    before = TRACE_COUNT["run"]
    seen = []
    got = dump(run_params(params, wa, chunk=4, static=static, devices=1, on_chunk=seen.append))
    assert seen == [4, 4, 2]  # ceil(10 / 4) = 3 batches of ceil(10 / 3) = 4 (the last padded by two)
    assert TRACE_COUNT["run"] == before + 1  # one batch size, one compile
    assert_identical(ref, got)
    assert ref["steps_done"].tolist() == [2] * 10
    assert batch_size(1008, 1000) == 504 and batch_size(10, 4) == 4 and batch_size(7, 4, ndev=3) == 6


def test_sharded_over_two_host_devices_is_identical(tmp_path):
    """XLA_FLAGS=--xla_force_host_platform_device_count=2 in a subprocess: two CPU devices, each
    running half of every batch (shard_map); an odd batch is padded to a multiple of two."""
    from simrl_fast.engine import run_params

    static, params, wa = grid()
    ref = dump(run_params(params, wa, chunk=10, sort=False, static=static, devices=1))
    script = tmp_path / "sharded.py"
    script.write_text(
        "import json, sys\nimport numpy as np\nimport jax\n"
        "sys.path[:0] = [sys.argv[2], sys.argv[3]]\n"
        "from test_driver import grid, dump\n"
        "from simrl_fast.engine import LOADED, device_count, run_params\n"
        "names = []\n"
        "jax.monitoring.register_event_duration_secs_listener(lambda e, d, fun_name='', **k: names.append(fun_name)"
        " if e == '/jax/core/compile/backend_compile_duration' else None)\n"
        "static, params, wa = grid()\n"
        "res = dump(run_params(params, wa, chunk=5, static=static))\n"  # 2 batches of 5: odd, padded to 6
        "np.savez(sys.argv[1], **res)\n"
        "print(json.dumps({'devices': device_count(), 'n': len(jax.local_devices()), 'compiles': names,"
        " 'loaded': LOADED['sharded']}))\n")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    env.pop("SIMRL_FAST_DEVICES", None)
    here = Path(__file__).resolve().parent
    out = tmp_path / "res.npz"
    proc = subprocess.run([sys.executable, str(script), str(out), str(here), str(here.parent)], env=env, capture_output=True,
                          text=True, timeout=600, cwd=str(here.parents[1]),
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (info["devices"], info["n"]) == (2, 2)
    # one compile per program: the sharded chunk is not compiled again for the state it returned itself
    # (it was, before the chunk's jit named its input and output shardings); or, from the second run on,
    # none: the compiled program is loaded from the program cache (`engine.program_dir`)
    assert info["compiles"].count("jit(body)") + info["loaded"] == 1, info
    got = dict(np.load(out))
    assert_identical(ref, got)


def test_device_count_env(monkeypatch):
    from simrl_fast.engine import device_count

    monkeypatch.setenv("SIMRL_FAST_DEVICES", "1")
    assert device_count() == 1
    monkeypatch.setenv("SIMRL_FAST_DEVICES", "two")
    with pytest.raises(ValueError, match="SIMRL_FAST_DEVICES='two': expected a whole number >= 1"):
        device_count()


def test_program_cache_stores_loads_and_replaces_a_bad_file(tmp_path, monkeypatch):
    """`engine._program`: compiled once and stored; a fresh process (the in-process table cleared)
    loads it without building it and gets the same bytes; a file that does not load is removed and
    the program compiled again (stored again only when XLA compiled it: not when jax's own cache
    served it, whose executables do not serialise whole); another key (shapes) is another file."""
    import time

    import jax
    import jax.numpy as jnp

    from simrl_fast import engine

    monkeypatch.setattr(engine, "_CACHE", str(tmp_path))
    monkeypatch.setattr(engine, "_PROGRAMS", {})
    k = float(time.time_ns() % 1_000_003 + 2)  # a program jax's persistent cache has not seen
    f = jax.jit(lambda x: jnp.cumsum(x * k + 1.0))
    builds = []

    def get(arg):
        return engine._program("t", engine._shapes(arg), lambda: builds.append(1) or f.trace(arg), jax.devices()[:1])

    x = jnp.arange(5.0)
    want = np.cumsum(np.arange(5.0) * k + 1.0)
    loaded0 = engine.LOADED["t"]
    assert np.asarray(get(x)(x)).tobytes() == want.tobytes()
    assert len(builds) == 1 and engine.LOADED["t"] == loaded0
    (path,) = list((tmp_path / "simrl-programs").iterdir())
    assert path.name.startswith("t-") and path.suffix == ".bin"
    engine._PROGRAMS.clear()
    assert np.asarray(get(x)(x)).tobytes() == want.tobytes()
    assert len(builds) == 1 and engine.LOADED["t"] == loaded0 + 1  # loaded, not built
    engine._PROGRAMS.clear()
    path.write_bytes(b"not a program")
    assert np.asarray(get(x)(x)).tobytes() == want.tobytes()
    assert len(builds) == 2
    # removed, then stored again unless jax's persistent cache served the compile (in one process jax
    # reuses its own fresh executable, which is stored)
    assert not path.exists() or path.stat().st_size > 100
    engine._PROGRAMS.clear()
    get(jnp.arange(6.0))
    assert len(builds) == 3 and len(list((tmp_path / "simrl-programs").iterdir())) == 1 + path.exists()
