"""`srl-research`: registry, statistics, study files, the LLM proposer (fake local server), end to end."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml
from click.testing import CliRunner

from simrl_explore.research.agents import OfflineProposer, ResearchState, read_lessons
from simrl_explore.research.cli import main
from simrl_explore.research.llm import LLMError, LLMProposer, extract_json
from simrl_explore.research.registry import StrategyError, make_strategy, overrides_for, strategy_schema
from simrl_explore.research.stats import bootstrap_interval, sign_flip, t_interval, verdict
from simrl_explore.research.study import StudyError, dispersed_knots, parse_study

STUDY = {
    "question": "Is round_robin better than least_requests here?",
    "base": {"set": {"cost.rollout": "linear", "cost.training": "constant", "cost.weight_sync": "fixed",
                     "cost.weight_sync_knobs.publish_s": 1, "deployment.rollout.instances": 2,
                     "policy": "bounded_async", "policy.batch_groups": 2, "workload.groups": 6,
                     "workload.group_size": 2, "run.training_steps": 2}},
    "family": "router", "baseline": {"name": "least_requests"}, "candidate": {"name": "round_robin"},
    "objective": "trained_tokens_per_s", "seeds": [0, 1],
    "variation": {"name": "length_dispersion", "values": [0.0, 1.0]},
}


def test_registry_validates_and_maps_to_overrides():
    s = make_strategy("router", "kv_cache_aware", {"cache_threshold": 1, "balance_abs_threshold": 32})
    assert s.cache_threshold == 1.0 and s.to_overrides()[0] == "router.name=kv_cache_aware"
    assert "router.balance_abs_threshold=32" in s.to_overrides()
    adm = make_strategy("admission", "bounded_async", {"max_staleness": 2})
    assert overrides_for({"router": s, "admission": adm})[0] == "policy=bounded_async"  # policy kind first
    for fam, name, params, match in [("router", "nope", {}, "unknown strategy 'nope'"),
                                     ("routers", "x", {}, "unknown strategy family"),
                                     ("router", "least_requests", {"cap": 1}, r"least_requests.cap: unknown parameter"),
                                     ("router", "kv_cache_aware", {"cache_threshold": 2.0}, r"kv_cache_aware.cache_threshold: .*<= 1.0"),
                                     ("admission", "bounded_async", {"inflight_rule": "wait"}, "inflight_rule")]:
        with pytest.raises(StrategyError, match=match):
            make_strategy(fam, name, params)
    schema = strategy_schema("router")
    assert schema["router"]["kv_cache_aware"]["params"]["cache_threshold"]["search"] == [0.0, 1.0]


def test_intervals_by_hand():
    # x = 1, 2, 3: mean 2, s = 1, t_{0.975, 2} = 4.303 -> half width 4.303 / sqrt(3) = 2.4843.
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    assert m == 2 and lo == pytest.approx(2 - 2.48434, abs=1e-4) and hi == pytest.approx(2 + 2.48434, abs=1e-4)
    a = bootstrap_interval([1.0, 2.0, 3.0, 4.0], seed=1)
    assert a == bootstrap_interval([1.0, 2.0, 3.0, 4.0], seed=1) and 1 <= a[1] < 2.5 < a[2] <= 4
    assert verdict(0.1, 0.3) == "better" and verdict(-0.3, -0.1) == "worse" and verdict(-0.1, 0.2) == "inconclusive"
    # -2 at x=0, +2 at x=1: crosses zero at 0.5; zeros are skipped; no change -> None.
    assert sign_flip([0, 1, 2], [-2, 2, 3]) == 0.5 and sign_flip([0, 1, 2], [0, 1, -1]) == 1.5
    assert sign_flip([0, 1], [0, 0]) is None and sign_flip([0, 1], [1, 2]) is None


def test_dispersion_stretches_around_the_median():
    knots = [[0, 100], [0.5, 400], [1, 1600]]
    assert dispersed_knots(knots, 1.0) == "[[0,100],[0.5,400],[1,1600]]"
    assert dispersed_knots(knots, 0.0) == "[[0,400],[0.5,400],[1,400]]"
    assert dispersed_knots(knots, 2.0) == "[[0,25],[0.5,400],[1,6400]]"  # 400 * (1/4)^2, 400 * 4^2


def test_bad_studies_are_clear():
    for change, match in [({"family": "routes"}, "family"), ({"baseline": {"name": "fastest"}}, "unknown strategy"),
                          ({"seeds": [1]}, "two distinct"), ({"objectve": "x"}, "objectve: unknown key"),
                          ({"candidate": None, "proposals": 0}, "proposals > 0"),
                          ({"variation": {"name": "dispersion", "values": [1]}}, "length_dispersion"),
                          ({"search": ["fastest"]}, "search")]:
        with pytest.raises(StudyError, match=match):
            parse_study({**STUDY, **change}, "q.yaml")


def test_offline_research_end_to_end_writes_a_lesson_that_later_runs_read(tmp_path):
    q = tmp_path / "q.yaml"
    q.write_text(yaml.safe_dump({**STUDY, "proposals": 1}))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, [str(q), "-o", str(out), "--jobs", "2", "--no-optuna"])
    assert r.exit_code == 0, r.output
    lessons = read_lessons(str(out / "lessons.jsonl"))
    assert len(lessons) == 2 and lessons[0]["source"] == "stated" and lessons[1]["source"] == "bandit"
    ls = lessons[0]
    assert ls["candidate"]["name"] == "round_robin" and ls["evidence"]["runs"] == 4
    assert ls["conditions"]["variable"] == "length_dispersion" and len(ls["evidence"]["per_variation"]) == 2
    assert (out / "lessons.md").read_text().count("## ") == 2
    report = (out / "report.md").read_text()
    assert "## Answer" in report and "round_robin" in report and (out / "research.html").exists()
    # A second run reads the lessons: the bandit starts from them (it does not re-propose a tried arm
    # blindly) and the file grows by the new lesson only.
    from simrl_explore.research.study import parse_study as ps
    prop = OfflineProposer(ps({**STUDY, "proposals": 1}), lessons, use_optuna=False)
    assert sum(len(v) for v in prop.arms.values()) == 2
    r = CliRunner().invoke(main, [str(q), "-o", str(out), "--jobs", "2", "--no-optuna", "--proposals", "0"])
    assert r.exit_code == 0, r.output
    assert len(read_lessons(str(out / "lessons.jsonl"))) == 2  # same stated lesson: same id, not duplicated


class _FakeLLM(BaseHTTPRequestHandler):
    replies: list = []
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeLLM.seen.append((self.path, self.headers.get("Authorization"), body))
        content = _FakeLLM.replies.pop(0)
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture
def fake_llm():
    srv = HTTPServer(("127.0.0.1", 0), _FakeLLM)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _FakeLLM.seen.clear()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_llm_proposer_validates_before_simulating(fake_llm):
    study = parse_study({**STUDY, "candidate": None, "proposals": 1}, "q.yaml")
    env = {"SIMRL_LLM_BASE_URL": fake_llm, "SIMRL_LLM_API_KEY": "k", "SIMRL_LLM_MODEL": "m"}
    prop = LLMProposer(study, [], env=env)
    # First answer invalid (a parameter out of range): the model is asked again with the error.
    _FakeLLM.replies[:] = ['{"name": "kv_cache_aware", "params": {"cache_threshold": 3}}',
                           'Sure:\n```json\n{"name": "kv_cache_aware", "params": {"cache_threshold": 0.5},'
                           ' "rationale": "affinity"}\n```']
    p = prop.propose(ResearchState(study, []))
    assert p.strategy.name == "kv_cache_aware" and p.strategy.cache_threshold == 0.5 and p.rationale == "affinity"
    path, auth, body = _FakeLLM.seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer k" and body["model"] == "m"
    assert "kv_cache_aware" in body["messages"][0]["content"]  # the registry schema is in the prompt
    assert "cache_threshold" in _FakeLLM.seen[1][2]["messages"][-1]["content"]  # the validation error fed back
    _FakeLLM.replies[:] = ['{"name": "teleport"}', "no json at all"]
    p = prop.propose(ResearchState(study, []))
    assert p.strategy is None and "invalid LLM proposal" in p.rejected


def test_llm_settings_and_errors():
    study = parse_study(STUDY, "q.yaml")
    with pytest.raises(LLMError, match="SIMRL_LLM_BASE_URL"):
        LLMProposer(study, [], env={})
    prop = LLMProposer(study, [], env={"SIMRL_LLM_BASE_URL": "http://127.0.0.1:9/v1", "SIMRL_LLM_MODEL": "m"},
                       timeout_s=2)
    with pytest.raises(LLMError, match="chat/completions"):
        prop.propose(ResearchState(study, []))
    assert extract_json('x {"a": 1} y') == {"a": 1}


def test_optuna_proposer_is_seeded_and_reads_lessons():
    pytest.importorskip("optuna")
    study = parse_study({**STUDY, "proposals": 2}, "q.yaml")
    a = OfflineProposer(study, [])
    b = OfflineProposer(study, [])
    pa, pb = a.propose(ResearchState(study, [])), b.propose(ResearchState(study, []))
    assert a.source == "optuna" and pa.strategy == pb.strategy and pa.strategy.family == "router"
    lesson = {"family": "router", "objective": "trained_tokens_per_s", "fingerprint": {"variation": "length_dispersion"},
              "candidate": {"name": "round_robin", "params": {"active_cap": 0}},
              "evidence": {"overall": {"mean": 0.05}}}
    c = OfflineProposer(study, [lesson])
    assert len(c.opt.trials) == 1 and c.opt.trials[0].value == 0.05


def test_the_shared_cli_style():
    res = CliRunner().invoke(main, ["-h"])
    assert res.exit_code == 0
    for opt in ("-q, --quiet", "-v, --verbose", "--json", "-o, --output"):
        assert opt in res.output, opt
    res = CliRunner().invoke(main, ["no-such-question.yaml", "-o", "x"])
    assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output
