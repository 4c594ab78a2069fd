"""The real-run format: round trips, converters, and a reader that names file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simrl.realrun import (
    RealRunError,
    from_harness,
    from_psrl_log,
    from_sim_run,
    load_run,
    read_realrun,
    write_realrun,
)

DATA = Path(__file__).parents[1] / "data"
@pytest.fixture
def sim_run(default_run_dir):
    return default_run_dir


HEADER = {"schema": "simrl.realrun.v1", "system": "x", "model": "m"}


def step(k, **kw):
    row = {"step": k, "start": 10.0 * (k - 1), "end": 10.0 * k, "train_s": 3.0, "sync_s": 1.0,
           "generated_tokens": 1000, "trained_tokens": 800, "staleness": [0, 1]}
    row.update(kw)
    return {k2: v for k2, v in row.items() if v is not ...}


def write(tmp_path, rows, raw=None) -> Path:
    p = tmp_path / "run.jsonl"
    p.write_text(raw if raw is not None else "\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def test_sim_run_round_trips_through_the_format(sim_run, tmp_path):
    run = from_sim_run(sim_run)
    report = json.loads((sim_run / "report.json").read_text())
    assert len(run.steps) == len(report["steps"]) == 5
    assert sum(s.generated_tokens for s in run.steps) == report["totals"]["tokens_generated"]
    assert sum(s.trained_tokens for s in run.steps) == report["totals"]["tokens_trained"]
    for s, r in zip(run.steps, report["steps"], strict=True):
        assert s.wait_s == pytest.approx(r["batch_ready"] - r["wait_start"], abs=1e-6)
        assert s.staleness == tuple(r["staleness"])
    assert run.steps[0].load  # telemetry samples carried as per-instance load
    p = write_realrun(tmp_path / "r.jsonl", run)
    assert read_realrun(p) == run
    assert load_run(sim_run) == run


def test_hand_written_sample_reads():
    run = read_realrun(DATA / "real_run_sample.jsonl")
    assert run.system.startswith("psrl") and len(run.steps) == 5
    assert run.steps[3].staleness is not None and run.steps[0].staleness is None
    assert run.steps[0].staleness_max == 0 and run.steps[0].wait_s == pytest.approx(38.2 - 5.1 - 3.4)


@pytest.mark.parametrize("rows, raw, needle", [
    (None, "", "empty file"),
    ([HEADER], None, "no step lines"),
    (None, json.dumps(HEADER) + "\n{not json\n", ":2: not valid JSON"),
    ([{**HEADER, "schema": "other"}, step(1)], None, ":1: field 'schema'"),
    ([{**HEADER, "colour": "red"}, step(1)], None, ":1: field 'colour': unknown field"),
    ([{k: v for k, v in HEADER.items() if k != "model"}, step(1)], None, ":1: field 'model': missing"),
    ([HEADER, step(1, train_s=...)], None, ":2: field 'train_s': missing"),
    ([HEADER, step(1, gpu_util=0.5)], None, ":2: field 'gpu_util': unknown field"),
    ([HEADER, step(1, trained_tokens="800")], None, ":2: field 'trained_tokens': expected int"),
    ([HEADER, step(1, generated_tokens=-1)], None, ":2: field 'generated_tokens': must be >= 0"),
    ([HEADER, step(1), step(3)], None, ":3: field 'step': expected step 2 after 1, got 3 (steps missing)"),
    ([HEADER, step(1), step(1)], None, ":3: field 'step': expected step 2 after 1, got 1"),
    ([HEADER, step(1, end=-1.0)], None, ":2: field 'end': end -1.0 is before start"),
    ([HEADER, step(1, train_s=9.5)], None, ":2: field 'train_s': train_s + sync_s"),
    ([HEADER, step(1, staleness={"mean": 0.5})], None, ":2: field 'staleness.max': missing"),
    ([HEADER, step(1, staleness="low")], None, ":2: field 'staleness': expected a list"),
    ([HEADER, step(1, load=[{"t": 1.0, "instance": 0, "running": 3}])], None, ":2: field 'load[0].waiting': missing"),
    ([HEADER, step(1, load=[{"t": 1.0, "instance": 0, "running": 3, "waiting": 0, "gpu": 1}])], None,
     ":2: field 'load[0].gpu': unknown field"),
])
def test_reader_rejects_bad_input_with_line_and_field(tmp_path, rows, raw, needle):
    p = write(tmp_path, rows, raw)
    with pytest.raises(RealRunError) as exc:
        read_realrun(p)
    assert str(p) in str(exc.value) and needle in str(exc.value)


def test_harness_evidence_converts():
    run = from_harness(DATA / "harness_sample")
    assert [s.step for s in run.steps] == [1, 2, 3]
    s1, s2 = run.steps[0], run.steps[1]
    # d_k = 12k + 3, train_end = d_k + 5, c_k = d_k + 6.5; step 1 starts at the first turn's arrival.
    assert (s1.start, s1.end, s1.train_s, s1.sync_s) == (0.2, 21.5, 5.0, 1.5)
    assert (s2.start, s2.end) == (21.5, 33.5) and s2.wait_s == pytest.approx(27.0 - 21.5)
    assert s2.generated_tokens == 4 * 1050 and s2.trained_tokens == 4200
    assert s2.staleness == (0, 0, 1, 1) and s2.groups == 4
    assert load_run(DATA / "harness_sample") == run


def test_harness_evidence_missing_field_names_line(tmp_path):
    (tmp_path / "updates.jsonl").write_text(json.dumps({"k": 1, "d_k": 1.0, "c_k": 2.0, "train_end": 1.5}) + "\n")
    with pytest.raises(RealRunError, match=r"updates.jsonl:1: field 'publish_end': missing"):
        from_harness(tmp_path)
    with pytest.raises(RealRunError, match="neither a simulated run"):
        load_run(tmp_path / "..")


def test_psrl_log_converts_all_three_spellings():
    run = from_psrl_log(DATA / "psrl_sample.log", model="qwen3-8b")
    assert [s.step for s in run.steps] == [1, 2, 3]
    s1, s2, s3 = run.steps
    assert (s1.start, s1.end, s1.train_s, s1.sync_s) == (0.0, 36.5, 5.5, 3.0)
    assert s1.trained_tokens == 120000  # perf/total_num_tokens * response / (response + prompt)
    assert s2.start == 36.5 and s2.trained_tokens == 205000 and len(s2.load) == 4
    assert s3.staleness_mean == 0.5 and s3.staleness_max == 1 and s3.generated_tokens == 250000
    assert "2 non-metric lines skipped" in run.notes


def test_psrl_log_errors_name_the_key(tmp_path):
    p = tmp_path / "log"
    p.write_text("just text\n")
    with pytest.raises(RealRunError, match="no metric lines"):
        from_psrl_log(p)
    p.write_text(json.dumps({"trainer/global_step": 1, "timing_s/update_actor": 1.0}) + "\n")
    with pytest.raises(RealRunError, match=r"log:1: field 'timing_s/step': missing"):
        from_psrl_log(p)
    p.write_text(json.dumps({"trainer/global_step": 1, "timing_s/step": 5.0, "timing_s/update_actor": 1.0}) + "\n")
    with pytest.raises(RealRunError, match=r"'psrl/trained_tokens': missing"):
        from_psrl_log(p)
