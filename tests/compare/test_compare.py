"""`srl-compare` and `simrl.compare`: alignment, errors, phase attribution, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from simrl.cli.compare import cli
from simrl.compare import CompareError, compare
from simrl.realrun import RealRun, RealStep, from_sim_run, write_realrun

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture
def sim_run(default_run_dir):
    return default_run_dir


def run_of(*steps) -> RealRun:
    out, t = [], 0.0
    for k, (wait, train, sync, gen, trained) in enumerate(steps, 1):
        end = t + wait + train + sync
        out.append(RealStep(k, t, end, train, sync, gen, trained, staleness=(0, 1), staleness_mean=0.5,
                            staleness_max=1))
        t = end
    return RealRun(system="t", model="m", steps=tuple(out))


def test_self_comparison_is_zero_error(sim_run, tmp_path):
    conv = write_realrun(tmp_path / "self.jsonl", from_sim_run(sim_run))
    for other in (sim_run, conv):
        res = CliRunner().invoke(cli, [str(sim_run), str(other), "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        for s in out["summary"].values():
            assert s["max"] == 0
        assert all(r["step_time_s"]["error"] == 0 for r in out["steps"])
        assert out["attribution"]["dominant"] is None


def test_errors_and_attribution_are_exact():
    real = run_of((20, 5, 2, 10000, 5000), (10, 5, 2, 9000, 5000))
    sim = run_of((24, 5, 3, 10000, 5000), (10, 4, 2, 9000, 5000))
    out = compare(sim, real)
    s1, s2 = out["steps"]
    assert s1["step_time_s"] == {"sim": 32, "real": 27, "error": 5, "ape_pct": pytest.approx(500 / 27, rel=1e-8)}
    assert s1["largest_phase"] == "waiting for a batch (rollout-bound)" and s2["largest_phase"] == "training"
    assert s1["trained_tokens_per_s"]["ape_pct"] == pytest.approx(abs(5000 / 32 - 5000 / 27) / (5000 / 27) * 100,
                                                                  rel=1e-8)
    summ = out["summary"]["step_time_s_ape_pct"]
    assert summ["max"] == pytest.approx(500 / 27, rel=1e-8)
    assert summ["median"] == pytest.approx((500 / 27 + 100 / 17) / 2, rel=1e-8)
    att = out["attribution"]
    assert att["dominant"] == "waiting for a batch (rollout-bound)"
    assert att["phases"]["waiting for a batch (rollout-bound)"]["share"] == pytest.approx(4 / 6, rel=1e-8)
    assert "longer" in att["verdict"]


def test_different_step_counts_need_allow_partial():
    real = run_of((20, 5, 2, 1, 1), (10, 5, 2, 1, 1), (10, 5, 2, 1, 1))
    sim = run_of((20, 5, 2, 1, 1), (10, 5, 2, 1, 1))
    with pytest.raises(CompareError, match=r"different step counts.*--allow-partial.*1\.\.2"):
        compare(sim, real)
    out = compare(sim, real, allow_partial=True)
    assert out["partial"] and out["steps_compared"] == [1, 2]
    later = attrs.evolve(real, steps=tuple(attrs.evolve(s, step=s.step + 10) for s in real.steps))
    with pytest.raises(CompareError, match="no common training steps"):
        compare(sim, later, allow_partial=True)


def test_zero_real_value_has_no_percentage_error():
    out = compare(run_of((20, 5, 2, 100, 0)), run_of((20, 5, 2, 100, 0)))
    assert out["steps"][0]["trained_tokens_per_s"]["ape_pct"] == 0
    out = compare(run_of((20, 5, 2, 100, 10)), run_of((20, 5, 2, 100, 0)))
    assert out["steps"][0]["trained_tokens_per_s"]["ape_pct"] is None
    assert out["summary"]["trained_tokens_per_s_ape_pct"]["undefined_steps"] == 1


def test_cli_against_the_hand_written_sample(sim_run, tmp_path):
    res = CliRunner().invoke(cli, [str(sim_run), str(DATA / "real_run_sample.jsonl"), "--plots", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    assert "absolute percentage error" in res.output and "step time" in res.output
    assert "most of the step-time disagreement is in" in res.output
    for name in ("compare_step_time", "compare_throughput", "compare_phases"):
        assert (tmp_path / "p" / f"{name}.png").exists() and (tmp_path / "p" / f"{name}.html").exists()


def test_cli_bad_inputs_are_clean_errors(sim_run, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"schema": "simrl.realrun.v1", "system": "x", "model": "m"}) + "\n"
                   + json.dumps({"step": 1, "start": 0, "end": 5, "train_s": 1, "sync_s": 1,
                                 "generated_tokens": 1, "trained_tokens": 1, "tokens_per_joule": 3}) + "\n")
    cases = [
        ([str(sim_run), str(tmp_path / "missing.jsonl")], "missing.jsonl: no such file"),
        ([str(sim_run), str(bad)], "bad.jsonl:2: field 'tokens_per_joule': unknown field"),
        ([str(sim_run), str(DATA / "harness_sample")], "different step counts"),
        ([str(tmp_path), str(sim_run)], "neither a simulated run"),
    ]
    for args, needle in cases:
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, res.output
        assert needle in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli, [str(sim_run), str(DATA / "harness_sample"), "--allow-partial"])
    assert res.exit_code == 0 and "partial" in res.output


def test_harness_model_record_is_labelled_readably(tmp_path):
    """A bench results directory's manifest holds the model as a record; labels show its name."""
    import shutil

    from simrl.compare import compare, render_text
    from simrl.realrun import load_run

    d = tmp_path / "results"
    shutil.copytree(Path(__file__).parents[1] / "data" / "harness_sample", d)
    (d / "manifest.json").write_text(json.dumps({"backend": "art", "model": {
        "name": "Qwen/Qwen3-8B", "revision": "0123456789abcdef", "dtype": "bf16", "lora": {"rank": 8}}}))
    run = load_run(d)
    assert run.model == "Qwen/Qwen3-8B@0123456789ab (bf16, LoRA rank 8)"
    result = compare(run, run)
    assert result["real"]["label"] == "art, Qwen/Qwen3-8B@0123456789ab (bf16, LoRA rank 8)"
    text = render_text(result)
    assert "{" not in text.splitlines()[1] and "Qwen/Qwen3-8B@0123456789ab" in text
