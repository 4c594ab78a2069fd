"""`srl-profile megatron`: layouts, overrides, the step timer and the launch loop with a fake pretrain."""

import json
import types

import pytest
from click.testing import CliRunner

from adapters import megatron as mg
from adapters.cli import cli
from simrl.cost.fit import fit_artifact

PROV = {"hardware": "NVIDIA H100 (fake)", "source": "test", "date": "2026-01-01"}


def _cfg():
    ns = types.SimpleNamespace
    return ns(model=ns(tensor_model_parallel_size=1, recompute_granularity="full"), dataset=ns(), train=ns(),
              scheduler=ns(), checkpoint=ns(save="/ckpt"), logger=ns(), ddp=ns(use_distributed_optimizer=True))


def test_layouts_and_points():
    assert mg.parse_layouts("tp2pp1, tp1pp2cp2ep4") == [mg.Layout(2, 1, 1, 1), mg.Layout(1, 2, 2, 4)]
    for bad in ("tp2xx", "pp", "tp0", ""):
        with pytest.raises(ValueError, match="--layouts"):
            mg.parse_layouts(bad)
    assert mg.Layout(2, 2).dp(8) == 2
    with pytest.raises(ValueError, match="do not divide"):
        mg.Layout(3).dp(8)
    with pytest.raises(ValueError, match="EP 4 must divide"):
        mg.Layout(4, ep=4).dp(8)  # DP x CP = 2
    p = mg.make_point("r:f", "Qwen/Qwen3-8B", mg.Layout(2), 4096, 1, None, 8, 3, 1)
    assert p.global_batch == 4 and p.train_iters == 4
    with pytest.raises(ValueError, match="multiple of micro batch x DP"):
        mg.make_point("r:f", "m", mg.Layout(2), 4096, 1, 6, 8, 3, 1)
    with pytest.raises(ValueError, match="2 x CP"):
        mg.make_point("r:f", "m", mg.Layout(cp=2), 4095, 1, None, 8, 3, 1)


def test_overrides_apply_and_name_missing_paths():
    p = mg.make_point("r:f", "m", mg.Layout(2, 1, 1, 1), 2048, 2, 16, 8, 3, 1, recompute="none")
    cfg = _cfg()
    mg.apply_overrides(cfg, mg.config_overrides(p))
    assert cfg.model.tensor_model_parallel_size == 2 and cfg.model.sequence_parallel is True
    assert cfg.model.seq_length == cfg.dataset.seq_length == 2048
    assert cfg.train.global_batch_size == 16 and cfg.train.train_iters == 4
    assert cfg.model.recompute_granularity is None and cfg.checkpoint.save is None
    with pytest.raises(ValueError, match="no 'optimizer.lr'"):
        mg.apply_overrides(_cfg(), {"optimizer.lr": 1.0})


def test_step_timer_and_observations():
    ticks = iter(range(100))
    timer = mg.StepTimer(sync=lambda: None, reset_peak=lambda: None, peak=lambda: 1000 + next(ticks))
    for _ in range(3):
        timer.on_train_step_start(None)
        timer.on_train_step_end(None)
    timer.on_eval_start(None)  # other events are accepted and ignored
    assert len(timer.times) == 3 and timer.peaks == [1000, 1001, 1002]
    p = mg.make_point("r:f", "Qwen/Qwen3-8B", mg.Layout(1, 2), 1024, 1, None, 4, 2, 1)
    ranks = [{"times": [9.0, 0.5, 0.7], "peaks": [5, 10, 11], "distributed_optimizer": True, "recompute": "full"},
             {"times": [9.0, 0.6, 0.6], "peaks": [5, 12, 3], "distributed_optimizer": True, "recompute": "full"},
             {"times": [9.0, 0.5, 0.5], "peaks": [5, 1, 1], "distributed_optimizer": True, "recompute": "full"},
             {"times": [9.0, 0.5, 0.5], "peaks": [5, 1, 1], "distributed_optimizer": True, "recompute": "full"}]
    t, m = mg.point_observations(p, ranks, PROV)
    # Slowest rank per timed step: [0.6, 0.7] -> median 0.65; the warm-up step (9 s) is dropped.
    assert t.value == pytest.approx(0.65) and m.value == 12
    assert t.inputs["dp"] == 2 and t.inputs["pp"] == 2 and t.inputs["seq_lens"] == [1024, 1024]
    assert t.inputs["zero_stage"] == 1 and t.inputs["activation_checkpointing"] is True


def test_fake_pretrain_end_to_end(tmp_path, monkeypatch):
    """The launch loop with a runner that plays torchrun: every rank runs run_rank on a fake pretrain."""
    def fake_pretrain(cfg, forward_step, callbacks):
        seq, tp = cfg.model.seq_length, cfg.model.tensor_model_parallel_size
        for _ in range(cfg.train.train_iters):
            for cb in callbacks:
                cb.on_train_step_start(None)
            for cb in callbacks:
                cb.on_train_step_end(None)
        fake_pretrain.seen.append((seq, tp, cfg.train.global_batch_size))
    fake_pretrain.seen = []

    def runner(cmd):
        assert cmd[:3] == ["torchrun", "--standalone", "--nproc-per-node=4"] and cmd[3:5] == ["-m", "adapters.megatron"]
        spec = json.loads(open(cmd[5]).read())
        p = mg.point_from_dict(spec["point"])
        clock = iter(range(1000))
        recs = []
        for _ in range(p.nproc):
            timer = mg.StepTimer(lambda: None, lambda: None, lambda: p.seq_length * 10)
            recs.append(mg.run_rank(p, fake_pretrain, None, _cfg, timer))
            recs[-1]["times"] = [0.1 * p.seq_length / 1024 + 0.001 * next(clock) for _ in recs[-1]["times"]]
        open(spec["out"], "w").write(json.dumps(recs))

    points = [mg.make_point("r:f", "Qwen/Qwen3-8B", lay, s, 1, None, 4, 3, 1)
              for lay in (mg.Layout(1), mg.Layout(2)) for s in (1024, 2048, 4096)]
    obs = mg.profile_megatron(points, runner=runner)
    assert len(obs) == 12 and {s for s, _, _ in fake_pretrain.seen} == {1024, 2048, 4096}
    assert {(o.inputs["tp"], o.inputs["dp"]) for o in obs} == {(1, 4), (2, 2)}
    art = fit_artifact("hydraulis", obs, gpu="H100")
    assert set(art["coefficients"]["strategies"]) == {"tp1_pp1", "tp2_pp1"}


def test_refuses_without_gpus():
    r = CliRunner().invoke(cli, ["megatron", "--model", "Qwen/Qwen3-8B", "--nproc", "1", "-o", "x.jsonl"])
    assert r.exit_code == 2
    assert "needs torch and Megatron-Bridge" in r.output or "visible GPUs" in r.output
