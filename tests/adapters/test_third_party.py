"""third_party/install.sh: the dry run CI runs, and real idempotent clones from local repositories."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "third_party" / "install.sh"
PINS = json.loads((ROOT / "third_party" / "pins.json").read_text())
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull}
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _run(*args, env=None):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env=env or GIT_ENV)


def test_pins_are_well_formed():
    assert re.fullmatch(r"[0-9a-f]{40}", PINS["megatron_bridge"]["commit"])
    assert re.fullmatch(r"[0-9a-f]{40}", PINS["megatron_bridge"]["submodule"]["commit"])
    assert re.fullmatch(r"[0-9a-f]{7,40}", PINS["vllm"]["commit_prefix"])
    assert PINS["torch"]["cuda"].startswith("cu") and PINS["flash_attn"]["version"]
    for section in ("torch", "vllm", "megatron_bridge", "flash_attn"):
        assert PINS[section]["why"], section  # how the pin was chosen is recorded


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path):
    r = _run("--dry-run", "--dir", str(tmp_path / "tp"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"torch=={PINS['torch']['version']}" in out and PINS["torch"]["index_url"] in out
    assert f"refs/tags/{PINS['vllm']['tag']}" in out
    assert PINS["megatron_bridge"]["commit"] in out and PINS["megatron_bridge"]["submodule"]["commit"] in out
    assert f"flash-attn=={PINS['flash_attn']['version']} --no-build-isolation" in out
    assert "would run: git init" in out and out.rstrip().endswith("done (dry run)")
    assert not (tmp_path / "tp").exists()


def test_bad_input_is_refused(tmp_path):
    r = _run("--dry-run", "--only", "nope")
    assert r.returncode == 2 and "unknown step 'nope'" in r.stderr
    bad = tmp_path / "pins.json"
    bad.write_text(json.dumps({**PINS, "megatron_bridge": {**PINS["megatron_bridge"], "commit": "abc"}}))
    r = _run("--dry-run", "--pins", str(bad))
    assert r.returncode == 2 and "'abc' is not a 40-hex-digit commit" in r.stderr
    bad.write_text(json.dumps({k: v for k, v in PINS.items() if k != "flash_attn"}))
    r = _run("--dry-run", "--pins", str(bad))
    assert r.returncode == 2 and "missing key 'flash_attn.version'" in r.stderr


def _repo(path: Path, tag: str | None = None) -> str:
    path.mkdir()
    for cmd in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(path), *cmd], check=True, env=GIT_ENV)
    if tag:
        subprocess.run(["git", "-C", str(path), "tag", tag], check=True, env=GIT_ENV)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True, env=GIT_ENV).stdout.strip()


@needs_git
def test_clones_are_idempotent_and_checked(tmp_path):
    vllm_sha = _repo(tmp_path / "up-vllm", tag="v9.9.9")
    mb_sha = _repo(tmp_path / "up-mb")
    mlm_sha = _repo(tmp_path / "up-mlm")
    pins = {**PINS,
            "vllm": {**PINS["vllm"], "repo": str(tmp_path / "up-vllm"), "tag": "v9.9.9", "commit_prefix": vllm_sha[:9]},
            "megatron_bridge": {**PINS["megatron_bridge"], "repo": str(tmp_path / "up-mb"), "commit": mb_sha,
                                "submodule": {"path": "3rdparty/Megatron-LM", "repo": str(tmp_path / "up-mlm"),
                                              "commit": mlm_sha}}}
    pf = tmp_path / "pins.json"
    pf.write_text(json.dumps(pins))
    tp = tmp_path / "tp"
    args = ("--only", "vllm,megatron", "--pins", str(pf), "--dir", str(tp))
    r = _run(*args)
    assert r.returncode == 0, r.stderr
    assert "clone" in r.stdout
    head = lambda p: subprocess.run(["git", "-C", str(p), "rev-parse", "HEAD"], capture_output=True,  # noqa: E731
                                    text=True, env=GIT_ENV).stdout.strip()
    assert head(tp / "vllm") == vllm_sha and head(tp / "Megatron-Bridge") == mb_sha
    assert head(tp / "Megatron-Bridge/3rdparty/Megatron-LM") == mlm_sha
    again = _run(*args)
    assert again.returncode == 0 and again.stdout.count("already at") == 3 and "+ git" not in again.stdout
    # A clone at another commit is refused, not overwritten.
    pins["vllm"]["commit_prefix"] = "0" * 9
    pf.write_text(json.dumps(pins))
    r = _run(*args)
    assert r.returncode == 2 and "not the pinned 000000000" in r.stderr
    assert head(tp / "vllm") == vllm_sha
