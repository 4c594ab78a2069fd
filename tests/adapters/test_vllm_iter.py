"""`srl-profile vllm`: the pure parts, and the driving loop end to end against a fake engine."""

import sys
import types

import pytest
from click.testing import CliRunner

from adapters import vllm_iter as vi
from adapters.cli import cli
from simrl.cost.fit import fit_artifact

PROV = {"hardware": "NVIDIA H100 (fake)", "source": "test", "date": "2026-01-01"}


class FakeEngine:
    """Continuous batching with a token budget and a KV pool, reporting like vLLM 0.33's core.

    Each step: running requests decode one token each; waiting ones are admitted while the
    sequence limit, the token budget (prefill in full, no chunking) and the KV pool allow. The
    step time is a made-up function of the batch (the test checks it is carried, not modelled).
    """

    def __init__(self, recorder, max_num_seqs=4, budget=2048, kv_capacity=4096):
        self.rec, self.max_seqs, self.budget, self.cap = recorder, max_num_seqs, budget, kv_capacity
        self.waiting, self.running, self.it = [], [], 0

    def add_request(self, rid, prompt, params):
        self.waiting.append({"id": rid, "ctx": len(prompt["prompt_token_ids"]), "left": params["max_tokens"],
                             "prefilled": False})

    def has_unfinished_requests(self):
        return bool(self.waiting or self.running)

    def step(self):
        decode = [r for r in self.running]
        budget = self.budget - len(decode)
        prefill = []
        while self.waiting and len(self.running) + len(prefill) < self.max_seqs and self.waiting[0]["ctx"] <= budget:
            r = self.waiting.pop(0)
            budget -= r["ctx"]
            prefill.append(r)
        for r in decode:
            r["ctx"] += 1
            r["left"] -= 1
        for r in prefill:
            r["left"] -= 1  # the prefill step samples the first token
            self.running.append(r)
        kv_used = sum(r["ctx"] for r in self.running)
        self.running = [r for r in self.running if r["left"] > 0]
        details = types.SimpleNamespace(
            iteration_index=self.it, num_ctx_requests=len(prefill), num_ctx_tokens=sum(r["ctx"] for r in prefill),
            num_generation_requests=len(decode), num_generation_tokens=len(decode),
            elapsed_ms=1.0 + 0.01 * sum(r["ctx"] for r in prefill) + 0.1 * len(decode), is_dummy=False)
        stats = types.SimpleNamespace(num_running_reqs=len(prefill) + len(decode), num_waiting_reqs=len(self.waiting),
                                      kv_cache_usage=kv_used / self.cap, iteration_details=details)
        self.it += 1
        self.rec.record(stats, None)
        return []


def test_scenarios_parse_and_refuse():
    assert vi.parse_scenarios("8x512x128, 1X16x2") == [vi.Scenario(8, 512, 128), vi.Scenario(1, 16, 2)]
    for bad in ("8x512", "8x0x4", "axbxc", ""):
        with pytest.raises(ValueError, match="--scenarios"):
            vi.parse_scenarios(bad)


def test_forced_requests_and_params():
    sc = vi.Scenario(3, 5, 7)
    ids = vi.forced_requests(sc, vocab_size=100, seed=1)
    assert len(ids) == 3 and all(len(p) == 5 and all(16 <= t < 100 for t in p) for p in ids)
    assert ids == vi.forced_requests(sc, 100, seed=1) and ids != vi.forced_requests(sc, 100, seed=2)
    assert vi.sampling_kwargs(sc) == {"max_tokens": 7, "min_tokens": 7, "ignore_eos": True, "temperature": 0.0}


def test_fake_engine_end_to_end_gives_iterations_psrl_fits():
    scenarios = [vi.Scenario(6, 100, 5), vi.Scenario(2, 300, 3)]
    rec = vi.IterationRecorder()
    eng = FakeEngine(rec)
    vi.drive(eng, rec, scenarios, vocab_size=1000, make_params=vi.sampling_kwargs)
    assert vi.check_forced_lengths(rec, scenarios) == []
    obs = vi.observations_from(rec, scenarios, 4096, {"model": "fake", "tp": 1}, PROV)
    # Scenario 0: 4 admitted at step 0 (max_num_seqs), 2 more at step 4 when the first 4 finish.
    first = obs[0]
    assert first.inputs["batch_size"] == 4 and first.inputs["prefill_tokens"] == 400
    assert first.inputs["decode_tokens"] == 0 and first.inputs["waiting_requests"] == 2
    assert first.inputs["kv_tokens"] == 400  # usage 400/4096 of a 4096-token pool
    assert first.value == pytest.approx((1.0 + 0.01 * 400) / 1e3)  # elapsed_ms carried, in seconds
    second = obs[1]  # 4 decoding, each with 101 tokens of context after the step
    assert second.inputs["decode_tokens"] == 4 and second.inputs["kv_tokens"] == 404
    assert "frontend_step_wall_s" in second.provenance
    # Totals: prefill 6x100 + 2x300; decode 6x4 + 2x2 (the first token comes with the prefill).
    assert sum(o.inputs["prefill_tokens"] for o in obs) == 1200
    assert sum(o.inputs["decode_tokens"] for o in obs) == 28
    art = fit_artifact("psrl", obs)
    assert art["family"] == "psrl" and art["fit_quality"]["training"]["overall"]["n"] == len(obs)


def test_mismatched_lengths_are_reported():
    rec = vi.IterationRecorder()
    rec.scenario_index = 0
    det = types.SimpleNamespace(iteration_index=0, num_ctx_requests=1, num_ctx_tokens=9, num_generation_requests=0,
                                num_generation_tokens=0, elapsed_ms=1.0, is_dummy=False)
    rec.record(types.SimpleNamespace(num_running_reqs=1, num_waiting_reqs=0, kv_cache_usage=0.1,
                                     iteration_details=det))
    bad = vi.check_forced_lengths(rec, [vi.Scenario(1, 10, 1)])
    assert len(bad) == 1 and "prefill 9 tokens (expected 10)" in bad[0]
    rec.rows[0]["kv_usage"] = 1.5
    with pytest.raises(ValueError, match="outside"):
        vi.observations_from(rec, [vi.Scenario(1, 10, 1)], 100, {}, PROV)


def test_no_details_is_a_clear_error():
    with pytest.raises(ValueError, match="enable_logging_iteration_details"):
        vi.observations_from(vi.IterationRecorder(), [vi.Scenario(1, 1, 1)], 10, {}, PROV)


def test_refuses_without_vllm_or_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    r = CliRunner().invoke(cli, ["vllm", "--model", "m", "-o", "x.jsonl"])
    assert r.exit_code == 2 and "profile-vllm" in r.output
    fake_torch = types.SimpleNamespace(__version__="0-cpu", cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setattr("adapters.kernels.require_torch", lambda: fake_torch)
    r = CliRunner().invoke(cli, ["vllm", "--model", "m", "-o", "x.jsonl"])
    assert r.exit_code == 2 and "needs a CUDA GPU" in r.output and "third_party/install.sh" in r.output
