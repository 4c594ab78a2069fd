"""GPU specifications used by the analytical cost models (public datasheet numbers).

One frozen `GPUSpec` per accelerator: dense BF16 (and FP8) throughput, HBM capacity and bandwidth,
and the per-GPU link bandwidths that collectives see. Bandwidths are unidirectional, per GPU
(vendors quote NVLink and PCIe as bidirectional totals; the catalog halves them).

The table is data, not code: ``simrl/cost/catalog/gpus.yaml`` (each entry with its datasheet
source), validated on load. `gpu_spec` resolves

- a name or alias, case-insensitively ("H100", "NVIDIA H100 80GB HBM3", "mi300x");
- a mapping, e.g. from the run configuration ``deployment.rollout.gpu: {name: X, flops: 400 TFLOPS,
  hbm_bytes: 96 GB, hbm_bw: 3 TB/s}``; ``base: H100`` inherits every key not given;
- the path of a YAML file holding one such mapping (or a table of them, ``{NAME: {...}}``, whose
  single entry is taken).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from simrl.cost.base import CostModelError
from simrl.cost.catalog import data_path, parse_quantity

GiB = 2**30
MiB = 2**20

CATALOG_FILE = "gpus.yaml"


@attrs.frozen
class GPUSpec:
    """One accelerator. Units: FLOP/s, bytes, bytes/s (unidirectional, per GPU)."""

    name: str
    bf16_flops_per_s: float  # dense (no 2:4 sparsity)
    hbm_bytes: float  # what the driver reports as total memory
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # scale-up link (NVLink / xGMI / HCCS; PCIe when none), per GPU, one direction
    pcie_bytes_per_s: float  # host link, one direction
    ib_bytes_per_s: float  # scale-out NIC per GPU, one direction (typical DGX/HGX: one NIC per GPU)
    gpus_per_node: int = 8  # scale-up (NVLink) domain size
    fp8_flops_per_s: float | None = None  # dense; None: no FP8 tensor cores
    source: str = ""  # datasheet(s) the figures come from

    def link_bytes_per_s(self, group_size: int) -> float:
        """Bandwidth a ring over ``group_size`` GPUs sees: NVLink inside a node, the NIC across."""
        return self.nvlink_bytes_per_s if group_size <= self.gpus_per_node else self.ib_bytes_per_s

    def collective_bytes_per_s(self, group_size: int, stride: int = 1) -> float:
        """Per-GPU bus bandwidth of a ring collective (all-reduce, reduce-scatter, all-gather) over
        ``group_size`` ranks placed ``stride`` ranks apart.

        Inside one scale-up domain: the scale-up link. Across nodes, NCCL runs one ring per NIC, so
        the ranks a node holds each cross through their own NIC: ``min(scale-up, NIC x members per
        node)``; a group with one member per node gets one NIC (e.g. a DP group at stride TP = 8).
        """
        if group_size * stride <= self.gpus_per_node:
            return self.nvlink_bytes_per_s
        per_node = max(1, min(group_size, self.gpus_per_node // max(stride, 1)))
        return min(self.nvlink_bytes_per_s, self.ib_bytes_per_s * per_node)

    def flops_per_s(self, dtype: str = "bf16") -> float:
        """Dense peak for ``dtype`` ('bf16' or 'fp8'); FP8 falls back to BF16 where the chip has none."""
        if dtype == "bf16":
            return self.bf16_flops_per_s
        if dtype == "fp8":
            return self.fp8_flops_per_s if self.fp8_flops_per_s else self.bf16_flops_per_s
        raise CostModelError(f"unknown compute dtype {dtype!r}; expected 'bf16' or 'fp8'")


# -- reading entries -------------------------------------------------------------------------------

# YAML key -> (GPUSpec field, quantity kind). Short keys from the config-level form are accepted too.
_KEYS: dict[str, tuple[str, str]] = {
    "bf16_flops": ("bf16_flops_per_s", "flops"),
    "flops": ("bf16_flops_per_s", "flops"),
    "fp8_flops": ("fp8_flops_per_s", "flops"),
    "hbm_bytes": ("hbm_bytes", "bytes"),
    "hbm_bw": ("hbm_bytes_per_s", "bandwidth"),
    "intra_node_bw": ("nvlink_bytes_per_s", "bandwidth"),
    "nvlink_bw": ("nvlink_bytes_per_s", "bandwidth"),
    "inter_node_bw": ("ib_bytes_per_s", "bandwidth"),
    "ib_bw": ("ib_bytes_per_s", "bandwidth"),
    "host_bw": ("pcie_bytes_per_s", "bandwidth"),
    "pcie_bw": ("pcie_bytes_per_s", "bandwidth"),
}
_OTHER_KEYS = ("name", "base", "gpus_per_node", "aliases", "source")
_REQUIRED = ("bf16_flops_per_s", "hbm_bytes", "hbm_bytes_per_s")
# A custom GPU given without links and without a base: a PCIe Gen4 box, one 200 Gb/s NIC per GPU.
_LINK_DEFAULTS = {"nvlink_bytes_per_s": 32e9, "pcie_bytes_per_s": 32e9, "ib_bytes_per_s": 25e9}


def _spec_from_mapping(raw: Mapping[str, Any], where: str, name: str | None = None,
                       catalog: bool = False) -> tuple[GPUSpec, list[str]]:
    """Validate one entry; ``where`` names its file (or config key) for errors."""
    if not isinstance(raw, Mapping):
        raise CostModelError(f"{where}: expected a mapping of GPU figures, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_KEYS) - set(_OTHER_KEYS))
    if unknown:
        raise CostModelError(
            f"{where}.{unknown[0]}: unknown GPU key; expected some of: {', '.join(sorted([*_KEYS, *_OTHER_KEYS]))}"
        )
    fields: dict[str, Any] = {}
    if raw.get("base") is not None:
        if catalog:
            raise CostModelError(f"{where}.base: catalog entries must give every figure, not a base")
        fields = attrs.asdict(gpu_spec(str(raw["base"])))
        fields["source"] = f"{fields['source']} (base of a custom GPU)"
    seen: dict[str, str] = {}
    for key, (field, kind) in _KEYS.items():
        if key not in raw:
            continue
        if field in seen:
            raise CostModelError(f"{where}: both {seen[field]!r} and {key!r} given for the same figure")
        seen[field] = key
        val = raw[key]
        if val is None and field == "fp8_flops_per_s":
            fields[field] = None
            continue
        fields[field] = parse_quantity(val, kind, f"{where}.{key}")
    gname = raw.get("name", name)
    if not isinstance(gname, str) or not gname.strip():
        raise CostModelError(f"{where}.name: a GPU needs a non-empty name")
    fields["name"] = gname.strip()
    missing = [f for f in _REQUIRED if f not in fields]
    if missing:
        key = {v[0]: k for k, v in reversed(list(_KEYS.items()))}[missing[0]]
        raise CostModelError(f"{where}.{key}: required (e.g. {key}: {_hint(key)})")
    for field, default in _LINK_DEFAULTS.items():
        if field not in fields:
            if catalog:
                key = {v[0]: k for k, v in reversed(list(_KEYS.items()))}[field]
                raise CostModelError(f"{where}.{key}: required in the catalog")
            fields[field] = default
    if "gpus_per_node" in raw:
        gpn = raw["gpus_per_node"]
        if not isinstance(gpn, int) or isinstance(gpn, bool) or gpn < 1:
            raise CostModelError(f"{where}.gpus_per_node: expected an integer >= 1, got {gpn!r}")
        fields["gpus_per_node"] = gpn
    src = raw.get("source")
    if src is not None:
        if not isinstance(src, str):
            raise CostModelError(f"{where}.source: expected a string")
        fields["source"] = src.strip()
    if catalog and not fields.get("source"):
        raise CostModelError(f"{where}.source: every catalog entry names the datasheet its figures come from")
    fields.setdefault("source", "user-supplied")
    aliases = raw.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise CostModelError(f"{where}.aliases: expected a list of strings")
    return GPUSpec(**fields), aliases


def _hint(key: str) -> str:
    return {"bf16_flops": "989 TFLOPS", "flops": "989 TFLOPS", "hbm_bytes": "80 GiB",
            "hbm_bw": "3.35 TB/s"}.get(key, "...")


def _key(name: str) -> str:
    return str(name).strip().lower().removeprefix("nvidia").strip().replace(" ", "-").replace("_", "-")


def load_gpu_table(path: str | Path, catalog: bool = True) -> dict[str, tuple[GPUSpec, list[str]]]:
    """Read and validate a YAML table ``{NAME: {figures...}}``; errors name the file and key."""
    p = Path(path)
    data = _read_yaml(str(p))
    if not isinstance(data, dict) or not data:
        raise CostModelError(f"{p}: expected a mapping of GPU name -> figures")
    return {str(n): _spec_from_mapping(e, f"{p.name}:{n}", name=str(n), catalog=catalog) for n, e in data.items()}


@functools.cache
def _catalog() -> tuple[dict[str, GPUSpec], dict[str, str]]:
    table = load_gpu_table(data_path(CATALOG_FILE))
    gpus: dict[str, GPUSpec] = {}
    aliases: dict[str, str] = {}
    for name, (spec, names) in table.items():
        gpus[name] = spec
        for a in [name, *names]:
            k = _key(a)
            if k in aliases and aliases[k] != name:
                raise CostModelError(f"{CATALOG_FILE}:{name}.aliases: {a!r} already names {aliases[k]}")
            aliases[k] = name
    return gpus, aliases


def gpu_names() -> list[str]:
    return sorted(_catalog()[0])


def gpu_spec(name: str | GPUSpec | Mapping[str, Any]) -> GPUSpec:
    """A catalog name or alias, a mapping of figures, or the path of a YAML file (see module doc)."""
    if isinstance(name, GPUSpec):
        return name
    if isinstance(name, Mapping):
        return _spec_from_mapping(name, "gpu")[0]
    text = str(name)
    if text.endswith((".yaml", ".yml")):
        table = load_gpu_table(text, catalog=False) if _is_table(text) else None
        if table is None:
            return _spec_from_file(text)
        if len(table) != 1:
            raise CostModelError(f"{text}: holds {len(table)} GPUs ({', '.join(table)}); a run takes one")
        return next(iter(table.values()))[0]
    gpus, aliases = _catalog()
    canon = aliases.get(_key(text))
    if canon is None:
        raise CostModelError(
            f"unknown GPU {name!r}; known GPUs: {', '.join(gpu_names())} "
            f"(aliases: {', '.join(sorted(aliases))}); or give the figures (name, flops, hbm_bytes, hbm_bw) "
            f"or the path of a YAML file"
        )
    return gpus[canon]


def _read_yaml(path: str) -> Any:
    """A GPU file, strictly read: duplicate keys, non-UTF-8 and NUL bytes are errors naming the line."""
    from simrl.strictio import YamlInputError, load_yaml_file

    try:
        return load_yaml_file(path)
    except YamlInputError as exc:
        raise CostModelError(f"{path}:{exc.line}: {exc.message}" if exc.line else f"{path}: {exc.message}") from None


def _is_table(path: str) -> bool:
    data = _read_yaml(path)
    return isinstance(data, dict) and bool(data) and all(isinstance(v, dict) for v in data.values())


def _spec_from_file(path: str) -> GPUSpec:
    return _spec_from_mapping(_read_yaml(path), Path(path).name, name=Path(path).stem)[0]
