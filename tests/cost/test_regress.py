"""`srl-profile import vidur` and `srl-regress fit / eval / show` through click's CliRunner."""

import json
from pathlib import Path

from click.testing import CliRunner
from simhelpers import VIDUR_DATA

from adapters.cli import cli as profile_cli
from simrl.cli.regress import cli as regress_cli

PHI2 = VIDUR_DATA / "compute/h100/microsoft/phi-2/mlp.csv"


def test_import_fit_eval_show(tmp_path):
    r = CliRunner()
    obs, art = str(tmp_path / "obs.jsonl"), str(tmp_path / "art.json")
    res = r.invoke(profile_cli, ["import", "vidur", str(PHI2), "-o", obs])
    assert res.exit_code == 0, res.output
    assert "wrote 2349 observations" in res.output
    res = r.invoke(regress_cli, ["fit", "--family", "composed", "--obs", obs, "-o", art, "--kfold", "3"])
    assert res.exit_code == 0, res.output
    assert "3-fold cross-validation" in res.output
    kf = json.loads(Path(art).read_text())["fit_quality"]["kfold"]
    assert kf["overall"]["median_ape"] < 3.0
    res = r.invoke(regress_cli, ["eval", art, "--obs", obs, "--json"])
    assert res.exit_code == 0 and "mlp_up_proj" in json.loads(res.output)["per_group"]
    res = r.invoke(regress_cli, ["show", art])
    assert res.exit_code == 0 and "rollout / composed" in res.output and "domain num_tokens" in res.output


def test_user_errors_exit_2(tmp_path):
    r = CliRunner()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": "nope"}\n')
    res = r.invoke(regress_cli, ["fit", "--family", "psrl", "--obs", str(bad), "-o", str(tmp_path / "a.json")])
    assert res.exit_code == 2 and "bad.jsonl:1" in res.output and "'schema'" in res.output
    (tmp_path / "a.json").write_text("{}")
    res = r.invoke(regress_cli, ["show", str(tmp_path / "a.json")])
    assert res.exit_code == 2 and "missing key 'schema'" in res.output
