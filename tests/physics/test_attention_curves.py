"""The fused-attention curve's per-profile half-saturation lengths, the Blackwell profiles' curves against the cuDNN
measurements they come from, and the fp8 casts of chips whose fp8 GEMMs take every layout."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from round_specs import round_hw  # noqa: E402

from planner.engines.load import load_hardware
from planner.physics.kernels import (
    ATTENTION_HALF_SATURATION_TOKENS_CAUSAL,
    ATTENTION_HALF_SATURATION_TOKENS_NONCAUSAL,
    attention_efficiency,
    attention_half_saturation_tokens,
    fp8_cast_bytes_per_element,
    fp8_cast_seconds,
)
from planner.specs.hardware import HardwareProfile

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"


def with_attention(hw: HardwareProfile, **fields: float) -> HardwareProfile:
    attention = hw.efficiency.attention.model_copy(update=fields)
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"attention": attention})})


def any_layout(hw: HardwareProfile) -> HardwareProfile:
    return hw.model_copy(update={"accelerator": hw.accelerator.model_copy(update={"fp8_gemm_any_layout": True})})


def test_a_profile_without_its_own_lengths_takes_the_hopper_constants():
    assert attention_half_saturation_tokens(round_hw()) == (550.0, 200.0)
    assert (ATTENTION_HALF_SATURATION_TOKENS_CAUSAL, ATTENTION_HALF_SATURATION_TOKENS_NONCAUSAL) == (550.0, 200.0)


def test_the_profile_half_saturation_lengths_set_the_curve():
    # plateau 0.5, causal half-saturation 1,000 keys, full mask 400: half the plateau exactly there, 0.5 x 3000/4000
    # at 3,000 causal keys; head dim 64 still scales by (64/96)/(128/160).
    hw = with_attention(round_hw(), half_saturation_tokens_causal=1000.0, half_saturation_tokens_noncausal=400.0)
    assert attention_half_saturation_tokens(hw) == (1000.0, 400.0)
    assert attention_efficiency(hw, np.array([1000.0, 3000.0]), 128, causal=True).tolist() == pytest.approx([0.25, 0.375])
    assert float(attention_efficiency(hw, 400.0, 128, causal=False)) == pytest.approx(0.25)
    assert float(attention_efficiency(hw, 1000.0, 64, causal=True)) == pytest.approx(0.25 * (64 / 96) / (128 / 160))
    # only one given: the other keeps its constant
    causal_only = with_attention(round_hw(), half_saturation_tokens_causal=1000.0)
    assert attention_half_saturation_tokens(causal_only) == (1000.0, 200.0)


def test_profile_lengths_outside_bounds_are_refused():
    hw = round_hw()
    data = hw.model_dump()
    data["efficiency"]["attention"]["half_saturation_tokens_causal"] = 0.0
    with pytest.raises(ValueError):
        HardwareProfile.model_validate(data)


def measured_fwd_bwd_fraction(path: Path, peak: float) -> dict[int, float]:
    """cuDNN's forward + backward rate per key length from a cudnn-frontend result file, as a fraction of `peak`:
    3.5 / (1/fwd + 2.5/bwd) TFLOP/s, the planner's FLOP convention (the file's: causal half, backward 2.5x)."""
    out: dict[int, float] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["backend"] == "pyt_cudnn":
                fwd, bwd = float(row["fwd_tflops_per_sec"]), float(row["bwd_tflops_per_sec"])
                out[int(row["q_seqlen"])] = 3.5 / (1 / fwd + 2.5 / bwd) * 1e12 / peak
    return out


@pytest.mark.parametrize("profile, fixture", [
    ("b200", "sdpa_bf16_benchmark_results_NVIDIA_B200.csv"),
    ("gb300-nvl72", "sdpa_bf16_benchmark_results_NVIDIA_GB300.csv"),
])
def test_blackwell_attention_curve_follows_cudnn_9_13_on_that_chip(profile, fixture):
    # NVIDIA/cudnn-frontend's bf16 SDPA benchmark (cuDNN 9.13.1, causal, head dim 128; tests/fixtures/kernels/SOURCES.md)
    # at the lengths the profile was fitted on: within 3%. Below them the benchmark pays PyTorch's per-call host cost,
    # which the curve leaves out, so the measured rate is lower than the curve at 4k keys.
    hw = load_hardware(profile).spec
    measured = measured_fwd_bwd_fraction(KERNELS / fixture, hw.accelerator.peak_flops_per_s["bf16"])
    for s in (8192, 16384, 32768):
        assert float(attention_efficiency(hw, float(s), 128, causal=True)) == pytest.approx(measured[s], rel=0.03), s
    assert float(attention_efficiency(hw, 4096.0, 128, causal=True)) > measured[4096]


def test_gb200_takes_the_b200_curve_as_fractions_of_its_own_peak():
    b200, gb200 = load_hardware("b200").spec, load_hardware("gb200-nvl72").spec
    for s in (4096.0, 8192.0):
        for causal in (True, False):
            assert float(attention_efficiency(gb200, s, 128, causal=causal)) == float(
                attention_efficiency(b200, s, 128, causal=causal))


def test_fp8_casts_drop_the_transpose_where_fp8_gemms_take_every_layout():
    # Hopper-style TN-only fp8 GEMMs: read for the amax and the cast (2 + 2), write the copy and its transpose
    # (1 + 1) = 6 bytes; any layout (Blackwell): no transpose, 5 bytes. At 1.8e12 B/s, 1.8e12/5 elements take 1 s.
    tn_only, any_ = round_hw(), any_layout(round_hw())
    assert (fp8_cast_bytes_per_element(tn_only), fp8_cast_bytes_per_element(any_)) == (6.0, 5.0)
    assert (fp8_cast_bytes_per_element(tn_only, weight=True), fp8_cast_bytes_per_element(any_, weight=True)) == (6.0, 5.0)
    assert float(fp8_cast_seconds(any_, 1.8e12 / 5)) == pytest.approx(1.0)
    assert float(fp8_cast_seconds(any_, 1.8e12 / 5, weight=True)) == pytest.approx(1.0)


@pytest.mark.parametrize("profile, expected", [
    ("b200", True), ("gb200-nvl72", True), ("b300", True), ("gb300-nvl72", True),
    ("h100-sxm", False), ("h200", False), ("l40s", False), ("a100-80gb", False),
])
def test_fp8_any_layout_follows_transformer_engine_capability_rule(profile, expected):
    # Transformer Engine's is_non_tn_fp8_gemm_supported: compute capability 10.x or >= 13.0 (Blackwell datacenter
    # parts), not Hopper 9.0, Ada 8.9 or Ampere.
    assert load_hardware(profile).spec.accelerator.fp8_gemm_any_layout is expected


def test_fp8_cast_bytes_by_recipe():
    # Per quantized element (Fp8RecipeCode): tensorwise 2 (amax read) + 2 (cast read) + 1 (copy) + 1 (TN
    # transpose) = 6, 5 where fp8 GEMMs take every layout; delayed skips the amax read: 4 and 3; the block-scaled
    # recipes read once and write a rowwise and a columnwise copy on every chip, each with 1/32 byte of scales:
    # 2 + 1 + 1 + 2/32 = 4.0625. Weights alike.
    from planner.specs.layout import Fp8RecipeCode

    tn_only, any_ = round_hw(), any_layout(round_hw())
    codes = np.array([Fp8RecipeCode.TENSORWISE, Fp8RecipeCode.DELAYED, Fp8RecipeCode.MXFP8, Fp8RecipeCode.BLOCKWISE])
    assert fp8_cast_bytes_per_element(tn_only, codes).tolist() == [6.0, 4.0, 4.0625, 4.0625]
    assert fp8_cast_bytes_per_element(any_, codes).tolist() == [5.0, 3.0, 4.0625, 4.0625]
    assert fp8_cast_bytes_per_element(tn_only, codes, weight=True).tolist() == [6.0, 4.0, 4.0625, 4.0625]
    # at 1.8e12 B/s, 1.8e12 / 4 elements under delayed scaling on a TN-only chip take 1 s
    assert float(fp8_cast_seconds(tn_only, 1.8e12 / 4, Fp8RecipeCode.DELAYED)) == pytest.approx(1.0)
