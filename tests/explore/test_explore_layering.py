"""simrl_explore is the top layer: nothing below imports it (module-level or function-local)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
BELOW = ("simrl", "simrl_fast", "presets", "workloads", "harness", "adapters")


def _imports(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)):
            yield str(node.args[0].value)


def test_nothing_below_imports_simrl_explore():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for pkg in BELOW for p in (ROOT / pkg).rglob("*.py")
           for m in _imports(p) if m == "simrl_explore" or m.startswith("simrl_explore.")]
    assert not bad, bad
