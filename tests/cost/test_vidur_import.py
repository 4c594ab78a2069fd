"""Vidur CSV import: counts per operator and collective, units converted to seconds and bytes."""

import collections
import csv

import pytest
from simhelpers import VIDUR_DATA

from simrl.cost.vidur_import import import_vidur

VIDUR = VIDUR_DATA


@pytest.fixture(scope="module")
def obs():
    return import_vidur(VIDUR)


def test_counts(obs):
    counts = collections.Counter((o.kind, o.name) for o in obs)
    rows = {m: sum(1 for _ in csv.DictReader(open(p))) for m, p in
            [(p.parent.name, p) for p in VIDUR.rglob("mlp.csv")]}
    assert rows == {"Llama-2-7b-hf": 1044, "Llama-2-70b-hf": 1044, "phi-2": 261}
    assert counts[("operator", "mlp_up_proj")] == 1044 + 1044 + 261
    assert counts[("operator", "post_attention_layernorm")] == 1044 + 1044  # phi-2 has none
    assert counts[("collective", "all_reduce")] == 2982 + 1988
    assert counts[("collective", "send_recv")] == 1988 + 1988


def test_units(obs):
    first = next(o for o in obs if o.kind == "operator" and o.name == "add"
                 and o.inputs["model"].endswith("Llama-2-70b-hf"))
    assert first.unit == "s" and first.value == pytest.approx(0.062e-3)  # 0.062 ms in the CSV
    ar = next(o for o in obs if o.kind == "collective")
    assert ar.inputs["size_bytes"] == 2 * ar.inputs["size_elements"]
    assert ar.provenance["source"].startswith("vidur:data/")
