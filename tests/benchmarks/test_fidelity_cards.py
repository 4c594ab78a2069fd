"""The fidelity benchmark's cards: each parses, names its source and builds a valid configuration.

Fast: no card is simulated in full. One small card-shaped run (the NeMo-RL Llama-3.1-8B card's
sync run, cut to a short workload) checks that the runner reads a step time from the report.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CARDS = ROOT / "benchmarks" / "fidelity_cards"


def _load_module():
    # Loaded by path: tests/benchmarks/ must not shadow the repository's benchmarks/ directory.
    spec = importlib.util.spec_from_file_location("simrl_fidelity_bench", ROOT / "benchmarks" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fid = _load_module()
CARD_FILES = sorted(CARDS.glob("*.yaml"))


def test_enough_cards_from_enough_systems():
    cards = fid.load_cards(CARDS)
    assert len(cards) >= 8
    assert len({c["system"] for c in cards}) >= 3
    assert len({c["id"] for c in cards}) == len(cards)


@pytest.mark.parametrize("path", CARD_FILES, ids=[p.stem for p in CARD_FILES])
def test_card_parses_names_source_and_builds(path):
    card = fid.validate_card(yaml.safe_load(path.read_text(encoding="utf-8")), path)
    card["_file"] = path.name
    src = card["source"]
    assert "/" in src["repo"] and src["file"]
    assert src.get("commit") or src.get("url")
    # Every published step time and every ratio refers to a run the card maps.
    runs = card["mapping"]["runs"]
    assert set(card["published"]["step_time_s"]) <= set(runs)
    for ratio in card["published"].get("ratios") or []:
        assert ratio["num"] in runs and ratio["den"] in runs
    for run in runs:
        # The same loader `srl` uses; a bad key or value raises ConfigError naming it.
        from simrl.config import load_config

        cfg = load_config(None, fid.run_overrides(card, run))
        assert cfg.run.training_steps == card["mapping"]["training_steps"]
        assert cfg.deployment.rollout.gpus >= 1 and cfg.deployment.training.gpus >= 1
        # The cost models build for this layout (model and GPU names resolve in the catalog).
        from simrl.cost.build import build_costs

        costs = build_costs(cfg)
        assert costs.training.step_time([1024] * 8) > 0


def _card(path_name: str) -> dict:
    path = CARDS / path_name
    return fid.validate_card(yaml.safe_load(path.read_text(encoding="utf-8")), path)


def test_bad_cards_are_rejected_with_file_and_key():
    good = _card("nemo_rl_llama31_8b_1off.yaml")
    p = Path("broken.yaml")
    bad = copy.deepcopy(good)
    del bad["source"]["repo"]
    with pytest.raises(fid.CardError, match=r"broken.yaml: source: missing required key\(s\) repo"):
        fid.validate_card(bad, p)
    bad = copy.deepcopy(good)
    bad["published"]["ratios"][0]["num"] = "nope"
    with pytest.raises(fid.CardError, match=r"published.ratios\[0\].num: no such run 'nope'"):
        fid.validate_card(bad, p)
    bad = copy.deepcopy(good)
    bad["mapping"]["runs"]["sync"] = ["policy sync"]
    with pytest.raises(fid.CardError, match=r"mapping.runs.sync: expected a list of KEY=VALUE"):
        fid.validate_card(bad, p)
    bad = copy.deepcopy(good)
    bad["published"]["step_time_s"]["sync"] = -1
    with pytest.raises(fid.CardError, match=r"step_time_s.sync: expected seconds > 0"):
        fid.validate_card(bad, p)
    bad = copy.deepcopy(good)
    bad["mapping"]["lengths"]["mean_sequence_tokens"] = {"sync": 1000}
    with pytest.raises(fid.CardError, match=r"got None for run 'async'"):
        fid.validate_card(bad, p)


def test_length_scaling_hits_the_published_mean():
    # The NeMo-RL Llama card publishes a mean sequence length of 1060 tokens for its sync run:
    # the scaled workload's mean prompt + completion is within 1 % of it.
    from simrl.engine.sim import load_workload

    card = _card("nemo_rl_llama31_8b_1off.yaml")
    card["_file"] = "nemo_rl_llama31_8b_1off.yaml"
    card["mapping"]["base"] = [o for o in card["mapping"]["base"] if not o.startswith("workload.groups")]
    card["mapping"]["base"].append("workload.groups=64")
    w = load_workload(fid.build_config(card, "sync"))
    last = w.traj_call_start[1:] - 1
    mean = float((w.call_prompt_tokens[last] + w.call_completion_tokens[last]).mean())
    assert abs(mean - 1060) / 1060 < 0.01
    assert int((w.call_prompt_tokens[last] + w.call_completion_tokens[last]).max()) <= 4096


def test_length_scaling_to_a_published_mean_response_length():
    # A source that publishes the mean response length (verl's response_length/mean) sets
    # mean_response_tokens: the scaled workload's mean completion, without the prompt, is within 1 %.
    from simrl.engine.sim import load_workload

    card = _card("nemo_rl_llama31_8b_1off.yaml")
    card["mapping"]["lengths"] = {"mean_response_tokens": 800}
    card["mapping"]["base"] = [o for o in card["mapping"]["base"] if not o.startswith("workload.groups")]
    card["mapping"]["base"].append("workload.groups=64")
    both = copy.deepcopy(card)
    both["mapping"]["lengths"]["mean_sequence_tokens"] = 1000
    with pytest.raises(fid.CardError, match=r"response.yaml: mapping.lengths: give exactly one of"):
        fid.validate_card(both, Path("response.yaml"))
    fid.validate_card(card, Path("response.yaml"))
    card["_file"] = "response.yaml"
    w = load_workload(fid.build_config(card, "sync"))
    last = w.traj_call_start[1:] - 1
    assert abs(float(w.call_completion_tokens[last].mean()) - 800) / 800 < 0.01


def test_one_small_card_simulates_and_reports_errors():
    # A cut-down copy of the Llama card (8 prompts x 32 per step, 2 steps): the runner returns a
    # positive step time per run, and the error is (simulated - published) / published.
    card = _card("nemo_rl_llama31_8b_1off.yaml")
    card["_file"] = "small"
    card["mapping"]["training_steps"], card["mapping"]["warmup_steps"] = 2, 1
    card["mapping"]["base"] = [o for o in card["mapping"]["base"] if not o.startswith("workload.groups")]
    card["mapping"]["base"].append("workload.groups=32")
    card["mapping"]["runs"]["sync"] = [o.replace("batch_groups=64", "batch_groups=8")
                                       for o in card["mapping"]["runs"]["sync"]]
    card["mapping"]["runs"]["async"] = [o.replace("num_prompts_per_step=64", "num_prompts_per_step=8")
                                        for o in card["mapping"]["runs"]["async"]]
    result = fid.evaluate([card])
    rows = {r["run"]: r for r in result["step_times"]}
    assert set(rows) == {"sync", "async"}
    for r in rows.values():
        assert r["simulated_s"] > 0
        assert r["rel_err"] == pytest.approx((r["simulated_s"] - r["published_s"]) / r["published_s"])
    (ratio,) = result["ratios"]
    assert ratio["published"] == pytest.approx(97.7 / 74.6)
    assert ratio["simulated"] == pytest.approx(rows["sync"]["simulated_s"] / rows["async"]["simulated_s"])
    assert result["medians"]["step_times_abs_rel_err"] == pytest.approx(
        sorted(abs(r["rel_err"]) for r in rows.values())[0] / 2 + sorted(abs(r["rel_err"]) for r in rows.values())[1] / 2)
    assert "nemo-rl-llama3.1-8b-1off" in result["missing_mechanisms"]


def test_verl_scaling_card_truncates_a_few_responses_at_the_cap():
    # The verl colocated scaling card's completion tail runs past max_response_length (28,672),
    # so the sync barrier waits for truncated responses as DAPO runs do. By hand from its knots:
    # P(> 16,384) = 1 - 0.999 = 0.001, linear up to 57,344, so P(>= 28,672) = 0.001 x (57,344 -
    # 28,672) / (57,344 - 16,384) = 0.0007: about 5.7 of a step's 8192 responses, none above the cap.
    from simrl.engine.sim import load_workload

    card = _card("verl_colocated_sync_scaling_7b.yaml")
    card["_file"] = "verl_colocated_sync_scaling_7b.yaml"
    w = load_workload(fid.build_config(card, "sync64"))
    last = w.traj_call_start[1:] - 1
    completion = w.call_completion_tokens[last]
    assert int(completion.max()) == 28672
    at_cap = float((completion >= 28672).mean())
    assert 0.0003 < at_cap < 0.0012, at_cap  # 0.0007 +- sampling noise over 65,536 responses
    # The card's overrides carry verl's rollout defaults and the colocated runs' own launch script
    # (offload=True, fsdp_size=2), and verl's whole-batch balance (trainer.balance_batch).
    ovr = fid.run_overrides(card, "sync64")
    assert "deployment.rollout.max_num_seqs=1024" in ovr
    assert "cost.colocated_knobs.optimizer_offload=true" in ovr
    assert "cost.training_knobs.fsdp_shard_size=2" in ovr
    assert "cost.training_knobs.dp_balance=batch" in ovr


def test_verl_async_runs_take_the_run_era_hsdp_and_their_cost_model_shards_in_pairs():
    # The fully_async runs' own scripts from before the published table (exp/.../fsdp2_fully-async_*/
    # run.sh@1fc52bb5, shell/dapo_7b_math_fsdp2_64_64.sh@26849432) set fsdp_size=2, as the colocated
    # runs' scripts do; the cards' async runs carry it, and the streaming trainer's cost model is
    # then HSDP in pairs: 16 trainer GPUs / Ulysses 4 = 4 DP ranks x 4 SP ranks = 16 reduce ranks,
    # shard group 2, 8 replicas.
    from simrl.cost.build import build_costs

    names = ["verl_fully_async_7b_32.yaml", "verl_fully_async_7b_64.yaml", "verl_fully_async_7b_128.yaml",
             "verl_staleness_sweep_7b_128.yaml"]
    for name in names:
        card = _card(name)
        for run, ovr in card["mapping"]["runs"].items():
            if run != "sync":
                assert "cost.training_knobs.fsdp_shard_size=2" in ovr, (name, run)
    card = _card(names[0])
    card["_file"] = names[0]
    tr = build_costs(fid.build_config(card, "async")).training
    assert (tr.gpus, tr.dp, tr.ulysses_sp, tr.fsdp_shard_size) == (16, 4, 4, 2)
    assert (tr._shard_group, tr._zero_group) == (16, 2)


def test_areal_cards_mean_response_is_the_published_throughput_times_step_time():
    # AReaL v0.2 publishes, for the same runs, hours per N steps (README table) and end-to-end
    # throughput (README figure thpt_comparison.png). Tokens per sequence = throughput x step time /
    # (512 x 16), by hand:
    #   7B:   26,000 x 2268 / 8192 = 7,198.2;  95,000 x 810 / 8192 = 9,393.3;  mean 8,295.8
    #   1.5B: 20,000 x 3456 / 8192 = 8,437.5;  68,000 x 993.6 / 8192 = 8,247.7;
    #         173,000 x 388.8 / 8192 = 8,210.6;  mean 8,298.6
    # Both round to the 8,300 the cards set (one value per card: the workload does not depend on
    # the GPU count).
    from simrl.engine.sim import load_workload

    thpt = {"areal_v02_7b_scaling.yaml": {"gpus32": 26e3, "gpus128": 95e3},
            "areal_v02_1p5b_scaling.yaml": {"gpus8": 20e3, "gpus32": 68e3, "gpus128": 173e3}}
    for name, by_run in thpt.items():
        card = _card(name)
        card["_file"] = name
        steps = card["published"]["step_time_s"]
        per_seq = [by_run[r] * steps[r] / 8192 for r in by_run]
        assert round(sum(per_seq) / len(per_seq), -2) == card["mapping"]["lengths"]["mean_response_tokens"] == 8300
        run = next(iter(by_run))
        ovr = fid.run_overrides(card, run)
        # AReaL v0.2's dataflow and weight path (ppo_math_exp.py, cli_args.py, model_worker.py @v0.2.0)
        assert "cost.training_knobs.reference_model=true" in ovr
        assert not any(o.startswith("cost.training_knobs.recompute_old_logprob=true") for o in ovr)
        assert "cost.weight_sync=filesystem" in ovr
    # The scaled workload (a smaller copy of the 7B card's, 256 prompts x 16) has the published mean
    # and, with rl_math's shape, truncates under the blog's 5 % at the 27,648 cap.
    card = _card("areal_v02_7b_scaling.yaml")
    card["_file"] = "areal_v02_7b_scaling.yaml"
    card["mapping"]["base"] = [o for o in card["mapping"]["base"] if not o.startswith("workload.groups")]
    card["mapping"]["base"].append("workload.groups=256")
    w = load_workload(fid.build_config(card, "gpus32"))
    completion = w.call_completion_tokens[w.traj_call_start[1:] - 1]
    assert abs(float(completion.mean()) - 8300) / 8300 < 0.01
    assert int(completion.max()) == 27648
    assert 0.02 < float((completion >= 27648).mean()) < 0.05
