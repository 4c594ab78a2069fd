"""tests/examples: the full-size example reproductions run only when asked for (`pytest -m slow`)."""

import pytest


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="full-size example run: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
