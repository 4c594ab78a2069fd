"""The ./bench launcher, per-turn prompt sizing, and the Kubernetes pod script stopping on a failed check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.backends.forced import FILLER, sized_text
from harness.k8s import K8sOptions, pod_script

ROOT = Path(__file__).resolve().parents[2]


def test_launcher_runs_bench_from_any_directory(tmp_path):
    env = dict(os.environ, BENCH_PYTHON=sys.executable)
    out = subprocess.run([str(ROOT / "bench"), "plan"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("suite comparison: 8 runs")
    bad = subprocess.run([str(ROOT / "bench"), "validate", str(tmp_path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no manifest.json" in bad.stderr and "Traceback" not in bad.stderr


class Template:
    """A chat template: each message costs 3 tokens + its words; the generation prompt 2 more."""

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True, **_kw):
        n = sum(3 + len(m["content"].split()) for m in messages) + (2 if add_generation_prompt else 0)
        return list(range(n))


def test_each_turn_is_sized_to_its_scheduled_whole_prompt():
    tok = Template()
    # Turn 0: scheduled prompt 100 -> 100 - 3 - 2 = 95 filler words.
    m0 = sized_text(tok, [], 100)
    assert m0 == FILLER * 95
    # The assistant answered 40 tokens; turn 1 adds 30 new tokens: scheduled prompt 100 + 40 + 30 = 170.
    # The conversation so far templates to 3 + 95 + 3 + 40 = 141 (+2 generation prompt for the new one),
    # so the observation is 170 - 141 - 3 - 2 = 24 words: not empty, as sizing to the 30 new tokens
    # against the whole conversation would make it.
    history = [{"role": "user", "content": m0}, {"role": "assistant", "content": " x" * 40}]
    m1 = sized_text(tok, history, 170)
    assert m1 == FILLER * 24
    assert len(tok.apply_chat_template([*history, {"role": "user", "content": m1}])) == 170
    assert sized_text(tok, history, 30) == ""  # the old call: the whole conversation already exceeds 30


def test_pod_script_stops_at_a_failed_check(tmp_path):
    work = tmp_path / "w"
    (work).mkdir()
    (work / "release").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bin_dir / "python").write_text(f"#!/bin/sh\necho ran >> {tmp_path}/python-ran\n")
    (bin_dir / "python").chmod(0o755)
    o = K8sOptions(backend="art", name="n", image="r/i@sha256:" + "a" * 64, provenance={}, output=str(tmp_path))
    script = pod_script(o).replace("/rl-bench", str(work))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", BENCH_PYTHON_SHA256="s",
               EXPECTED_SOURCE_SHA256="s", BENCH_RECIPE_SHA256="r", EXPECTED_RECIPE_SHA256="r")
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 9, out.stderr
    assert (work / "done").read_text().strip() == "9"
    assert "pod check failed" in out.stderr
    assert not (tmp_path / "python-ran").exists()  # no CUDA smoke test, no benchmark after the failure
