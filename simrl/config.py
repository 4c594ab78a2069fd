"""Typed run configuration: frozen attrs classes, loaded from YAML with cattrs.

`load_config` reads a YAML file (or nothing: the embedded default), applies dotted
overrides such as ``deployment.rollout.instances=4`` or ``policy=sync``, validates, and
returns a `SimConfig`. Every error is a `ConfigError` whose message names the key path and
what was expected; the CLI prints it without a traceback.

The policy section is a tagged union keyed by ``kind``; policy classes register themselves
in `simrl.policy.registry`, so presets in `presets/` extend the union without edits here.
"""

from __future__ import annotations

import copy
import math
from typing import Any, NewType

import attrs
import cattrs
import yaml
from attrs import validators as v
from cattrs.errors import AttributeValidationNote

from simrl.deployment_check import deployment_errors
from simrl.policy.base import Policy
from simrl.policy.registry import policy_class, policy_kinds
from simrl.strictio import (
    INT_MAX,
    INT_MIN,
    YamlInputError,
    YamlNumberError,
    did_you_mean,
    load_yaml_text,
    read_utf8,
    yaml_key_lines,
)

# Seconds where ``.inf`` means "no limit" (NaN is never accepted).
HorizonS = NewType("HorizonS", float)


class ConfigError(ValueError):
    """A configuration problem, with the offending key path in the message."""


def _pos(_inst, att, value):
    if value <= 0:
        raise ValueError(f"{att.name} must be > 0, got {value!r}")


def _nonneg(_inst, att, value):
    if value < 0:
        raise ValueError(f"{att.name} must be >= 0, got {value!r}")


def _finite_nonneg(_inst, att, value):
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{att.name} must be a finite number >= 0, got {value!r}")


def _gpu(_inst, att, value):
    """A catalog GPU name, the path of a GPU YAML file, or a mapping of figures (simrl.cost.hardware)."""
    if not isinstance(value, str | dict):
        raise ValueError(f"must be a GPU name, a YAML file path or a mapping of figures, got {value!r}", att)
    if isinstance(value, dict):
        from simrl.cost.base import CostModelError
        from simrl.cost.hardware import gpu_spec

        try:
            gpu_spec(value)
        except CostModelError as exc:
            raise ValueError(str(exc), att) from None


RUN_NAME_MAX_BYTES = 200  # a file name is at most 255 bytes; staging adds a prefix and a suffix


def _run_name(_inst, att, value):
    """``run.name`` is the run directory's name under ``run.output_dir``: one path component."""
    if value is None:
        return
    if not value or value.strip() != value:
        raise ValueError(f"{att.name} must be a non-empty directory name without surrounding spaces "
                         f"(or null for the default), got {value!r}")
    if value in (".", "..") or any(c in value for c in "/\\") or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{att.name} is the run directory's name under run.output_dir: expected one path "
                         f"component without '/', '\\', control characters, '.' or '..', got {value!r:.80}")
    if len(value.encode("utf-8")) > RUN_NAME_MAX_BYTES:
        raise ValueError(f"{att.name} must be at most {RUN_NAME_MAX_BYTES} bytes (a directory name), got "
                         f"{len(value.encode('utf-8'))}")


def _opt_pos(_inst, att, value):
    if value is not None and value <= 0:
        raise ValueError(f"{att.name} must be > 0 or null, got {value!r}")


def _count(hi: int, lo: int = 1, optional: bool = False):
    """An integer in [lo, hi] (or null when ``optional``): sizes that allocate are bounded, so a typo
    such as ``instances=1000000000`` is an error, not an hour of memory growth."""

    def check(_inst, att, value):
        if value is None and optional:
            return
        if not lo <= value <= hi:
            raise ValueError(f"{att.name} must be in [{lo}, {hi}]{' or null' if optional else ''}, got {value!r}")

    return check


@attrs.frozen
class WorkloadConfig:
    """Which workload to run: a generator name and its knobs, or a trace file.

    ``groups`` is the size of the prompt dataset; when a run needs more groups than that,
    it starts another epoch over the same prompts (as an RL dataloader does).
    """

    generator: str = "rl_math"
    groups: int = attrs.field(default=160, validator=_count(50_000_000))
    group_size: int | None = attrs.field(default=None, validator=_count(1_000_000, optional=True))  # None: generator's own
    seed: int | None = attrs.field(default=None, validator=_count(INT_MAX, lo=0, optional=True))  # None: run seed
    trace: str | None = None  # path to a joint grouped workload trace (JSONL); overrides generator
    knobs: dict[str, Any] = attrs.field(factory=dict, validator=lambda _i, _a, v: _not_generate_args(v))


def _not_generate_args(knobs: dict[str, Any]) -> None:
    """``workload.knobs.groups`` is ``workload.groups`` (an argument of the generator, not a knob)."""
    for k in ("groups", "seed", "group_size"):
        if k in knobs:
            raise ValueError(f"knobs.{k} is not a knob: set workload.{k} instead")


@attrs.frozen
class RolloutConfig:
    """The rollout fleet: identical inference instances (vLLM-like engines)."""

    instances: int = attrs.field(default=2, validator=_count(100_000))
    gpu: Any = attrs.field(default="H100", validator=_gpu)  # name, YAML path or {name, flops, hbm_bytes, hbm_bw, ...}
    tp: int = attrs.field(default=1, validator=_count(4096))
    pp: int = attrs.field(default=1, validator=_count(4096))
    dp: int = attrs.field(default=1, validator=_count(4096))
    ep: int = attrs.field(default=1, validator=_count(4096))
    max_num_seqs: int = attrs.field(default=256, validator=_count(1 << 20))
    kv_capacity_tokens: int | None = attrs.field(default=None, validator=_count(1 << 40, optional=True))  # None: derive
    gpu_memory_utilization: float = attrs.field(default=0.9, validator=v.and_(v.gt(0.0), v.le(1.0)))
    max_num_batched_tokens: int = attrs.field(default=8192, validator=_count(1 << 31, lo=0))  # 0: prefill unchunked
    kv_policy: str = attrs.field(default="on_demand", validator=v.in_(("reserve", "on_demand")))
    prefix_caching: bool = True

    @property
    def gpus_per_instance(self) -> int:
        # Expert parallelism spans the TP x DP ranks (vLLM's --enable-expert-parallel); it adds none.
        return self.tp * self.pp * self.dp

    @property
    def gpus(self) -> int:
        return self.instances * self.gpus_per_instance


@attrs.frozen
class TrainingConfig:
    """The trainer: GPUs and their Megatron/FSDP-style layout. DP is derived."""

    gpus: int = attrs.field(default=8, validator=_count(1_000_000))
    gpu: Any = attrs.field(default="H100", validator=_gpu)  # name, YAML path or {name, flops, hbm_bytes, hbm_bw, ...}
    tp: int = attrs.field(default=1, validator=_count(4096))
    pp: int = attrs.field(default=1, validator=_count(4096))
    cp: int = attrs.field(default=1, validator=_count(4096))
    ep: int = attrs.field(default=1, validator=_count(4096))
    micro_batch_size: int = attrs.field(default=1, validator=_count(1 << 20))
    activation_checkpointing: bool = True
    zero_stage: int = attrs.field(default=1, validator=v.in_((0, 1, 2, 3)))
    # Time in the step besides training (docs/model.md, "Reward and validation time"):
    reward_s_per_trajectory: float = attrs.field(default=0.0, validator=_finite_nonneg)  # reward/verifier, trainer-side
    reward_workers: int = attrs.field(default=1, validator=_count(1_000_000))  # trajectories scored in parallel
    test_freq: int = attrs.field(default=0, validator=_count(10_000_000, lo=0))  # verl trainer.test_freq: validate every k steps
    validation_s: float = attrs.field(default=0.0, validator=_finite_nonneg)  # one validation pass (rollout paused)
    # verl fully_async: mini-batch updates per weight publication (1: the whole batch is one update)
    trigger_parameter_sync_step: int = attrs.field(default=1, validator=_count(1_000_000))

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    def __attrs_post_init__(self):
        per = self.tp * self.pp * self.cp
        if self.gpus % per:
            raise ValueError(f"gpus={self.gpus} is not divisible by tp*pp*cp={per}")
        if self.ep > 1 and self.dp * self.cp * self.tp % self.ep:
            raise ValueError(f"ep={self.ep} must divide dp*cp*tp={self.dp * self.cp * self.tp}")


@attrs.frozen
class DeploymentConfig:
    model: str = "qwen3-8b"
    rollout: RolloutConfig = attrs.field(factory=RolloutConfig)
    training: TrainingConfig = attrs.field(factory=TrainingConfig)
    placement: str = attrs.field(default="disaggregated", validator=v.in_(("disaggregated", "colocated")))


@attrs.frozen
class RouterConfig:
    """How calls are assigned to rollout instances.

    ``active_cap`` caps the requests resident on one instance (0 = off); calls beyond it wait
    in the router queue. ``cache_threshold`` / ``balance_abs_threshold`` /
    ``balance_rel_threshold`` are the kv_cache_aware knobs, named and defaulted as
    sglang-router's cache_aware CLI (``--cache-threshold 0.3``, ``--balance-abs-threshold 64``,
    ``--balance-rel-threshold 1.5``; sgl-router/py_src/sglang_router/router_args.py).
    ``dp_shard`` is NeMo-RL's synchronous vLLM generation (``vllm_cfg.async_engine: false``): the
    batch is cut into one contiguous slice per engine before generation starts
    (``BatchedDataDict.shard_by_batch_size(dp_size, allow_uneven_shards=True)``), so call k of a
    batch goes to instance ``(k // shard_calls) % instances``; ``shard_calls`` 0 derives the slice
    from the policy's batch, ``ceil(batch trajectories / instances)``.
    """

    name: str = attrs.field(
        default="least_requests",
        validator=v.in_(("round_robin", "least_requests", "throughput_balance", "kv_cache_aware", "dp_shard")),
    )
    active_cap: int = attrs.field(default=0, validator=_count(1 << 31, lo=0))
    cache_threshold: float = attrs.field(default=0.3, validator=v.and_(v.ge(0.0), v.le(1.0)))
    balance_abs_threshold: int = attrs.field(default=64, validator=_nonneg)
    balance_rel_threshold: float = attrs.field(default=1.5, validator=v.ge(1.0))
    shard_calls: int = attrs.field(default=0, validator=_count(1 << 31, lo=0))  # dp_shard: calls per slice (0: derive)


@attrs.frozen
class CostConfig:
    """Cost models: a built-in family name or the path of a fitted artifact (JSON).

    ``*_knobs`` are passed to the family's constructor (e.g. efficiency factors, a fixed step
    time). ``strict`` turns out-of-validity-domain queries into errors.
    """

    rollout: str = "roofline"
    training: str = "analytical"
    weight_sync: str = "nccl"
    rollout_knobs: dict[str, Any] = attrs.field(factory=dict)
    training_knobs: dict[str, Any] = attrs.field(factory=dict)
    weight_sync_knobs: dict[str, Any] = attrs.field(factory=dict)
    colocated_knobs: dict[str, Any] = attrs.field(factory=dict)  # simrl.cost.colocated (sleep level, offloads)
    # colocated host transfers; None: the catalog GPU's host link x colocated_knobs.host_link_efficiency
    offload_bytes_per_s: float | None = attrs.field(default=None, validator=v.optional(_pos))
    strict: bool = False


@attrs.frozen
class RunConfig:
    seed: int = attrs.field(default=0, validator=_count(INT_MAX, lo=0))
    training_steps: int = attrs.field(default=5, validator=_count(10_000_000))
    time_horizon_s: HorizonS = attrs.field(default=math.inf, validator=_pos)
    output_dir: str = "outputs"
    name: str | None = attrs.field(default=None, validator=_run_name)  # None: policy, model and a config hash
    telemetry: bool = True
    plots: bool = True


@attrs.frozen
class SimConfig:
    deployment: DeploymentConfig = attrs.field(factory=DeploymentConfig)
    workload: WorkloadConfig = attrs.field(factory=WorkloadConfig)
    # The default scenario is the PSRL run the product description is aligned against.
    policy: Policy = attrs.field(factory=lambda: policy_class("psrl")())
    router: RouterConfig = attrs.field(factory=RouterConfig)
    cost: CostConfig = attrs.field(factory=CostConfig)
    run: RunConfig = attrs.field(factory=RunConfig)


# -- cattrs: tagged policy union, exact types, strict keys -----------------------------------

class _Invalid(ValueError):
    """A value of the wrong type or range; the message says what was expected."""


def _show(value) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _reads_as(text: str, typ: type) -> bool:
    """Whether ``text`` is a number of ``typ`` written in quotes (``"12"``): the hint to unquote it."""
    try:
        typ(text.strip())
    except ValueError:
        return False
    return True


def _structure_int(value, _type):
    if type(value) is not int:
        hint = ""
        if isinstance(value, float) and math.isfinite(value):
            hint = "; write a whole number (a float is never truncated)"
        elif isinstance(value, str) and _reads_as(value, int):
            hint = "; write it without quotes"
        raise _Invalid(f"expected an integer, got {_show(value)}{hint}")
    if not INT_MIN <= value <= INT_MAX:
        raise _Invalid(f"expected an integer in the 64-bit range, got {value}")
    return value


def _structure_float(value, _type, allow_inf: bool = False):
    if isinstance(value, bool) or not isinstance(value, int | float):
        hint = "; write a number without quotes (1.5, 2e-3, .inf where no limit is allowed)" \
            if isinstance(value, str) and _reads_as(value, float) else ""
        raise _Invalid(f"expected a number, got {_show(value)}{hint}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not (allow_inf and value > 0)):
        raise _Invalid(f"expected a finite number, got {value}" + (" (.inf means no limit here; NaN never)"
                                                                     if allow_inf else ""))
    return value


def _structure_bool(value, _type):
    if type(value) is not bool:
        hint = "; write true or false without quotes" if isinstance(value, str | int) else ""
        raise _Invalid(f"expected true or false, got {_show(value)}{hint}")
    return value


def _structure_str(value, _type):
    if type(value) is not str:
        raise _Invalid(f"expected a string, got {_show(value)}; quote it if it is meant as text")
    return value


def _plain_error(value) -> tuple[str, str] | None:
    """(relative path, message) of the first value in knobs data that is not plain and finite."""
    if isinstance(value, dict):
        for k, val in value.items():
            if not isinstance(k, str):
                return str(k), f"expected a string key, got {_show(k)}"
            sub = _plain_error(val)
            if sub is not None:
                return (f"{k}.{sub[0]}" if sub[0] and not sub[0].startswith("[") else f"{k}{sub[0]}"), sub[1]
    elif isinstance(value, list):
        for i, val in enumerate(value):
            sub = _plain_error(val)
            if sub is not None:
                return f"[{i}]" + (f".{sub[0]}" if sub[0] and not sub[0].startswith("[") else sub[0]), sub[1]
    elif isinstance(value, float) and not math.isfinite(value):
        return "", f"expected a finite number, got {value}"
    elif isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
        return "", f"expected an integer in the 64-bit range, got {value}"
    elif value is not None and not isinstance(value, str | int | float | bool):
        return "", f"expected plain data, got {_show(value)}"
    return None


def _structure_knobs(value, _type):
    if not isinstance(value, dict):
        raise _Invalid(f"expected a mapping of knob names to values, got {_show(value)}")
    bad = _plain_error(value)
    if bad is not None:
        exc = _Invalid(bad[1])
        exc.add_note(AttributeValidationNote("knob value", bad[0], None))
        raise cattrs.ClassValidationError("While structuring knobs", [exc], dict)
    return dict(value)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    # null (JSON has no infinity) and .inf both mean "no limit".
    conv.register_structure_hook(HorizonS, lambda v, t: math.inf if v is None else _structure_float(v, t, True))
    conv.register_structure_hook(bool, _structure_bool)
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook_func(lambda t: t == dict[str, Any], _structure_knobs)

    def structure_policy(obj, _type):
        if isinstance(obj, str):
            obj = {"kind": obj}  # `policy: NAME` (YAML) is `policy=NAME` (command line)
        if not isinstance(obj, dict):
            raise _Invalid(f"expected a policy name or a mapping with a 'kind' key, got {_show(obj)}")
        if "kind" not in obj:
            raise _Invalid(f"missing 'kind' (one of: {', '.join(policy_kinds())})")
        kind = obj["kind"]
        try:
            cls = policy_class(kind)
        except (KeyError, TypeError):
            raise _Invalid(f"unknown policy kind {kind!r}{did_you_mean(str(kind), policy_kinds())}; expected "
                           f"one of: {', '.join(policy_kinds())} (`srl presets` lists them)") from None
        fields = {k: val for k, val in obj.items() if k != "kind"}
        return _structure_attrs_strict(fields, cls)

    def unstructure_policy(obj):
        d = {a.name: conv.unstructure(getattr(obj, a.name)) for a in attrs.fields(type(obj))}
        return {"kind": obj.kind, **d}

    def _structure_attrs_strict(fields, cls: type):
        """One attrs class, every problem collected with the attribute it belongs to.

        attrs validators run in ``__init__``, where cattrs cannot say which attribute failed,
        so each knob's validator is first run on its own (the per-knob pass), then the class is
        built (cross-field checks in ``__attrs_post_init__`` are reported at the class's path).
        """
        if not isinstance(fields, dict):
            raise _Invalid(f"expected a mapping (a section of keys), got {_show(fields)}")
        attrs.resolve_types(cls)
        names = [a.name for a in attrs.fields(cls)]
        errors: list[Exception] = []
        for key in fields:
            if key not in names:
                exc = _Invalid(f"unknown key{did_you_mean(str(key), names)}; known keys: {', '.join(names)}")
                exc.add_note(AttributeValidationNote(f"extra key {key}", str(key), None))
                errors.append(exc)
        kwargs = {}
        for a in attrs.fields(cls):
            if a.name not in fields:
                continue
            try:
                kwargs[a.name] = conv.structure(fields[a.name], a.type) if a.type is not None else fields[a.name]
            except Exception as exc:
                exc.add_note(AttributeValidationNote(f"Structuring {cls.__name__}.{a.name}", a.name, a.type))
                errors.append(exc)
        if errors:
            raise cattrs.ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        for a in attrs.fields(cls):
            if a.validator is None or a.name not in kwargs:
                continue
            try:
                a.validator(None, a, kwargs[a.name])
            except (ValueError, TypeError) as exc:
                exc.add_note(AttributeValidationNote(f"Validating {cls.__name__}.{a.name}", a.name, a.type))
                errors.append(exc)
            except AttributeError:
                pass  # a validator that needs the instance: checked at construction below
        if errors:
            raise cattrs.ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:
            raise cattrs.ClassValidationError(f"While structuring {cls.__name__}", [exc], cls) from None

    conv.register_structure_hook_func(lambda t: t is Policy, structure_policy)
    conv.register_structure_hook_func(
        lambda t: isinstance(t, type) and attrs.has(t) and not issubclass(t, Policy), _structure_attrs_strict
    )
    conv.register_unstructure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, Policy), unstructure_policy
    )
    return conv


converter = _make_converter()


def _format_exception(exc: BaseException, _type) -> str:
    if isinstance(exc, KeyError):
        return "missing required key"
    if isinstance(exc, _Invalid):
        return str(exc)
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[1], attrs.Attribute):
        return str(args[0])  # attrs' own validators: (message, attribute, expected, value)
    if isinstance(exc, ValueError | TypeError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def error_lines(exc: BaseException) -> list[str]:
    """cattrs' errors as ``key.path: what was wrong`` lines (`cattrs.transform_error` paths)."""
    out = []
    for line in cattrs.transform_error(exc, path="$", format_exception=_format_exception):
        msg, _, path = line.rpartition(" @ ")
        path = path.removeprefix("$").removeprefix(".") or "<top level>"
        out.append(f"{path}: {msg}")
    return out


def structure(data: dict) -> SimConfig:
    try:
        return converter.structure(data, SimConfig)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(error_lines(exc))) from None


def unstructure(cfg: SimConfig) -> dict:
    return converter.unstructure(cfg)


def to_yaml(cfg: SimConfig) -> str:
    return yaml.safe_dump(unstructure(cfg), sort_keys=True, default_flow_style=False)


# -- parse caches: a sweep loads thousands of configurations that repeat the same override values
# and base file. Only the YAML parsing is cached (keyed by the exact text, so a hit is the same
# parse), and every hit returns a fresh copy of the parsed containers: no two configurations share
# a mutable dict or list. Errors are never cached (a bad value is re-parsed and raises each time).

_CACHE_MAX = 65_536
_PARSED_VALUES: dict[str, Any] = {}
_PARSED_FILES: dict[str, tuple[dict, dict[str, int]]] = {}
_DEFAULT_DATA: list[dict] = []


def _fresh(value: Any) -> Any:
    """A copy of parsed YAML data: new dicts and lists; scalars (immutable) are shared."""
    if isinstance(value, dict):
        return {k: _fresh(val) for k, val in value.items()}
    if isinstance(value, list):
        return [_fresh(val) for val in value]
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    return copy.deepcopy(value)


def _remember(cache: dict, key, value) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value


def clear_parse_caches() -> None:
    """Forget the cached parses of override values, configuration files and the default data."""
    _PARSED_VALUES.clear()
    _PARSED_FILES.clear()
    _DEFAULT_DATA.clear()


def _parse_value(key: str, text: str) -> Any:
    """An override's value, read as one YAML scalar or flow collection (``4``, ``true``, ``[1, 2]``)."""
    hit = _PARSED_VALUES.get(text, _PARSED_VALUES)
    if hit is not _PARSED_VALUES:
        return _fresh(hit)
    try:
        value = load_yaml_text(text) if text.strip() else text
    except YamlNumberError as exc:
        raise ConfigError(f"override {key}={text}: {exc.message}") from None
    except YamlInputError as exc:
        if text.lstrip()[:1] in "[{" or text.strip().startswith(("'", '"')):
            raise ConfigError(f"override {key}={text}: {exc.message}; quote the whole value for a string") from None
        value = text
    _remember(_PARSED_VALUES, text, value)
    return _fresh(value)


KNOB_SECTIONS = ("knobs", "rollout_knobs", "training_knobs", "weight_sync_knobs", "colocated_knobs")


def apply_override(data: dict, dotted: str) -> None:
    """Apply ``a.b.c=value`` to a nested dict; ``policy=NAME`` switches the policy kind."""
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r}: expected KEY=VALUE, e.g. deployment.rollout.instances=4")
    key, _, raw = dotted.partition("=")
    key = key.strip()
    if not key:
        raise ConfigError(f"override {dotted!r}: empty key")
    parts = key.split(".")
    if any(not p for p in parts):
        raise ConfigError(f"override {dotted!r}: empty part in the key path {key!r}")
    value = _parse_value(key, raw)
    if parts == ["policy"]:
        if not isinstance(value, str):
            raise ConfigError(f"override policy={raw}: expected a policy kind name (`srl presets` lists them)")
        data["policy"] = {"kind": value}
        return
    node = data
    for i, p in enumerate(parts[:-1]):
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        if isinstance(nxt, str) and i == 0 and p == "policy":
            nxt = node[p] = {"kind": nxt}
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {key}: {'.'.join(parts[: i + 1])} is a value, not a section")
        node = nxt
    node[parts[-1]] = value


def key_field(cfg: SimConfig, dotted: str) -> tuple[str, Any]:
    """Where the configuration key ``dotted`` is in ``cfg``'s layout: ``("ok", attribute)`` for a
    typed key (an `attrs.Attribute`: its type and validator), ``("free", None)`` for a key inside a
    knobs mapping or the policy union itself (checked where it is read),
    ``("unknown", names)`` where no such key exists (``names``: the keys of the section where the path
    left the layout, for a did-you-mean). ``policy.X`` is looked up in ``cfg``'s policy class."""
    node: Any = type(cfg)
    att = None
    for p in dotted.split("."):
        if node is Policy:
            node = type(cfg.policy)
        if not (isinstance(node, type) and attrs.has(node)):
            return ("free", None) if node == dict[str, Any] or node is Any else ("unknown", None)
        attrs.resolve_types(node)
        fields = attrs.fields_dict(node)
        if p not in fields:
            return ("free", None) if p == "kind" and issubclass(node, Policy) else ("unknown", list(fields))
        att = fields[p]
        node = att.type
    if att is None or node is Policy or node == dict[str, Any]:
        return "free", None
    return "ok", att  # (``Any``, e.g. a GPU: no type, but the key's validator)


def unknown_key_error(cfg: SimConfig, key: str) -> str | None:
    """Why ``key`` is not a configuration key of ``cfg``'s layout (with a did-you-mean), or None."""
    status, names = key_field(cfg, key)
    if status != "unknown":
        return None
    parts = key.split(".")
    hint = did_you_mean(parts[-1], names or []) if names else ""
    return (f"{key!r} is not a configuration key{hint}" +
            (f"; known keys there: {', '.join(names)}" if names else "") + " (`srl config` prints them all)")


def override_value_error(cfg: SimConfig, key: str, text: str) -> str | None:
    """What is wrong with the override ``key=text`` on its own for ``cfg``'s layout: the value read
    as `apply_override` reads it, structured as a configuration file's value is (exact types) and
    checked by the key's own validator (its range or choices; not the rules that relate keys, such
    as TP dividing the GPUs). None where it is a valid value of the key (or the key is free-form)."""
    status, att = key_field(cfg, key)
    if status != "ok":
        return None
    try:
        value = converter.structure(_parse_value(key, text), att.type)
        if att.validator is not None:
            att.validator(None, att, value)
    except ConfigError as exc:
        return str(exc)
    except AttributeError:
        return None  # a validator that needs the whole section: checked per point
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        return "; ".join(line.removeprefix("<top level>: ") for line in error_lines(exc))
    return None


def _drift_errors(cfg: SimConfig) -> list[str]:
    """A linear length drift (``workload.knobs.length_growth_per_step``) whose factor reaches zero
    within the run: every later response would be silently clamped to one token."""
    g = cfg.workload.knobs.get("length_growth_per_step")
    if isinstance(g, int | float) and not isinstance(g, bool) and math.isfinite(g) and g < 0:
        steps = cfg.run.training_steps
        if 1.0 + g * steps <= 0:
            return [f"workload.knobs.length_growth_per_step: {g:g} per step makes the response-length factor "
                    f"1 + {g:g} x step reach {1.0 + g * steps:g} by step {steps} (run.training_steps); "
                    f"lengths must stay > 0: use > {-1.0 / steps:g} or length_drift_knots"]
    return []


def check_deployment(cfg: SimConfig) -> None:
    """Cross-field checks against the model and hardware (`simrl.deployment_check`)."""
    errs = deployment_errors(cfg) + _drift_errors(cfg)
    if errs:
        raise ConfigError("impossible deployment:\n  " + "\n  ".join(errs))


def default_data() -> dict:
    """The embedded default configuration as plain data (a fresh copy on every call)."""
    if not _DEFAULT_DATA:
        _DEFAULT_DATA.append(unstructure(SimConfig()))
    return _fresh(_DEFAULT_DATA[0])


def read_config_file(path: str) -> tuple[dict, dict[str, int]]:
    """The user's YAML file, strictly read (duplicate keys, non-UTF-8 bytes and aliases refused),
    and the line of every key (for messages)."""
    try:
        text = read_utf8(path)
        hit = _PARSED_FILES.get(text)  # keyed by the file's text: a changed file is parsed again
        if hit is not None:
            return _fresh(hit[0]), dict(hit[1])
        user = load_yaml_text(text)
    except YamlInputError as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        raise ConfigError(f"{where}: {exc.message}") from None
    if user is None:
        raise ConfigError(f"{path}: the configuration file is empty (no YAML document, or only comments); "
                          f"expected a mapping of sections (deployment, workload, policy, router, cost, run) at the "
                          f"top level. "
                          f"To run the embedded default, leave out --config; to start from it, write "
                          f"`srl config > {path}`")
    if not isinstance(user, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (deployment, workload, policy, router, cost, "
                          f"run) at the top level, got {type(user).__name__}")
    lines = yaml_key_lines(text)
    _remember(_PARSED_FILES, text, (user, lines))
    return _fresh(user), dict(lines)


def _locate_in_file(path: str, lines: dict[str, int], message: str) -> str:
    """Prefix each ``key.path: ...`` line of a config error with ``FILE:LINE:`` where the key is."""
    out = []
    for text in message.splitlines():
        key = text.strip().partition(": ")[0]
        while key and key not in lines:
            key = key.rpartition(".")[0]
        if key and text.startswith("  "):
            out.append(f"  {path}:{lines[key]}: {text.strip()}")
        else:
            out.append(text)
    if out and out[0] == message.splitlines()[0]:
        out[0] = f"{path}: {out[0]}"
    return "\n".join(out)


def _base_data(path: str | None, overrides: tuple[str, ...] | list[str] = ()) -> dict:
    """The embedded default, then the YAML file (merged section by section and checked), then
    ``overrides``: the unstructured data `load_config` and `ConfigBase` start from."""
    data = default_data()
    if path is not None:
        user, lines = read_config_file(path)
        try:
            _merge(data, user, path="")
            check_deployment(structure(data))
        except ConfigError as exc:
            raise ConfigError(_locate_in_file(path, lines, str(exc))) from None
    # A policy override that only names the kind takes that kind's defaults; later
    # policy.x=... overrides then refine it.
    for ov in overrides:
        apply_override(data, ov)
    return data


def _structured(data: dict) -> SimConfig:
    cfg = structure(data)
    check_deployment(cfg)
    return cfg


def load_config(path: str | None = None, overrides: tuple[str, ...] | list[str] = ()) -> SimConfig:
    """Embedded default, then the YAML file (merged section by section), then overrides."""
    return _structured(_base_data(path, overrides))


class ConfigBase:
    """A base configuration applied once: ``ConfigBase(path, base).load(more)`` gives what
    ``load_config(path, [*base, *more])`` gives (the same steps on the same data: the default, the
    file merged and checked, ``base`` then ``more`` applied, structured and checked), without
    reading the file and applying ``base`` again for every point of a sweep. Raises `ConfigError`
    where the file or ``base`` is invalid on its own (where ``load_config`` would raise for every
    point). Each `load` starts from a fresh copy of the base data: configurations share nothing
    mutable."""

    def __init__(self, path: str | None = None, overrides: tuple[str, ...] | list[str] = ()):
        self._data = _base_data(path, overrides)

    def load(self, overrides: tuple[str, ...] | list[str] = ()) -> SimConfig:
        data = _fresh(self._data)
        for ov in overrides:
            apply_override(data, ov)
        return _structured(data)


def _merge(base: dict, user: dict, path: str) -> None:
    for k, val in user.items():
        here = f"{path}.{k}" if path else str(k)
        if not isinstance(k, str):
            raise ConfigError(f"{here}: keys must be strings, got {k!r}")
        if k == "policy" and not path:
            base[k] = {"kind": val} if isinstance(val, str) else val  # a kind replaces the whole section
        elif isinstance(val, dict) and isinstance(base.get(k), dict) and not k.endswith("knobs"):
            _merge(base[k], val, here)
        else:
            base[k] = val
