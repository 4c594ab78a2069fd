"""`srl-workload` through click's CliRunner: exit codes and output."""

import json

import pytest
from click.testing import CliRunner

from simrl.cli.workload import main
from workloads.registry import generate
from workloads.trace import read_trace


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return invoke


def test_synth_validate_stats(run, tmp_path):
    out = tmp_path / "t.jsonl"
    res = run("synth", "multi_turn", "--groups", 12, "--seed", 3, "calls=2", "-o", out)
    assert res.exit_code == 0, res.output
    w = read_trace(out)
    assert w.n_groups == 12 and w.knobs["calls"] == 2
    assert w.schedule_sha256() == generate("multi_turn", 12, 3, calls=2).schedule_sha256()
    res = run("validate", out)
    assert res.exit_code == 0 and res.output.startswith("OK ") and w.schedule_sha256() in res.output
    res = run("stats", out)
    assert res.exit_code == 0 and "completion_tokens" in res.output and "zero-variance groups 0.0%" in res.output
    res = run("stats", out, "--json")
    assert json.loads(res.output)["quantiles"]["calls_per_trajectory"]["p50"] == 2


def test_user_errors_exit_2_without_traceback(run, tmp_path):
    for args, words in [
        (("synth", "nope", "-o", tmp_path / "x"), "unknown workload generator 'nope'; valid:"),
        (("synth", "rl_math", "colour=red", "-o", tmp_path / "x"), "unknown knob(s) colour; valid:"),
        (("synth", "rl_math", "oops", "-o", tmp_path / "x"), "must look like key=value"),
        (("validate", tmp_path / "missing.jsonl"), "cannot open"),
    ]:
        res = run(*args)
        assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output


def test_validate_rejects_with_line_and_field(run, tmp_path):
    out = tmp_path / "t.jsonl"
    run("synth", "constant", "--groups", 3, "-o", out)
    lines = out.read_text().splitlines()
    rec = json.loads(lines[2])
    rec["trajectories"][1]["completion_tokens"] = [-5]
    lines[2] = json.dumps(rec)
    out.write_text("\n".join(lines) + "\n")
    res = run("validate", out)
    assert res.exit_code == 2
    assert f"{out}:3: trajectories[1].completion_tokens[0]: expected an integer >= 1, got -5" in res.output
    good = tmp_path / "g.jsonl"
    run("synth", "constant", "prompt=1000", "completion=100", "-o", good)
    res = run("validate", good, "--max-model-len", 1050)
    assert res.exit_code == 2 and "max_model_len=1050" in res.output


def test_import_splitwise_and_collect(run, tmp_path):
    csv = tmp_path / "s.csv"
    csv.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{i * 0.1},{100 + i},{10 + i}\n" for i in range(9)))
    out = tmp_path / "s.jsonl"
    res = run("import", "splitwise", csv, "--group-size", 2, "-o", out)
    assert res.exit_code == 0, res.output
    assert read_trace(out).n_groups == 4
    log = tmp_path / "turns.jsonl"
    log.write_text(json.dumps({"group": 0, "trajectory": 0, "turn": 0, "prompt_tokens": 9,
                               "completion_tokens": 3}) + "\n")
    res = run("collect", log, "-o", tmp_path / "c.jsonl", "--name", "mine")
    assert res.exit_code == 0 and read_trace(tmp_path / "c.jsonl").name == "mine"
    log.write_text("{bad\n")
    res = run("collect", log, "-o", tmp_path / "c.jsonl")
    assert res.exit_code == 2 and "turns.jsonl:1" in res.output


def test_list(run):
    res = run("list")
    assert res.exit_code == 0 and "rl_math (group size 8)" in res.output and "max_completion = 8192" in res.output


def test_stats_plot_png(run, tmp_path):
    out = tmp_path / "t.jsonl"
    run("synth", "rl_math", "--groups", 20, "-o", out)
    res = run("stats", out, "--plot", tmp_path / "p.png")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stats_plot_of_another_format_is_refused_before_work(run, tmp_path):
    # the histograms are PNG only: a .txt / .html name would get PNG bytes under the wrong name
    out = tmp_path / "t.jsonl"
    run("synth", "rl_math", "--groups", 4, "-o", out)
    for name, got in (("p.txt", "'.txt'"), ("p.html", "'.html'"), ("plot", "'no suffix'")):
        res = run("stats", out, "--plot", tmp_path / name)
        assert res.exit_code == 2, res.output
        assert f"--plot {tmp_path / name}: expected a file name ending in .png" in res.output, res.output
        assert f"got {got}" in res.output and "Traceback" not in res.output
        assert not (tmp_path / name).exists()
