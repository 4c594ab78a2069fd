"""srl-profile is an app of the shared CLI (docs/cli.md): -h, -q/-v, --json, -o, exit codes."""

from __future__ import annotations

from click.testing import CliRunner

from adapters.cli import cli


def test_help_and_common_options_on_every_command():
    r = CliRunner()
    assert r.invoke(cli, ["-h"]).exit_code == 0
    for cmd in (["import", "vidur"], ["kernels"], ["kv-probe"]):
        res = r.invoke(cli, [*cmd, "-h"])
        assert res.exit_code == 0, cmd
        for opt in ("-q, --quiet", "-v, --verbose", "--json", "-o, --output"):
            assert opt in res.output, (cmd, opt)
    for cmd in (["fsdp"], ["vllm"], ["weight-sync"], ["megatron"]):
        res = r.invoke(cli, [*cmd, "-h"])
        assert res.exit_code == 0, cmd
        for opt in ("-q, --quiet", "-v, --verbose", "--json", "-o, --output"):
            assert opt in res.output, (cmd, opt)
    for cmd in (["fetch", "vidur"],):
        res = r.invoke(cli, [*cmd, "-h"])
        assert res.exit_code == 0, cmd
        for opt in ("-q, --quiet", "-v, --verbose", "-o, --output"):
            assert opt in res.output, (cmd, opt)


def test_user_errors_exit_2_without_traceback(tmp_path):
    res = CliRunner().invoke(cli, ["import", "vidur", str(tmp_path / "missing"), "-o", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 2 and "does not exist" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["kernels", "--model", "no-such-model", "--device", "cpu", "-o",
                                   str(tmp_path / "k.jsonl")])
    assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output
