"""Families as registered objects; layouts and GPUs a fit belongs to; cost provenance in the report."""

import ast
import json
import warnings
from importlib.resources import files
from pathlib import Path

import pytest

import simrl.cost
from simrl.config import load_config
from simrl.cost import registry
from simrl.cost.artifact import ArtifactError, write_artifact
from simrl.cost.base import CostModelError, CostModelWarning
from simrl.cost.build import build_costs, load_artifact
from simrl.cost.family import Family
from simrl.cost.fit import fit_artifact
from simrl.cost.fit_training import FittedTraining
from simrl.cost.linear import LinearForm, LinearRollout
from simrl.cost.observations import make
from simrl.cost.provenance import provenance_markdown

PROV = {"hardware": "H100", "source": "synthetic", "date": "2026-01-01"}
DATA = files("simrl.cost") / "data"
# a = 1 ms, b = 10 us per sequence, c = 1 ns per KV token, d = 20 us per prefilled token
TRUE = (1e-3, 1e-5, 1e-9, 2e-5)


def psrl_obs(coefs=TRUE):
    a, b, c, d = coefs
    pts = [(1, 100, 0), (8, 5000, 0), (64, 90000, 0), (0, 0, 512), (16, 20000, 1024), (128, 100000, 0), (256, 4000, 8)]
    return [make("iteration", a + b * bs + c * kv + d * p, "s",
                 {"batch_size": bs, "kv_tokens": kv, "prefill_tokens": p}, PROV) for bs, kv, p in pts]


@pytest.fixture
def psrl_path(tmp_path):
    p = tmp_path / "psrl-tp1.json"
    write_artifact(p, fit_artifact("psrl", psrl_obs(), files=["telemetry.jsonl"], model="qwen3-8b", gpu="H100", tp=1))
    return str(p)


def cfg(*overrides):
    return load_config(overrides=list(overrides))


# -- the registry ---------------------------------------------------------------------------------

def test_every_family_is_registered_once_and_implements_the_protocol():
    for target in ("rollout", "training", "weight_sync"):
        for name in registry.names(target):
            fam = registry.family(target, name)
            assert isinstance(fam, Family) and fam.target == target and fam.name == name
            assert fam.fittable or fam.from_knobs, f"{fam!r} can be neither fitted nor built"
    assert registry.fittable() == {
        "composed": "rollout", "distserve": "rollout", "psrl": "rollout", "roofline": "rollout",
        "fixed": "training", "linear": "training", "analytical": "training", "hydraulis": "training",
        "fsdp": "training", "fitted": "weight_sync"}
    assert registry.names("rollout", from_knobs=True) == ["linear", "roofline"]
    with pytest.raises(CostModelError, match="unknown rollout family 'nope'"):
        registry.family("rollout", "nope")


def _imports(path: Path) -> set[str]:
    """Every simrl.cost module a file imports, including function-local imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("simrl.cost"):
            out |= {f"{node.module}.{a.name}" if node.module == "simrl.cost" else node.module for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("simrl.cost")}
    return out


def test_simrl_cost_has_no_import_circle_and_artifact_imports_no_fitter():
    pkg = Path(simrl.cost.__file__).parent
    graph = {f"simrl.cost.{p.stem}": _imports(p) for p in pkg.glob("*.py") if p.stem != "__init__"}
    assert _imports(pkg / "artifact.py") <= {"simrl.cost.base"}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for dep in graph.get(m, ()):
            assert state.get(dep) != 1, f"import circle: {' -> '.join([*path, dep])}"
            if dep not in state:
                visit(dep, [*path, dep])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


# -- artifacts: coefficients, layout and GPU --------------------------------------------------------

def test_psrl_builds_the_one_linear_rollout_with_its_domain_and_layout(psrl_path):
    model, _ = load_artifact("rollout", psrl_path, cfg())
    assert type(model) is LinearRollout
    form = model.linear_coefficients()
    assert isinstance(form, LinearForm) and form.bounded_domain
    assert (form.a, form.b, form.c, form.p) == pytest.approx(TRUE, rel=1e-6)
    assert form.fitted_for == {"model": "qwen3-8b", "gpu": "H100", "tp": 1}
    # 1e-3 + 10 * 1e-5 + 2000 * 1e-9 + 100 * 2e-5 = 1e-3 + 1e-4 + 2e-6 + 2e-3 = 3.102e-3 s
    assert model.iteration_time(10, 2000, 100) == pytest.approx(3.102e-3, rel=1e-6)
    assert model.domain.ranges["batch_size"] == (0.0, 256.0)


def test_another_tp_or_model_is_an_error_naming_both_keys(psrl_path):
    with pytest.raises(ArtifactError) as exc:
        build_costs(cfg(f"cost.rollout={psrl_path}", "deployment.rollout.tp=2"))
    assert psrl_path in str(exc.value) and "fitted_for.tp=1" in str(exc.value)
    assert "deployment.rollout.tp=2" in str(exc.value)
    with pytest.raises(ArtifactError, match="fitted_for.model"):
        build_costs(cfg(f"cost.rollout={psrl_path}", "deployment.model=llama-3.1-8b"))


@pytest.mark.parametrize("name", ["rollout-roofline-h100.json", "rollout-composed-h100.json"])
def test_a_fit_from_another_gpu_warns_and_strict_refuses(name):
    path = str(DATA / name)
    with pytest.warns(CostModelWarning) as rec:
        costs = build_costs(cfg(f"cost.rollout={path}", "deployment.rollout.gpu=H200"))
    msg = str(rec[0].message)
    assert path in msg and "fitted on H100" in msg and "deployment.rollout.gpu=H200" in msg
    row = costs.provenance()[0]
    assert row["fitted_gpu"] == "H100" and row["run_gpu"] == "H200"
    assert "(differs)" in provenance_markdown([row])[2]
    with pytest.raises(ArtifactError, match="fitted on H100"):
        build_costs(cfg(f"cost.rollout={path}", "deployment.rollout.gpu=H200", "cost.strict=true"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CostModelWarning)
        build_costs(cfg(f"cost.rollout={path}"))  # H100 on H100: no warning


def test_malformed_coefficients_name_the_file_and_key(tmp_path):
    art = json.loads((DATA / "rollout-composed-h100.json").read_text())
    del art["coefficients"]["kernel_db"]["operators"]
    p = tmp_path / "broken.json"
    p.write_text(json.dumps(art))
    with pytest.raises(ArtifactError, match=r"broken.json: coefficients.kernel_db.operators: missing \(expected an object\)"):
        build_costs(cfg(f"cost.rollout={p}"))
    art = json.loads((DATA / "rollout-composed-h100.json").read_text())
    del art["coefficients"]["collectives"]["all_reduce/2"]["latency_s"]
    p.write_text(json.dumps(art))
    with pytest.raises(ArtifactError) as exc:  # the family's check reaches the collectives: file and key path
        build_costs(cfg(f"cost.rollout={p}"))
    assert str(p) in str(exc.value) and "coefficients.collectives.all_reduce/2.latency_s: missing" in str(exc.value)
    art = fit_artifact("linear", [make("training_step", 2.0 + 3e-5 * 100 * n, "s",
                                       {"seq_lens": [100] * n, "tp": 1, "pp": 1, "dp": 8, "model": "qwen3-8b"}, PROV)
                                  for n in (1, 4, 16, 64)])
    art["coefficients"]["time"] = [2.0]
    p = tmp_path / "train.json"
    p.write_text(json.dumps(art))
    with pytest.raises(ArtifactError, match=r"train.json: coefficients.time: expected a list of 2 numbers"):
        build_costs(cfg(f"cost.training={p}"))


def test_fitted_linear_training_exposes_its_linear_form():
    # time = 2 s + 3e-5 s per token; a step of 16 sequences of 100 tokens: 2 + 3e-5 * 1600 = 2.048 s
    obs = [make("training_step", 2.0 + 3e-5 * 100 * n, "s",
                {"seq_lens": [100] * n, "tp": 1, "pp": 1, "dp": 8, "model": "qwen3-8b"}, PROV) for n in (1, 4, 16, 64)]
    art = fit_artifact("linear", obs)
    model = registry.family("training", "linear").build(art, cfg())
    assert isinstance(model, FittedTraining)
    assert model.linear_coefficients() == pytest.approx((2.0, 3e-5), rel=1e-9)
    assert model.step_time([100] * 16) == pytest.approx(2.048, rel=1e-9)


# -- the linear knob family declares its layout -------------------------------------------------------

def test_linear_knobs_refuse_a_tp_sweep_unless_the_layout_is_declared():
    base = ["cost.rollout=linear", "cost.training=constant", "cost.weight_sync=fixed",
            "cost.weight_sync_knobs.publish_s=1", "workload.groups=4", "workload.group_size=2", "run.training_steps=1",
            "run.telemetry=false", "run.plots=false", "policy=sync", "policy.batch_groups=2"]
    build_costs(cfg(*base, "deployment.rollout.tp=1"))  # the declared layout (tp=1) builds
    with pytest.raises(CostModelError) as exc:  # what a sweep over tp hits at its second point
        build_costs(cfg(*base, "deployment.rollout.tp=2"))
    assert "fitted_for.tp=1" in str(exc.value) and "deployment.rollout.tp=2" in str(exc.value)
    ok = build_costs(cfg(*base, "deployment.rollout.tp=2", "cost.rollout_knobs.fitted_for.tp=2"))
    assert ok.rollout.linear_coefficients().fitted_for == {"tp": 2, "pp": 1}
    with pytest.raises(CostModelError, match="cost.rollout_knobs.fitted_for.dp"):
        build_costs(cfg(*base, "cost.rollout_knobs.fitted_for.dp=2"))


# -- provenance ---------------------------------------------------------------------------------------

def test_provenance_names_family_data_layout_and_domain_exits(psrl_path):
    costs = build_costs(cfg(f"cost.rollout={psrl_path}", "cost.training=fixed", "cost.training_knobs.step_s=5"))
    with pytest.warns(CostModelWarning):
        costs.rollout.iteration_time(1000, 10, 0)
    costs.rollout.iteration_time(300, 10, 0)
    ro, tr, ws = costs.provenance()
    assert (ro["role"], ro["family"], ro["spec"]) == ("rollout", "psrl", psrl_path)
    assert "telemetry.jsonl" in ro["data"] and ro["n_observations"] == 7
    assert ro["fitted_for"] == {"model": "qwen3-8b", "gpu": "H100", "tp": 1}
    assert ro["run_layout"] == {"model": "qwen3-8b", "tp": 1, "pp": 1} and ro["run_gpu"] == "H100"
    assert ro["queries_outside"] == 2 and ro["dimensions"]["batch_size"]["worst_value"] == 1000
    assert (tr["family"], tr["data"]) == ("fixed", "none (not fitted; built from cost.training_knobs)")
    assert (ws["family"], ws["queries_outside"]) == ("nccl", 0)
    table = provenance_markdown(costs.provenance())
    assert "| rollout | `psrl`" in table[2] and "qwen3-8b tp1 / qwen3-8b tp1 pp1" in table[2]
    assert "2 (batch_size: 2 (worst 1000 vs [0, 256]))" in table[2]


def test_the_run_report_states_its_cost_provenance(default_run_dir):
    rep = json.loads((default_run_dir / "report.json").read_text())
    roles = [(r["role"], r["family"], r["spec"]) for r in rep["cost_provenance"]]
    assert roles == [("rollout", "roofline", "roofline"), ("training", "analytical", "analytical"),
                     ("weight_sync", "nccl", "nccl")]
    md = (default_run_dir / "report.md").read_text()
    assert "## Cost provenance" in md and "| training | `analytical`" in md


def test_srl_prints_a_gpu_mismatch_as_one_warning_line_and_strict_exits_2(tmp_path):
    from click.testing import CliRunner

    from simrl.cli.main import cli

    args = [f"run.output_dir={tmp_path}", "run.plots=false", "run.telemetry=false", "workload.groups=8",
            "run.training_steps=1", "policy=sync", "policy.batch_groups=4", "deployment.rollout.gpu=H200",
            f"cost.rollout={DATA / 'rollout-roofline-h100.json'}", "--quiet"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if "fitted on H100" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "deployment.rollout.gpu=H200" in lines[0]
    assert "Warning:" not in res.output and "warnings.warn" not in res.output
    res = CliRunner().invoke(cli, [*args, "cost.strict=true"])
    assert res.exit_code == 2 and "error: " in res.output and "fitted on H100" in res.output


def test_srl_regress_fit_of_a_layout_specific_family_needs_the_layout(tmp_path):
    from click.testing import CliRunner

    from simrl.cli.regress import cli
    from simrl.cost.observations import write_observations

    obs = tmp_path / "it.jsonl"
    write_observations(obs, psrl_obs())
    out = tmp_path / "a.json"
    res = CliRunner().invoke(cli, ["fit", "--family", "psrl", "--obs", str(obs), "-o", str(out)])
    assert res.exit_code == 2 and "give --model and --tp" in res.output and not out.exists()
    res = CliRunner().invoke(cli, ["fit", "--family", "psrl", "--obs", str(obs), "-o", str(out), "--model", "qwen3-8b",
                                   "--tp", "1"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["fitted_for"] == {"model": "qwen3-8b", "tp": 1}
