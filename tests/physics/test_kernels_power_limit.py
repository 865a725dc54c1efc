"""The power limit's compute fraction (accelerator.power_limit, physics/kernels.py compute_fraction): it slows the
tensor-core kernels - GEMMs 16-bit and fp8, the flash-attention core - by 1 / fraction, and nothing that HBM or a
link bounds. Hand arithmetic on a made-up profile."""

from __future__ import annotations

import pytest

from planner.engines.load import load_hardware, load_model
from planner.physics.kernels import (
    GEMM_FIXED_SECONDS,
    attention_plateau,
    compute_fraction,
    fp8_gemm_plateau,
    matmul_plateau,
    matmul_seconds,
    memory_seconds,
)
from planner.specs.hardware import HardwareProfile, PowerLimit
from planner.specs.layout import Layout
from planner.training.time import layer_time

BASE = HardwareProfile.model_validate({
    "name": "Test node",
    "accelerator": {"name": "Test GPU", "memory_bytes": 16_000_000_000, "memory_bandwidth_bytes_per_s": 1.0e12,
                    "peak_flops_per_s": {"bf16": 100.0e12, "fp8": 200.0e12}, "source": "made up for the test"},
    "node": {"gpus_per_node": 4, "link_kind": "nvlink", "bandwidth_bytes_per_s": 100.0e9, "latency_s": 2.0e-6,
             "source": "made up for the test"},
    "efficiency": {
        "matmul": {"peak_fraction": 0.8, "note": "test"},
        "matmul_fp8": {"fraction": 0.6, "note": "test"},
        "attention": {"fraction": 0.5, "note": "test"},
        "attention_flash2": {"fraction": 0.3, "note": "test"},
        "memory_bandwidth": {"fraction": 0.9, "note": "test"},
        "intra_node_link": {"fraction": 0.8, "note": "test"},
        "inter_node_link": {"fraction": 0.85, "note": "test"},
    },
})


def limited(fraction: float) -> HardwareProfile:
    limit = PowerLimit(watts=500, nominal_watts=700, compute_fraction=fraction, note="test")
    return BASE.model_copy(update={"accelerator": BASE.accelerator.model_copy(update={"power_limit": limit})})


def test_no_power_limit_is_a_fraction_of_one():
    assert compute_fraction(BASE) == 1.0
    assert matmul_plateau(BASE) == 0.8 and fp8_gemm_plateau(BASE) == 0.6
    assert attention_plateau(BASE) == 0.5 and attention_plateau(BASE, "flash2") == 0.3


def test_the_plateaus_of_the_tensor_core_kernels_scale():
    hw = limited(0.5)
    assert compute_fraction(hw) == 0.5
    assert matmul_plateau(hw) == pytest.approx(0.4)  # 0.8 x 0.5
    assert fp8_gemm_plateau(hw) == pytest.approx(0.3)  # 0.6 x 0.5
    assert attention_plateau(hw) == pytest.approx(0.25)  # 0.5 x 0.5
    assert attention_plateau(hw, "flash2") == pytest.approx(0.15)  # 0.3 x 0.5


def test_a_gemm_takes_one_over_the_fraction_longer():
    # 1 TFLOP at a 100 TFLOP/s peak: (0.01 s + 7.5 us) / (0.8 x 0.5) = 0.0250188 s
    seconds = float(matmul_seconds(limited(0.5), 1e12, 100e12))
    assert seconds == pytest.approx((0.01 + GEMM_FIXED_SECONDS) / 0.4)
    assert seconds == pytest.approx(2 * float(matmul_seconds(BASE, 1e12, 100e12)))


def test_streaming_kernels_do_not_slow_down():
    # 9e11 bytes at 1 TB/s x 0.9: one second, with or without the limit
    assert float(memory_seconds(limited(0.5), 9e11)) == pytest.approx(1.0)
    assert float(memory_seconds(BASE, 9e11)) == pytest.approx(1.0)


def test_only_the_compute_part_of_a_layer_scales():
    """forward(f) = compute / f + streaming: the limit at 1/2 adds one compute part, at 1/4 three."""
    h100 = load_hardware("h100-sxm").spec
    model = load_model("llama-3.1-8b").spec
    lay = Layout(dp=8, global_batch=8, seq_len=8192).to_arrays()

    def forward(fraction: float) -> float:
        limit = PowerLimit(watts=500, nominal_watts=700, compute_fraction=fraction, note="test")
        hw = h100.model_copy(update={"accelerator": h100.accelerator.model_copy(update={"power_limit": limit})})
        return float(layer_time(model, hw, lay, moe_layer=False).forward[0])

    compute = forward(0.5) - forward(1.0)
    assert compute > 0
    assert forward(0.25) - forward(1.0) == pytest.approx(3 * compute, rel=1e-9)
    assert 0 < forward(1.0) - compute  # the streaming part (norms, residuals, SwiGLU) stays


def test_the_grand_teton_fraction_is_its_measured_gemm_ratio():
    """h100-sxm-96gb: the best cuBLAS bf16 GEMM on the 500 W HBM2e H100 (M 8192, N 6656, K 16384 in 2,879 us,
    yifuwang/symm-mem-recipes README) over the 700 W H100's best (797.5 TFLOP/s at 8192 cubed, zzc0721/
    torch-performance-test-data#79): 620.6 / 797.5 = 0.778."""
    limit = load_hardware("h100-sxm-96gb").spec.accelerator.power_limit
    assert limit is not None and (limit.watts, limit.nominal_watts) == (500, 700)
    at_500w = 2 * 8192 * 6656 * 16384 / 2879e-6
    assert at_500w == pytest.approx(620.6e12, rel=1e-3)
    assert limit.compute_fraction == pytest.approx(at_500w / 797.5e12, abs=0.005)
    assert load_hardware("h100-sxm").spec.accelerator.power_limit is None  # the 700 W part: no limit
