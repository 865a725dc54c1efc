"""The engine's attention kernel: PyTorch SDPA engines run FlashAttention-2 on Hopper, Megatron/NeMo cuDNN's fused
attention (Transformer Engine); on Ampere FlashAttention-2 is the best kernel and nothing changes."""

from __future__ import annotations

import pytest

from planner.engines.load import load_hardware, load_model
from planner.physics.kernels import attention_plateau
from planner.specs.engine import engine_profile
from planner.specs.layout import Layout
from planner.training.estimate import estimate
from planner.training.time import attention_core_seconds

H100 = load_hardware("h100-sxm").spec
A100 = load_hardware("a100-80gb").spec
LLAMA8B = load_model("llama-3.1-8b").spec


def test_plateau_follows_the_engines_kernel():
    assert attention_plateau(H100, engine_profile("megatron").kernels.attention_kernel) == H100.efficiency.attention.fraction
    fa2 = H100.efficiency.attention_flash2
    assert fa2 is not None
    assert attention_plateau(H100, engine_profile("torchtitan").kernels.attention_kernel) == fa2.fraction
    # 328 TFLOP/s of 989 at 16k keys, causal, on the curve s / (s + 550): the profile's 0.343 (hand arithmetic)
    assert fa2.fraction == pytest.approx(328 / 989 / (16384 / (16384 + 550)), abs=0.002)
    # Ampere: FlashAttention-2 is the best kernel; no separate plateau
    assert A100.efficiency.attention_flash2 is None
    assert attention_plateau(A100, "flash2") == A100.efficiency.attention.fraction


def test_attention_core_scales_with_the_plateau():
    lay = Layout(dp=8, global_batch=8, seq_len=8192).to_arrays()
    fused = attention_core_seconds(LLAMA8B, H100, lay, attention_plateau(H100, "fused"))
    flash2 = attention_core_seconds(LLAMA8B, H100, lay, attention_plateau(H100, "flash2"))
    ratio = H100.efficiency.attention.fraction / H100.efficiency.attention_flash2.fraction
    assert float(flash2[0][0]) == pytest.approx(ratio * float(fused[0][0]))  # no ring steps: the kernel alone
    assert float(flash2[1][0]) == pytest.approx(ratio * float(fused[1][0]))


def test_end_to_end_gain_of_cudnn_attention_is_the_published_order():
    """pytorch/torchtitan#1042: Llama 3 8B cut to 14 layers, batch 1, seq 8192, 2 H100, no activation checkpointing;
    forcing SDPBackend.CUDNN_ATTENTION instead of the default FLASH_ATTENTION gave '~10%' end to end. The step of
    the same job with the fused plateau instead of FlashAttention-2's must be faster by a few to fifteen percent."""
    model = LLAMA8B.model_copy(update={"num_layers": 14})
    lay = Layout(dp=2, zero=3, global_batch=2, seq_len=8192, engine="torchtitan", grad_dtype="fp32")
    cudnn = H100.model_copy(update={"efficiency": H100.efficiency.model_copy(update={"attention_flash2": None})})
    gain = estimate(model, H100, lay).scalar("step_seconds") / estimate(model, cudnn, lay).scalar("step_seconds")
    assert 1.03 < gain < 1.15


@pytest.mark.parametrize(("engine", "kernel"), [("megatron", "flash2"), ("torchtitan", "fused"), ("nemo", None)])
def test_a_layouts_kernel_overrides_the_engines(engine, kernel):
    """Layout.attention_kernel (Megatron --attention-backend flash / fused) wins over the engine's kernel; null keeps
    the engine's. The attention core then runs at that kernel's plateau and nothing else moves."""
    base = dict(dp=8, zero=1, global_batch=8, seq_len=8192, engine=engine, grad_dtype="fp32")
    lay = Layout(**base, attention_kernel=kernel)
    chosen = kernel or engine_profile(engine).kernels.attention_kernel
    assert lay.resolved_attention_kernel == chosen
    arrays = lay.to_arrays()
    assert bool(arrays.attention_flash2[0]) == (chosen == "flash2")
    got = attention_core_seconds(LLAMA8B, H100, arrays, None)
    want = attention_core_seconds(LLAMA8B, H100, arrays, attention_plateau(H100, chosen))
    assert float(got[0][0]) == pytest.approx(float(want[0][0]))
    # the layout read back from its arrays is the same layout (the engine's own kernel read back as null)
    assert arrays.to_layout(0, engine=engine) == lay


def test_the_kernel_changes_only_the_attention_core_of_the_step():
    lay = dict(dp=8, zero=1, global_batch=8, seq_len=32768)
    fused = estimate(LLAMA8B, H100, Layout(**lay, attention_kernel="fused"))
    flash2 = estimate(LLAMA8B, H100, Layout(**lay, attention_kernel="flash2"))
    assert fused.scalar("step_seconds") == estimate(LLAMA8B, H100, Layout(**lay)).scalar("step_seconds")
    assert flash2.scalar("step_seconds") > fused.scalar("step_seconds")
    assert flash2.scalar("peak_bytes") == fused.scalar("peak_bytes")


def test_an_attention_kernel_needs_the_fused_path():
    with pytest.raises(ValueError, match="attention_kernel applies only with flash_attention"):
        Layout(global_batch=8, seq_len=1024, flash_attention=False, attention_kernel="flash2")


def test_the_search_grid_runs_the_problems_kernel_as_estimate_does():
    from planner.search.engine import run_search
    from planner.search.space import Filters, Problem

    problem = Problem(gpus=8, global_batch=16, seq_len=8192, attention_kernel="flash2")
    r = run_search(LLAMA8B, H100, problem, Filters(pp=(1,), cp=(1,)))
    assert r.feasible > 0
    for i in (int(j) for j in r.fits[:5]):
        layout = r.layouts.to_layout(i)
        assert layout.attention_kernel == "flash2"
        assert r.results.step_seconds[i] == pytest.approx(estimate(LLAMA8B, H100, layout).scalar("step_seconds"))


def test_nemo_launcher_releases_that_turned_cudnn_attention_off():
    """NeMo-Framework-Launcher config.yaml set NVTE_FUSED_ATTN: 0 at tags 24.03-24.07 (removed 2024-08-29): those
    published rows run FlashAttention-2; later NeMo and other sources keep their engine's kernel."""
    from planner.calibrate.published import engine_fields

    nemo2407 = "NVIDIA/NeMo docs/source/performance/performance_summary.md @4c73f77670 (NeMo 24.07, DGX-H100, FP8)"
    assert engine_fields("x", nemo2407, "none") == {"engine": "nemo", "attention_kernel": "flash2"}
    assert engine_fields("x", "NVIDIA/NeMo docs/... (NeMo 24.09, DGX-H100)", "none") == {"engine": "nemo"}
    assert "attention_kernel" not in engine_fields("x", "NVIDIA-NeMo/Megatron-Bridge docs (25.11)", "none")
