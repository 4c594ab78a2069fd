"""GPU table lookups and datasheet sanity."""

import pytest

from simrl.cost.base import CostModelError
from simrl.cost.hardware import gpu_names, gpu_spec


@pytest.mark.parametrize("alias", ["H100", "h100", "NVIDIA H100 80GB HBM3", "h100-sxm", "H100_SXM5"])
def test_aliases_resolve_to_h100(alias):
    assert gpu_spec(alias).name == "H100"


def test_unknown_gpu_lists_valid_names():
    with pytest.raises(CostModelError) as exc:
        gpu_spec("V100")
    for name in gpu_names():
        assert name in str(exc.value)


def test_table_is_ordered_like_the_datasheets():
    a, h, h2, b = (gpu_spec(n) for n in ("A100", "H100", "H200", "B200"))
    assert a.bf16_flops_per_s < h.bf16_flops_per_s == h2.bf16_flops_per_s < b.bf16_flops_per_s
    assert a.hbm_bytes_per_s < h.hbm_bytes_per_s < h2.hbm_bytes_per_s < b.hbm_bytes_per_s
    assert h.hbm_bytes < h2.hbm_bytes < b.hbm_bytes
    assert 75 * 2**30 < h.hbm_bytes <= 80 * 2**30
    # Ridge point (FLOPs per byte) of an H100: ~295.
    assert 250 < h.bf16_flops_per_s / h.hbm_bytes_per_s < 350


def test_links_fall_back_to_the_nic_outside_a_node():
    h = gpu_spec("H100")
    assert h.link_bytes_per_s(8) == h.nvlink_bytes_per_s
    assert h.link_bytes_per_s(16) == h.ib_bytes_per_s < h.nvlink_bytes_per_s
