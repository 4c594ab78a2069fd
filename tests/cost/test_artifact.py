"""Artifacts: round trip through a file, every corruption rejected with file and key, loaders."""

import json

import pytest

from simrl.config import load_config
from simrl.cost.artifact import ArtifactError, read_artifact, write_artifact
from simrl.cost.base import RolloutCost, TrainingCost
from simrl.cost.build import load_artifact
from simrl.cost.fit import fit_artifact
from simrl.cost.observations import make
from simrl.cost.registry import read


def load_rollout_artifact(path, cfg):
    return load_artifact("rollout", str(path), cfg)[0]


def load_training_artifact(path, cfg):
    return load_artifact("training", str(path), cfg)[0]

PROV = {"hardware": "H100", "source": "synthetic", "date": "2026-01-01"}


@pytest.fixture
def psrl_art():
    obs = [make("iteration", 1e-3 + 1e-5 * b + 1e-9 * kv + 2e-5 * p, "s",
                {"batch_size": b, "kv_tokens": kv, "prefill_tokens": p}, PROV)
           for b, kv, p in [(1, 100, 0), (8, 5000, 0), (64, 90000, 0), (0, 0, 512), (16, 20000, 1024), (128, 100_000, 0)]]
    return fit_artifact("psrl", obs, model="qwen3-8b", tp=1)


def test_round_trip(tmp_path, psrl_art):
    p = tmp_path / "a.json"
    write_artifact(p, psrl_art)
    assert read_artifact(p) == json.loads(json.dumps(psrl_art))
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".artifact-")]
    model = load_rollout_artifact(p, load_config())
    assert isinstance(model, RolloutCost)
    assert model.iteration_time(8, 5000, 0) == pytest.approx(1e-3 + 8e-5 + 5e-6, rel=1e-6)


@pytest.mark.parametrize("mutate, needle", [
    (lambda a: a.update(schema="simrl.cost-artifact.v0"), "schema"),
    (lambda a: a.pop("validity_domain"), "missing key 'validity_domain'"),
    (lambda a: a.pop("provenance"), "missing key 'provenance'"),
    (lambda a: a["coefficients"].update(a_s=float("nan")), "coefficients.a_s: NaN is not a finite"),
    (lambda a: a["coefficients"].update(b_s_per_seq=-1.0), "coefficients.b_s_per_seq: negative"),
    (lambda a: a.update(family="nope"), "family"),
    (lambda a: a.update(family="linear"), "family: 'linear' is not a fitted rollout family"),
    (lambda a: a["coefficients"].pop("c_s_per_kv_token"), "coefficients.c_s_per_kv_token: missing"),
    (lambda a: a["coefficients"].update(a_s="fast"), "coefficients.a_s: expected a number, got str"),
    (lambda a: a["coefficients"].update(a_s=[1.0]), "coefficients.a_s: expected a number, got list"),
    (lambda a: a.update(fitted_for=[1]), "fitted_for: expected an object"),
    (lambda a: a["validity_domain"].update(kv_tokens=[5, 1]), "validity_domain.kv_tokens"),
])
def test_corruptions_are_rejected_with_file_and_key(tmp_path, psrl_art, mutate, needle):
    mutate(psrl_art)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(psrl_art).replace("NaN", "NaN"))
    with pytest.raises(ArtifactError) as exc:
        read(p)  # the format (read_artifact), then the family and its coefficients
    assert str(p) in str(exc.value) and needle in str(exc.value)


def test_not_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_artifact(p)


def test_layout_specific_fit_refuses_another_model(tmp_path, psrl_art):
    p = tmp_path / "a.json"
    write_artifact(p, psrl_art)
    with pytest.raises(ArtifactError, match="fitted_for.model"):
        load_rollout_artifact(p, load_config(overrides=["deployment.model=llama-3.1-8b"]))
    with pytest.raises(ArtifactError, match="target"):
        load_training_artifact(p, load_config())


def test_bundled_artifacts_load_for_the_default_config():
    from importlib.resources import files

    data = files("simrl.cost") / "data"
    cfg = load_config()
    for name in ("rollout-composed-h100.json", "rollout-roofline-h100.json"):
        model = load_rollout_artifact(str(data / name), cfg)
        assert isinstance(model, RolloutCost)
        assert 1e-3 < model.iteration_time(32, 32 * 2000, 0) < 0.1
        assert model.kv_capacity_tokens() > 100_000
    art = read_artifact(str(data / "rollout-composed-h100.json"))
    assert "real" in art["provenance"]["label"]
    assert isinstance(load_training_artifact(str(data / "training-analytical-h100.json"), cfg), TrainingCost)
