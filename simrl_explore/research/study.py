"""A research question as a YAML file, and the records the agents pass to each other.

::

    question: Is kv_cache_aware routing better than throughput_balance here, and under what
      length dispersion does the answer flip?
    base: {config: null, set: {workload.groups: 64, ...}}   # the scenario
    family: router                      # what proposals may change
    baseline: {name: throughput_balance}
    candidate: {name: kv_cache_aware}   # optional: the stated proposal, validated first
    objective: trained_tokens_per_s     # or step_time, gpu_hours_per_1k_steps, staleness
    seeds: [0, 1, 2, 3]
    variation:                          # workload variations every proposal is validated over
      name: length_dispersion           # built-in: stretch completion lengths (see below)
      values: [0.0, 0.5, 1.0, 1.5, 2.0]
    proposals: 2                        # further proposals from the proposer
    interval: t                         # or bootstrap
    confidence: 0.95

Variations: ``length_dispersion: d`` replaces the workload generator's completion-length
quantile knots ``(q, L)`` by ``(q, m * (L / m) ** d)`` with ``m`` the median knot: d = 0 gives
every call the median length, d = 1 the generator's own distribution, d = 2 squares every ratio
to the median (a log-space stretch; the generator's ``max_completion`` still caps lengths). Any
other variation names a configuration key (``key: workload.knobs.length_correlation``) whose
values are set directly.
"""

from __future__ import annotations

import math
import os
from typing import Any

import attrs
import yaml

from simrl_explore.research.registry import REGISTRY, Strategy, StrategyError, make_strategy
from simrl_explore.space import OBJECTIVES, _yaml_value, load_yaml_spec


class StudyError(ValueError):
    """A research-question file problem, naming the file and key."""


_KEYS = {"question", "base", "family", "baseline", "candidate", "objective", "seeds", "variation", "proposals",
         "interval", "confidence", "proposer_seed", "name", "search"}


@attrs.frozen
class Variation:
    name: str
    values: tuple
    key: str | None = None

    def overrides(self, value: Any, base_knots: list) -> list[str]:
        if self.key:
            return [f"{self.key}={_yaml_value(value)}"]
        if self.name == "none":
            return []
        return [f"workload.knobs.completion_knots={dispersed_knots(base_knots, float(value))}"]


@attrs.frozen
class Study:
    name: str
    question: str
    base_config: str | None
    base_set: tuple[str, ...]
    family: str
    baseline: Strategy
    candidate: Strategy | None
    objective: str
    seeds: tuple[int, ...]
    variation: Variation
    proposals: int
    interval: str
    confidence: float
    proposer_seed: int
    search: tuple[str, ...] = ()  # strategies the proposer may use (default: the whole family)

    @property
    def direction(self) -> str:
        return OBJECTIVES[self.objective][0]

    @property
    def column(self) -> str:
        return OBJECTIVES[self.objective][1]

    def fingerprint(self) -> dict[str, Any]:
        """What a lesson's conditions are keyed on: the scenario and how it was varied."""
        return {"base": list(self.base_set), "family": self.family, "objective": self.objective,
                "variation": self.variation.key or self.variation.name}


def dispersed_knots(knots: list, d: float) -> str:
    """Knots (q, L) -> (q, m * (L/m)**d), m the median knot length, as a compact YAML flow list."""
    qs = [float(q) for q, _ in knots]
    ls = [float(v) for _, v in knots]
    import numpy as np

    m = float(np.interp(0.5, qs, ls))
    out = [[q, max(1, int(round(m * (v / m) ** d)))] for q, v in zip(qs, ls, strict=True)]
    return "[" + ",".join(f"[{q:g},{v}]" for q, v in out) + "]"


def base_completion_knots(study: Study) -> list:
    """The completion knots the variation stretches: the base's own, else the generator's default."""
    from simrl.config import load_config
    from workloads.registry import generator_spec

    cfg = load_config(study.base_config, list(study.base_set))
    knots = cfg.workload.knobs.get("completion_knots")
    if knots is None:
        spec = generator_spec(cfg.workload.generator)
        knots = spec.knobs.get("completion_knots") if hasattr(spec, "knobs") else None
    if knots is None:
        raise StudyError(f"variation length_dispersion: workload generator {cfg.workload.generator!r} has no "
                         "completion_knots knob; use a variation with a config key instead")
    return [list(k) for k in knots]


MAX_DISPERSION = 10  # length ratios to the median, raised to this power (0: every call the median)
MAX_PROPOSALS = 1000  # each proposal is a full seeds x variations validation


def check_base(study: Study, path: str = "<study>") -> None:
    """The base configuration (file and ``base.set``) loads, and a variation's key is a configuration
    key that takes each of its values (its type and own range): checked before any output is
    written (a wrong value or a misspelt key otherwise ran every seed and proposal for nothing)."""
    from simrl.config import load_config, override_value_error, unknown_key_error

    cfg = load_config(study.base_config, list(study.base_set))
    var = study.variation
    if not var.key:
        return
    why = unknown_key_error(cfg, var.key)
    if why:
        raise StudyError(f"{path}: variation.key: {why}")
    for i, v in enumerate(var.values):
        why = override_value_error(cfg, var.key, _yaml_value(v))
        if why:
            raise StudyError(f"{path}: variation.values[{i}]: value {v!r:.40} for {var.key}: {why}")


def _need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise StudyError(f"{where}: {msg}")


def _strategy(raw: Any, family: str, where: str) -> Strategy:
    _need(isinstance(raw, dict), where, "expected {name, params?}")
    extra = sorted(set(raw) - {"name", "params", "family"})
    _need(not extra, f"{where}.{extra[0] if extra else ''}", "unknown key; expected name, params")
    _need(raw.get("family", family) == family, f"{where}.family", f"must be the study's family {family!r}")
    try:
        return make_strategy(family, raw.get("name"), raw.get("params") or {})
    except StrategyError as exc:
        raise StudyError(f"{where}: {exc}") from None


def load_study(path: str) -> Study:
    data = load_yaml_spec(path, StudyError)
    return parse_study(data, path)


def parse_study(data: Any, path: str | None = None) -> Study:
    w = path or "<study>"
    _need(isinstance(data, dict), w, "expected a mapping at the top level")
    extra = sorted(set(data) - _KEYS)
    _need(not extra, f"{w}.{extra[0] if extra else ''}", f"unknown key; expected one of: {', '.join(sorted(_KEYS))}")
    _need(isinstance(data.get("question"), str) and data["question"].strip(), f"{w}.question", "state the question")
    base = data.get("base") or {}
    _need(isinstance(base, dict) and not (set(base) - {"config", "set"}), f"{w}.base", "expected {config?, set?}")
    cfg_path = base.get("config")
    if cfg_path and path and not os.path.isabs(cfg_path):
        cfg_path = os.path.join(os.path.dirname(os.path.abspath(path)), cfg_path)
    sets = base.get("set") or {}
    _need(isinstance(sets, dict), f"{w}.base.set", "expected a mapping of dotted keys to values")
    base_set = tuple(f"{k}={_yaml_value(v) if not isinstance(v, dict | list) else yaml.safe_dump(v, default_flow_style=True).strip()}"
                     for k, v in sets.items())
    family = data.get("family")
    _need(family in REGISTRY, f"{w}.family", f"expected one of: {', '.join(sorted(REGISTRY))}")
    baseline = _strategy(data.get("baseline"), family, f"{w}.baseline")
    candidate = _strategy(data["candidate"], family, f"{w}.candidate") if data.get("candidate") else None
    objective = data.get("objective", "trained_tokens_per_s")
    _need(objective in OBJECTIVES, f"{w}.objective", f"expected one of: {', '.join(OBJECTIVES)}")
    seeds = data.get("seeds", [0, 1, 2])
    _need(isinstance(seeds, list) and len(seeds) >= 2 and all(type(s) is int for s in seeds)
          and len(set(seeds)) == len(seeds), f"{w}.seeds", "expected at least two distinct integer seeds")
    for i, s in enumerate(seeds):
        _need(0 <= s < 2**63, f"{w}.seeds[{i}]", f"expected a seed in [0, 2**63), got {s}")
    var = data.get("variation") or {"name": "none", "values": [None]}
    _need(isinstance(var, dict) and not (set(var) - {"name", "values", "key"}), f"{w}.variation",
          "expected {name, values, key?}")
    vals = var.get("values")
    _need(isinstance(vals, list) and vals and len(set(map(str, vals))) == len(vals), f"{w}.variation.values",
          "expected a list of distinct values")
    name = str(var.get("name", var.get("key", "")))
    _need(bool(var.get("key")) or name in ("length_dispersion", "none"), f"{w}.variation",
          "give key: CONFIG.KEY, or name: length_dispersion")
    if name == "length_dispersion" and not var.get("key"):
        for i, x in enumerate(vals):
            _need(isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= MAX_DISPERSION,
                  f"{w}.variation.values[{i}]", f"dispersions are numbers in [0, {MAX_DISPERSION}] (length ratios to "
                  f"the median are raised to this power), got {x!r:.40}")
    for i, x in enumerate(vals):
        _need(not (isinstance(x, float) and not math.isfinite(x)) and not (type(x) is int and not -2**63 <= x < 2**63),
              f"{w}.variation.values[{i}]", f"expected a finite number or a 64-bit integer, got {x!r:.40}")
    proposals = data.get("proposals", 0)
    _need(type(proposals) is int and 0 <= proposals <= MAX_PROPOSALS, f"{w}.proposals",
          f"expected a whole number in [0, {MAX_PROPOSALS}], got {proposals!r:.40}")
    proposer_seed = data.get("proposer_seed", 0)
    _need(type(proposer_seed) is int and 0 <= proposer_seed < 2**63, f"{w}.proposer_seed",
          f"expected a seed in [0, 2**63), got {proposer_seed!r:.40}")
    _need(data.get("name") is None or isinstance(data["name"], str), f"{w}.name",
          f"expected a string, got {data.get('name')!r:.40}")
    _need(candidate is not None or proposals > 0, w, "give a candidate, or proposals > 0 for the proposer")
    search = data.get("search") or sorted(REGISTRY[family])
    _need(isinstance(search, list) and all(n in REGISTRY[family] for n in search), f"{w}.search",
          f"expected a list of {family} strategies: {', '.join(sorted(REGISTRY[family]))}")
    method = data.get("interval", "t")
    _need(method in ("t", "bootstrap"), f"{w}.interval", "expected t or bootstrap")
    conf = data.get("confidence", 0.95)
    _need(conf in (0.9, 0.95, 0.99), f"{w}.confidence", "expected 0.9, 0.95 or 0.99")
    return Study(
        name=str(data.get("name") or (os.path.splitext(os.path.basename(path))[0] if path else "study")),
        question=" ".join(data["question"].split()), base_config=cfg_path, base_set=base_set, family=family,
        baseline=baseline, candidate=candidate, objective=objective, seeds=tuple(seeds),
        variation=Variation(name, tuple(vals), var.get("key")), proposals=proposals, interval=method,
        confidence=float(conf), proposer_seed=proposer_seed, search=tuple(search),
    )
