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


def test_fit_reports_progress_per_fold(tmp_path, monkeypatch):
    """`srl-regress fit --kfold K` drives the progress display: the full fit, then each fold."""
    import contextlib

    import simrl.cli.regress as regress

    seen = []

    @contextlib.contextmanager
    def recording_watch(poll, label, **kw):
        seen.append((label, poll()))
        yield
        seen.append((label, poll()))

    monkeypatch.setattr(regress, "watch", recording_watch)
    calls = []
    monkeypatch.setattr(regress, "fit_artifact", _spy(regress.fit_artifact, calls))
    r = CliRunner()
    obs, art = str(tmp_path / "obs.jsonl"), str(tmp_path / "art.json")
    assert r.invoke(profile_cli, ["import", "vidur", str(PHI2), "-o", obs]).exit_code == 0
    res = r.invoke(regress_cli, ["fit", "--family", "composed", "--obs", obs, "-o", art, "--kfold", "3"])
    assert res.exit_code == 0, res.output
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]  # the full fit, then folds 1..3
    assert seen[0] == ("fitting composed", ("fitting on every observation (then 3 folds)", 0.0))
    assert seen[-1] == ("fitting composed", ("fold 3/3 cross-validated", 1.0))
    assert regress.fit_progress(2, 4, 3) == ("fold 1/3 cross-validated", 0.5)
    assert regress.fit_progress(1, 1, 0) == ("fitted", 1.0)


def _spy(fit_artifact, calls):
    def wrapped(*a, progress=None, **kw):
        def both(i, total):
            calls.append((i, total))
            progress(i, total)

        return fit_artifact(*a, progress=both, **kw)

    return wrapped
