"""torchtitan's float8 tensor parallelism (torchao Float8ColwiseParallel / PrepareFloat8ModuleInput): under an fp8
recipe the sequence-parallel all-gathers move fp8 (1 byte per element), the reduce-scatters stay bf16. Hand
arithmetic on one NVLink node."""

from __future__ import annotations

import pytest

from planner.engines.load import load_hardware, load_model
from planner.specs.engine import engine_profile
from planner.specs.layout import Layout
from planner.training.time import layer_time

H100 = load_hardware("h100-sxm").spec
LLAMA70B = load_model("llama-3.1-70b").spec


def tp_comm(engine, dtype: str) -> float:  # type: ignore[no-untyped-def]
    lay = Layout(tp=8, dp=1, sequence_parallel=True, micro_batch=1, global_batch=1, seq_len=8192, dtype=dtype,
                 engine="torchtitan")
    return float(layer_time(LLAMA70B, H100, lay.to_arrays(), moe_layer=False, engine=engine).tp_comm[0])


def test_the_all_gathers_halve_under_fp8():
    titan = engine_profile("torchtitan")
    assert titan.kernels.fp8_tp_all_gather
    bf16_gathers = titan.model_copy(update={"kernels": titan.kernels.model_copy(update={"fp8_tp_all_gather": False})})
    # 8,192 tokens x 8,192 hidden x 2 bytes = 134,217,728 bytes per collective; an all-gather over 8 GPUs moves
    # 7/8 of it at 450 GB/s x 0.8; fp8 moves half. Two passes (no recompute) x two all-gathers: the latency
    # terms cancel in the difference.
    half = 7 / 8 * 134_217_728 / 2 / (450e9 * 0.8)
    assert tp_comm(bf16_gathers, "fp8") - tp_comm(titan, "fp8") == pytest.approx(2 * 2 * half, rel=1e-9)
    assert tp_comm(titan, "bf16") == pytest.approx(tp_comm(bf16_gathers, "bf16"))  # bf16 recipes: unchanged


def test_megatron_counts_its_gathers_in_16_bit():
    assert not engine_profile("megatron").kernels.fp8_tp_all_gather
    assert not engine_profile("deepspeed").kernels.fp8_tp_all_gather
