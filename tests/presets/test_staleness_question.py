"""`srl --staleness N`: every preset answers with its own knob, at its nearest meaning."""

import json

import pytest
from click.testing import CliRunner

from presets._staleness import resolve_staleness, staleness_overrides
from simrl.cli.main import cli
from simrl.config import load_config
from simrl.policy import PolicyError
from simrl.policy.registry import policy_kinds


def KIND(overrides):  # noqa: N802 - the CLI's reading: the loaded configuration's policy kind
    return load_config(overrides=overrides).policy.kind


#: presets whose knob cannot express the asked bound exactly (the answer says so)
NOT_BOUNDED_AT_2 = {"verl", "slime"}


@pytest.mark.parametrize("kind", [k for k in policy_kinds() if k != "sync" and not k.startswith("_")])
def test_every_preset_declares_the_asked_bound_or_says_it_has_none(kind):
    ans = staleness_overrides(kind, 2)
    assert ans.overrides and all(o.startswith("policy.") for o in ans.overrides)
    policy = load_config(overrides=[f"policy={kind}", *ans.overrides]).policy
    if kind in NOT_BOUNDED_AT_2:
        assert not ans.bounded and "no per-sample bound" in ans.message()
        assert policy.staleness_spec.bound != 2
    else:
        # The knob set is the preset's own bound: the declared Staleness reads N.
        assert ans.bounded and policy.staleness_spec.bound == 2, (kind, ans.overrides, policy.staleness_spec)


def test_knob_translations_follow_each_upstream_meaning():
    # verl V1's threshold counts the version being trained: bound 2 -> threshold 3; Dressage
    # keeps the last K versions: bound 2 -> K = 3; verl's threshold is a sample budget.
    assert "policy.max_off_policy_threshold=3" in staleness_overrides("verl_v1", 2).overrides
    assert staleness_overrides("dressage", 2).overrides == ("policy.dressage_staleness_keep_versions=3",)
    assert "sample budget" in staleness_overrides("verl", 2).note
    # no bound below 1 exists for these knobs: the nearest is taken and said
    assert staleness_overrides("openrlhf", 0).overrides == ("policy.async_queue_size=1",)
    assert "nearest bound is 1" in staleness_overrides("nemo_rl", 0).note
    with pytest.raises(PolicyError, match="bounded_async"):
        staleness_overrides("sync", 2)


def test_shorthand_is_the_option_and_conflicts_are_refused():
    out, ans = resolve_staleness(["policy=skyrl", "staleness=3"], None, KIND)
    assert out == ["policy=skyrl", "policy.max_staleness_steps=3"] and ans.n == 3
    assert resolve_staleness(["policy=psrl"], None, KIND) == (["policy=psrl"], None)
    with pytest.raises(PolicyError, match="given twice"):
        resolve_staleness(["policy=psrl", "staleness=3"], 2, KIND)
    with pytest.raises(PolicyError, match="conflicts"):
        resolve_staleness(["policy=trl", "policy.max_staleness=3"], 1, KIND)
    with pytest.raises(PolicyError, match="did you mean 'staleness'"):
        resolve_staleness(["stalenes=2"], None, KIND)


def test_cli_prints_the_knob_and_the_staleness_reached(tmp_path):
    res = CliRunner().invoke(cli, ["--staleness", "2", "policy=verl", "run.training_steps=1", "workload.groups=40",
                                   "run.plots=false", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "policy.staleness_threshold=2.0" in res.output and "sample budget" in res.output
    assert "staleness asked 2: reached max" in res.output
    bad = CliRunner().invoke(cli, ["stalenes=2", "-o", str(tmp_path)])
    assert bad.exit_code != 0 and "did you mean 'staleness'" in bad.output


def test_json_output_stays_one_document_with_the_knob_note_on_stderr(tmp_path):
    res = CliRunner().invoke(cli, ["--staleness", "2", "policy=areal", "run.training_steps=1",
                                                   "workload.groups=40", "run.plots=false", "-o", str(tmp_path),
                                                   "--json"])
    assert res.exit_code == 0, res.output + res.stderr
    doc = json.loads(res.stdout)  # nothing but the JSON document on stdout
    assert doc["totals"]["staleness_bound"] == 2
    assert "policy.max_head_offpolicyness=2" in res.stderr
