"""`srl-profile fsdp`: the pure parts always; a real gloo run on the CPU whenever torch is installed."""

import importlib.util
import json

import numpy as np
import pytest
from click.testing import CliRunner

from adapters import fsdp
from adapters.cli import cli
from adapters.extras import MissingExtraError
from simrl.cli.regress import cli as regress_cli
from simrl.cost.architectures import model_arch
from simrl.cost.observations import read_observations

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed (the profile-torch extra)")
PROV = {"hardware": "test CPU", "source": "test", "date": "2026-01-01"}


def test_plan_validation_names_the_option():
    ok = fsdp.FsdpPlan()
    assert fsdp.validate_plan(ok).name == "simrl/tiny-llama"
    for bad, match in [
        (dict(world_sizes=()), "--world-sizes"),
        (dict(seq_lens=(0,)), "--seq-lens"),
        (dict(seq_lens=(10**6,)), "max_position"),
        (dict(shardings=("zero9",)), "--sharding"),
        (dict(steps=0), "--steps"),
        (dict(device="tpu"), "--device"),
        (dict(device="cuda", clock="process"), "--clock process"),
        (dict(device="cuda", start_method="fork"), "fork"),
        (dict(model="Qwen/Qwen3-30B-A3B"), "dense"),
    ]:
        with pytest.raises(ValueError, match=match):
            fsdp.validate_plan(fsdp.FsdpPlan(**bad))
    assert fsdp.parse_ints("4,1,2,2", "--x") == (1, 2, 4)
    with pytest.raises(ValueError, match="--x"):
        fsdp.parse_ints("1,a", "--x")


def test_point_observations_take_the_slowest_rank_per_step():
    plan = fsdp.FsdpPlan(steps=3, shardings=("grad-op",))
    arch = model_arch(plan.model)
    ranks = [{"wall": [0.1, 0.3, 0.2], "process": [0.1, 0.1, 0.1], "peak_bytes": 1000},
             {"wall": [0.2, 0.1, 0.25], "process": [0.1, 0.2, 0.1], "peak_bytes": 3000}]
    t, m = fsdp.point_observations(plan, arch, 2, "grad-op", 64, ranks, PROV)
    # Slowest rank per step: [0.2, 0.3, 0.25] -> median 0.25, population std sqrt(((-.05)^2+.05^2+0)/3) = 0.0408.
    assert t.value == pytest.approx(0.25) and t.spread == pytest.approx(0.040825, rel=1e-4)
    # The process clock takes the median over ranks (of two: their mean): [.1, .15, .1] -> median .1.
    assert t.provenance["timing"]["process"]["steps"] == pytest.approx([0.1, 0.15, 0.1])
    assert t.provenance["timing"]["process"]["median"] == pytest.approx(0.1)
    assert m.unit == "bytes" and m.value == 3000 and m.provenance["memory"]["per_rank_bytes"] == [1000, 3000]
    i = t.inputs
    assert i["seq_lens"] == [64, 64] and i["dp"] == 2 and i["tp"] == 1 and i["pp"] == 1
    assert i["zero_stage"] == 2 and i["reshard_after_forward"] is False and i["backend"] == "gloo"
    with pytest.raises(ValueError, match="expected 2 rank records"):
        fsdp.point_observations(plan, arch, 2, "grad-op", 64, ranks[:1], PROV)
    with pytest.raises(ValueError, match="read 0"):
        fsdp.point_observations(plan, arch, 1, "full", 64, [{**ranks[0], "wall": [0.0, 0.1, 0.1]}], PROV)


def test_missing_torch_names_the_extra(monkeypatch):
    def missing(*a, **k):
        raise MissingExtraError("srl-profile fsdp needs torch ...: pip install 'simrl[profile-torch]'")

    monkeypatch.setattr(fsdp, "require_torch", missing)
    r = CliRunner().invoke(cli, ["fsdp", "-o", "x.jsonl"])
    assert r.exit_code == 2 and "profile-torch" in r.output


@needs_torch
def test_model_matches_the_registered_architecture():
    import torch

    arch = model_arch("simrl/tiny-llama")
    model = fsdp.build_model(torch, arch)
    # Built in code, its parameters are exactly the architecture's count (5,245,184: 4 layers of
    # 196,608 attention + 589,824 MLP + 512 norm weights, 2 x 4096 x 256 embedding/LM head, final norm).
    assert fsdp.count_params(model) == arch.total_params == 5_245_184
    logits = model(torch.randint(0, arch.vocab, (2, 16)))
    assert logits.shape == (2, 16, arch.vocab)


@needs_torch
def test_a_failing_rank_stops_the_interleaved_run_with_its_traceback(monkeypatch):
    """One rank of one world raises: the run stops with that rank's error (no hang waiting for turns)."""
    def worker(rank, world, store, plan_dict, sharding, out_path, turn=None):
        if world == 2 and rank == 1:
            raise RuntimeError("boom in rank 1")
        if turn is not None and rank == 0:
            turn[0].acquire(timeout=30)  # waits for a turn that never comes once world 2 has failed

    monkeypatch.setattr(fsdp, "_worker", worker)  # forked ranks inherit the stand-in
    plan = fsdp.FsdpPlan(world_sizes=(1, 2), seq_lens=(32,), steps=1, warmup=0, start_method="fork")
    assert plan.interleaved
    with pytest.raises(RuntimeError, match=r"world=2 rank 1 failed:(.|\n)*boom in rank 1"):
        fsdp.profile_fsdp(plan)


@needs_torch
@pytest.mark.parametrize("schedule, order", [("interleaved", "121212"), ("sequential", "111222")])
def test_worlds_take_turns_step_by_step_when_interleaved(schedule, order, tmp_path, monkeypatch):
    """Stand-in ranks (no model) log each step: interleaved worlds alternate, sequential ones do not;
    the parent collects every world's records either way."""
    log = tmp_path / "steps.log"

    def worker(rank, world, store, plan_dict, sharding, out_path, turn=None):
        plan = fsdp.FsdpPlan(**plan_dict)
        for _ in range(len(plan.seq_lens) * (plan.warmup + plan.steps)):
            if rank == 0:
                if turn is not None:
                    turn[0].acquire()
                with open(log, "a") as fh:
                    fh.write(str(world))
                if turn is not None:
                    turn[1].release()
        if rank == 0:
            rec = {"wall": [0.2] * plan.steps, "process": [0.1] * plan.steps, "peak_bytes": 2**20}
            with open(out_path, "w") as fh:
                json.dump([{"rank": r, "records": {"32": rec}, "params": 7} for r in range(world)], fh)

    monkeypatch.setattr(fsdp, "_worker", worker)
    plan = fsdp.FsdpPlan(world_sizes=(1, 2), seq_lens=(32,), steps=2, warmup=1, start_method="fork",
                         schedule=schedule)
    prof = fsdp.profile_fsdp(plan)
    assert log.read_text() == order
    assert [(o.inputs["dp"], o.unit, o.value) for o in prof.observations] == [
        (1, "s", 0.2), (1, "bytes", 2**20), (2, "s", 0.2), (2, "bytes", 2**20)]  # --clock wall: 0.2
    assert prof.observations[0].provenance["schedule"] == schedule and prof.params == 7


def test_interleaving_is_for_the_cpu():
    assert not fsdp.FsdpPlan(device="cuda").interleaved and fsdp.FsdpPlan(schedule="sequential").interleaved is False
    with pytest.raises(ValueError, match="--schedule interleaved .* CPU only"):
        fsdp.validate_plan(fsdp.FsdpPlan(device="cuda", schedule="interleaved"))
    with pytest.raises(ValueError, match="--schedule"):
        fsdp.validate_plan(fsdp.FsdpPlan(schedule="random"))


@needs_torch
def test_cuda_is_refused_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="sees no CUDA device"):
        fsdp.profile_fsdp(fsdp.FsdpPlan(device="cuda", clock="wall"))


@needs_torch
def test_cpu_profile_fit_predicts_held_out_world_sizes_and_lengths(tmp_path):
    """The Done-when figure, through the commands a user runs: `srl-profile fsdp` on the CPU (gloo,
    4 x 4 grid, worlds interleaved), `srl-regress fit --family fsdp` (no --gpu: the observations say
    CPU) on the points without world 3 or seq_len 128, `srl-regress eval` on those held-out points."""
    import benchmarks.fsdp_profile as bench
    from simrl.cost.observations import write_observations

    out = tmp_path / "fsdp.jsonl"
    r = CliRunner().invoke(cli, ["fsdp", *bench.PROFILE_ARGS, "-o", str(out)])
    assert r.exit_code == 0, r.output
    obs = read_observations(out)
    assert len(obs) == 32  # 4 worlds x 4 lengths x (time, memory)
    times = {(o.inputs["dp"], o.inputs["seq_lens"][0]): o.value for o in obs if o.unit == "s"}
    assert times[(1, 256)] > times[(1, 32)] > 0  # 8x the tokens costs more
    assert times[(2, 32)] > times[(1, 32)]  # the same per-rank work plus gloo's collectives and their copies
    mem = [o for o in obs if o.unit == "bytes"]
    assert all(o.value > 5_245_184 * 16 for o in mem)  # at least the unsharded fp32 model + Adam state
    p = obs[0].provenance
    assert p["software"]["torch"] and p["software"]["backend"] == "gloo" and p["software"]["simrl_commit"]
    assert p["driver"] and p["date"] and "(CPU)" in p["hardware"] and p["schedule"] == "interleaved"
    assert p["timing"]["over_ranks"] == {"wall": "max", "process": "median"}

    train, test = bench.split(obs)
    assert len(train) == 18 and len(test) == 14  # 3 x 3 kept; world 3 (4 lengths) and 128 (3 more worlds)
    write_observations(tmp_path / "train.jsonl", train)
    write_observations(tmp_path / "test.jsonl", test)
    art = tmp_path / "fsdp.json"
    r = CliRunner().invoke(regress_cli, ["fit", "--family", "fsdp", "--obs", str(tmp_path / "train.jsonl"),
                                         "-o", str(art)])
    assert r.exit_code == 0, r.output
    fitted = json.loads(art.read_text())
    assert len(fitted["coefficients"]["time"]) == 7 and len(fitted["coefficients"]["memory"]) == 4
    assert np.all(np.asarray(fitted["coefficients"]["time"]) >= 0)
    r = CliRunner().invoke(regress_cli, ["eval", str(art), "--obs", str(tmp_path / "test.jsonl"), "--json"])
    assert r.exit_code == 0, r.output
    held = json.loads(r.output)["per_group"]
    assert held["step_time"]["n"] == 7 and held["step_memory"]["n"] == 7
    print(f"held-out median error: step time {held['step_time']['median_ape']:.1f} %, "
          f"peak memory {held['step_memory']['median_ape']:.1f} %")  # shown with pytest -s
    assert held["step_time"]["median_ape"] < 10.0, held
    assert held["step_memory"]["median_ape"] < 10.0, held

    # Step 4 of examples/profile/fsdp.sh: a simulation that trains with this CPU-fitted artifact.
    from simrl.cli.main import cli as srl_cli

    sim = [*example_sim_overrides(), f"cost.training={art}", "run.training_steps=1", "workload.groups=4",
           "run.plots=false", "-q", "-o", str(tmp_path / "runs")]
    r = CliRunner().invoke(srl_cli, sim)
    assert r.exit_code == 0 and "run directory:" in r.output, r.output


def example_sim_overrides() -> list[str]:
    """The CPU simulation overrides of examples/profile/fsdp.sh (its first ``SIM=(...)``)."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "examples/profile/fsdp.sh").read_text()
    m = re.search(r"SIM=\((.*?)\)", text, re.S)
    assert m, "examples/profile/fsdp.sh: no SIM=(...) overrides"
    args = shlex.split(m.group(1))
    assert "deployment.training.gpu=cpu" in args
    return args



def test_example_and_docs_profile_the_tested_grid():
    """examples/profile/fsdp.sh and docs/profiling.md run the grid the held-out test asserts on."""
    import shlex
    from pathlib import Path

    import benchmarks.fsdp_profile as bench

    root = Path(__file__).resolve().parents[2]
    for path in (root / "examples/profile/fsdp.sh", root / "docs/profiling.md"):
        text = path.read_text().replace("\\\n", " ")
        line = next(x for x in text.splitlines() if "srl-profile\" fsdp --world-sizes" in x
                    or x.startswith("srl-profile fsdp --world-sizes"))
        args = shlex.split(line)
        args = args[args.index("fsdp") + 1:]
        assert args[:len(bench.PROFILE_ARGS)] == bench.PROFILE_ARGS, path.name
        fit = next(x for x in text.splitlines() if "srl-regress" in x and "fit --family fsdp" in x)
        assert "--gpu" not in fit, path.name  # CPU observations need no GPU option
