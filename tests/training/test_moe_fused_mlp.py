"""Transformer Engine's fused grouped MLP (Layout.moe_fused_mlp): fc1's grouped GEMM applies the gated activation and
quantizes fc2's input in its epilogue, fc2's data-gradient GEMM the activation's gradient and the quantization of
fc1's output gradient, all local experts in a few kernels. What it removes is hand-counted below from the round
hardware (2 TB/s at 0.9) and a tiny MoE (hidden 128, 4 experts of width 64, top 2); the settings that cannot run
it are refused with one line."""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import round_hw, tiny

from planner.engines.export import render_export
from planner.engines.load import load_hardware, load_model
from planner.engines.megatron import import_megatron, split_launch_text
from planner.errors import PlannerError
from planner.physics.launch import layer_launches
from planner.physics.moe import expert_bias_bytes
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout
from planner.training.estimate import check_dtype, estimate
from planner.training.rules import check_layout, resolve_layout
from planner.training.time import clamp_seconds, layer_time

BANDWIDTH = 2e12 * 0.9  # round_hw's HBM at its memory-bound efficiency
SMALL_KERNEL = 1.2e-6  # physics.launch.SMALL_KERNEL_SECONDS, the GPU time of one bookkeeping kernel


def blackwell_like(fused: bool = True) -> HardwareProfile:
    data = round_hw().model_dump()
    data["accelerator"].update(fp8_block_scaling=True, fp8_gemm_any_layout=True, fused_grouped_mlp=fused)
    return HardwareProfile.model_validate(data)


HW = blackwell_like()


def moe_model(**overrides: object):  # type: ignore[no-untyped-def]
    moe = dict(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=64)
    moe.update(overrides.pop("moe", {}))  # type: ignore[arg-type]
    fields = dict(hidden_size=128, num_attention_heads=4, ffn_hidden_size=256, mlp_kind="gated", dropout=False,
                  moe=moe)
    fields.update(overrides)
    return tiny(**fields)


def layout(**fields: object) -> Layout:
    base = dict(global_batch=1, seq_len=32, dtype="fp8", fp8_recipe="mxfp8")
    base.update(fields)
    return Layout(**base)  # type: ignore[arg-type]


def times(model, lay: Layout) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    t = layer_time(model, HW, lay.to_arrays(), moe_layer=True)
    return float(t.forward[0]), float(t.backward[0]), float(t.after_sync_forward[0])


def test_the_fused_mlp_drops_the_activation_traffic_the_two_casts_and_the_per_expert_quantize_kernels() -> None:
    # 32 tokens, top 2 of width 64: 128 activation elements per token.
    # Forward: SwiGLU reads 4 x 128 and writes 2 x 128 bytes (768); fc2's MXFP8 input cast of 128 elements at
    # 2 + 1 + 1 + 2/32 = 4.0625 bytes (520); 1,288 bytes a token. Backward: twice the activation's traffic (1,536)
    # and the cast of fc1's output gradient, 2 x 128 elements (1,040); 2,576 bytes a token.
    # Per-expert quantization kernels: 2 for each of the 4 local experts, one small kernel each, forward; twice
    # that in the backward.
    model = moe_model()
    unfused_fwd, unfused_bwd, unfused_after = times(model, layout())
    fused_fwd, fused_bwd, fused_after = times(model, layout(moe_fused_mlp=True))
    assert unfused_fwd - fused_fwd == pytest.approx(32 * 1_288 / BANDWIDTH + 8 * SMALL_KERNEL, rel=1e-9)
    assert unfused_bwd - fused_bwd == pytest.approx(32 * 2_576 / BANDWIDTH + 16 * SMALL_KERNEL, rel=1e-9)
    # the routed side after the dispatcher's host sync loses the same forward traffic (not the bookkeeping)
    assert unfused_after - fused_after == pytest.approx(32 * 1_288 / BANDWIDTH, rel=1e-9)


def test_biased_experts_keep_one_read_of_the_output_gradient_and_a_clamp_runs_inside() -> None:
    # gpt-oss-like experts: fc2's bias (12 bytes forward, 14 backward per output element unfused) becomes the GEMM
    # epilogue's and one read of the gradient (0 and 2); the clamp of the routed experts' inputs runs in the kernel.
    model = moe_model(mlp_bias=True, activation_clamp=7.0)
    unfused, fused = layout().to_arrays(), layout(moe_fused_mlp=True).to_arrays()
    # 32 tokens x top 2 = 64 routed rows (balanced, dropless), hidden 128: 8,192 output elements
    assert [float(b[0]) for b in expert_bias_bytes(model, unfused)] == [12 * 8_192, 14 * 8_192]
    assert [float(b[0]) for b in expert_bias_bytes(model, fused)] == [0.0, 2 * 8_192]
    assert [float(c[0]) for c in clamp_seconds(model, HW, fused, moe_layer=True)] == [0.0, 0.0]
    assert float(clamp_seconds(model, HW, unfused, moe_layer=True)[0][0]) > 0


def test_the_host_issues_three_kernels_for_the_experts_whatever_their_number() -> None:
    # Unfused, after the dispatcher's sync: 16 dispatch kernels (24 less the 8 of preprocessing), 2 GEMMs per
    # local expert + the activation (9) and 2 quantizations per local expert (8): 33. Fused: 16 + 3.
    model = moe_model()
    _, after_unfused = layer_launches(model, layout().to_arrays(), moe_layer=True)
    _, after_fused = layer_launches(model, layout(moe_fused_mlp=True).to_arrays(), moe_layer=True)
    assert (float(after_unfused[0]), float(after_fused[0])) == (33.0, 19.0)


def test_only_under_mxfp8() -> None:
    for fields in (dict(dtype="bf16", fp8_recipe="tensorwise"), dict(fp8_recipe="tensorwise"), dict(fp8_recipe="blockwise")):
        with pytest.raises(ValueError, match="fp8_recipe mxfp8"):
            layout(moe_fused_mlp=True, **fields)


def test_only_on_a_chip_its_kernels_are_built_for() -> None:
    check_dtype(HW, "fp8", "mxfp8", moe_fused_mlp=True)
    with pytest.raises(PlannerError, match="compute capability 10"):
        check_dtype(blackwell_like(fused=False), "fp8", "mxfp8", moe_fused_mlp=True)
    assert load_hardware("gb300-nvl72").spec.accelerator.fused_grouped_mlp
    assert not load_hardware("h100-sxm").spec.accelerator.fused_grouped_mlp


@pytest.mark.parametrize(("model", "why"), [
    (tiny(hidden_size=128, num_attention_heads=4, ffn_hidden_size=256, mlp_kind="gated"), "MoE model"),
    (moe_model(mlp_kind="standard"), "mlp standard"),
    (moe_model(moe=dict(moe_ffn_hidden_size=96)), "moe_ffn_hidden_size 96"),
])
def test_only_for_gated_experts_of_widths_the_kernel_takes(model, why: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PlannerError, match=why):
        check_layout(model, layout(moe_fused_mlp=True), 1)


def test_expert_tp_must_leave_a_width_the_kernel_takes() -> None:
    # 128 wide experts: etp 2 leaves 64 per rank (taken), etp 4 leaves 32 (not a multiple of 64)
    model = moe_model(moe=dict(moe_ffn_hidden_size=128))
    check_layout(model, layout(moe_fused_mlp=True, tp=2, dp=1, sequence_parallel=True), 2)
    with pytest.raises(PlannerError, match="etp"):
        check_layout(model, layout(moe_fused_mlp=True, tp=4, dp=1, sequence_parallel=True), 4)


@pytest.mark.parametrize("engine", ["torchtitan", "fsdp", "deepspeed", "automodel"])
def test_engines_without_the_op_fuser_refuse_it(engine: str) -> None:
    with pytest.raises(PlannerError, match="cannot run moe_fused_mlp"):
        check_layout(moe_model(), layout(moe_fused_mlp=True, engine=engine), 1)


# Megatron-LM: --use-transformer-engine-op-fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 --------------------------
QWEN = load_model("qwen3-30b-a3b").spec
GB300 = load_hardware("gb300-nvl72").spec
ARGS = ("--tensor-model-parallel-size 1 --expert-model-parallel-size 8 --micro-batch-size 8 --global-batch-size 512 "
        "--seq-length 4096 --bf16 --fp8-format e4m3 --fp8-recipe mxfp8 --use-distributed-optimizer "
        "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep")
FUSER = " --use-transformer-engine-op-fuser --moe-mlp-glu-interleave-size 32"


def read(script: str):  # type: ignore[no-untyped-def]
    return import_megatron(split_launch_text(script, "train.sh"), gpus=8, given={}, model=QWEN, source="train.sh")


def test_megatron_reads_the_fuser_with_the_environment_variable() -> None:
    imported = read(f"export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1\npython pretrain_gpt.py {ARGS}{FUSER}\n")
    assert imported.fields["moe_fused_mlp"] is True


@pytest.mark.parametrize(("script", "why"), [
    (f"python pretrain_gpt.py {ARGS}{FUSER}\n", "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 in the launch environment"),
    (f"NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 python pretrain_gpt.py {ARGS.replace('mxfp8', 'tensorwise')}{FUSER}\n",
     "MXFP8 only"),
    (f"NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 python pretrain_gpt.py {ARGS} --use-transformer-engine-op-fuser\n",
     "interleaved in blocks of 32"),
])
def test_megatron_reads_the_unfused_path_and_says_why(script: str, why: str) -> None:
    imported = read(script)
    assert not imported.fields.get("moe_fused_mlp")
    assert any(why in w for w in imported.warnings), imported.warnings


def test_megatron_export_writes_the_flags_and_the_environment_and_reads_back() -> None:
    lay = resolve_layout(QWEN, 8, ep=8, zero=1, micro_batch=8, global_batch=512, seq_len=4096, dtype="fp8",
                         fp8_recipe="mxfp8", moe_dispatcher="hybridep", moe_fused_mlp=True)
    text = render_export("megatron", "qwen3-30b-a3b", QWEN, GB300, lay, estimate(QWEN, GB300, lay),
                         hardware_id="gb300-nvl72").text
    assert "export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in text
    assert "--use-transformer-engine-op-fuser --moe-mlp-glu-interleave-size 32" in text
    back = read(text)
    assert resolve_layout(QWEN, 8, **back.fields) == lay


@pytest.mark.parametrize("fmt", ["torchtitan", "deepspeed", "automodel"])
def test_other_exporters_refuse_it(fmt: str) -> None:
    lay = resolve_layout(QWEN, 8, ep=8 if fmt != "deepspeed" else 1, zero=1, micro_batch=8, global_batch=512,
                         seq_len=4096, dtype="fp8", fp8_recipe="mxfp8", moe_fused_mlp=True)
    with pytest.raises(PlannerError, match="moe_fused_mlp"):
        render_export(fmt, "qwen3-30b-a3b", QWEN, GB300, lay, estimate(QWEN, GB300, lay), hardware_id="gb300-nvl72")


def test_a_faster_step_on_the_held_out_recipe_shape() -> None:
    # Qwen3-30B-A3B on 8 GB300 as Megatron-Bridge 26.06 runs it: the fused step is shorter, by less than the
    # 1.3-2x the kernels gain on the MLP block alone (NVIDIA technical blog, 2026-06: 8% end to end on DeepSeek-V3).
    fields = dict(ep=8, zero=1, micro_batch=8, global_batch=512, seq_len=4096, dtype="fp8", fp8_recipe="mxfp8",
                  moe_dispatcher="hybridep", cuda_graph_scope=("full",))
    plain = estimate(QWEN, GB300, resolve_layout(QWEN, 8, **fields)).scalar("step_seconds")
    fused = estimate(QWEN, GB300, resolve_layout(QWEN, 8, moe_fused_mlp=True, **fields)).scalar("step_seconds")
    assert 0.8 * plain < fused < plain
    assert np.isfinite(fused)
