"""Fitted cost artifacts on the fast path: a fitted linear-form (psrl) artifact and
``deployment.rollout.tp`` change the JAX engine's results exactly as they change SimPy's, and a
model fitted for another layout or GPU is rejected by name, never ignored.

The lowering checks need no jax; the differential test does (one small compile).
"""

import pytest
from diffcases import BASE, Case, compare, run_fast
from simhelpers import random_workload

from simrl.config import load_config
from simrl.cost.artifact import ArtifactError, write_artifact
from simrl.cost.build import build_costs
from simrl.cost.fit import fit_artifact
from simrl.cost.observations import make
from simrl_fast.lowering import FastPathUnsupported, lower

PROV = {"hardware": "H100", "source": "synthetic telemetry", "date": "2026-01-01"}
# Per-iteration seconds a + b*batch + c*kv + d*prefill of one model at tp=1 and at tp=2 (the
# tp=2 engine splits the GEMMs and the KV reads over two GPUs, so every term is smaller).
COEFS = {1: (4e-3, 2e-5, 1e-8, 5e-5), 2: (3e-3, 1.2e-5, 6e-9, 3e-5)}
COMMON = [*BASE, "run.training_steps=3", "policy=bounded_async", "policy.batch_groups=2", "policy.max_staleness=1",
          "policy.inflight_rule=keep_pause", "deployment.rollout.instances=2", "cost.training=constant",
          "cost.training_knobs.a=2.0", "cost.weight_sync=fixed", "cost.weight_sync_knobs.publish_s=0.5"]


def psrl_artifact(tmp_path, tp: int) -> str:
    a, b, c, d = COEFS[tp]
    obs = [make("iteration", a + b * bs + c * kv + d * p, "s", {"batch_size": bs, "kv_tokens": kv, "prefill_tokens": p},
                PROV) for bs in (0, 1, 16, 256) for kv in (0, 10_000, 2_000_000) for p in (0, 300, 10_000)]
    path = tmp_path / f"psrl-tp{tp}.json"
    write_artifact(path, fit_artifact("psrl", obs, model="qwen3-8b", gpu="H100", tp=tp))
    return str(path)


def linear_training_artifact(tmp_path) -> str:
    """A fitted training ``linear`` artifact: 1.5 s + 2e-4 s per trained token (no memory fit)."""
    obs = [make("training_step", 1.5 + 2e-4 * n * s, "s",
                {"seq_lens": [s] * n, "tp": 1, "pp": 1, "dp": 8, "model": "qwen3-8b"}, PROV)
           for n in (1, 8, 32) for s in (20, 500, 2000)]
    path = tmp_path / "training-linear.json"
    write_artifact(path, fit_artifact("linear", obs, model="qwen3-8b"))
    return str(path)


@pytest.fixture
def artifacts(tmp_path):
    return {**{tp: psrl_artifact(tmp_path, tp) for tp in (1, 2)}, "training": linear_training_artifact(tmp_path)}


def case(artifact: str, tp: int, wl, *extra: str) -> Case:
    overrides = [*COMMON, f"deployment.rollout.tp={tp}", f"cost.rollout={artifact}", *extra]
    return Case(overrides, wl, build_costs(load_config(overrides=overrides)), f"psrl artifact, tp={tp} {extra}")


def test_fitted_artifact_and_tp_change_fast_results_as_they_change_simpy(artifacts):
    pytest.importorskip("jax")
    wl = random_workload(groups=10, n=4, seed=5, prompt=(50, 300), completion=(5, 200))
    cases = [case(artifacts[tp], tp, wl) for tp in (1, 2)]
    # the fitted training artifact (a + per_token * tokens) lowers too: same rollout as case 0
    cases.append(case(artifacts[1], 1, wl, f"cost.training={artifacts['training']}", "cost.training_knobs={}"))
    for c in cases:
        c.run_simpy()
    res = run_fast(cases)
    for m, c in enumerate(cases):
        worst = compare(c, res, m)
        assert worst["time"] < 1e-9 and worst["call"] < 1e-9
    simpy_end = [c.report.steps[-1].publish_end for c in cases]
    fast_end = [float(res.publish_end[m, len(c.report.steps) - 1]) for m, c in enumerate(cases)]
    assert simpy_end[1] < simpy_end[0] and fast_end[1] < fast_end[0]  # tp=2 iterates faster in both
    s1 = cases[2].report.steps[0]  # step 1 trains 2 groups x 4 samples: 1.5 s + 2e-4 s per token
    tokens = s1.trained_prompt_tokens + s1.trained_completion_tokens
    assert s1.train_end - s1.train_start == pytest.approx(1.5 + 2e-4 * tokens, rel=1e-9)


def test_another_tp_gpu_or_model_is_rejected_by_both_engines(artifacts):
    wl = random_workload(groups=4, n=2, seed=1, prompt=(50, 100), completion=(5, 50))
    tp1 = [*COMMON, f"cost.rollout={artifacts[1]}"]
    costs = build_costs(load_config(overrides=tp1))
    lower(load_config(overrides=tp1), wl, costs)  # its own layout lowers
    with pytest.raises(ArtifactError, match="fitted_for.tp=1 but the run uses deployment.rollout.tp=2"):
        build_costs(load_config(overrides=[*tp1, "deployment.rollout.tp=2"]))
    for override, needle in [("deployment.rollout.tp=2", "deployment.rollout.tp=2 with a rollout cost model fitted "
                                                         "for tp=1"),
                             ("deployment.rollout.gpu=H200", "deployment.rollout.gpu=H200 with a rollout cost model "
                                                             "fitted for gpu=H100"),
                             ("deployment.model=llama-3.1-8b", "deployment.model=llama-3.1-8b"),
                             ("cost.strict=true", "cost.strict=true with a fitted rollout validity domain")]:
        with pytest.raises(FastPathUnsupported) as exc:
            lower(load_config(overrides=[*tp1, override]), wl, costs)  # models built for tp=1, H100
        assert needle in str(exc.value), str(exc.value)


def test_linear_knobs_declare_their_layout_on_the_fast_path():
    wl = random_workload(groups=4, n=2, seed=1, prompt=(50, 100), completion=(5, 50))
    base = [*COMMON, "cost.rollout=linear"]
    costs = build_costs(load_config(overrides=[*base, "deployment.rollout.tp=2", "cost.rollout_knobs.fitted_for.tp=2"]))
    _, params, _ = lower(load_config(overrides=[*base, "deployment.rollout.tp=2",
                                                "cost.rollout_knobs.fitted_for.tp=2"]), wl, costs)
    assert float(params.a) == 0.005  # the LinearRollout default a
    with pytest.raises(FastPathUnsupported, match="deployment.rollout.tp=4"):
        lower(load_config(overrides=[*base, "deployment.rollout.tp=4", "cost.rollout_knobs.fitted_for.tp=2"]), wl,
              costs)
