"""Fixtures for the srl-predict tests; the slow self-prediction matrix runs only with -m slow."""

from __future__ import annotations

import pytest
from predict_helpers import full_run, small_cfg


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow self-prediction matrix: run with -m slow")
    for item in items:
        if "tests/predict/" in str(item.fspath).replace("\\", "/") and item.get_closest_marker("slow"):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def psrl_run():
    cfg = small_cfg()
    return cfg, full_run(cfg)
