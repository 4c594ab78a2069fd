"""The strategy registry: typed strategies with parameters, in three families.

A strategy is a frozen attrs class: its fields are its parameters, each with a type, a default,
a validator and a search range (``metadata["search"]``: ``(low, high)`` for numbers, a tuple of
choices for strings). `to_overrides()` turns it into configuration overrides, so a strategy is
exactly a point of the simulator's own mechanisms (the routers of `simrl.engine.router`, the
admission and staleness rules of the built-in policies), never a new untested code path.

Families:

- ``router``: ``round_robin``, ``least_requests``, ``throughput_balance``, ``kv_cache_aware``
  (vllm-router / sglang-gateway cache-aware routing and its three thresholds), each with the
  per-instance ``active_cap``;
- ``admission``: ``sync`` (on-policy) and ``bounded_async`` (staleness bound, concurrency cap,
  what in-flight requests do at a weight update);
- ``batch``: ``fixed_batch`` (groups per training step).

`make_strategy(family, name, params)` builds and validates one (every error names the family,
strategy and parameter); `strategy_schema()` is the JSON description the LLM proposer is
given.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
from attrs import validators as v


class StrategyError(ValueError):
    """A proposal that is not a valid typed strategy (unknown name, parameter or value)."""


def _p(default, search, validator=None, doc=""):
    return attrs.field(default=default, validator=validator, metadata={"search": search, "doc": doc})


@attrs.frozen
class Strategy:
    family: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def to_overrides(self) -> list[str]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        return attrs.asdict(self)

    def label(self) -> str:
        ps = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({ps})" if ps else self.name

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "name": self.name, "params": self.params()}


_CAP = dict(default=0, search=(0, 256), validator=v.and_(v.instance_of(int), v.ge(0)),
            doc="max calls resident on one instance; 0 = no cap")


def _router_overrides(name: str, cap: int, **extra) -> list[str]:
    return [f"router.name={name}", f"router.active_cap={cap}", *(f"router.{k}={val}" for k, val in extra.items())]


@attrs.frozen
class RoundRobin(Strategy):
    """Route each call to the next instance in turn."""

    family: ClassVar[str] = "router"
    name: ClassVar[str] = "round_robin"
    active_cap: int = _p(**_CAP)

    def to_overrides(self):
        return _router_overrides(self.name, self.active_cap)


@attrs.frozen
class LeastRequests(Strategy):
    """Route to the instance with the fewest assigned calls (vLLM router's default)."""

    family: ClassVar[str] = "router"
    name: ClassVar[str] = "least_requests"
    active_cap: int = _p(**_CAP)

    def to_overrides(self):
        return _router_overrides(self.name, self.active_cap)


@attrs.frozen
class ThroughputBalance(Strategy):
    """Route to the instance with the fewest outstanding tokens (prefill + decode still to do)."""

    family: ClassVar[str] = "router"
    name: ClassVar[str] = "throughput_balance"
    active_cap: int = _p(**_CAP)

    def to_overrides(self):
        return _router_overrides(self.name, self.active_cap)


@attrs.frozen
class KvCacheAware(Strategy):
    """Prefix affinity with an imbalance escape, else the smallest tree (sglang-router cache_aware)."""

    family: ClassVar[str] = "router"
    name: ClassVar[str] = "kv_cache_aware"
    cache_threshold: float = _p(0.3, (0.0, 1.0), v.and_(v.instance_of(float), v.ge(0.0), v.le(1.0)),
                                "fraction of the prompt the router's tree must exceed for affinity")
    balance_abs_threshold: int = _p(64, (0, 128), v.and_(v.instance_of(int), v.ge(0)),
                                    "imbalance escape: max - min assigned calls above this ...")
    balance_rel_threshold: float = _p(1.5, (1.0, 2.0), v.and_(v.instance_of(float), v.ge(1.0)),
                                      "... and max above this times min")
    active_cap: int = _p(**_CAP)

    def to_overrides(self):
        return _router_overrides(self.name, self.active_cap, cache_threshold=self.cache_threshold,
                                 balance_abs_threshold=self.balance_abs_threshold,
                                 balance_rel_threshold=self.balance_rel_threshold)


@attrs.frozen
class SyncAdmission(Strategy):
    """On-policy: admit one step's groups, train, publish, repeat (staleness 0)."""

    family: ClassVar[str] = "admission"
    name: ClassVar[str] = "sync"

    def to_overrides(self):
        return ["policy=sync"]


_RULES = ("continue", "keep_pause", "abort_resume", "abort_restart", "drain")


@attrs.frozen
class BoundedAsyncAdmission(Strategy):
    """Admission by a staleness budget and a concurrency cap; stale groups dropped or evicted."""

    family: ClassVar[str] = "admission"
    name: ClassVar[str] = "bounded_async"
    max_staleness: int = _p(1, (0, 4), v.and_(v.instance_of(int), v.ge(0)), "versions a trained group may lag")
    inflight_rule: str = _p("abort_resume", _RULES, v.in_(_RULES), "what running requests do at a weight update")

    def to_overrides(self):
        return ["policy=bounded_async", f"policy.max_staleness={self.max_staleness}",
                f"policy.inflight_rule={self.inflight_rule}"]


@attrs.frozen
class FixedBatch(Strategy):
    """Train on the first ``batch_groups`` finished groups (FIFO)."""

    family: ClassVar[str] = "batch"
    name: ClassVar[str] = "fixed_batch"
    batch_groups: int = _p(32, (4, 128), v.and_(v.instance_of(int), v.gt(0)), "groups per training step")

    def to_overrides(self):
        return [f"policy.batch_groups={self.batch_groups}"]


REGISTRY: dict[str, dict[str, type[Strategy]]] = {}
for _cls in (RoundRobin, LeastRequests, ThroughputBalance, KvCacheAware, SyncAdmission, BoundedAsyncAdmission,
             FixedBatch):
    REGISTRY.setdefault(_cls.family, {})[_cls.name] = _cls

FAMILY_ORDER = ("admission", "batch", "router")  # overrides apply in this order (policy kind first)


def families() -> list[str]:
    return sorted(REGISTRY)


def make_strategy(family: str, name: str, params: dict[str, Any] | None = None) -> Strategy:
    """Build and validate one strategy; ints given where floats are expected are accepted."""
    if family not in REGISTRY:
        raise StrategyError(f"unknown strategy family {family!r}; expected one of: {', '.join(families())}")
    if name not in REGISTRY[family]:
        raise StrategyError(f"{family}: unknown strategy {name!r}; expected one of: {', '.join(sorted(REGISTRY[family]))}")
    cls = REGISTRY[family][name]
    params = dict(params or {})
    if not isinstance(params, dict):
        raise StrategyError(f"{family}.{name}: params must be a mapping")
    fields = {a.name: a for a in attrs.fields(cls)}
    extra = sorted(set(params) - set(fields))
    if extra:
        raise StrategyError(f"{family}.{name}.{extra[0]}: unknown parameter; expected one of: "
                            f"{', '.join(fields) or '(none)'}")
    kwargs = {}
    for k, val in params.items():
        if fields[k].type in (float, "float") and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        kwargs[k] = val
    for k, val in kwargs.items():  # each parameter's validator on its own: the error names it
        if fields[k].validator is not None:
            try:
                fields[k].validator(None, fields[k], val)
            except (TypeError, ValueError) as exc:
                raise StrategyError(f"{family}.{name}.{k}: {exc.args[0] if exc.args else exc}") from None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        msg = exc.args[0] if exc.args else str(exc)
        bad = exc.args[1].name if len(exc.args) > 1 and isinstance(exc.args[1], attrs.Attribute) else "?"
        raise StrategyError(f"{family}.{name}.{bad}: {msg}") from None


def strategy_from_dict(d: Any, where: str = "strategy") -> Strategy:
    if not isinstance(d, dict):
        raise StrategyError(f"{where}: expected a mapping {{family, name, params}}, got {type(d).__name__}")
    extra = sorted(set(d) - {"family", "name", "params", "rationale"})
    if extra:
        raise StrategyError(f"{where}.{extra[0]}: unknown key; expected family, name, params (and rationale)")
    for k in ("family", "name"):
        if not isinstance(d.get(k), str):
            raise StrategyError(f"{where}.{k}: missing or not a string")
    return make_strategy(d["family"], d["name"], d.get("params") or {})


def strategy_schema(family: str | None = None) -> dict[str, Any]:
    """A JSON-able description of the registry (names, parameters, types, ranges, defaults)."""
    out: dict[str, Any] = {}
    for fam, strategies in sorted(REGISTRY.items()):
        if family and fam != family:
            continue
        out[fam] = {}
        for name, cls in sorted(strategies.items()):
            out[fam][name] = {
                "doc": (cls.__doc__ or "").strip(),
                "params": {a.name: {"type": getattr(a.type, "__name__", str(a.type)), "default": a.default,
                                    "search": list(a.metadata["search"]), "doc": a.metadata.get("doc", "")}
                           for a in attrs.fields(cls)},
            }
    return out


def overrides_for(strategies: dict[str, Strategy]) -> list[str]:
    out = []
    for fam in FAMILY_ORDER:
        if fam in strategies:
            out += strategies[fam].to_overrides()
    return out
