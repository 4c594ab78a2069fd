#!/usr/bin/env python3
"""Check, by AST, that every upstream symbol, signature, config key and string the drivers use exists.

    scripts/check_upstream_api.py --art openpipe_art-0.5.18.tar.gz --skyrl SKYRL_DIR_OR_ARCHIVE \
        [--output harness/pins_api_check.json]

Each source is a directory, a .tar.gz sdist or a .whl; an archive's sha256 must equal the one in
``harness.pins.UPSTREAM``. What is checked comes from the drivers' own ``API`` tables (and, for
SkyRL, every key of ``overrides()``): ``module:Class.method(params)`` must be a def with exactly
those parameter names; ``module:Name`` a class, def or imported name in that module; config keys
a path of dataclass fields from the root config class; TypedDict keys annotations of the class;
strings literal constants in the module. Exit 0 only when all pass. The output JSON is committed
and compared against the drivers in tests/harness/test_upstream_api.py (no network there).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import pins as P  # noqa: E402
from harness.backends import art as art_driver  # noqa: E402
from harness.backends import skyrl as skyrl_driver  # noqa: E402


def used_items(backend: str) -> list[str]:
    """Every item a driver uses, as check strings (the list the committed record must cover)."""
    api = (art_driver if backend == "art" else skyrl_driver).API
    items = [f"symbol {s}" for s in api["symbols"]]
    for cls, keys in api.get("typed_dict_keys", {}).items():
        items += [f"key {cls}.{k}" for k in keys]
    for mod, strings in api.get("strings", {}).items():
        items += [f"string {mod}:{s}" for s in strings]
    if backend == "skyrl":
        items += [f"config {api['config_root']}:{k}" for k in skyrl_config_keys()]
    return sorted(items)


def skyrl_config_keys() -> list[str]:
    from harness.backends.base import RunContext

    ctx = RunContext(run_id="r", run_dir="/tmp", backend="skyrl", workload="multi_turn", runtime="native", rank=8,
                     seed=0, settings=P.pipeline_settings("skyrl"), workload_params={}, trainer_uuids=[],
                     inference_uuids=[], model_path="/model")
    return sorted(line.split("=", 1)[0] for line in skyrl_driver.overrides(ctx, "/t.jsonl", 4))


def unpack(src: Path, backend: str, tmp: Path) -> Path:
    if src.is_dir():
        return src
    want = P.UPSTREAM[backend].get("sha256")
    got = hashlib.sha256(src.read_bytes()).hexdigest()
    if want and got != want:
        raise SystemExit(f"{src}: sha256 {got} != pinned {want}")
    out = tmp / backend
    if src.name.endswith(".whl"):
        zipfile.ZipFile(src).extractall(out)
        return out
    with tarfile.open(src) as tf:
        tf.extractall(out, filter="data")
    tops = list(out.iterdir())
    return tops[0] if len(tops) == 1 and tops[0].is_dir() else out


class Source:
    def __init__(self, root: Path, sub: str) -> None:
        self.root = root / sub if (root / sub).is_dir() else root
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            base = self.root / Path(*module.split("."))
            path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            self._trees[module] = ast.parse(path.read_text(encoding="utf-8")) if path.exists() else None
        return self._trees[module]

    def cls(self, module: str, name: str) -> ast.ClassDef | None:
        tree = self.tree(module)
        return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None) if tree \
            else None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    a = fn.args
    names = [x.arg for x in [*a.posonlyargs, *a.args]]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        names.append("*")
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return ", ".join(names)


def check_symbol(src: Source, spec: str) -> tuple[bool, str]:
    module, rest = spec.split(":", 1)
    want = None
    if "(" in rest:
        rest, want = rest[:-1].split("(", 1)
        want = ", ".join(p.strip() for p in want.split(","))
    tree = src.tree(module)
    if tree is None:
        return False, f"module {module} not found"
    parts = rest.split(".")
    if len(parts) == 1:
        for n in tree.body:
            if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.name == parts[0]:
                return True, f"{type(n).__name__} at line {n.lineno}"
            if isinstance(n, ast.ImportFrom | ast.Import) and any((a.asname or a.name) == parts[0] for a in n.names):
                return True, f"imported at line {n.lineno}"
        return False, f"{parts[0]} not defined in {module}"
    cls = src.cls(module, parts[0])
    if cls is None:
        return False, f"class {parts[0]} not in {module}"
    fn = next((n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == parts[1]),
              None)
    if fn is None:
        return False, f"{parts[0]}.{parts[1]} not defined"
    got = _params(fn)
    if want is not None and got != want:
        return False, f"signature ({got}) differs from the driver's ({want})"
    return True, f"def at line {fn.lineno} ({got})"


def _fields(cls: ast.ClassDef) -> dict[str, str]:
    out = {}
    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out[n.target.id] = ast.unparse(n.annotation)
    return out


def check_config_key(src: Source, root: str, key: str) -> tuple[bool, str]:
    module, cls_name = root.split(":")
    cls = src.cls(module, cls_name)
    for part in key.split("."):
        if cls is None:
            return False, f"no dataclass to hold {part!r}"
        fields = _fields(cls)
        if part not in fields:
            return False, f"{cls.name} has no field {part!r}"
        ann = fields[part].replace("Optional[", "").rstrip("]").strip("'\"")
        cls = src.cls(module, ann)
    return True, "field path exists"


def check_key(src: Source, spec: str) -> tuple[bool, str]:
    target, key = spec.rsplit(".", 1)
    module, name = target.split(":")
    cls = src.cls(module, name)
    if cls is None:
        return False, f"class {name} not in {module}"
    return (key in _fields(cls)), f"{name} {'declares' if key in _fields(cls) else 'lacks'} {key!r}"


def check_string(src: Source, module: str, text: str) -> tuple[bool, str]:
    tree = src.tree(module)
    if tree is None:
        return False, f"module {module} not found"
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value == text:
            return True, f"literal at line {n.lineno}"
        if isinstance(n, ast.Name | ast.Attribute) and (getattr(n, "id", None) or getattr(n, "attr", None)) == text:
            return True, f"name at line {n.lineno}"
    return False, f"{text!r} does not occur in {module}"


def run_checks(backend: str, root: Path) -> list[dict]:
    src = Source(root, P.UPSTREAM[backend]["root"])
    out = []
    for item in used_items(backend):
        kind, spec = item.split(" ", 1)
        if kind == "symbol":
            ok, detail = check_symbol(src, spec)
        elif kind == "key":
            ok, detail = check_key(src, spec)
        elif kind == "string":
            module, text = spec.split(":", 1)
            ok, detail = check_string(src, module, text)
        else:
            croot, key = spec.rsplit(":", 1)
            ok, detail = check_config_key(src, croot, key)
        out.append({"item": item, "ok": ok, "detail": detail})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--art", type=Path, required=True)
    ap.add_argument("--skyrl", type=Path, required=True)
    ap.add_argument("--output", type=Path, default=None)
    args = ap.parse_args(argv)
    record = {"schema": "bench.upstream_api_check.v1", "sources": P.UPSTREAM, "backends": {}}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for backend, path in (("art", args.art), ("skyrl", args.skyrl)):
            results = run_checks(backend, unpack(path, backend, Path(tmp)))
            record["backends"][backend] = results
            for r in results:
                if not r["ok"]:
                    bad += 1
                    print(f"FAIL {backend}: {r['item']}: {r['detail']}")
            print(f"{backend}: {sum(r['ok'] for r in results)}/{len(results)} ok")
    if args.output:
        args.output.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
