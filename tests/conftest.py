"""Test fixtures; the helpers themselves live in `simhelpers` (import them from there)."""

import pytest
from simhelpers import (  # noqa: F401  (re-exported for tests that import from conftest)
    Costs,
    linear_costs,
    multi_turn_workload,
    random_workload,
    run_sim,
)


@pytest.fixture
def sim_runner():
    return run_sim
