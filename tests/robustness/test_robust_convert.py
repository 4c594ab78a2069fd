"""`srl-predict convert EVIDENCE`: a harness results directory read strictly.

Evidence lines with bytes that are not UTF-8, duplicate keys or NaN were a traceback or read
silently; each is now exit 2 naming the file and line, and no snapshot is written. The
manifest's backend (``identity.backend`` in a bench manifest) picks the policy preset.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from robust_common import check_clean_error

from simrl.cli.predict import main as predict_cli

UPDATES = [{"k": 1, "d_k": 5.0, "train_end": 8.0, "publish_end": 9.0, "group_ids": [0]}]
TURNS = [{"group": 0, "trajectory": t, "turn": 0, "prompt_tokens": 100, "completion_tokens": 20, "arrival": 0.0,
          "first_token": 0.5, "finish": 2.0 + t, "policy_version_start": 0} for t in range(4)]
SMALL = ["--set", "workload.groups=8", "--set", "workload.group_size=4"]


def _evidence(d, updates=None, turns=None, manifest=None):
    d.mkdir()
    (d / "updates.jsonl").write_bytes(updates or "".join(json.dumps(u) + "\n" for u in UPDATES).encode())
    (d / "turns.jsonl").write_bytes(turns or "".join(json.dumps(t) + "\n" for t in TURNS).encode())
    if manifest is not None:
        (d / "manifest.json").write_bytes(manifest)


def _convert(tmp_path, **files):
    ev = tmp_path / "ev"
    _evidence(ev, **files)
    out = tmp_path / "snap.json"
    return CliRunner().invoke(predict_cli, ["convert", str(ev), "--at", "1.0", "-o", str(out), *SMALL]), ev, out


def test_valid_evidence_converts_with_the_manifest_backend(tmp_path):
    res, _, out = _convert(tmp_path, manifest=json.dumps({"identity": {"backend": "skyrl"}}).encode())
    assert res.exit_code == 0, res.output
    assert out.exists() and "policy skyrl" in res.output  # identity.backend, as bench writes it


TURN_LINES = "".join(json.dumps(t) + "\n" for t in TURNS)

CASES = [
    ("turns_latin1", {"turns": TURN_LINES.encode().replace(b'"arrival"', b'"arr\xe9val"', 1)},
     ["turns.jsonl: line 1", "UTF-8"]),
    ("turns_dup_key", {"turns": TURN_LINES.replace('{"group": 0,', '{"group": 0, "group": 1,', 1).encode()},
     ["turns.jsonl: line 1", "duplicate key 'group'"]),
    ("updates_nan", {"updates": b'{"k": 1, "d_k": NaN, "train_end": 8.0, "publish_end": 9.0, "group_ids": [0]}\n'},
     ["updates.jsonl: line 1", "NaN"]),
    ("updates_deep", {"updates": b"[" * 50000 + b"]" * 50000 + b"\n"}, ["updates.jsonl: line 1", "nested too deeply"]),
    ("manifest_latin1", {"manifest": b'{"identity": {"backend": "sk\xffyrl"}}'}, ["manifest.json", "UTF-8"]),
    ("manifest_dup_key", {"manifest": b'{"identity": {"backend": "skyrl", "backend": "art"}}'},
     ["manifest.json", "duplicate key 'backend'"]),
    ("manifest_list", {"manifest": b"[1]"}, ["manifest.json", "JSON object"]),
]


@pytest.mark.parametrize("name, files, expect", CASES, ids=[c[0] for c in CASES])
def test_malformed_evidence_is_a_clean_error(tmp_path, name, files, expect):
    res, ev, out = _convert(tmp_path, **files)
    check_clean_error(res, [f"{ev}/{e}" if e.startswith(("turns", "updates", "manifest")) else e for e in expect],
                      name)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ev"]  # no snapshot, no temp file
