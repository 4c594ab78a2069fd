"""A small simulated run (no plots), made once per test module."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from simrl.cli.main import cli


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    res = CliRunner().invoke(cli, [f"run.output_dir={out}", "run.name=sim", "run.plots=false", "--quiet"])
    assert res.exit_code == 0, res.output
    return out / "sim"
