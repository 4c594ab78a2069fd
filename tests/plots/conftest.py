"""A small simulated run with plots, made once per test module (the default scenario, 2 steps)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from simrl.cli.main import cli


@pytest.fixture(scope="module")
def plotted_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    res = CliRunner().invoke(cli, [f"run.output_dir={out}", "run.name=small", "run.training_steps=2", "--quiet"])
    assert res.exit_code == 0, res.output
    return out / "small"
