"""One test (or parametrized family) per schema rule of `planner.specs.hardware`.

The base profile below is written out by hand for these tests (not read from the catalog), so a
catalog change cannot make these pass or fail.
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import yaml

from planner.engines.load import parse_yaml
from planner.errors import PlannerError
from planner.specs.hardware import HardwareProfile
from planner.specs.validation import validate_spec


def base_profile() -> dict[str, Any]:
    """A small, valid two-level profile: 4 GPUs per node, 2 NICs of 100 Gb/s -> 6.25e9 B/s per GPU."""
    return {
        "name": "Test node",
        "description": "hand-written for the schema tests",
        "accelerator": {
            "name": "Test GPU",
            "memory_bytes": 16_000_000_000,
            "memory_bandwidth_bytes_per_s": 1.0e12,
            "peak_flops_per_s": {"bf16": 100.0e12, "fp32": 10.0e12},
            "source": "made up for the test",
        },
        "node": {
            "gpus_per_node": 4,
            "link_kind": "nvlink",
            "bandwidth_bytes_per_s": 100.0e9,
            "latency_s": 2.0e-6,
            "source": "made up for the test",
        },
        "network": {
            "kind": "infiniband",
            "bandwidth_bytes_per_s": 6.25e9,
            "nics_per_node": 2,
            "nic_bits_per_s": 100.0e9,
            "latency_s": 8.0e-6,
            "source": "made up for the test",
        },
        "efficiency": {
            "matmul": {"peak_fraction": 0.8, "note": "test"},
            "attention": {"fraction": 0.5, "note": "test"},
            "memory_bandwidth": {"fraction": 0.9, "note": "test"},
            "intra_node_link": {"fraction": 0.8, "note": "test"},
            "inter_node_link": {"fraction": 0.85, "note": "test"},
        },
    }


_DELETE = object()


def changed(**changes: Any) -> dict[str, Any]:
    """The base profile with changes at double-underscore paths (`node__gpus_per_node=8`); _DELETE removes a key."""
    data = base_profile()
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for key in parents:
            node = node[key]
        if value is _DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return data


def build(**changes: Any) -> HardwareProfile:
    return HardwareProfile.model_validate(changed(**changes))


def rejected(**changes: Any) -> str:
    """The one-line message validate_spec gives for the changed profile (it must be rejected)."""
    with pytest.raises(PlannerError) as info:
        validate_spec(HardwareProfile, changed(**changes), "test.yaml")
    return info.value.render()


# The valid base and its accessors -------------------------------------------------
def test_base_profile_is_valid_and_accessors_read_it() -> None:
    hw = build()
    assert hw.peak_flops("bf16") == 100.0e12
    assert hw.inter_node_bandwidth_bytes_per_s == 6.25e9
    assert hw.inter_node_latency_s == 8.0e-6


def test_peak_flops_of_a_missing_dtype_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        build().peak_flops("fp8")


def test_without_network_the_inter_node_figures_are_the_node_figures() -> None:
    hw = build(network=None)
    assert hw.network is None
    assert hw.inter_node_bandwidth_bytes_per_s == 100.0e9
    assert hw.inter_node_latency_s == 2.0e-6


def test_profile_is_frozen() -> None:
    hw = build()
    with pytest.raises(pydantic.ValidationError):
        hw.name = "other"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        hw.node.gpus_per_node = 8  # type: ignore[misc]


# Strictness: unknown and missing keys ------------------------------------------------
@pytest.mark.parametrize(
    "where",
    ["colour", "accelerator__colour", "node__colour", "network__colour", "efficiency__colour",
     "efficiency__matmul__colour", "efficiency__attention__colour"],
)
def test_unknown_key_is_rejected_and_named(where: str) -> None:
    message = rejected(**{where: "red"})
    assert message.startswith("test.yaml: " + where.replace("__", ".") + ": unknown key")


@pytest.mark.parametrize(
    "field",
    ["name", "accelerator", "node", "efficiency", "accelerator__memory_bytes", "accelerator__source",
     "node__gpus_per_node", "node__link_kind", "node__latency_s", "network__bandwidth_bytes_per_s",
     "efficiency__matmul__note", "efficiency__inter_node_link"],
)
def test_missing_required_field_is_named(field: str) -> None:
    message = rejected(**{field: _DELETE})
    assert message == f"test.yaml: {field.replace('__', '.')}: required field is missing; add it"


def test_optional_fields_may_be_left_out() -> None:
    hw = build(description=_DELETE, network=_DELETE)
    assert hw.description is None and hw.network is None and hw.price_per_gpu_hour_usd is None


# Sources and notes ---------------------------------------------------------------------
@pytest.mark.parametrize("block", ["accelerator", "node", "network"])
@pytest.mark.parametrize("blank", ["", "   "])
def test_blank_source_is_rejected(block: str, blank: str) -> None:
    message = rejected(**{f"{block}__source": blank})
    assert message == f"test.yaml: {block}.source: must not be empty; say where the figure comes from"


@pytest.mark.parametrize("block", ["matmul", "attention", "memory_bandwidth", "intra_node_link", "inter_node_link"])
def test_blank_efficiency_note_is_rejected(block: str) -> None:
    assert rejected(**{f"efficiency__{block}__note": " "}).startswith(f"test.yaml: efficiency.{block}.note: must not be empty")


# Peaks ----------------------------------------------------------------------------------
def test_peaks_need_bf16_or_fp16() -> None:
    message = rejected(accelerator__peak_flops_per_s={"fp32": 10.0e12, "fp8": 200.0e12})
    assert "accelerator.peak_flops_per_s: give at least a bf16 or fp16 peak" in message


def test_fp16_alone_is_enough() -> None:
    assert build(accelerator__peak_flops_per_s={"fp16": 125.0e12}).peak_flops("fp16") == 125.0e12


def test_unknown_peak_dtype_is_rejected() -> None:
    message = rejected(accelerator__peak_flops_per_s={"bf16": 1.0e12, "fp64": 1.0e12})
    assert message.startswith("test.yaml: accelerator.peak_flops_per_s.fp64")
    assert "Input should be 'fp32'" in message


# Positive numbers --------------------------------------------------------------------------
POSITIVE_FIELDS = [
    "accelerator__memory_bytes",
    "accelerator__memory_bandwidth_bytes_per_s",
    "node__gpus_per_node",
    "node__bandwidth_bytes_per_s",
    "node__latency_s",
    "network__bandwidth_bytes_per_s",
    "network__latency_s",
    "network__nics_per_node",
    "network__nic_bits_per_s",
]


@pytest.mark.parametrize("field", POSITIVE_FIELDS)
@pytest.mark.parametrize("value", [0, -1])
def test_non_positive_value_is_rejected(field: str, value: int) -> None:
    message = rejected(**{field: value})
    assert message == f"test.yaml: {field.replace('__', '.')}: Input should be greater than 0"


def test_non_positive_peak_is_rejected() -> None:
    message = rejected(accelerator__peak_flops_per_s={"bf16": 0})
    assert message == "test.yaml: accelerator.peak_flops_per_s.bf16: Input should be greater than 0"


def test_memory_bytes_must_be_whole() -> None:
    assert "fractional part" in rejected(accelerator__memory_bytes=16.5e9 + 0.5)


# Types ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["node__bandwidth_bytes_per_s", "efficiency__attention__fraction"])
def test_boolean_is_not_a_number(field: str) -> None:
    assert rejected(**{field: True}) == f"test.yaml: {field.replace('__', '.')}: expected a number, got true"


def test_boolean_is_not_a_count() -> None:
    assert rejected(node__gpus_per_node=True) == "test.yaml: node.gpus_per_node: expected an integer, got true"


@pytest.mark.parametrize("field", ["accelerator__memory_bytes", "node__latency_s"])
def test_word_is_not_a_number(field: str) -> None:
    assert rejected(**{field: "eight"}) == f"test.yaml: {field.replace('__', '.')}: expected a number, got 'eight'"


@pytest.mark.parametrize("value", ["8", 8.0])
def test_count_must_be_an_integer(value: object) -> None:
    assert rejected(network__nics_per_node=value) == f"test.yaml: network.nics_per_node: expected an integer, got {value!r}"


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_number_is_rejected(value: float) -> None:
    assert "expected a finite number" in rejected(node__bandwidth_bytes_per_s=value)


def test_yaml_exponent_without_sign_is_read_as_a_number() -> None:
    # YAML 1.1 (PyYAML's safe_load) leaves `80e9` and `1.5e12` as strings; planner's reader reads them as
    # numbers, as YAML 1.2 does, and the schema takes a whole float as a byte count.
    text = "memory_bytes: 80e9\nmemory_bandwidth_bytes_per_s: 1.5e12\n"
    assert yaml.safe_load(text) == {"memory_bytes": "80e9", "memory_bandwidth_bytes_per_s": "1.5e12"}
    parsed = parse_yaml(text, "test.yaml")
    assert parsed == {"memory_bytes": 80e9, "memory_bandwidth_bytes_per_s": 1.5e12}
    hw = build(accelerator__memory_bytes=parsed["memory_bytes"],
               accelerator__memory_bandwidth_bytes_per_s=parsed["memory_bandwidth_bytes_per_s"])
    assert hw.accelerator.memory_bytes == 80 * 10**9
    assert isinstance(hw.accelerator.memory_bytes, int)
    assert hw.accelerator.memory_bandwidth_bytes_per_s == 1.5e12


def test_link_kind_must_be_known() -> None:
    assert rejected(node__link_kind="infinity").startswith("test.yaml: node.link_kind: Input should be")


def test_network_kind_must_be_known() -> None:
    assert rejected(network__kind="token-ring").startswith("test.yaml: network.kind: Input should be")


def test_text_field_must_be_text() -> None:
    assert rejected(name=42).startswith("test.yaml: name: Input should be a valid string")


def test_profile_must_be_a_mapping() -> None:
    with pytest.raises(PlannerError, match="expected a mapping of fields, got list"):
        validate_spec(HardwareProfile, [1, 2], "test.yaml")


# Efficiency ranges ------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, -0.1, 1.01])
def test_matmul_peak_fraction_is_in_zero_one(value: float) -> None:
    assert rejected(efficiency__matmul__peak_fraction=value).startswith("test.yaml: efficiency.matmul.peak_fraction:")


def test_matmul_peak_fraction_of_one_is_allowed() -> None:
    assert build(efficiency__matmul__peak_fraction=1).efficiency.matmul.peak_fraction == 1.0


def test_half_saturation_is_no_longer_a_profile_field() -> None:
    # The fixed GEMM cost is one named constant (physics/kernels.py GEMM_FIXED_SECONDS), not a per-profile field.
    message = rejected(efficiency__matmul__half_saturation_flop=1e9)
    assert message == "test.yaml: efficiency.matmul.half_saturation_flop: unknown key; remove it or check its spelling"


def test_an_fp8_peak_needs_an_fp8_matmul_efficiency() -> None:
    message = rejected(accelerator__peak_flops_per_s__fp8=2e15)
    assert "efficiency.matmul_fp8: required" in message
    hw = build(accelerator__peak_flops_per_s__fp8=2e15, efficiency__matmul_fp8={"fraction": 0.6, "note": "test"})
    assert hw.efficiency.matmul_fp8 is not None and hw.efficiency.matmul_fp8.fraction == 0.6


@pytest.mark.parametrize("block", ["attention", "memory_bandwidth", "intra_node_link", "inter_node_link"])
@pytest.mark.parametrize("value", [0, 1.5])
def test_fraction_is_in_zero_one(block: str, value: float) -> None:
    assert rejected(**{f"efficiency__{block}__fraction": value}).startswith(f"test.yaml: efficiency.{block}.fraction:")


# NIC figures ---------------------------------------------------------------------------------------
def test_nic_figures_that_disagree_are_rejected() -> None:
    # 2 NICs x 100 Gb/s / 8 / 4 GPUs = 6.25e9 B/s, not 12.5e9.
    message = rejected(network__bandwidth_bytes_per_s=12.5e9)
    assert "network.bandwidth_bytes_per_s (1.25e+10) disagrees" in message
    assert "(6.25e+09)" in message


def test_nic_figures_within_one_percent_are_accepted() -> None:
    assert build(network__bandwidth_bytes_per_s=6.25e9 * 1.009).network is not None


def test_gpus_per_node_enters_the_nic_check() -> None:
    # 8 GPUs share the same 2 NICs: 3.125e9 per GPU, so the base 6.25e9 no longer agrees.
    assert "disagrees" in rejected(node__gpus_per_node=8)


@pytest.mark.parametrize("missing", ["nics_per_node", "nic_bits_per_s"])
def test_nic_figures_come_together(missing: str) -> None:
    message = rejected(**{f"network__{missing}": _DELETE})
    assert message == "test.yaml: network: give both nics_per_node and nic_bits_per_s, or neither"


def test_nic_figures_may_both_be_left_out() -> None:
    hw = build(network__nics_per_node=_DELETE, network__nic_bits_per_s=_DELETE)
    assert hw.network is not None and hw.network.nics_per_node is None


# Price -------------------------------------------------------------------------------------------------
def test_price_needs_a_source() -> None:
    assert rejected(price_per_gpu_hour_usd=2.5).endswith("price_per_gpu_hour_usd needs a price_source")


def test_price_with_source_is_kept() -> None:
    hw = build(price_per_gpu_hour_usd=2.5, price_source="a list price page")
    assert hw.price_per_gpu_hour_usd == 2.5


def test_price_must_be_positive() -> None:
    assert rejected(price_per_gpu_hour_usd=0, price_source="x").startswith("test.yaml: price_per_gpu_hour_usd:")



# Power limit ---------------------------------------------------------------------------------------
POWER = {"watts": 500, "nominal_watts": 700, "compute_fraction": 0.8, "note": "test"}


def test_a_power_limit_is_optional_and_read_when_given() -> None:
    assert build().accelerator.power_limit is None
    limit = build(accelerator__power_limit=POWER).accelerator.power_limit
    assert limit is not None and (limit.watts, limit.nominal_watts, limit.compute_fraction) == (500, 700, 0.8)


def test_a_power_limit_above_the_nominal_power_is_rejected() -> None:
    message = rejected(accelerator__power_limit={**POWER, "watts": 800})
    assert message.startswith("test.yaml: accelerator.power_limit:") and "above nominal_watts (700)" in message


@pytest.mark.parametrize("value", [0, -0.5, 1.2])
def test_power_limit_compute_fraction_is_in_zero_one(value: float) -> None:
    message = rejected(accelerator__power_limit={**POWER, "compute_fraction": value})
    assert message.startswith("test.yaml: accelerator.power_limit.compute_fraction:")


def test_a_power_limit_needs_its_note() -> None:
    message = rejected(accelerator__power_limit={**POWER, "note": "  "})
    assert message.startswith("test.yaml: accelerator.power_limit.note:")
