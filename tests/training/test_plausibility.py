"""The plausibility guard: an MFU more than MFU_PLAUSIBILITY_MARGIN above the best published MFU for the chip
and dtype (the profile's efficiency.best_published_mfu) is flagged in the arrays, the JSON and the tables."""

from __future__ import annotations

import json

import numpy as np
from round_specs import round_hw

from planner.engines.load import load_hardware, load_model
from planner.specs.layout import Layout
from planner.training.estimate import MFU_PLAUSIBILITY_MARGIN, best_published_mfu, estimate
from planner.training.flops import attention_core_flop_per_token, layer_weight_flop_per_token, lm_head_flop_per_token

H100 = load_hardware("h100-sxm").spec
LLAMA8B = load_model("llama-3.1-8b").spec


def test_the_ceiling_follows_the_dtype_and_is_nan_without_a_figure() -> None:
    both = Layout(global_batch=1, seq_len=8), Layout(global_batch=1, seq_len=8, dtype="fp8")
    got = [float(best_published_mfu(H100, lay.to_arrays())[0]) for lay in both]
    assert got == [0.49, 0.435]  # h100-sxm.yaml: Megatron-LM 2024 bf16, Megatron-Bridge 26.04.01 405B fp8
    assert np.isnan(best_published_mfu(round_hw(), both[0].to_arrays())[0])
    assert MFU_PLAUSIBILITY_MARGIN == 0.10


def test_an_estimate_above_the_ceiling_is_flagged_one_below_is_not() -> None:
    # Llama 3.1 8B on one 8-GPU node, data parallel only: the model's MFU exceeds 0.49 x 1.1; a 405B
    # layout with a deep pipeline (bubble) stays well below.
    high = estimate(LLAMA8B, H100, Layout(dp=8, zero=1, global_batch=128, seq_len=8192), headroom=0.0)
    assert high.scalar("mfu") > 0.49 * 1.1 and bool(high.result.implausible_mfu[0])
    doc = high.to_json()["plausibility"]
    assert doc == {"best_published_mfu": 0.49, "margin": 0.1, "implausible_mfu": True}
    low = estimate(load_model("llama-3.1-405b").spec, H100,
                   Layout(tp=8, pp=16, dp=8, zero=1, sequence_parallel=True, recompute="full", global_batch=512,
                          seq_len=8192), headroom=0.0)
    assert low.scalar("mfu") < 0.49 and not bool(low.result.implausible_mfu[0])
    assert low.to_json()["plausibility"]["implausible_mfu"] is False


def test_no_published_figure_no_flag() -> None:
    est = estimate(LLAMA8B, load_hardware("b200").spec, Layout(dp=8, zero=1, global_batch=128, seq_len=8192),
                   headroom=0.0)
    assert est.to_json()["plausibility"] == {"best_published_mfu": None, "margin": 0.1, "implausible_mfu": False}


def test_cli_marks_implausible_mfu_in_tables_and_json(run_cli) -> None:
    args = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8", "--global-batch", "128",
            "--seq-len", "8192"]
    table = run_cli("estimate", *args, "--dp", "8", "--zero", "1").stdout
    assert "implausible: MFU" in table
    search = " ".join(run_cli("search", *args, "--top", "3").stdout.split())  # the caption wraps with the width
    assert "MFU !: more than 10% above the best published MFU" in search and "implausible" in search
    doc = json.loads(run_cli("search", *args, "--top", "1", "--format", "json").stdout)
    assert doc["candidates"][0]["plausibility"]["implausible_mfu"] is True


def test_blackwell_ceilings_are_in_the_planners_flop_count() -> None:
    """Megatron-Bridge's performance summary prints model TFLOP/s with the causal attention core halved: its
    25.11 DGX-B200 Llama3-8B FP8-CS row (8,192 tokens) gives 30,624 tokens/s per GPU and 1,576 TFLOP/s. The
    planner counts the full core (training/flops.py), so the ceiling is that run's tokens/s in the planner's
    count over the fp8 peak, and an estimate equal to the run is not flagged."""
    seq = np.array([8192])
    weights = layer_weight_flop_per_token(LLAMA8B) + lm_head_flop_per_token(LLAMA8B)
    core = float(attention_core_flop_per_token(LLAMA8B, seq)[0])
    halved = 3 * (weights + core / 2)  # the table's count
    assert abs(30624 * halved / 1576e12 - 1) < 0.001
    b200 = load_hardware("b200").spec
    run_mfu = 30624 * 3 * (weights + core) / b200.accelerator.peak_flops_per_s["fp8"]
    ceiling = float(best_published_mfu(b200, Layout(global_batch=1, seq_len=8, dtype="fp8").to_arrays())[0])
    assert abs(ceiling - run_mfu) < 0.001
    assert run_mfu <= ceiling * (1 + MFU_PLAUSIBILITY_MARGIN)
