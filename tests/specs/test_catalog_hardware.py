"""Every built-in hardware profile loads, and its figures match the datasheet numbers written here.

The expected values are typed in from the datasheets in the form they print them (TFLOP/s dense,
TB/s, NVLink GB/s *bidirectional*, NICs x Gb/s) and converted here, so the test checks the
profile's unit conversions (one direction, per GPU, bytes) rather than repeating them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.engines.load import hardware_catalog, load_hardware
from planner.specs.hardware import HardwareProfile

CATALOG_DIR = Path(__file__).resolve().parents[2] / "hardware_profiles"

REQUIRED_IDS = {
    "v100-32gb", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gb200-nvl72", "mi300x", "l40s",
}

# id: (dense bf16-or-fp16 TFLOP/s, memory TB/s, datasheet memory GB, GPUs per node,
#      intra-node link GB/s as the datasheet quotes it (bidirectional; PCIe x16 both ways), NICs per node, Gb/s per NIC)
DATASHEET = {
    "v100-32gb": (125, 0.900, 32, 16, 300, 8, 100),  # DGX-2: NVLink 2 via NVSwitch, 8x EDR
    "a100-40gb": (312, 1.555, 40, 8, 600, 8, 200),  # DGX A100: NVLink 3, 8x HDR
    "a100-80gb": (312, 2.039, 80, 8, 600, 8, 200),
    "a100-pcie-80gb": (312, 1.935, 80, 8, 64, 4, 200),  # PCIe Gen4 x16 = 64 GB/s both ways
    "h100-sxm": (989, 3.35, 80, 8, 900, 8, 400),  # DGX H100: NVLink 4, 8x NDR
    "h100-pcie": (756, 2.0, 80, 8, 128, 4, 400),  # PCIe Gen5 x16 = 128 GB/s both ways
    "h200": (989, 4.8, 141, 8, 900, 8, 400),
    "h100-sxm-96gb": (989, 2.4, 96, 8, 900, 8, 400),  # Grand Teton, 500 W: 989 is the nominal SXM peak (torchtitan)
    "h800": (989, 3.35, 80, 8, 400, 8, 400),  # NVLink cut to 400 GB/s; DeepSeek-V3 cluster
    "h20": (148, 4.0, 96, 8, 900, 8, 400),
    "b200": (2250, 8.0, 180, 8, 1800, 8, 400),  # NVLink 5
    "gb200-nvl72": (2500, 8.0, 186, 72, 1800, 72, 400),  # one NVLink domain of 72 GPUs
    "b300": (2250, 8.0, 288, 8, 1800, 8, 800),  # HGX B300: 36 PF bf16 sparse / 8 / 2; 8x ConnectX-8
    "gb300-nvl72": (2500, 8.0, 288, 72, 1800, 72, 800),  # 360 PF bf16 sparse per rack / 72 / 2
    "mi300x": (1307.4, 5.3, 192, 8, 896, 8, 400),  # 7 xGMI links x 128 GB/s
    "mi325x": (1307.4, 6.0, 256, 8, 896, 8, 400),
    "l40s": (362.05, 0.864, 48, 8, 64, 4, 200),  # PCIe Gen4, no NVLink
}


@pytest.fixture(scope="module")
def catalog() -> dict[str, HardwareProfile]:
    return {entry.id: entry.spec for entry in hardware_catalog()}


def test_every_file_in_the_catalog_directory_loads(catalog: dict[str, HardwareProfile]) -> None:
    files = {path.stem for path in CATALOG_DIR.glob("*.yaml")}
    assert files == set(catalog)


def test_required_ids_are_present(catalog: dict[str, HardwareProfile]) -> None:
    assert REQUIRED_IDS <= set(catalog)


def test_every_profile_has_datasheet_figures_in_this_test(catalog: dict[str, HardwareProfile]) -> None:
    assert set(catalog) == set(DATASHEET), "add the new profile's datasheet numbers to DATASHEET"


@pytest.mark.parametrize("hw_id", sorted(DATASHEET))
def test_figures_match_the_datasheet(hw_id: str, catalog: dict[str, HardwareProfile]) -> None:
    tflops, mem_tb_s, mem_gb, gpus, link_gb_s_both_ways, nics, nic_gbit_s = DATASHEET[hw_id]
    hw = catalog[hw_id]
    acc = hw.accelerator
    half_precision = acc.peak_flops_per_s.get("bf16", acc.peak_flops_per_s.get("fp16"))
    assert half_precision == pytest.approx(tflops * 1e12, rel=1e-9)
    assert acc.memory_bandwidth_bytes_per_s == pytest.approx(mem_tb_s * 1e12, rel=1e-9)
    assert hw.node.gpus_per_node == gpus
    assert hw.node.bandwidth_bytes_per_s == pytest.approx(link_gb_s_both_ways * 1e9 / 2, rel=1e-9)
    assert hw.network is not None
    assert (hw.network.nics_per_node, hw.network.nic_bits_per_s) == (nics, nic_gbit_s * 1e9)
    assert hw.inter_node_bandwidth_bytes_per_s == pytest.approx(nics * nic_gbit_s * 1e9 / 8 / gpus, rel=1e-9)
    # Memory: either the datasheet GB or what the driver reports, which lies between the decimal
    # figure less a reserve and the same number read as GiB.
    assert 0.95 * mem_gb * 1e9 <= acc.memory_bytes <= mem_gb * 2**30


def test_headline_numbers_named_in_the_issue(catalog: dict[str, HardwareProfile]) -> None:
    h100, a100 = catalog["h100-sxm"], catalog["a100-80gb"]
    assert h100.peak_flops("bf16") == 989e12
    assert h100.node.bandwidth_bytes_per_s == 450e9
    assert h100.inter_node_bandwidth_bytes_per_s == 50e9
    assert a100.peak_flops("bf16") == 312e12
    assert a100.node.bandwidth_bytes_per_s == 300e9
    assert a100.inter_node_bandwidth_bytes_per_s == 25e9
    assert catalog["gb200-nvl72"].node.gpus_per_node == 72
    assert catalog["l40s"].node.link_kind == "pcie"
    assert catalog["mi300x"].node.link_kind == "xgmi"
    assert "bf16" not in catalog["v100-32gb"].accelerator.peak_flops_per_s  # Volta has no bf16


@pytest.mark.parametrize("hw_id", sorted(DATASHEET))
def test_fp8_is_about_twice_bf16_when_both_are_given(hw_id: str, catalog: dict[str, HardwareProfile]) -> None:
    # Both dense or both sparse: a sparse figure mixed with a dense one would show as 4x or 1x.
    peaks = catalog[hw_id].accelerator.peak_flops_per_s
    if "fp8" in peaks and "bf16" in peaks:
        assert peaks["fp8"] / peaks["bf16"] == pytest.approx(2.0, rel=0.03)


@pytest.mark.parametrize("hw_id", sorted(DATASHEET))
def test_sources_and_notes_are_filled_in(hw_id: str, catalog: dict[str, HardwareProfile]) -> None:
    hw = catalog[hw_id]
    blocks = [hw.accelerator.source, hw.node.source] + ([hw.network.source] if hw.network else [])
    assert all(len(text) > 40 for text in blocks)
    assert "latency" in hw.node.source
    eff = hw.efficiency
    for part in (eff.matmul, eff.attention, eff.memory_bandwidth, eff.intra_node_link, eff.inter_node_link):
        assert len(part.note) > 20
    assert (hw.price_per_gpu_hour_usd is None) == (hw.price_source is None)


@pytest.mark.parametrize("hw_id", sorted(DATASHEET))
def test_efficiencies_and_latencies_are_plausible(hw_id: str, catalog: dict[str, HardwareProfile]) -> None:
    hw = catalog[hw_id]
    eff = hw.efficiency
    assert 0.3 <= eff.matmul.peak_fraction <= 0.95
    for part in (eff.attention, eff.memory_bandwidth, eff.intra_node_link, eff.inter_node_link):
        assert 0.2 <= part.fraction <= 0.98
    assert 1e-7 <= hw.node.latency_s <= 1e-4
    assert hw.network is None or 1e-7 <= hw.network.latency_s <= 1e-4
    # Scale-out is slower than the node fabric (per GPU, one direction) on every system here.
    assert hw.inter_node_bandwidth_bytes_per_s < hw.node.bandwidth_bytes_per_s


def test_ids_and_aliases_are_unique_and_lowercase() -> None:
    names: list[str] = []
    for entry in hardware_catalog():
        names += [entry.id, *entry.aliases]
    assert len(names) == len(set(names))
    assert all(name == name.lower() for name in names)


def test_aliases_resolve_to_their_profile() -> None:
    # One alias per profile (each look-up by alias reads the whole catalog), plus case-insensitivity.
    for entry in hardware_catalog():
        if entry.aliases:
            assert load_hardware(entry.aliases[0]).id == entry.id
    assert load_hardware("DGX-H100").id == "h100-sxm"
    assert load_hardware("A100").id == "a100-80gb"


@pytest.mark.parametrize("hw_id", ["gb200-nvl72", "gb300-nvl72"])
def test_grace_racks_issue_kernels_at_the_measured_grace_cost(hw_id: str, catalog: dict[str, HardwareProfile]) -> None:
    # NVIDIA/TransformerEngine #2053: a torch Linear forward costs 37.08 us of CPU on a GB200's Grace.
    launch = catalog[hw_id].efficiency.host_launch
    assert launch is not None and launch.seconds == pytest.approx(37.08e-6, rel=0.01)
    assert catalog["b200"].efficiency.host_launch is None  # x86 DGX host: the launch module's default
