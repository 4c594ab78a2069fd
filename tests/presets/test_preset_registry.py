"""Presets arrive through the ``simrl.policies`` entry points; the seam never imports them."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import attrs
import pytest
from simhelpers import linear_costs, random_workload

from simrl.config import load_config
from simrl.engine.core import SimulationError
from simrl.engine.sim import build_simulation
from simrl.policy import PolicyError
from simrl.policy.builtin import SyncPolicy
from simrl.policy.registry import ENTRY_POINT_GROUP, entry_point_kinds, policy_class, policy_kinds

ROOT = Path(__file__).resolve().parents[2]


def declared() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["entry-points"][ENTRY_POINT_GROUP]


def test_every_preset_module_is_declared_once_under_its_kind():
    modules = sorted(p.stem for p in (ROOT / "presets").glob("*.py") if not p.stem.startswith("_"))
    eps = declared()
    assert sorted(v.split(":")[0] for v in eps.values()) == [f"presets.{m}" for m in modules]
    for kind in eps:
        assert policy_class(kind).kind == kind


def test_the_installed_entry_points_match_pyproject():
    assert entry_point_kinds() == sorted(declared()), (
        "the installed metadata is older than pyproject.toml; reinstall: pip install -e '.[dev,fast]'")


def test_listing_kinds_imports_no_preset_and_lookup_loads_one():
    code = ("import sys; from simrl.policy.registry import policy_kinds, policy_class\n"
            "kinds = policy_kinds(); assert 'psrl' in kinds and 'sync' in kinds, kinds\n"
            "assert not any(m.split('.')[0] == 'presets' for m in sys.modules), 'listing imported presets'\n"
            "assert policy_class('skyrl').__module__ == 'presets.skyrl'\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "simrl", capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_an_unknown_kind_is_a_key_error_and_kinds_are_sorted():
    with pytest.raises(KeyError):
        policy_class("no_such_system")
    assert policy_kinds() == sorted(policy_kinds())


def test_a_policy_error_leaves_the_engine_as_a_simulation_error():
    assert not issubclass(PolicyError, SimulationError)

    class Failing(SyncPolicy):
        def form_batch(self, st):
            raise PolicyError("no batch can ever form")

    sim = build_simulation(attrs.evolve(load_config(), policy=Failing()), random_workload(groups=4),
                           linear_costs())
    with pytest.raises(SimulationError, match="no batch can ever form") as info:
        sim.run()
    assert isinstance(info.value.__cause__, PolicyError)
