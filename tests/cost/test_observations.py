"""Observation schema: round trip, SI units, rejection with line and field."""

import json

import pytest

from simrl.cost.observations import SCHEMA, ObservationError, make, read_observations, write_observations

PROV = {"hardware": "H100", "source": "test", "date": "2026-01-01"}


def _rec(**over):
    rec = {"schema": SCHEMA, "kind": "iteration", "inputs": {"batch_size": 4, "kv_tokens": 100, "prefill_tokens": 0},
           "value": 12.5, "spread": 0.5, "unit": "ms", "provenance": PROV}
    rec.update(over)
    return rec


def _write(tmp_path, recs):
    p = tmp_path / "obs.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


def test_round_trip_normalises_units(tmp_path):
    p = _write(tmp_path, [_rec()])
    (ob,) = read_observations(p)
    assert ob.value == pytest.approx(0.0125) and ob.unit == "s" and ob.spread == pytest.approx(5e-4)
    out = tmp_path / "again.jsonl"
    assert write_observations(out, [ob]) == 1
    assert read_observations(out) == [ob]


@pytest.mark.parametrize("bad, field", [
    (dict(schema="simrl.observation.v0"), "schema"),
    (dict(kind="magic"), "kind"),
    (dict(unit="furlongs"), "unit"),
    (dict(unit="bytes"), "unit"),  # iterations measure time
    (dict(value=float("nan")), "value"),
    (dict(value=-1.0), "value"),
    (dict(inputs={"batch_size": 4, "kv_tokens": 100}), "inputs.prefill_tokens"),
    (dict(inputs={"batch_size": "four", "kv_tokens": 1, "prefill_tokens": 0}), "inputs.batch_size"),
    (dict(provenance={"hardware": "H100", "date": "x"}), "provenance.source"),
    (dict(extra=1), "extra"),
])
def test_rejects_with_line_and_field(tmp_path, bad, field):
    p = _write(tmp_path, [_rec(), _rec(**bad)])
    with pytest.raises(ObservationError) as exc:
        read_observations(p)
    assert f"{p}:2:" in str(exc.value) and repr(field) in str(exc.value)


def test_rejects_bad_json_with_line(tmp_path):
    p = tmp_path / "o.jsonl"
    p.write_text(json.dumps(_rec()) + "\n{not json\n")
    with pytest.raises(ObservationError, match=r"o.jsonl:2: not valid JSON"):
        read_observations(p)


def test_operator_needs_a_name():
    with pytest.raises(ObservationError, match="'name'"):
        make("operator", 1e-3, "s", {"num_tokens": 1, "tp": 1, "n_embd": 8, "n_head": 1, "n_kv_head": 1,
                                     "n_expanded_embd": 8, "vocab_size": 8, "use_gated_mlp": True}, PROV)
