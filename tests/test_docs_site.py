"""The docs site builds with every warning an error, its CLI reference comes from the click commands,
and the srl-profile / srl-regress command lines in the profiling docs and examples are real."""

import importlib.util
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import click
import pytest

from adapters.cli import cli as profile_cli
from simrl.cli.regress import cli as regress_cli

ROOT = Path(__file__).resolve().parents[1]
HAS_MKDOCS = importlib.util.find_spec("mkdocs") is not None and importlib.util.find_spec("mkdocs_click") is not None
CHECKED = [ROOT / "docs/profiling.md", ROOT / "docs/observations.md", *sorted((ROOT / "examples/profile").glob("[!_]*.sh"))]
PROGRAMS = {"srl-profile": profile_cli, "srl-regress": regress_cli}


@pytest.mark.skipif(not HAS_MKDOCS or shutil.which("make") is None, reason="mkdocs (the dev extra) or make missing")
def test_strict_build_and_generated_cli_reference(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run(["make", "-C", str(ROOT / "docs"), "strict", f"SITE={site}"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (site / "cli/srl-profile/index.html").read_text()
    for name in profile_cli.commands:  # every subcommand of the click group is on the page
        assert f"srl-profile {name}" in page, name
    assert "--world-sizes" in page and "--seq-lens" in page  # options come from the click params


def _code(path: Path) -> str:
    """Fenced code blocks of a Markdown file; the non-comment lines of a shell script."""
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if path.suffix == ".md":
            if line.startswith("```"):
                inside = not inside
                lines.append("")
                continue
            lines.append(line if inside else "")
        else:
            lines.append("" if line.lstrip().startswith("#") else line)
    return "\n".join(lines)


def _command_lines(path: Path):
    text = _code(path).replace("\\\n", " ")
    for n, line in enumerate(text.splitlines(), 1):
        for prog in PROGRAMS:
            if re.search(rf"(^|[\s/\"`]){prog}[\"']?\s", line):
                yield n, prog, line


def _resolve(prog: str, tokens: list[str]) -> click.Command:
    cmd = PROGRAMS[prog]
    while isinstance(cmd, click.Group) and tokens and not tokens[0].startswith("-"):
        name = tokens.pop(0)
        assert name in cmd.commands, f"{prog}: no subcommand {name!r}"
        cmd = cmd.commands[name]
    return cmd


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: p.name)
def test_documented_command_lines_are_real(path):
    found = 0
    for n, prog, line in _command_lines(path):
        try:
            toks = shlex.split(line, comments=True)
        except ValueError:
            toks = line.split()
        start = next(i for i, t in enumerate(toks) if t.endswith(prog))
        rest = [t for t in toks[start + 1:] if t not in ("|", "&&")]
        if any(t in ("|", "&&", ";") for t in toks[start + 1:]):
            rest = rest[: next((i for i, t in enumerate(rest) if t.endswith(tuple(PROGRAMS))), len(rest))]
        cmd = _resolve(prog, rest)
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        for tok in rest:
            if tok.startswith("--") and not tok.startswith("--)"):
                opt = tok.split("=", 1)[0].strip("[]")
                assert opt in known, f"{path.name}:{n}: {prog} {cmd.name}: no option {opt}"
        found += 1
    assert found, f"{path.name}: no command lines found"
