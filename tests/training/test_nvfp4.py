"""NVFP4 training (dtype fp4: Transformer Engine's NVFP4BlockScaling, Megatron-LM --fp4-format e2m1): the GEMMs at the
chip's fp4 peak and NVFP4 plateau, the quantization as memory traffic, the NVFP4 copies kept for the backward and
the NVFP4 weights, the engines and chips that run it, and the readers and writers of its flags.

Hand-derived on the round test chip (memory 2e12 B/s x 0.9 = 1.8e12 B/s streamed; fixed 7.5 us per GEMM) with an
fp4 peak of 4e15 FLOP/s at a plateau of 0.5 added."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from round_specs import lay, round_hw, tiny, tiny_gemm_passes  # noqa: E402

from planner.engines.load import load_hardware, load_model
from planner.engines.megatron import import_megatron, layout_flags, split_launch_text
from planner.engines.megatron_bridge import bridge_tokens, override, parse_bridge_text
from planner.errors import PlannerError
from planner.physics.kernels import (
    NVFP4_CAST_BYTES_PER_ELEMENT,
    fp8_cast_bytes_per_element,
    gemm_peak_flops,
    gemm_plateau,
)
from planner.specs.layout import Fp8RecipeCode, Layout
from planner.training.estimate import check_dtype, estimate
from planner.training.memory import layer_activation_bytes_per_token, layer_weight_bytes
from planner.training.rules import resolve_layout
from planner.training.time import layer_time


def fp4_hw():
    hw = round_hw({"bf16": 1e15, "fp8": 2e15, "fp4": 4e15})
    eff = hw.efficiency.model_copy(update={"matmul_fp4": hw.efficiency.matmul_fp8.model_copy(update={"fraction": 0.5})})
    return hw.model_copy(update={"efficiency": eff})


HW = fp4_hw()


def fp4(**fields):
    fields.setdefault("global_batch", 1)
    fields.setdefault("seq_len", 32)
    return Layout(dtype="fp4", **fields).to_arrays()


def test_the_layout_keeps_fp4_through_its_arrays():
    layout = Layout(dtype="fp4", zero=1, dp=2, global_batch=2, seq_len=32, fp8_param_gather=True)
    arrays = layout.to_arrays()
    assert bool(arrays.fp8[0]) and bool(arrays.fp4[0]) and int(arrays.fp8_recipe[0]) == Fp8RecipeCode.NVFP4
    back = arrays.to_layout(0)
    assert (back.dtype, back.fp8_param_gather, back.fp8_recipe) == ("fp4", True, "tensorwise")
    assert not bool(Layout(dtype="fp8", global_batch=1, seq_len=32).to_arrays().fp4[0])


@pytest.mark.parametrize(("fields", "why"), [
    (dict(fp8_recipe="mxfp8"), "fp8_recipe mxfp8 applies only with dtype fp8"),
    (dict(fp8_attention=True), "fp8_attention runs the fused attention kernel on fp8 inputs"),
    (dict(fp8_param_gather=True), "needs dtype fp8 or fp4 and zero >= 1"),
    (dict(moe_fused_mlp=True), "moe_fused_mlp"),
])
def test_what_nvfp4_does_not_run_is_refused(fields, why):
    with pytest.raises(ValueError, match=why):
        Layout(dtype="fp4", global_batch=1, seq_len=32, **fields)


def test_the_gemms_run_at_the_fp4_peak_and_plateau():
    a4, a8 = fp4(), Layout(dtype="fp8", global_batch=1, seq_len=32).to_arrays()
    assert (gemm_peak_flops(HW, a4).tolist(), gemm_plateau(HW, a4).tolist()) == ([4e15], [0.5])
    assert (gemm_peak_flops(HW, a8).tolist(), gemm_plateau(HW, a8).tolist()) == ([2e15], [0.7])


def test_nvfp4_quantization_bytes():
    # activations and gradients: the measured 6.25 bytes per element (amax pass 2, fused cast 2, two NVFP4 copies of
    # 0.5 + 1/16, the Hadamard transform's and rounding's arithmetic); weights: amax 2 + cast 2 + 2 x 0.5625 = 5.125
    code = np.array([Fp8RecipeCode.NVFP4])
    assert fp8_cast_bytes_per_element(HW, code).tolist() == [NVFP4_CAST_BYTES_PER_ELEMENT] == [6.25]
    assert fp8_cast_bytes_per_element(HW, code, weight=True).tolist() == [5.125]


def test_the_fp4_forward_adds_exactly_the_casts_to_the_gemm_change():
    # tiny GPT (h 64, f 256, tp 1), 32 tokens, one micro-batch: the layer's four GEMMs of 2 x 32 x (12,288, 4,096,
    # 16,384, 16,384) FLOP at 1e15 x 0.8 in bf16 and at 4e15 x 0.5 in fp4, each with the fixed 7.5 us; the casts:
    # 32 tokens x 448 input elements x 6.25 bytes and the 49,152 weight elements x 5.125 bytes, at 1.8e12 B/s.
    model = tiny()
    t16 = layer_time(model, HW, lay(), moe_layer=False)
    t4 = layer_time(model, HW, fp4(), moe_layer=False)
    # the GEMMs on the roofline (round_specs.tiny_gemm_passes): NVFP4 operands 0.5625 bytes each
    gemm16, dgrad16, wgrad16 = tiny_gemm_passes(operand_bytes=2, peak=1e15, plateau=0.8)
    gemm4, dgrad4, wgrad4 = tiny_gemm_passes(operand_bytes=0.5625, peak=4e15, plateau=0.5)
    casts = (32 * 448 * 6.25 + 49_152 * 5.125) / 1.8e12
    assert float(t4.forward[0] - t16.forward[0]) == pytest.approx(gemm4 - gemm16 + casts, rel=1e-9)
    # the backward's output gradients: 32 tokens x 576 elements x 6.25 bytes on top of its GEMMs
    bwd_gemm16, bwd_gemm4 = dgrad16 + wgrad16, dgrad4 + wgrad4
    assert float(t4.backward[0] - t16.backward[0]) == pytest.approx(
        bwd_gemm4 - bwd_gemm16 + 32 * 576 * 6.25 / 1.8e12, rel=1e-9)


def test_nvfp4_keeps_the_gemm_inputs_in_nvfp4():
    # tiny GPT, tp 1, flash attention: the saved GEMM inputs (the two post-norm inputs, 2h = 128, and fc2's
    # input, f = 256: 384 elements per token) take 0.5 + 1/16 bytes each instead of 2: 384 x 1.4375 = 552 bytes
    # less per token; in fp8 they take 1 byte: 384 less.
    bf16 = layer_activation_bytes_per_token(tiny(), lay(), moe_layer=False).stored
    fp8 = layer_activation_bytes_per_token(tiny(), lay(dtype="fp8"), moe_layer=False).stored
    nv = layer_activation_bytes_per_token(tiny(), fp4(), moe_layer=False).stored
    assert ((bf16 - fp8).tolist(), (bf16 - nv).tolist()) == ([384], [552])


def test_nvfp4_weights_take_half_a_byte_and_their_scales():
    params = dict(zero=1, dp=2, global_batch=2, seq_len=32, fp8_param_gather=True)
    assert layer_weight_bytes(fp4(**params)).tolist() == [0.5625]
    assert layer_weight_bytes(Layout(dtype="fp8", **params).to_arrays()).tolist() == [1.0]
    assert layer_weight_bytes(fp4(zero=1, dp=2, global_batch=2, seq_len=32)).tolist() == [2.0]


@pytest.mark.parametrize(("profile", "why"), [
    ("h100-sxm", "has no fp4 peak"),  # Hopper: no fp4 tensor cores
    ("a100-80gb", "has no fp4 peak"),
])
def test_a_chip_without_fp4_is_refused(profile, why):
    with pytest.raises(PlannerError, match=why):
        check_dtype(load_hardware(profile).spec, "fp4")


def test_a_profile_without_an_nvfp4_gemm_measurement_is_refused():
    bare = round_hw({"bf16": 1e15, "fp8": 2e15, "fp4": 4e15})  # a peak, no efficiency.matmul_fp4
    with pytest.raises(PlannerError, match="measures no NVFP4 GEMM"):
        check_dtype(bare, "fp4")


@pytest.mark.parametrize("profile", ["b200", "gb200-nvl72", "b300", "gb300-nvl72"])
def test_every_blackwell_profile_trains_in_nvfp4_faster_than_in_mxfp8(profile):
    # Llama 3.1 70B, tp 2 pp 4 v 5 on 64 GPUs (Megatron-Bridge's GB200 layout): NVFP4 is faster than MXFP8 (its GEMMs
    # at a plateau of a peak two to three times fp8's) but by far less than the peaks say (the quantization and the
    # 16-bit attention, LM head and element-wise kernels stay)
    hw, model = load_hardware(profile).spec, load_model("llama-3.1-70b").spec
    base = dict(tp=2, pp=4, interleave=5, global_batch=256, seq_len=8192, zero=1, sequence_parallel=True,
                fp8_param_gather=True)
    mx = estimate(model, hw, resolve_layout(model, 64, dtype="fp8", fp8_recipe="mxfp8", **base)).scalar("step_seconds")
    nv = estimate(model, hw, resolve_layout(model, 64, dtype="fp4", **base)).scalar("step_seconds")
    peaks = hw.accelerator.peak_flops_per_s
    assert 1.0 < mx / nv < peaks["fp4"] / peaks["fp8"]


def test_only_engines_with_transformer_engines_nvfp4_run_it():
    model = load_model("llama-3.1-8b").spec
    assert resolve_layout(model, 8, dtype="fp4", global_batch=8, seq_len=4096).dtype == "fp4"
    with pytest.raises(PlannerError, match="engine torchtitan cannot run dtype fp4"):
        resolve_layout(model, 8, dtype="fp4", global_batch=8, seq_len=4096, engine="torchtitan")


MEGATRON = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 --bf16 "
            "--micro-batch-size 1 --global-batch-size 8 ")


def megatron(extra: str, gpus: int = 8):
    return import_megatron(split_launch_text(MEGATRON + extra, "t"), gpus=gpus, given={}, model=None, source="t")


def test_megatron_reads_and_writes_nvfp4():
    imp = megatron("--fp4-format e2m1 --fp4-param-gather --use-distributed-optimizer")
    assert (imp.fields["dtype"], imp.fields["fp8_param_gather"]) == ("fp4", True)
    layout = resolve_layout(imp.model, 8, **imp.fields)
    flags = [" ".join(f) for f in layout_flags(imp.model, layout)]
    assert {"--fp4-format e2m1", "--fp4-recipe nvfp4", "--fp4-param-gather"} <= set(flags)
    assert not any(f.startswith("--fp8") for f in flags)
    again = megatron(" ".join(f for f in flags if f.startswith(("--fp4", "--use-distributed"))))
    assert (again.fields["dtype"], again.fields["fp8_param_gather"]) == ("fp4", True)


@pytest.mark.parametrize(("extra", "why"), [
    ("--fp4-format e2m1 --fp8-format hybrid", "--fp4-format and --fp8-format are both set"),
    ("--fp4-format e2m1 --fp4-recipe custom", "--fp4-recipe custom: planner models NVFP4 training"),
    ("--fp4-format e3m0", "--fp4-format e3m0: Megatron-LM takes e2m1"),
    ("--fp4-param-gather --use-distributed-optimizer", "--fp4-param-gather keeps NVFP4 weights"),
])
def test_megatron_nvfp4_flags_it_cannot_read_are_one_error(extra, why):
    with pytest.raises(PlannerError, match=why):
        megatron(extra)


def test_megatron_fp4_param_gather_without_sharded_optimizer_is_read_as_off():
    imp = megatron("--fp4-format e2m1 --fp4-param-gather")
    assert imp.fields["dtype"] == "fp4" and not imp.fields.get("fp8_param_gather", False)
    assert any("--fp4-param-gather without" in w for w in imp.warnings)


def test_megatron_bridge_reads_and_writes_the_nvfp4_recipe():
    text = ("model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, ffn_hidden_size: 256, seq_length: 128, "
            "vocab_size: 1000}\ntrain: {global_batch_size: 8, micro_batch_size: 1}\n"
            "mixed_precision: bf16_with_nvfp4_mixed\n")
    data = parse_bridge_text(text, "run.yaml")
    tokens, _ = bridge_tokens(data, "run.yaml")
    imp = import_megatron(tokens, gpus=8, given={}, model=None, source="run.yaml")
    # the recipe's fp4 e2m1 / nvfp4 with its weights kept in NVFP4 (the base recipe's distributed optimizer)
    assert (imp.fields["dtype"], imp.fields["fp8_param_gather"]) == ("fp4", True)
    layout = resolve_layout(imp.model, 8, **imp.fields)
    written = override(imp.model, layout)
    assert written["mixed_precision"] == "bf16_with_nvfp4_mixed"
    assert yaml.safe_load(yaml.safe_dump(written))["mixed_precision"] == "bf16_with_nvfp4_mixed"


def test_cli_estimate_and_search_take_fp4(run_cli):
    args = ("--model", "llama-3.1-8b", "--hardware", "b200", "--gpus", "8", "--global-batch", "64",
            "--seq-len", "4096", "--dtype", "fp4")
    ok = run_cli("estimate", *args, "--format", "json")
    assert ok.exit_code == 0, ok.output
    assert '"dtype": "fp4"' in ok.output
    hopper = run_cli("search", *[a if a != "b200" else "h100-sxm" for a in args])
    assert hopper.exit_code == 2 and "has no fp4 peak" in hopper.output
