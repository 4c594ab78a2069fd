"""Every command in README.md and the docs is real: extracted from the Markdown and run.

What is extracted: every line of README.md's ``bash`` blocks, every inline code span of README.md
that starts with a project command, and every line of a fenced block in docs/*.md that starts
with a project command (``srl``, ``srl-*``, ``bench``, optionally after ``$ `` or
``.venv/bin/``; an indented line continues the command above it).

How each is checked (fast: in-process through click's CliRunner, about 20 s in all):

- ``srl`` with overrides only (a simulation): run for real, shortened to one training step with
  plots off and the run directory in a temporary folder (the docs show full runs);
- ``srl config``, ``srl presets``, ``srl step --do ...``: run for real as written;
- a command whose arguments are placeholders (``NAME``, ``PATH``, ``[--opt]``, ``a|b``) or name
  input files that are not in the repository (``my.yaml``, ``obs.jsonl``): its subcommand must
  exist and every option it shows must be one of that subcommand's options (``--help`` parsed);
- shell completion lines: the completion script is generated;
- ``make TARGET``: the Makefile has the target; ``tox -e ENV``: tox.ini has the environment;
  ``python benchmarks/X.py``: the script exists and compiles; ``bash examples/X.sh``: the script
  exists and parses (``bash -n``); ``ruff``: installed.

And nothing in README.md or docs/ points outside the repository: no absolute paths into a
workplace, no relative link that leaves the repository or names a missing file.
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
def _entry_points() -> dict[str, str]:
    """Console scripts of pyproject.toml: name -> "module:attribute"."""
    import tomllib

    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"])


ENTRY = _entry_points()
PROJECT_RE = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?(srl(?:-[a-z]+)?|bench)(?:\s|$)")
FENCE_RE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _line_no(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def extract() -> list[tuple[str, str]]:
    """(where, command) for every command the docs show; a ``$ `` command followed by its output
    carries that output's first line after `` => ``."""
    out: list[tuple[str, str]] = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        readme = path.name == "README.md"
        for m in FENCE_RE.finditer(text):
            lang, body = m.group(1), m.group(2)
            start = _line_no(text, m.start(2))
            if readme and lang in ("bash", "sh"):
                joined = ""
                for k, line in enumerate(body.splitlines()):
                    if line.strip() and not line.lstrip().startswith("#"):
                        joined = (joined + " " + line.strip()).strip()
                        if joined.endswith("\\"):
                            joined = joined[:-1].rstrip()
                            continue
                        out.append((f"{rel}:{start + k}", joined))
                        joined = ""
                continue
            lines = body.splitlines()
            cmd, where = None, ""
            for k, line in enumerate(lines + [""]):
                if cmd is not None and cmd.endswith("\\"):
                    cmd = cmd[:-1].rstrip() + " " + line.strip()  # a shell line continuation
                    continue
                if cmd is not None and line.startswith((" ", "\t")) and line.strip() and \
                        not PROJECT_RE.match(line.strip()) and lang != "" or \
                        (cmd is not None and re.match(r"^\s+\[", line)):
                    cmd += " " + line.strip()  # an indented continuation of the command above
                    continue
                if cmd is not None:
                    if cmd.startswith("$ ") and line.strip() and not PROJECT_RE.match(line):
                        cmd += " => " + line.strip()  # the output the docs show
                    out.append((where, cmd))
                    cmd = None
                if PROJECT_RE.match(line) or (lang in ("bash", "sh") and "_COMPLETE=" in line):
                    cmd, where = line.strip(), f"{rel}:{start + k}"
        if readme:
            for m in re.finditer(r"`([^`\n]+)`", FENCE_RE.sub(lambda f: "\n" * f.group(0).count("\n"), text)):
                if PROJECT_RE.match(m.group(1)) and " " in m.group(1):
                    out.append((f"{rel}:{_line_no(text, m.start())}", m.group(1)))
    return out


COMMANDS = extract()


def _click(prog: str) -> click.Command:
    """The click object behind a console script: the entry point itself, or the module's `cli`
    when the entry point is a plain function wrapping it."""
    module, _, attr = ENTRY[prog].partition(":")
    mod = importlib.import_module(module)
    obj = getattr(mod, attr or "main", None)
    return obj if isinstance(obj, click.Command) else mod.cli


def _tokens(cmd: str) -> list[str]:
    return shlex.split(cmd.removeprefix("$ "), comments=True)


PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]+$|[\[\]|<>]|\.\.\.|path/to/")


def _resolve(prog: str, args: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The (sub)command the arguments name, the words naming it, and the remaining arguments."""
    cmd, path = _click(prog), [prog]
    if prog == "srl" and (not args or args[0] not in cmd.commands):
        args = ["run", *args]
    default = getattr(cmd, "default_command", None)  # e.g. `srl-predict SNAPSHOT` = `srl-predict predict ...`
    if default and args and args[0] not in cmd.commands and args[0] not in ("-h", "--help"):
        args = [default, *args]
    while isinstance(cmd, click.Group) and args and args[0] in cmd.commands:
        path.append(args[0])
        cmd, args = cmd.commands[args[0]], args[1:]
    return cmd, path, args


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def _check_options(where: str, cmd: click.Command, path: list[str], args: list[str]) -> None:
    known = _options(cmd) | {"-h", "--help"}
    res = CliRunner().invoke(cmd, ["--help"], prog_name=" ".join(path))
    assert res.exit_code == 0, f"{where}: `{' '.join(path)} --help` failed:\n{res.output}"
    for a in args:
        for opt in re.findall(r"(?:^|[\[|\s])(--?[a-zA-Z][\w-]*)", a):
            assert opt in known, f"{where}: `{' '.join(path)}` has no option {opt} (options: {sorted(known)})"


def _is_real_input(arg: str) -> bool:
    """An option, an override, or a file of the repository (an override naming a file counts too)."""
    value = arg.split("=", 1)[1] if "=" in arg else arg
    if re.search(r"\.(json|jsonl|yaml|yml|csv|log)$", value):
        return (ROOT / value).exists()
    return "=" in arg or arg.startswith("-") or (ROOT / arg).exists()


def _simulate(where: str, args: list[str], tmp_path: Path) -> None:
    from simrl.cli.main import cli

    short = [*args, "run.training_steps=1", "run.plots=false", "-q", "-o", str(tmp_path)]
    res = CliRunner().invoke(cli, short)
    assert res.exit_code == 0, f"{where}: srl {' '.join(short)} -> exit {res.exit_code}:\n{res.output}"
    assert "run directory:" in res.output


def _check_project(where: str, tokens: list[str], tmp_path: Path, expect: str = "") -> None:
    prog = Path(tokens[0]).name
    assert prog in ENTRY, f"{where}: {prog} is not a console script of pyproject.toml"
    cmd, path, args = _resolve(prog, tokens[1:])
    placeholder = any(PLACEHOLDER.search(a) for a in args) or not all(_is_real_input(a) for a in args
                                                                       if not a.startswith("-"))
    if expect.startswith("error:") and not placeholder:
        res = CliRunner().invoke(_click(prog), tokens[1:])
        assert res.exit_code == 2 and expect in res.output, \
            f"{where}: {' '.join(tokens)} should fail with {expect!r}; got exit {res.exit_code}:\n{res.output}"
    elif path == ["srl", "run"] and not placeholder and "--config" not in args:
        _simulate(where, args, tmp_path)
    elif path in (["srl", "config"], ["srl", "presets"], ["srl", "step"]) and not placeholder:
        res = CliRunner().invoke(_click("srl"), tokens[1:])
        assert res.exit_code == 0, f"{where}: {' '.join(tokens)} -> exit {res.exit_code}:\n{res.output}"
    _check_options(where, cmd, path, args)


def _check_completion(where: str, line: str) -> None:
    m = re.search(r"_([A-Z_]+)_COMPLETE=(\w+) ([\w-]+)", line)
    assert m, f"{where}: cannot read the completion line {line!r}"
    var, shell, prog = m.groups()
    assert var == prog.replace("-", "_").upper(), f"{where}: {prog}'s completion variable is _{prog.upper()}_COMPLETE"
    res = CliRunner().invoke(_click(prog), [], prog_name=prog, env={f"_{var}_COMPLETE": shell})
    assert res.exit_code == 0 and prog in res.output and "complete" in res.output.lower(), f"{where}: {res.output}"


def _check_other(where: str, tokens: list[str]) -> None:
    name = Path(tokens[0]).name
    if name == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        assert set(tokens[1:]) <= targets, f"{where}: Makefile has no target {set(tokens[1:]) - targets}"
    elif name == "tox":
        env = tokens[tokens.index("-e") + 1]
        assert f"[testenv:{env}]" in (ROOT / "tox.ini").read_text(), f"{where}: tox.ini has no env {env}"
    elif name.startswith("python"):
        script = ROOT / tokens[1]
        assert script.is_file(), f"{where}: {tokens[1]} is not in the repository"
        compile(script.read_text(encoding="utf-8"), str(script), "exec")
    elif name == "bash":  # an example script: in the repository and valid bash (`bash -n`)
        script = ROOT / tokens[1]
        assert script.is_file(), f"{where}: {tokens[1]} is not in the repository"
        res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert res.returncode == 0, f"{where}: {tokens[1]} is not valid bash: {res.stderr}"
    elif name in ("ruff", "pytest"):
        assert importlib.util.find_spec(name) is not None, f"{where}: {name} is not installed (the dev extra)"
    else:
        pytest.fail(f"{where}: no check for {' '.join(tokens)!r}; teach tests/test_docs_commands.py")


def test_commands_were_found():
    where = {w.split(":")[0] for w, _ in COMMANDS}
    assert "README.md" in where and len(COMMANDS) >= 15
    assert any(c.endswith("srl") or c.startswith(".venv/bin/srl ") for _, c in COMMANDS)


@pytest.mark.parametrize("where,command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_runs(where, command, tmp_path):
    if "_COMPLETE=" in command:
        _check_completion(where, command)
        return
    command, _, expect = command.partition(" => ")
    tokens = _tokens(command)
    if PROJECT_RE.match(command.removeprefix("$ ")):
        _check_project(where, tokens, tmp_path, expect)
    else:
        _check_other(where, tokens)


OUTSIDE = re.compile(r"(?<![\w.])(/work/|/home/\w|/Users/|/mnt/|\.\./shared\b|\.\./\.\./)")


def test_docs_refer_to_nothing_outside_the_repository():
    problems = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        for m in OUTSIDE.finditer(text):
            problems.append(f"{rel}:{_line_no(text, m.start())}: {m.group(0)!r} is outside the repository")
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            resolved = (path.parent / target).resolve()
            if not resolved.is_relative_to(ROOT):
                problems.append(f"{rel}:{_line_no(text, m.start())}: link {target} leaves the repository")
            elif not resolved.exists():
                problems.append(f"{rel}:{_line_no(text, m.start())}: link {target} names a missing file")
    assert not problems, "\n".join(problems)


if __name__ == "__main__":  # list what is extracted
    for w, c in COMMANDS:
        print(f"{w}: {c}", file=sys.stdout)
