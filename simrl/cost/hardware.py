"""GPU specifications used by the analytical cost models (public datasheet numbers).

One frozen `GPUSpec` per accelerator: dense BF16 throughput, HBM capacity and bandwidth, and the
per-GPU link bandwidths that collectives see. Bandwidths are unidirectional, per GPU (NVIDIA quotes
NVLink and PCIe as bidirectional totals; we halve them). `gpu_spec(name)` resolves a name or
alias, case-insensitively.
"""

from __future__ import annotations

import attrs

from simrl.cost.base import CostModelError

GiB = 2**30
MiB = 2**20


@attrs.frozen
class GPUSpec:
    """One accelerator. Units: FLOP/s, bytes, bytes/s (unidirectional, per GPU)."""

    name: str
    bf16_flops_per_s: float  # dense (no 2:4 sparsity)
    hbm_bytes: float  # what the CUDA driver reports as total memory
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # per GPU, one direction
    pcie_bytes_per_s: float  # host link, one direction
    ib_bytes_per_s: float  # scale-out NIC per GPU, one direction (typical DGX/HGX: one NIC per GPU)
    gpus_per_node: int = 8  # NVLink domain size

    def link_bytes_per_s(self, group_size: int) -> float:
        """Bandwidth a ring over ``group_size`` GPUs sees: NVLink inside a node, the NIC across."""
        return self.nvlink_bytes_per_s if group_size <= self.gpus_per_node else self.ib_bytes_per_s


_GPUS: dict[str, GPUSpec] = {
    # NVIDIA A100 datasheet (2021): 312 TFLOPS BF16 dense, 80 GB HBM2e at 2,039 GB/s, NVLink 3
    # 600 GB/s bidirectional, PCIe Gen4 64 GB/s bidirectional; DGX A100: 200 Gb/s HDR per GPU.
    "A100": GPUSpec(
        name="A100",
        bf16_flops_per_s=312e12,
        hbm_bytes=81920 * MiB,  # nvidia-smi on A100-SXM4-80GB
        hbm_bytes_per_s=2.039e12,
        nvlink_bytes_per_s=300e9,
        pcie_bytes_per_s=32e9,
        ib_bytes_per_s=25e9,
    ),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOPS BF16 dense (1,979 sparse), 80 GB
    # HBM3 at 3.35 TB/s, NVLink 4 900 GB/s bidirectional, PCIe Gen5 128 GB/s bidirectional;
    # DGX H100: one 400 Gb/s ConnectX-7 per GPU.
    "H100": GPUSpec(
        name="H100",
        bf16_flops_per_s=989e12,
        hbm_bytes=81559 * MiB,  # nvidia-smi on H100 80GB HBM3
        hbm_bytes_per_s=3.35e12,
        nvlink_bytes_per_s=450e9,
        pcie_bytes_per_s=64e9,
        ib_bytes_per_s=50e9,
    ),
    # NVIDIA H200 datasheet (SXM): same compute as H100, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s
    # bidirectional, PCIe Gen5 128 GB/s bidirectional; 400 Gb/s NIC per GPU in HGX H200.
    "H200": GPUSpec(
        name="H200",
        bf16_flops_per_s=989e12,
        hbm_bytes=143771 * MiB,  # nvidia-smi on H200 (about 140 GiB)
        hbm_bytes_per_s=4.8e12,
        nvlink_bytes_per_s=450e9,
        pcie_bytes_per_s=64e9,
        ib_bytes_per_s=50e9,
    ),
    # NVIDIA DGX B200 datasheet: 1,440 GB HBM3e and 64 TB/s for 8 GPUs (180 GB, 8 TB/s each),
    # 72 PFLOPS FP8 training with sparsity (=> 2.25 PFLOPS BF16 dense per GPU), NVLink 5 1.8 TB/s
    # bidirectional per GPU, 400 Gb/s ConnectX-7 per GPU, PCIe Gen5 host link.
    "B200": GPUSpec(
        name="B200",
        bf16_flops_per_s=2.25e15,
        hbm_bytes=180e9,
        hbm_bytes_per_s=8e12,
        nvlink_bytes_per_s=900e9,
        pcie_bytes_per_s=64e9,
        ib_bytes_per_s=50e9,
    ),
}

_ALIASES: dict[str, str] = {
    "a100": "A100",
    "a100-80gb": "A100",
    "a100-sxm": "A100",
    "a100-sxm4-80gb": "A100",
    "h100": "H100",
    "h100-sxm": "H100",
    "h100-sxm5": "H100",
    "h100-80gb": "H100",
    "h100-80gb-hbm3": "H100",
    "h200": "H200",
    "h200-sxm": "H200",
    "h200-141gb": "H200",
    "b200": "B200",
    "b200-sxm": "B200",
}


def gpu_names() -> list[str]:
    return sorted(_GPUS)


def gpu_spec(name: str | GPUSpec) -> GPUSpec:
    """Look up a GPU by name or alias (case-insensitive; 'NVIDIA ' prefix and spaces ignored)."""
    if isinstance(name, GPUSpec):
        return name
    key = str(name).strip().lower().removeprefix("nvidia").strip().replace(" ", "-").replace("_", "-")
    canon = _ALIASES.get(key)
    if canon is None:
        raise CostModelError(
            f"unknown GPU {name!r}; known GPUs: {', '.join(gpu_names())} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return _GPUS[canon]
