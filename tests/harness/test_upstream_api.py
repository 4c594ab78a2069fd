"""The drivers against the committed upstream API check (no network): every item a driver uses
was verified against the recorded source, and the checker itself catches a missing field or a
changed signature."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from harness import pins as P

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_upstream_api", ROOT / "scripts" / "check_upstream_api.py")
chk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chk)


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads((ROOT / "harness" / "pins_api_check.json").read_text())


def test_record_is_of_the_pinned_sources(record):
    assert record["sources"] == json.loads(json.dumps(P.UPSTREAM))


@pytest.mark.parametrize("backend", ["art", "skyrl"])
def test_every_item_the_driver_uses_was_checked_and_passed(record, backend):
    checked = {r["item"]: r for r in record["backends"][backend]}
    used = chk.used_items(backend)
    assert sorted(checked) == used, "driver changed since the upstream check: rerun scripts/check_upstream_api.py"
    assert all(checked[i]["ok"] for i in used), [checked[i] for i in used if not checked[i]["ok"]]


def test_skyrl_overrides_name_no_removed_keys():
    keys = chk.skyrl_config_keys()
    assert "trainer.fully_async.enabled" in keys
    for gone in ("generator.num_inference_engines", "trainer.max_steps", "generator.async_engine"):
        assert gone not in keys
    assert not [k for k in keys if k.startswith("+")]


def test_the_checker_catches_drift(tmp_path):
    pkg = tmp_path / "up" / "lib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cfg.py").write_text(
        "from dataclasses import dataclass, field\n"
        "@dataclass\nclass Inner:\n    rank: int = 0\n"
        "@dataclass\nclass Root:\n    inner: Inner = field(default_factory=Inner)\n    name: str = 'x'\n"
        "class T:\n    async def run(self, batch, *, fast=False):\n        return 'metric/a'\n")
    src = chk.Source(tmp_path / "up", ".")
    assert chk.check_symbol(src, "lib.cfg:T.run(self, batch, *, fast)")[0]
    ok, detail = chk.check_symbol(src, "lib.cfg:T.run(self, batch)")
    assert not ok and "signature" in detail
    assert not chk.check_symbol(src, "lib.cfg:T.gone")[0]
    assert chk.check_config_key(src, "lib.cfg:Root", "inner.rank")[0]
    assert not chk.check_config_key(src, "lib.cfg:Root", "inner.alpha")[0]
    assert chk.check_string(src, "lib.cfg", "metric/a")[0]
    assert not chk.check_string(src, "lib.cfg", "metric/b")[0]
