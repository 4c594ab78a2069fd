"""Imports point one way, and no module imports itself back.

Every import is counted: module level, inside functions, under ``TYPE_CHECKING``, and
``importlib.import_module("...")`` with a literal name. The layers, lowest first:

    workloads -> simrl (config, cost, policy seam, engine, ...) -> presets -> simrl_fast
              -> CLI layer (simrl.cli, simrl_explore, adapters, harness, benchmarks, scripts)

A module may import its own layer or a lower one. Inside `simrl`, the policy seam imports
only itself (presets see nothing else of simrl).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workloads", "simrl", "presets", "simrl_fast", "simrl_explore", "adapters", "harness",
            "benchmarks", "scripts")
CLI_LAYER = 4


def layer(module: str) -> int | None:
    """The layer of a first-party module; None for third-party and the standard library."""
    top = module.split(".")[0]
    if module == "simrl.cli" or module.startswith("simrl.cli."):
        return CLI_LAYER
    return {"workloads": 0, "simrl": 1, "presets": 2, "simrl_fast": 3}.get(
        top, CLI_LAYER if top in PACKAGES else None)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_module_target(node: ast.Call, here: str) -> str | None:
    """The module an ``importlib.import_module(...)`` call names, when it can be read."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if (isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.FormattedValue)
            and isinstance(arg.values[0].value, ast.Name) and arg.values[0].value.id == "__name__"):
        return here  # a submodule of the importing package
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(".")  # f"harness.backends.{x}": its package
    return "<dynamic>"


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, wherever it sits."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, node.lineno))
            # `from pkg import sub` may import the submodule pkg.sub
            out += [(f"{mod}.{a.name}", node.lineno) for a in node.names]
        elif isinstance(node, ast.Call):
            target = _import_module_target(node, here)
            if target is not None:
                out.append((target, node.lineno))
    return out


def source_files() -> list[Path]:
    files = []
    for pkg in PACKAGES:
        if (ROOT / pkg).is_dir():
            files += sorted((ROOT / pkg).rglob("*.py"))
    return files


def module_graph() -> dict[str, set[str]]:
    """First-party module -> first-party modules it imports (names that are modules only)."""
    files = source_files()
    known = {module_name(f) for f in files}
    graph: dict[str, set[str]] = {}
    for f in files:
        here = module_name(f)
        graph[here] = {m for m, _ in imports_of(f) if m in known and m != here}
    return graph


def test_imports_point_down_the_layers():
    bad = []
    for f in source_files():
        here = module_name(f)
        mine = layer(here)
        for mod, line in imports_of(f):
            if mod == "<dynamic>":
                if mine < CLI_LAYER:  # the CLI layer is the top: whatever it loads is below it
                    bad.append(
                        f"{f.relative_to(ROOT)}:{line}: import_module with a name the test cannot read")
                continue
            theirs = layer(mod)
            if theirs is not None and theirs > mine:
                bad.append(f"{f.relative_to(ROOT)}:{line}: {here} (layer {mine}) imports {mod} (layer {theirs})")
    assert not bad, "imports that point up:\n" + "\n".join(bad)


def test_the_policy_seam_and_presets_see_only_the_seam():
    bad = []
    for f in source_files():
        here = module_name(f)
        if not (here.startswith("simrl.policy") or here.startswith("presets")):
            continue
        for mod, line in imports_of(f):
            if mod.split(".")[0] == "simrl" and not (mod == "simrl" or mod.startswith("simrl.policy")):
                bad.append(f"{f.relative_to(ROOT)}:{line}: {here} imports {mod}")
    assert not bad, "the policy seam and presets import only simrl.policy:\n" + "\n".join(bad)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_of_init_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop a package's edges to its own submodules: importing ``pkg.sub`` runs ``pkg`` first,
    which is not a dependency of ``pkg.sub`` on ``pkg``'s re-exports."""
    return {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}


#: circles owned by other work in progress; a new circle anywhere else fails the test
KNOWN_CIRCLES: list[set[str]] = []


@pytest.mark.parametrize("scope", ["simrl.engine", "simrl.policy", "presets", ""])
def test_no_import_circle(scope):
    graph = _package_of_init_edges(module_graph())
    found = [c for c in cycles(graph) if any(m.startswith(scope) for m in c)]
    if not scope:
        found = [c for c in found if not any(set(c) <= k for k in KNOWN_CIRCLES)]
    assert not found, f"import circles in {scope or 'the repository'}: {found}"


def test_the_checker_sees_function_local_and_importlib_imports(tmp_path, monkeypatch):
    src = tmp_path / "simrl" / "policy" / "x.py"
    src.parent.mkdir(parents=True)
    src.write_text("import importlib\n\ndef f():\n    from simrl.engine.core import SimulationError\n"
                   "    importlib.import_module('presets')\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    mods = [m for m, _ in imports_of(src)]
    assert "simrl.engine.core" in mods and "presets" in mods
    assert layer("presets") > layer(module_name(src))
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
