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


# -- the open catalog ------------------------------------------------------------------------------

NEW = ("H20", "H800", "A800", "L40S", "GB200", "MI300X", "Ascend910B")


def test_catalog_has_the_issue_gpus_with_every_figure_and_a_source():
    assert set(NEW) | {"A100", "H100", "H200", "B200"} <= set(gpu_names())
    for name in gpu_names():
        g = gpu_spec(name)
        assert g.bf16_flops_per_s > 0 and g.hbm_bytes > 0 and g.hbm_bytes_per_s > 0
        assert g.nvlink_bytes_per_s > 0 and g.ib_bytes_per_s > 0 and g.pcie_bytes_per_s > 0
        assert "datasheet" in g.source.lower() or "brief" in g.source.lower(), name
        if g.fp8_flops_per_s is not None:
            assert g.fp8_flops_per_s == pytest.approx(2 * g.bf16_flops_per_s, rel=0.03), name


def test_datasheet_figures_of_the_new_gpus():
    h20, h800, a800, l40s = (gpu_spec(n) for n in ("H20", "H800", "A800", "L40S"))
    assert (h20.bf16_flops_per_s, h20.hbm_bytes, h20.hbm_bytes_per_s) == (148e12, 96e9, 4.0e12)
    # Export variants keep the compute and HBM of their parent, with NVLink cut to (400 GB/s bidirectional).
    assert h800.bf16_flops_per_s == gpu_spec("H100").bf16_flops_per_s and h800.nvlink_bytes_per_s == 200e9
    assert a800.hbm_bytes_per_s == gpu_spec("A100").hbm_bytes_per_s and a800.nvlink_bytes_per_s == 200e9
    assert l40s.nvlink_bytes_per_s == 32e9 and l40s.hbm_bytes_per_s == 864e9  # no NVLink, GDDR6
    gb = gpu_spec("GB200")
    assert gb.gpus_per_node == 72 and gb.link_bytes_per_s(64) == gb.nvlink_bytes_per_s  # NVL72 domain
    mi = gpu_spec("amd instinct mi300x")
    assert (mi.bf16_flops_per_s, mi.hbm_bytes_per_s, mi.hbm_bytes) == (1307.4e12, 5.3e12, 192 * 2**30)
    assert gpu_spec("ascend-910b").fp8_flops_per_s is None
    assert gpu_spec("Ascend910B").flops_per_s("fp8") == gpu_spec("Ascend910B").bf16_flops_per_s


def test_quantity_units():
    from simrl.cost.catalog import parse_quantity

    assert parse_quantity("400 Gb/s", "bandwidth", "k") == 50e9
    assert parse_quantity("400Gbps", "bandwidth", "k") == 50e9
    assert parse_quantity("3.35 TB/s", "bandwidth", "k") == 3.35e12
    assert parse_quantity("80 GiB", "bytes", "k") == 80 * 2**30
    assert parse_quantity("1.5 PFLOPS", "flops", "k") == 1.5e15
    assert parse_quantity(2e12, "flops", "k") == 2e12
    for bad, kind in (("80 GB/s", "bytes"), ("fast", "flops"), ("-1 TB/s", "bandwidth"), ("3 TFLOPS", "bytes")):
        with pytest.raises(CostModelError, match="k"):
            parse_quantity(bad, kind, "k")


def test_custom_gpu_from_a_mapping():
    g = gpu_spec({"name": "MyChip", "flops": "400 TFLOPS", "hbm_bytes": "96 GB", "hbm_bw": "3 TB/s"})
    assert (g.name, g.bf16_flops_per_s, g.hbm_bytes, g.hbm_bytes_per_s) == ("MyChip", 400e12, 96e9, 3e12)
    assert g.link_bytes_per_s(4) == 32e9 and g.link_bytes_per_s(16) == 25e9  # documented PCIe box defaults
    # base: inherit everything not given.
    h = gpu_spec({"name": "H100-lowclock", "base": "H100", "flops": "700 TFLOPS"})
    assert h.bf16_flops_per_s == 700e12 and h.hbm_bytes_per_s == gpu_spec("H100").hbm_bytes_per_s


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "X", "flops": "1 TFLOPS", "hbm_bytes": "1 GB"}, "gpu.hbm_bw: required"),
        ({"name": "X", "flops": "1 TFLOPS", "hbm_bytes": "1 GB", "hbm_bw": "1 GB/s", "hbm": 3}, "gpu.hbm: unknown GPU key"),
        ({"name": "X", "flops": "1 TB/s", "hbm_bytes": "1 GB", "hbm_bw": "1 GB/s"}, "gpu.flops: unit of"),
        ({"name": "X", "flops": 1e12, "bf16_flops": 1e12, "hbm_bytes": 1e9, "hbm_bw": 1e9}, "both"),
        ({"flops": 1e12, "hbm_bytes": 1e9, "hbm_bw": 1e9}, "gpu.name"),
    ],
)
def test_custom_gpu_errors_name_the_key(raw, message):
    with pytest.raises(CostModelError, match=message):
        gpu_spec(raw)


def test_gpu_from_a_yaml_file(tmp_path):
    one = tmp_path / "chip.yaml"
    one.write_text("name: Chip\nbf16_flops: 500 TFLOPS\nhbm_bytes: 64 GiB\nhbm_bw: 2 TB/s\n")
    assert gpu_spec(str(one)).hbm_bytes == 64 * 2**30
    table = tmp_path / "table.yaml"
    table.write_text("Chip2:\n  flops: 1 PFLOPS\n  hbm_bytes: 1 TB\n  hbm_bw: 10 TB/s\n")
    assert gpu_spec(str(table)).name == "Chip2"
    bad = tmp_path / "bad.yaml"
    bad.write_text("Chip3:\n  flops: 1 PFLOPS\n  hbm_bytes: lots\n  hbm_bw: 10 TB/s\n")
    with pytest.raises(CostModelError, match=r"bad.yaml:Chip3.hbm_bytes: cannot read 'lots'"):
        gpu_spec(str(bad))


def test_catalog_entries_need_every_figure_and_a_source(tmp_path):
    from simrl.cost.hardware import load_gpu_table

    f = tmp_path / "gpus.yaml"
    f.write_text("X:\n  bf16_flops: 1 PFLOPS\n  hbm_bytes: 1 TB\n  hbm_bw: 10 TB/s\n  intra_node_bw: 1 TB/s\n"
                 "  inter_node_bw: 400 Gb/s\n  host_bw: 64 GB/s\n")
    with pytest.raises(CostModelError, match=r"gpus.yaml:X.source"):
        load_gpu_table(f)
    f.write_text("X:\n  bf16_flops: 1 PFLOPS\n  hbm_bytes: 1 TB\n  hbm_bw: 10 TB/s\n  source: a datasheet\n")
    with pytest.raises(CostModelError, match=r"gpus.yaml:X.intra_node_bw: required in the catalog"):
        load_gpu_table(f)


def test_collective_bandwidth_uses_every_nic_of_a_node():
    h = gpu_spec("H100")
    assert h.collective_bytes_per_s(8) == 450e9  # NVLink
    assert h.collective_bytes_per_s(16) == 400e9  # 8 rings, one per NIC: min(450, 8 x 50)
    assert h.collective_bytes_per_s(4, stride=2) == 450e9  # 4 ranks 2 apart: still one node
    assert h.collective_bytes_per_s(2, stride=8) == 50e9  # one member per node: one NIC
    assert h.collective_bytes_per_s(4, stride=4) == 100e9  # two members per node
    gb = gpu_spec("GB200")
    assert gb.collective_bytes_per_s(64) == gb.nvlink_bytes_per_s  # inside the NVL72 domain
