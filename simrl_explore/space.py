"""Search spaces in YAML: grid, random and Latin-hypercube axes, linked and derived axes, constraints.

A space file (docs/search.md has the full reference)::

    name: gpu32
    base:                      # the configuration every point starts from
      config: my.yaml          # optional; relative to this file
      set: {policy: bounded_async, deployment.rollout.kv_policy: reserve}
    constants: {budget: 32}
    axes:
      - {name: rollout_gpus, grid: [8, 12, 16, 20, 24]}
      - {name: rollout_tp, key: deployment.rollout.tp, grid: [1, 2, 4]}
      - {name: staleness, key: policy.max_staleness, random: {low: 0, high: 3, integer: true}}
      - {name: seqs, key: deployment.rollout.max_num_seqs, lhs: {low: 64, high: 512, log: true, integer: true}}
      - linked:                # values advance together (zip), not crossed
          - {name: batch, key: policy.batch_groups, values: [16, 32]}
          - {name: groups, key: workload.groups, values: [80, 160]}
    samples: 20                # draws of the random / LHS axes, crossed with the grid
    derived:
      - {name: training_gpus, key: deployment.training.gpus, expr: budget - rollout_gpus}
      - {name: instances, key: deployment.rollout.instances, expr: rollout_gpus // rollout_tp}
    constraints:
      - {expr: rollout_gpus % rollout_tp == 0, reason: rollout GPUs do not split into TP groups}
    checks: [heads, memory, kv]

`load_space(path)` validates everything it can before a simulation runs: unknown keys (named
with their path, e.g. ``axes[2].gird``), a repeated axis name or config key, repeated values in
a grid, duplicate YAML keys, expressions naming unknown variables, and axis keys that are not
configuration keys. `Space.points()` expands it deterministically (``seed``).
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import Any

import attrs
import numpy as np
import yaml

from simrl_explore.expr import Expr, ExprError

OBJECTIVES = {  # name -> (direction, column)
    "step_time": ("min", "step_time_s"),
    "trained_tokens_per_s": ("max", "trained_tokens_per_s"),
    "gpu_hours_per_1k_steps": ("min", "gpu_hours_per_1k_steps"),
    "staleness": ("min", "staleness_mean"),
}
CHECKS = ("heads", "memory", "kv")
_TOP = {"name", "base", "constants", "axes", "samples", "seed", "derived", "constraints", "checks",
        "objectives", "rank_by", "top_k", "recheck_tolerance", "engine", "surrogate", "plot", "question"}
_AXIS = {"name", "key", "grid", "values", "random", "lhs", "linked"}
_DIST = {"low", "high", "integer", "log"}


class SpaceError(ValueError):
    """A search-space file problem; the message names the file and key path."""


@attrs.frozen
class Axis:
    name: str
    key: str | None
    kind: str  # grid | random | lhs
    values: tuple = ()
    low: float = 0.0
    high: float = 0.0
    integer: bool = False
    log: bool = False
    link: int = -1  # index of the linked block (grid axes that advance together), -1 alone
    at: str = ""  # where the axis is in its file (``axes[2]``, ``axes[0].linked[1]``), for messages


@attrs.frozen
class Derived:
    name: str
    key: str | None
    expr: Expr


@attrs.frozen
class Constraint:
    expr: Expr
    reason: str


@attrs.frozen
class Point:
    """One point of the space: its variables (axes, derived, constants) and config overrides."""

    index: int
    variables: dict[str, Any]
    overrides: tuple[str, ...]
    dropped: str | None = None  # why a constraint dropped it


@attrs.frozen
class Space:
    name: str
    path: str | None
    base_config: str | None
    base_set: tuple[str, ...]
    constants: dict[str, Any]
    axes: tuple[Axis, ...]
    samples: int
    seed: int
    derived: tuple[Derived, ...]
    constraints: tuple[Constraint, ...]
    checks: tuple[str, ...]
    objectives: tuple[str, ...]
    rank_by: str
    top_k: int
    recheck_tolerance: float
    engine: str
    surrogate: str
    plot: dict[str, Any]
    question: str

    @property
    def variable_names(self) -> list[str]:
        return [*self.constants, *(a.name for a in self.axes), *(d.name for d in self.derived)]

    def size(self) -> int:
        return len(self._grid_rows()) * max(1, self.samples if self._sampled() else 1)

    def _sampled(self) -> list[Axis]:
        return [a for a in self.axes if a.kind in ("random", "lhs")]

    def _grid_rows(self) -> list[dict[str, Any]]:
        blocks: list[list[Axis]] = []
        where: dict[int, int] = {}  # linked block -> its position in blocks
        for a in self.axes:
            if a.kind != "grid":
                continue
            if a.link >= 0 and a.link in where:
                blocks[where[a.link]].append(a)
                continue
            if a.link >= 0:
                where[a.link] = len(blocks)
            blocks.append([a])
        rows: list[dict[str, Any]] = [{}]
        for block in blocks:  # a block is one axis, or linked axes advancing together
            n = len(block[0].values)
            rows = [{**r, **{a.name: a.values[i] for a in block}} for r in rows for i in range(n)]
        return rows

    def _sample_rows(self) -> list[dict[str, Any]]:
        axes = self._sampled()
        if not axes:
            return [{}]
        n = self.samples
        cols: dict[str, np.ndarray] = {}
        for a in axes:  # one stream per axis, in file order: adding an axis leaves the others' draws
            sub = np.random.default_rng([self.seed, _stable_hash(a.name)])
            if a.kind == "lhs":
                u = (sub.permutation(n) + sub.random(n)) / n
            else:
                u = sub.random(n)
            cols[a.name] = u
        return [{a.name: _scale(a, float(cols[a.name][i])) for a in axes} for i in range(n)]

    def points(self) -> list[Point]:
        """Every point, in a deterministic order (grid rows outer, samples inner)."""
        out: list[Point] = []
        keyed = {a.name: a.key for a in self.axes}
        samples = self._sample_rows()  # drawn once: the same draws cross every grid row
        for g in self._grid_rows():
            for s in samples:
                env: dict[str, Any] = {**self.constants, **g, **s}
                dropped = None
                for d in self.derived:
                    try:
                        env[d.name] = _plain(d.expr(env))
                    except (ArithmeticError, TypeError, ValueError) as exc:
                        env[d.name] = None
                        dropped = dropped or f"derived {d.name}: {d.expr.text} failed ({exc})"
                if dropped is None:
                    for c in self.constraints:
                        try:
                            ok = bool(c.expr(env))
                        except (ArithmeticError, TypeError, ValueError) as exc:
                            ok, why = False, f"{c.expr.text} failed ({exc})"
                        else:
                            why = c.reason
                        if not ok:
                            dropped = f"constraint: {why}"
                            break
                ov = [f"{k}={_yaml_value(env[n])}" for n, k in keyed.items() if k]
                ov += [f"{d.key}={_yaml_value(env[d.name])}" for d in self.derived if d.key]
                out.append(Point(len(out), env, tuple(ov), dropped))
        return out


def _stable_hash(text: str) -> int:
    h = 0
    for ch in text.encode():
        h = (h * 131 + ch) % (2**31 - 1)
    return h


def _scale(a: Axis, u: float) -> Any:
    if a.integer:
        lo, hi = int(a.low), int(a.high)
        if a.log:
            v = math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))
            return min(hi, max(lo, int(math.floor(v))))
        return min(hi, lo + int(math.floor(u * (hi - lo + 1))))
    if a.log:
        return float(math.exp(math.log(a.low) + u * (math.log(a.high) - math.log(a.low))))
    return float(a.low + u * (a.high - a.low))


def _plain(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


@functools.lru_cache(maxsize=65_536)
def _text_value(v: str) -> str:
    """A string value as override text that the configuration reads back as that same string:
    as it is when it reads as itself, else double-quoted (a YAML scalar), so a quoted ``"12"``
    stays the string it was written as (the config then says "write it without quotes") and is
    never silently taken for the number 12."""
    from simrl.strictio import YamlInputError, load_yaml_text

    try:
        plain = load_yaml_text(v) == v if v.strip() == v and v else False
    except YamlInputError:
        plain = False
    return v if plain else json.dumps(v)


def _yaml_value(v: Any) -> str:
    if isinstance(v, str):
        return _text_value(v)
    if isinstance(v, bool) or v is None:
        return "true" if v is True else ("false" if v is False else "null")
    if isinstance(v, float):
        return (".inf" if v > 0 else "-.inf") if math.isinf(v) else repr(v)  # YAML's spelling, not Python's
    return str(v)


# -- loading ------------------------------------------------------------------------------------

def load_yaml_spec(path: str, error: type[Exception]) -> Any:
    """A space or study file read by the strict YAML loader every input format shares
    (`simrl.strictio`): non-UTF-8 bytes, duplicate keys, aliases, ``.nan`` and float overflow
    (``1e400``) are ``error("FILE:LINE: ...")``; an empty file is an error too."""
    from simrl.strictio import YamlInputError, load_yaml_text, read_utf8

    try:
        data = load_yaml_text(read_utf8(path))
    except YamlInputError as exc:
        raise error(f"{path}:{exc.line}: {exc.message}" if exc.line else f"{path}: {exc.message}") from None
    if data is None:
        raise error(f"{path}: the file is empty (no YAML document, or only comments); expected a mapping "
                    f"at the top level")
    return data


def simrl_data_dir() -> str:
    import simrl.cost

    return os.path.join(os.path.dirname(os.path.abspath(simrl.cost.__file__)), "data")


def _subst(v: Any) -> Any:
    """``{simrl_data}`` in a string value: the bundled cost artifacts folder (simrl/cost/data)."""
    if isinstance(v, str) and "{simrl_data}" in v:
        return v.replace("{simrl_data}", simrl_data_dir())
    return v


def load_space(path: str) -> Space:
    return parse_space(load_yaml_spec(path, SpaceError), path)


def parse_space(data: Any, path: str | None = None) -> Space:
    where = path or "<space>"
    try:
        return _parse(data, where, path)
    except ExprError as exc:
        raise SpaceError(str(exc)) from None


def _need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise SpaceError(f"{where}: {msg}")


def _unknown(d: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(d) - allowed, key=str)
    if extra:
        raise SpaceError(f"{where}.{extra[0]}: unknown key; expected one of: {', '.join(sorted(allowed))}")


def _whole(value: Any, where: str, lo: int = 0) -> int:
    """An exact integer (not a bool, not a float) in [lo, 2**63)."""
    _need(type(value) is int and lo <= value < 2**63, where,
          f"expected a whole number >= {lo} (not quoted, not true/false), got {value!r}")
    return value


def _flag(value: Any, where: str) -> bool:
    """true or false, exactly (a string such as "false" is not silently true)."""
    _need(type(value) is bool, where, f"expected true or false (without quotes), got {value!r}")
    return value


def _finite(value: Any, where: str) -> float:
    _need(isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value), where,
          f"expected a finite number, got {value!r}")
    return float(value)


def _identifier(name: Any, where: str) -> str:
    _need(isinstance(name, str) and name.isidentifier(), where, f"expected a variable name (letters, digits, _), got {name!r}")
    return name


def _parse_axis(raw: Any, where: str, link: int = -1, at: str = "") -> Axis:
    _need(isinstance(raw, dict), where, f"expected a mapping, got {type(raw).__name__}")
    _unknown(raw, _AXIS - {"linked"}, where)
    key = raw.get("key")
    _need(key is None or (isinstance(key, str) and key.strip() != ""), f"{where}.key", "expected a dotted config key")
    name = raw.get("name", key.replace(".", "_") if key else None)
    _need(name is not None, where, "an axis needs a name (a variable) or a key (a config key)")
    name = _identifier(name, f"{where}.name")
    kinds = [k for k in ("grid", "values", "random", "lhs") if k in raw]
    _need(len(kinds) == 1, where, f"give exactly one of grid / random / lhs (got {', '.join(kinds) or 'none'})")
    kind = kinds[0]
    if kind in ("grid", "values"):
        vals = raw[kind]
        _need(isinstance(vals, list) and len(vals) > 0, f"{where}.{kind}", "expected a non-empty list of values")
        vals = [_subst(v) for v in vals]
        for i, v in enumerate(vals):
            _need(not any(type(u) is type(v) and u == v for u in vals[:i]), f"{where}.{kind}[{i}]",
                  f"value {v!r} repeated")
        return Axis(name, key, "grid", tuple(vals), link=link, at=at)
    _need(link < 0, where, "a linked block holds grid values only")
    dist = raw[kind]
    _need(isinstance(dist, dict), f"{where}.{kind}", "expected {low, high, integer?, log?}")
    _unknown(dist, _DIST, f"{where}.{kind}")
    lo, hi = (_finite(dist.get(k), f"{where}.{kind}.{k}") for k in ("low", "high"))
    _need(lo < hi, f"{where}.{kind}", f"low={lo:g} must be below high={hi:g}")
    log = _flag(dist.get("log", False), f"{where}.{kind}.log")
    _need(not log or lo > 0, f"{where}.{kind}.low", "must be > 0 with log: true")
    return Axis(name, key, kind, (), lo, hi, _flag(dist.get("integer", False), f"{where}.{kind}.integer"), log,
                at=at)


def _parse(data: Any, where: str, path: str | None) -> Space:
    _need(isinstance(data, dict), where, "expected a mapping at the top level")
    _unknown(data, _TOP, where)
    base = data.get("base") or {}
    _need(isinstance(base, dict), f"{where}.base", "expected a mapping {config?, set?}")
    _unknown(base, {"config", "set"}, f"{where}.base")
    base_config = base.get("config")
    if base_config is not None:
        _need(isinstance(base_config, str), f"{where}.base.config", "expected a file path")
        if path and not os.path.isabs(base_config):
            base_config = os.path.join(os.path.dirname(os.path.abspath(path)), base_config)
    sets = base.get("set") or {}
    _need(isinstance(sets, dict), f"{where}.base.set", "expected a mapping of dotted keys to values")
    base_set = tuple(f"{k}={_yaml_value(_subst(v)) if not isinstance(v, dict | list) else yaml.safe_dump(v, default_flow_style=True).strip()}"
                     for k, v in sets.items())
    consts = data.get("constants") or {}
    _need(isinstance(consts, dict), f"{where}.constants", "expected a mapping of names to values")
    for k in consts:
        _identifier(k, f"{where}.constants.{k}")

    raw_axes = data.get("axes") or []
    _need(isinstance(raw_axes, list), f"{where}.axes", "expected a list of axes")
    axes: list[Axis] = []
    n_links = 0
    for i, raw in enumerate(raw_axes):
        aw = f"{where}.axes[{i}]"
        if isinstance(raw, dict) and "linked" in raw:
            _unknown(raw, {"linked"}, aw)
            group = raw["linked"]
            _need(isinstance(group, list) and len(group) >= 2, f"{aw}.linked", "expected a list of at least two grid axes")
            members = [_parse_axis(g, f"{aw}.linked[{j}]", link=n_links, at=f"axes[{i}].linked[{j}]")
                       for j, g in enumerate(group)]
            lens = {len(m.values) for m in members}
            _need(len(lens) == 1, f"{aw}.linked", f"linked axes need equally many values, got {sorted(lens)}")
            axes.extend(members)
            n_links += 1
        else:
            axes.append(_parse_axis(raw, aw, at=f"axes[{i}]"))
    names: dict[str, str] = {k: f"{where}.constants.{k}" for k in consts}
    keys: dict[str, str] = {}
    for i, a in enumerate(axes):
        _need(a.name not in names, f"{where}.axes", f"axis {a.name!r} repeated (also {names.get(a.name)})")
        names[a.name] = f"axes[{i}]"
        if a.key:
            _need(a.key not in keys, f"{where}.axes", f"config key {a.key!r} swept twice ({keys.get(a.key)} and {a.name})")
            keys[a.key] = a.name
    sampled = [a for a in axes if a.kind != "grid"]
    samples = data.get("samples", 0)
    _whole(samples, f"{where}.samples")
    _need(not sampled or samples > 0, f"{where}.samples", f"random / lhs axes ({sampled[0].name if sampled else ''}) need samples > 0")
    seed = data.get("seed", 0)
    _whole(seed, f"{where}.seed")

    derived: list[Derived] = []
    for i, raw in enumerate(data.get("derived") or []):
        dw = f"{where}.derived[{i}]"
        _need(isinstance(raw, dict), dw, "expected {name, key?, expr}")
        _unknown(raw, {"name", "key", "expr"}, dw)
        _need("expr" in raw, dw, "missing expr")
        key = raw.get("key")
        name = _identifier(raw.get("name", key.replace(".", "_") if isinstance(key, str) else None), f"{dw}.name")
        _need(name not in names, dw, f"name {name!r} already used ({names.get(name)})")
        if key:
            _need(key not in keys, dw, f"config key {key!r} already set by {keys.get(key)}")
            keys[key] = name
        e = Expr(str(raw["expr"]), f"{dw}.expr")
        e.check_names(set(names))
        names[name] = dw
        derived.append(Derived(name, key, e))
    constraints: list[Constraint] = []
    for i, raw in enumerate(data.get("constraints") or []):
        cw = f"{where}.constraints[{i}]"
        _need(isinstance(raw, dict), cw, "expected {expr, reason}")
        _unknown(raw, {"expr", "reason"}, cw)
        _need("expr" in raw, cw, "missing expr")
        e = Expr(str(raw["expr"]), f"{cw}.expr")
        e.check_names(set(names))
        constraints.append(Constraint(e, str(raw.get("reason", e.text))))
    checks = data.get("checks", list(CHECKS))
    _need(isinstance(checks, list) and all(c in CHECKS for c in checks), f"{where}.checks",
          f"expected a list of: {', '.join(CHECKS)}")
    objectives = data.get("objectives", list(OBJECTIVES))
    _need(isinstance(objectives, list) and objectives and all(o in OBJECTIVES for o in objectives),
          f"{where}.objectives", f"expected a non-empty list of: {', '.join(OBJECTIVES)}")
    rank_by = data.get("rank_by", objectives[0])
    _need(rank_by in OBJECTIVES, f"{where}.rank_by", f"expected one of: {', '.join(OBJECTIVES)}")
    top_k = data.get("top_k", 5)
    _whole(top_k, f"{where}.top_k")
    tol = data.get("recheck_tolerance", 0.05)
    _need(_finite(tol, f"{where}.recheck_tolerance") > 0, f"{where}.recheck_tolerance",
          "expected a finite number > 0 (relative)")
    engine = data.get("engine", "auto")
    _need(engine in ("auto", "fast", "simpy"), f"{where}.engine", "expected auto, fast or simpy")
    surrogate = data.get("surrogate", "linear")
    _need(surrogate in ("linear", "off"), f"{where}.surrogate", "expected linear or off")
    plot = data.get("plot") or {}
    _need(isinstance(plot, dict), f"{where}.plot", "expected a mapping {x, y, color?}")
    _unknown(plot, {"x", "y", "color"}, f"{where}.plot")
    for k in ("x", "y"):
        if k in plot:
            _need(plot[k] in names, f"{where}.plot.{k}", f"unknown variable {plot[k]!r}; known: {', '.join(names)}")
    if "color" in plot:
        _need(plot["color"] in OBJECTIVES, f"{where}.plot.color", f"expected one of: {', '.join(OBJECTIVES)}")
    _need(isinstance(data.get("name", ""), str | None), f"{where}.name", "expected a string")
    _need(isinstance(data.get("question", ""), str), f"{where}.question", "expected a string")
    name = data.get("name") or (os.path.splitext(os.path.basename(path))[0] if path else "sweep")
    return Space(
        name=str(name), path=path, base_config=base_config, base_set=base_set, constants=dict(consts),
        axes=tuple(axes), samples=samples if sampled else 0, seed=seed, derived=tuple(derived),
        constraints=tuple(constraints), checks=tuple(checks), objectives=tuple(objectives), rank_by=rank_by,
        top_k=top_k, recheck_tolerance=float(tol), engine=engine, surrogate=surrogate, plot=dict(plot),
        question=str(data.get("question", "")),
    )


def _cli_value(what: str, text: str) -> Any:
    """One command-line value read by the strict YAML loader (``1e400`` and ``.nan`` refused);
    text that is not valid YAML on its own stays a string, as the config's overrides do."""
    from simrl.strictio import YamlInputError, YamlNumberError, load_yaml_text

    try:
        return load_yaml_text(text)
    except YamlNumberError as exc:
        raise SpaceError(f"{what}={text}: {exc.message}") from None
    except YamlInputError:
        return text


def grid_space(base: list[str], grid: list[str], config: str | None = None) -> Space:
    """The space of the command-line form ``--grid KEY=V1,V2`` (cartesian), as a Space."""
    axes = []
    for g in grid:
        key, sep, values = g.partition("=")
        if not sep or not key.strip() or not values:
            raise SpaceError(f"--grid {g!r}: expected KEY=V1,V2,... e.g. deployment.rollout.instances=1,2,4")
        vals = [_cli_value(f"--grid {key.strip()}", v.strip()) for v in values.split(",")]
        axes.append({"key": key.strip(), "grid": vals})
    sets = {}
    for o in base:
        k, sep, v = o.partition("=")
        if not sep:
            raise SpaceError(f"override {o!r}: expected KEY=VALUE")
        sets[k.strip()] = _cli_value(f"override {k.strip()}", v) if v else v
    data = {"base": {"config": config, "set": sets}, "axes": axes}
    return parse_space(data, None)

