"""`srl-profile` group: the help lists both profilers, and importing the CLI pulls in no torch/vllm."""

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from adapters.cli import cli as profile_cli

REPO = Path(__file__).resolve().parents[2]


def test_help_epilog_mentions_the_profilers():
    res = CliRunner().invoke(profile_cli, ["--help"])
    assert res.exit_code == 0
    for text in ("srl-profile kernels", "srl-profile kv-probe", "profile-torch", "profile-vllm"):
        assert text in res.output
    for cmd in ("kernels", "kv-probe"):
        sub = CliRunner().invoke(profile_cli, [cmd, "--help"])
        assert sub.exit_code == 0 and "--model" in sub.output


def test_cli_import_is_light():
    code = ("import sys, adapters.cli, adapters.kernels, adapters.vllm_probe; "
            "bad = [m for m in ('torch', 'vllm') if m in sys.modules]; sys.exit(f'imported: {bad}' if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
