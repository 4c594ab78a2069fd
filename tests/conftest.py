"""Test fixtures; the helpers themselves live in `simhelpers` (import them from there)."""

import pytest
from simhelpers import (  # noqa: F401  (re-exported for tests that import from conftest)
    Costs,
    linear_costs,
    multi_turn_workload,
    random_workload,
    run_sim,
)

import simrl_fast  # noqa: F401, I001  (sets XLA_FLAGS before any test starts jax: no fused multiply-adds)


@pytest.fixture
def sim_runner():
    return run_sim


@pytest.fixture(scope="session")
def default_run_dir(tmp_path_factory):
    """The default scenario (no plots), simulated once per test session: its run directory."""
    from click.testing import CliRunner

    from simrl.cli.main import cli

    out = tmp_path_factory.mktemp("default-run")
    res = CliRunner().invoke(cli, [f"run.output_dir={out}", "run.name=sim", "run.plots=false", "--quiet"])
    assert res.exit_code == 0, res.output
    return out / "sim"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (long matrices, full-size examples, profiler runs) run only with ``-m slow``."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="marked slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
