"""What-ifs: the configuration each produces, its reshard cost, and its effect."""

from __future__ import annotations

import json

import attrs
import pytest
from click.testing import CliRunner
from predict_helpers import snapshot_at
from simhelpers import linear_costs

from simrl.cli.predict import main as predict_cli
from simrl.predict import WhatIf, predict, what_if_config, with_staleness
from simrl.snapshot import SnapshotError, write_snapshot


@pytest.fixture(scope="module")
def snap(psrl_run):
    cfg, full = psrl_run
    return snapshot_at(cfg, full.steps[0].batch_ready * 0.5)[0]


def test_move_engines_changes_both_sides(snap):
    cfg = what_if_config(snap, WhatIf(move_to_training=1))
    # default: 2 rollout engines of TP1, 8 training GPUs -> 1 engine, 9 GPUs
    assert cfg.deployment.rollout.instances == 1 and cfg.deployment.training.gpus == 9
    back = what_if_config(snap, WhatIf(move_to_training=-2))
    assert back.deployment.rollout.instances == 4 and back.deployment.training.gpus == 6
    with pytest.raises(SnapshotError, match="rollout has 2"):
        what_if_config(snap, WhatIf(move_to_training=2))


def test_tp_keeps_the_rollout_gpus(snap):
    cfg = what_if_config(snap, WhatIf(tp=2))
    assert (cfg.deployment.rollout.tp, cfg.deployment.rollout.instances) == (2, 1)
    with pytest.raises(SnapshotError, match="not divisible"):
        what_if_config(snap, WhatIf(tp=4))


def test_staleness_knob_is_found(snap):
    policy = snap.sim_config().policy  # psrl, staleness 0
    assert with_staleness(policy, 2).staleness == 2
    assert with_staleness(policy, 2).staleness_spec.bound == 2


def test_what_ifs_are_priced_and_change_the_prediction(snap):
    costs = linear_costs(sync_s=1.0)
    base = predict(snap, draws=4, costs=costs)
    # Moving an engine to training: the trainer reshards for publish_time(1) = 1 s (ConstantSync).
    moved = predict(snap, draws=4, costs=costs, what_if=WhatIf(move_to_training=1))
    assert moved.reshard_s == 1.0 and moved.trainer_free_s == pytest.approx(snap.time_s + 1.0)
    # Two more rollout engines (from training) load weights for 1 s; more engines, earlier batch.
    more = predict(snap, draws=4, costs=costs, what_if=WhatIf(move_to_training=-2))
    assert more.reshard_s == 1.0
    assert more.batch_quantiles(0)[1] <= base.batch_quantiles(0)[1] + 1.0
    # Re-sharding to TP2 restarts every engine: in-flight requests re-prefill, the batch is later.
    tp2 = predict(snap, draws=4, costs=costs, what_if=WhatIf(tp=2))
    assert tp2.batch_quantiles(0)[1] > base.batch_quantiles(0)[1]


def test_prediction_is_deterministic(snap):
    a = predict(snap, draws=3, batches=2, costs=linear_costs()).to_dict()
    b = predict(snap, draws=3, batches=2, costs=linear_costs()).to_dict()
    assert json.dumps(a) == json.dumps(b)


def test_cli_prints_prediction_and_what_ifs(snap, tmp_path):
    path = tmp_path / "s.json"
    write_snapshot(snap, path)
    res = CliRunner().invoke(predict_cli, [str(path), "--draws", "3", "--staleness", "1", "--requests", "3"])
    assert res.exit_code == 0, res.output
    assert "[as is]" in res.output and "[staleness bound 1]" in res.output
    assert "next batch 1:" in res.output and "stalls:" in res.output and "requests in flight" in res.output
    res = CliRunner().invoke(predict_cli, [str(path), "--draws", "2", "--json"])
    out = json.loads(res.output)
    assert out["predictions"][0]["what_if"] == "as is" and len(out["predictions"][0]["batches"]) == 1


def test_cli_bad_snapshot_exits_2(snap, tmp_path):
    path = tmp_path / "s.json"
    write_snapshot(attrs.evolve(snap, schema="nope"), path)
    res = CliRunner().invoke(predict_cli, [str(path)])
    assert res.exit_code == 2 and f"{path}: schema: expected 'simrl.snapshot.v1'" in res.output
    res = CliRunner().invoke(predict_cli, [str(path.with_name("missing.json"))])
    assert res.exit_code == 2 and "missing.json: cannot read" in res.output
