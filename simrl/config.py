"""Typed run configuration: frozen attrs classes, loaded from YAML with cattrs.

`load_config` reads a YAML file (or nothing: the embedded default), applies dotted
overrides such as ``deployment.rollout.instances=4`` or ``policy=sync``, validates, and
returns a `SimConfig`. Every error is a `ConfigError` whose message names the key path and
what was expected; the CLI prints it without a traceback.

The policy section is a tagged union keyed by ``kind``; policy classes register themselves
in `simrl.policy.registry`, so presets in `presets/` extend the union without edits here.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import cattrs
import yaml
from attrs import validators as v

from simrl.policy.base import Policy
from simrl.policy.registry import policy_class, policy_kinds


class ConfigError(ValueError):
    """A configuration problem, with the offending key path in the message."""


def _pos(_inst, att, value):
    if value <= 0:
        raise ValueError(f"{att.name} must be > 0, got {value!r}")


def _nonneg(_inst, att, value):
    if value < 0:
        raise ValueError(f"{att.name} must be >= 0, got {value!r}")


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


def _opt_pos(_inst, att, value):
    if value is not None and value <= 0:
        raise ValueError(f"{att.name} must be > 0 or null, got {value!r}")


@attrs.frozen
class WorkloadConfig:
    """Which workload to run: a generator name and its knobs, or a trace file.

    ``groups`` is the size of the prompt dataset; when a run needs more groups than that,
    it starts another epoch over the same prompts (as an RL dataloader does).
    """

    generator: str = "rl_math"
    groups: int = attrs.field(default=160, validator=_pos)
    group_size: int | None = attrs.field(default=None, validator=_opt_pos)  # None: generator's own
    seed: int | None = None  # None: the run seed
    trace: str | None = None  # path to a joint grouped workload trace (JSONL); overrides generator
    knobs: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class RolloutConfig:
    """The rollout fleet: identical inference instances (vLLM-like engines)."""

    instances: int = attrs.field(default=2, validator=_pos)
    gpu: Any = attrs.field(default="H100", validator=_gpu)  # name, YAML path or {name, flops, hbm_bytes, hbm_bw, ...}
    tp: int = attrs.field(default=1, validator=_pos)
    pp: int = attrs.field(default=1, validator=_pos)
    dp: int = attrs.field(default=1, validator=_pos)
    ep: int = attrs.field(default=1, validator=_pos)
    max_num_seqs: int = attrs.field(default=256, validator=_pos)
    kv_capacity_tokens: int | None = attrs.field(default=None, validator=_opt_pos)  # None: derive
    gpu_memory_utilization: float = attrs.field(default=0.9, validator=v.and_(v.gt(0.0), v.le(1.0)))
    max_num_batched_tokens: int = attrs.field(default=8192, validator=_nonneg)  # 0: prefill unchunked
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

    gpus: int = attrs.field(default=8, validator=_pos)
    gpu: Any = attrs.field(default="H100", validator=_gpu)  # name, YAML path or {name, flops, hbm_bytes, hbm_bw, ...}
    tp: int = attrs.field(default=1, validator=_pos)
    pp: int = attrs.field(default=1, validator=_pos)
    cp: int = attrs.field(default=1, validator=_pos)
    ep: int = attrs.field(default=1, validator=_pos)
    micro_batch_size: int = attrs.field(default=1, validator=_pos)
    activation_checkpointing: bool = True
    zero_stage: int = attrs.field(default=1, validator=v.in_((0, 1, 2, 3)))

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
    ``balance_rel_threshold`` are the kv_cache_aware knobs (vllm-router / sglang-gateway
    defaults: 0.3, 64, 1.5).
    """

    name: str = attrs.field(
        default="least_requests",
        validator=v.in_(("round_robin", "least_requests", "throughput_balance", "kv_cache_aware")),
    )
    active_cap: int = attrs.field(default=0, validator=_nonneg)
    cache_threshold: float = attrs.field(default=0.3, validator=v.and_(v.ge(0.0), v.le(1.0)))
    balance_abs_threshold: int = attrs.field(default=64, validator=_nonneg)
    balance_rel_threshold: float = attrs.field(default=1.5, validator=v.ge(1.0))


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
    offload_bytes_per_s: float = attrs.field(default=25e9, validator=_pos)  # colocated offload/reload
    strict: bool = False


@attrs.frozen
class RunConfig:
    seed: int = 0
    training_steps: int = attrs.field(default=5, validator=_pos)
    time_horizon_s: float = attrs.field(default=math.inf, validator=_pos)
    output_dir: str = "outputs"
    name: str | None = None  # None: derived from the policy, model and a config hash
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


# -- cattrs: tagged policy union, strict keys ------------------------------------------------

def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def structure_policy(obj, _type):
        if not isinstance(obj, dict):
            raise ValueError(f"expected a mapping with a 'kind' key, got {type(obj).__name__}")
        if "kind" not in obj:
            raise ValueError(f"missing 'kind' (one of: {', '.join(policy_kinds())})")
        kind = obj["kind"]
        try:
            cls = policy_class(kind)
        except KeyError:
            raise ValueError(f"unknown policy kind {kind!r}; expected one of: {', '.join(policy_kinds())}") from None
        fields = {k: val for k, val in obj.items() if k != "kind"}
        return _structure_attrs_strict(fields, cls)

    def unstructure_policy(obj):
        d = {a.name: conv.unstructure(getattr(obj, a.name)) for a in attrs.fields(type(obj))}
        return {"kind": obj.kind, **d}

    def _structure_attrs_strict(fields: dict, cls: type):
        attrs.resolve_types(cls)
        names = {a.name for a in attrs.fields(cls)}
        extra = sorted(set(fields) - names)
        if extra:
            raise cattrs.ForbiddenExtraKeysError("", cls, set(extra))
        kwargs = {}
        errors = []
        for a in attrs.fields(cls):
            if a.name not in fields:
                continue
            try:
                kwargs[a.name] = conv.structure(fields[a.name], a.type) if a.type is not None else fields[a.name]
            except Exception as exc:
                exc.add_note(f"Structuring class {cls.__name__} @ attribute {a.name}")
                errors.append(exc)
        if errors:
            raise cattrs.ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        # Run each knob's validator on its own first, so an error names the knob's path.
        for a in attrs.fields(cls):
            if a.validator is None or a.name not in kwargs:
                continue
            try:
                a.validator(None, a, kwargs[a.name])
            except (ValueError, TypeError) as exc:
                exc.add_note(f"Structuring class {cls.__name__} @ attribute {a.name}")
                errors.append(exc)
            except AttributeError:
                pass  # a validator that needs the instance: checked at construction below
        if errors:
            raise cattrs.ClassValidationError(f"While structuring {cls.__name__}", errors, cls)
        return cls(**kwargs)

    conv.register_structure_hook_func(lambda t: t is Policy, structure_policy)
    conv.register_unstructure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, Policy), unstructure_policy
    )
    return conv


converter = _make_converter()


def _flatten_errors(exc: BaseException, path: str = "") -> list[str]:
    """Turn cattrs' nested exception groups into 'path: message' lines."""
    msgs: list[str] = []
    if isinstance(exc, cattrs.ClassValidationError | cattrs.IterableValidationError | ExceptionGroup):
        for sub in exc.exceptions:
            note = ""
            for n in getattr(sub, "__notes__", []):
                note = str(n)
            key = ""
            if note.startswith("Structuring class") and "@ attribute" in note:
                key = note.split("@ attribute")[-1].strip()
            elif note.startswith("Extra fields"):
                key = ""
            sub_path = f"{path}.{key}" if path and key else (key or path)
            msgs.extend(_flatten_errors(sub, sub_path))
        return msgs
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return [f"{path + '.' if path else ''}{k}: unknown key" for k in sorted(exc.extra_fields)]
    text = str(exc)
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[1], attrs.Attribute):
        # attrs validators raise (message, attribute, expected, value): name the key itself.
        path = f"{path}.{args[1].name}" if path else args[1].name
        text = str(args[0])
    if isinstance(exc, KeyError):
        text = "missing required key"
    return [f"{path or '<root>'}: {text}"]


def structure(data: dict) -> SimConfig:
    try:
        return converter.structure(data, SimConfig)
    except Exception as exc:  # cattrs wraps everything in exception groups
        lines = _flatten_errors(exc)
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None


def unstructure(cfg: SimConfig) -> dict:
    return converter.unstructure(cfg)


def to_yaml(cfg: SimConfig) -> str:
    return yaml.safe_dump(unstructure(cfg), sort_keys=True, default_flow_style=False)


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict, dotted: str) -> None:
    """Apply ``a.b.c=value`` to a nested dict; ``policy=NAME`` switches the policy kind."""
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r}: expected KEY=VALUE, e.g. deployment.rollout.instances=4")
    key, _, raw = dotted.partition("=")
    key = key.strip()
    if not key:
        raise ConfigError(f"override {dotted!r}: empty key")
    value = _parse_value(raw)
    parts = key.split(".")
    if parts == ["policy"]:
        if not isinstance(value, str):
            raise ConfigError(f"policy={raw}: expected a policy kind name")
        data["policy"] = {"kind": value}
        return
    node = data
    for i, p in enumerate(parts[:-1]):
        nxt = node.get(p)
        if nxt is None and parts[i] in ("knobs", "rollout_knobs", "training_knobs", "weight_sync_knobs"):
            nxt = {}
        if nxt is None:
            nxt = {}
            node[p] = nxt
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {key}: {'.'.join(parts[: i + 1])} is not a section")
        node = nxt
    node[parts[-1]] = value


def default_data() -> dict:
    return unstructure(SimConfig())


def load_config(path: str | None = None, overrides: tuple[str, ...] | list[str] = ()) -> SimConfig:
    """Embedded default, then the YAML file (merged section by section), then overrides."""
    data = default_data()
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                user = yaml.safe_load(fh)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if user is None:
            user = {}
        if not isinstance(user, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level, got {type(user).__name__}")
        _merge(data, user, path="")
    # A policy override that only names the kind takes that kind's defaults; later
    # policy.x=... overrides then refine it.
    for ov in overrides:
        apply_override(data, ov)
    return structure(data)


def _merge(base: dict, user: dict, path: str) -> None:
    for k, val in user.items():
        here = f"{path}.{k}" if path else str(k)
        if k == "policy":
            base[k] = val  # a different kind replaces the whole section
        elif isinstance(val, dict) and isinstance(base.get(k), dict) and not k.endswith("knobs"):
            _merge(base[k], val, here)
        else:
            base[k] = val
