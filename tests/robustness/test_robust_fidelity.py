"""Malformed fidelity cards through the real entry point, ``benchmarks/fidelity.py``'s ``main``.

Each case is one card directory holding one malformed card (a valid card edited): exit status 2,
no traceback, a message naming the file and the key (or line), nothing simulated, nothing written.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VALID = ROOT / "benchmarks" / "fidelity_cards" / "nemo_rl_llama31_8b_1off.yaml"
NAME = "card.yaml"


def _load():
    spec = importlib.util.spec_from_file_location("simrl_fidelity_robust", ROOT / "benchmarks" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fid = _load()


def card(edit) -> str:
    """The valid card after ``edit(data)`` (in place), as YAML text."""
    data = yaml.safe_load(VALID.read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def _set(*path, value):
    def edit(d):
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _base(*extra):
    return lambda d: d["mapping"]["base"].extend(extra)


CASES = [
    ("empty", "", [NAME, "mapping"]),
    ("latin1", "id: caf\xe9\n".encode("latin-1"), [f"{NAME}:1", "UTF-8"]),
    ("nul_byte", "id: a\n\x00\n", [f"{NAME}:2", "NUL"]),
    ("bad_yaml", "id: [a,\n", [f"{NAME}:", "not valid YAML"]),
    ("duplicate_key", "id: a\nid: b\n", [f"{NAME}:2", "duplicate key 'id'"]),
    ("top_list", "- 1\n", [NAME, "expected a mapping"]),
    ("top_typo", card(lambda d: d.update(publsihed=d.pop("published"))), [NAME, "publsihed"]),
    ("step_time_nan", card(_set("published", "step_time_s", "sync", value=float("nan"))),
     ["published.step_time_s.sync", "finite"]),
    ("step_time_inf", card(_set("published", "step_time_s", "sync", value=float("inf"))),
     ["published.step_time_s.sync"]),
    ("step_time_bool", card(_set("published", "step_time_s", "sync", value=True)), ["published.step_time_s.sync"]),
    ("step_time_str", card(_set("published", "step_time_s", "sync", value="97.7")), ["published.step_time_s.sync"]),
    ("step_time_run_typo", card(lambda d: d["published"]["step_time_s"].update(snyc=1.0)),
     ["published.step_time_s.snyc", "no such run"]),
    ("length_nan", card(_set("mapping", "lengths", "mean_sequence_tokens", "sync", value=float("nan"))),
     ["mapping.lengths.mean_sequence_tokens", "sync"]),
    ("length_zero", card(_set("mapping", "lengths", "mean_sequence_tokens", value=0)),
     ["mapping.lengths.mean_sequence_tokens"]),
    ("length_both", card(lambda d: d["mapping"]["lengths"].update(mean_response_tokens=500)),
     ["mapping.lengths", "exactly one"]),
    ("length_typo", card(lambda d: d["mapping"]["lengths"].update(mean_respones_tokens=500)),
     ["mapping.lengths", "mean_respones_tokens"]),
    ("training_steps_bool", card(_set("mapping", "training_steps", value=True)), ["training_steps"]),
    ("warmup_float", card(_set("mapping", "warmup_steps", value=1.5)), ["warmup_steps"]),
    ("ratio_value_nan", card(lambda d: d["published"]["ratios"][0].update(value=float("nan"))),
     ["published.ratios[0].value"]),
    ("ratio_value_str", card(lambda d: d["published"]["ratios"][0].update(value="1.3")),
     ["published.ratios[0].value"]),
    ("ratio_kind", card(lambda d: d["published"]["ratios"][0].update(kind="speed")), ["published.ratios[0].kind"]),
    ("ratios_mapping", card(_set("published", "ratios", value={"a": 1})), ["published.ratios", "list"]),
    ("settings_from_mapping", card(_set("source", "settings_from", value=["a/b@c x", {"a/b@c y (note": "z)"}])),
     ["source.settings_from"]),
    ("settings_list", card(_set("published", "settings", value=[1])), ["published.settings"]),
    ("missing_string", card(_set("missing", value="prefix caching")), ["missing", "list"]),
    ("missing_required", card(lambda d: d.pop("missing")), ["missing required key(s) missing"]),
    ("system_int", card(_set("system", value=3)), ["system"]),
    ("commit_not_hex", card(_set("source", "commit", value="zzzzzzzz")), ["source.commit"]),
    ("override_typo", card(_base("deployment.rollout.tpp=4")), ["mapping.runs.", "deployment.rollout.tpp"]),
    ("override_tp_heads", card(lambda d: d["mapping"]["runs"]["sync"].append("deployment.rollout.tp=3")),
     ["mapping.runs.sync", "deployment.rollout.tp"]),
    ("override_knob_enum", card(_base("cost.training_knobs.dp_balance=batchh")),
     ["mapping.runs.", "cost.training_knobs.dp_balance"]),
    ("override_knob_type", card(_base("cost.rollout_knobs.enforce_eager=2")),
     ["mapping.runs.", "cost.rollout_knobs.enforce_eager"]),
    ("override_not_kv", card(lambda d: d["mapping"]["runs"]["sync"].append("policy")), ["mapping.runs.sync"]),
]


def _main(argv, capsys):
    rc = fid.main(argv)
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize("name, content, expect", CASES, ids=[c[0] for c in CASES])
def test_malformed_card_is_a_clean_error(tmp_path, capsys, name, content, expect):
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / NAME).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    out = tmp_path / "out.json"
    rc, text = _main(["--cards", str(cards), "--quiet", "--json", str(out)], capsys)
    assert rc == 2, f"{name}: exit {rc}\n{text}"
    assert "Traceback" not in text and "simulating" not in text, text
    for e in [NAME, *expect]:
        assert e in text, f"{name}: message does not name {e!r}:\n{text}"
    assert not out.exists()


def test_valid_card_passes_the_load_checks(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / NAME).write_text(card(lambda d: None), encoding="utf-8")
    assert [c["id"] for c in fid.load_cards(cards)] == [yaml.safe_load(VALID.read_text())["id"]]


@pytest.mark.parametrize("argv, expect", [
    (["--cards", "{tmp}/nope"], ["--cards", "not a directory"]),
    (["--cards", "{tmp}", "--json", "{tmp}"], ["--json", "existing directory"]),
    (["--cards", "{tmp}", "--json", "{tmp}/no/such/dir/x.json"], ["--json"]),
    (["--cards", "{tmp}"], ["no *.yaml cards"]),
    (["--only", "nope-card"], ["--only", "nope-card"]),
], ids=["cards_missing", "json_is_dir", "json_parent_missing", "cards_empty", "only_unknown"])
def test_malformed_fidelity_options(tmp_path, capsys, argv, expect):
    rc, text = _main([a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--quiet"], capsys)
    assert rc == 2, text
    for e in expect:
        assert e in text, text
