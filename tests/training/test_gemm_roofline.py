"""Layer GEMMs on the roofline, as the engine's model code runs them, and torchao's rowwise float8 recipe.

round_hw: 1 PFLOP/s bf16 (2 fp8) at plateaus 0.8 (fp8 0.7), HBM at 1.8e12 B/s, the fixed GEMM cost 7.5 us.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny  # noqa: E402

from planner.errors import PlannerError
from planner.physics.kernels import (
    FP8_ROWWISE_FORWARD_GEMM_EFFICIENCY,
    fp8_cast_bytes_per_element,
    gemm_roofline_seconds,
    matmul_seconds,
)
from planner.physics.shapes import gemm_kernels, rank_gemms
from planner.specs.engine import engine_profile
from planner.specs.layout import Fp8RecipeCode, Layout
from planner.training.memory import saved_gemm_input_bytes
from planner.training.rules import resolve_layout
from planner.training.time import dense_gemm_seconds, layer_time

HW = round_hw()


def test_a_compute_bound_gemm_is_matmul_seconds_and_a_thin_one_reads_its_operands():
    # 8,192 x 8,192 x 8,192 in bf16: 1.0995e12 FLOP take 1.374e-3 s at 0.8 PFLOP/s; its 3 x 134 MB, 0.22 ms of
    # traffic, hide under them: exactly matmul_seconds.
    big = 2.0 * 8192**3
    moved = 2.0 * 3 * 8192**2
    assert float(gemm_roofline_seconds(HW, big, moved, 1e15, 0.8)) == float(matmul_seconds(HW, big, 1e15, 0.8))
    # 131,072 tokens x 8,192 in x 128 out: 2.75e11 FLOP = 3.436e-4 s of math, but it reads the 2.15 GB input:
    # 2 (M k + k n) + 2 M n = 2,183,135,232 bytes, 1.2129e-3 s at 1.8e12, plus 7.5e-6 / 0.8.
    m, k, n = 131_072, 8192, 128
    thin = gemm_roofline_seconds(HW, 2.0 * m * k * n, 2.0 * (m * k + k * n) + 2.0 * m * n, 1e15, 0.8)
    assert float(thin) == pytest.approx(2_183_135_232 / 1.8e12 + 7.5e-6 / 0.8, rel=1e-12)
    assert float(gemm_roofline_seconds(HW, 0.0, 1e9, 1e15, 0.8)) == 0.0  # no GEMM, no time


def test_engines_that_keep_separate_projections_run_q_k_v_and_gate_up_as_gemms_of_their_own():
    # Llama 3 8B shapes at tp 8 (h 4,096, 32 heads of 128, 8 KV heads, gated f 14,336): torchtitan's wq, wk, wv read
    # the hidden state into 4,096 / 8 = 512, and one KV head of 128 each; w1 and w3 14,336 / 8 = 1,792 each.
    # Megatron-Core's linear_qkv and linear_fc1 are one GEMM each of the summed width.
    llama = tiny(hidden_size=4096, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336, mlp_kind="gated")
    tp = np.array([8])
    gemms = dict(((g.name, (g, e)) for g, e in rank_gemms(llama, tp, moe_layer=False)))
    qkv, up = gemms["qkv"], gemms["mlp_up"]
    split = gemm_kernels(llama, *qkv, tp, separate=True)
    assert [(p.part, float(p.k[0]), float(p.n[0])) for p in split] == [
        ("q", 4096.0, 512.0), ("k", 4096.0, 128.0), ("v", 4096.0, 128.0)]
    fused = gemm_kernels(llama, *qkv, tp, separate=False)
    assert [(p.part, float(p.k[0]), float(p.n[0])) for p in fused] == [("qkv", 4096.0, 768.0)]
    assert [(p.part, float(p.n[0])) for p in gemm_kernels(llama, *up, tp, separate=True)] == [
        ("gate", 1792.0), ("up", 1792.0)]
    out = gemm_kernels(llama, *gemms["attn_out"], tp, separate=True)  # row-parallel: the shard in, the hidden out
    assert [(p.part, float(p.k[0]), float(p.n[0])) for p in out] == [("attn_out", 512.0, 4096.0)]
    assert engine_profile("torchtitan").kernels.separate_projections
    assert not engine_profile("megatron").kernels.separate_projections


def test_the_thin_kv_projections_are_memory_bound_and_their_input_gradients_are_summed():
    # tiny (h 64, 4 heads of 16, MHA) at 4,096 tokens, bf16: run separately, Q, K and V are three GEMMs of k 64, n 64
    # (each 2 x 4,096 x 64 x 64 = 33.6 MFLOP, 4.19e-8 s of math; its traffic 2 (M k + k n) + 2 M n = 1,056,768
    # bytes, 5.871e-7 s: memory-bound), fused one GEMM of n 192 (100.7 MFLOP, 1.258e-7 s of math; 2,121,728 bytes,
    # 1.1787e-6 s). The backward also sums the three input gradients of their shared input: read 3 and write 1
    # M x k tensor of 2 bytes, 4 x 2 x 4,096 x 64 = 2,097,152 bytes, 1.1651e-6 s.
    model = tiny()
    a = lay(seq_len=4096)
    g, elements = next((g, e) for g, e in rank_gemms(model, a.tp, moe_layer=False) if g.name == "qkv")
    tokens = np.array([4096.0])
    sep = dense_gemm_seconds(model, HW, a, g, elements, tokens, 1e15, 0.8, separate=True)
    fused = dense_gemm_seconds(model, HW, a, g, elements, tokens, 1e15, 0.8, separate=False)
    fixed = 7.5e-6 / 0.8
    assert float(sep[0][0]) == pytest.approx(3 * (1_056_768 / 1.8e12 + fixed), rel=1e-12)
    assert float(fused[0][0]) == pytest.approx(2_121_728 / 1.8e12 + fixed, rel=1e-12)
    one_dgrad = (2 * (4096 * 64 + 64 * 64) + 2 * 4096 * 64) / 1.8e12 + fixed
    assert float(sep[1][0]) == pytest.approx(3 * one_dgrad + 2_097_152 / 1.8e12, rel=1e-12)


def test_rowwise_casts_every_tensor_along_both_axes():
    # torchao's roofline counts 2 + 1 + 2 and 2 + 1 bytes per input element, 3 + 4 + 3 per weight element, on every
    # chip (a new quantization along the other axis, not a transpose)
    for any_layout in (False, True):
        hw = HW.model_copy(update={"accelerator": HW.accelerator.model_copy(update={"fp8_gemm_any_layout": any_layout})})
        assert float(fp8_cast_bytes_per_element(hw, Fp8RecipeCode.ROWWISE)) == 8.0
        assert float(fp8_cast_bytes_per_element(hw, Fp8RecipeCode.ROWWISE, weight=True)) == 10.0
    rowwise = Layout(global_batch=1, seq_len=32, dtype="fp8", fp8_recipe="rowwise", engine="torchtitan").to_arrays()
    tensorwise = Layout(global_batch=1, seq_len=32, dtype="fp8", engine="torchtitan").to_arrays()
    assert (saved_gemm_input_bytes(rowwise).tolist(), saved_gemm_input_bytes(tensorwise).tolist()) == ([2], [1])


def test_rowwise_forward_gemms_run_slower_and_the_backward_rescales_its_outputs():
    # A compute-bound fp8 GEMM (tiny's fc1 weights at 65,536 tokens, k 64, n 256 is not: take h 4,096, f 16,384 at
    # 8,192 tokens). Forward: the rowwise kernel at FP8_ROWWISE_FORWARD_GEMM_EFFICIENCY of the per-tensor plateau;
    # input gradient: the per-tensor kernel plus a read and write of its 16-bit M x k output (4 bytes); weight
    # gradient likewise with its k x n output.
    model = tiny(hidden_size=4096, num_attention_heads=32, num_kv_heads=32, ffn_hidden_size=16384)
    rw = Layout(global_batch=1, seq_len=8192, dtype="fp8", fp8_recipe="rowwise", engine="torchtitan").to_arrays()
    tw = Layout(global_batch=1, seq_len=8192, dtype="fp8", engine="torchtitan").to_arrays()
    g, elements = next((g, e) for g, e in rank_gemms(model, rw.tp, moe_layer=False) if g.name == "mlp_up")
    tokens = np.array([8192.0])
    got_rw = dense_gemm_seconds(model, HW, rw, g, elements, tokens, 2e15, 0.7, separate=False)
    got_tw = dense_gemm_seconds(model, HW, tw, g, elements, tokens, 2e15, 0.7, separate=False)
    flop = 2 * 8192 * 4096 * 16384
    assert float(got_tw[0][0]) == pytest.approx((flop / 2e15 + 7.5e-6) / 0.7, rel=1e-12)
    assert float(got_rw[0][0]) == pytest.approx((flop / 2e15 + 7.5e-6) / (0.7 * FP8_ROWWISE_FORWARD_GEMM_EFFICIENCY),
                                                rel=1e-12)
    assert float(got_rw[1][0] - got_tw[1][0]) == pytest.approx(4 * 8192 * 4096 / 1.8e12, rel=1e-12)
    assert float(got_rw[2][0] - got_tw[2][0]) == pytest.approx(4 * 4096 * 16384 / 1.8e12, rel=1e-12)


def test_rowwise_tp_gathers_stay_16_bit_where_tensorwise_ones_move_fp8():
    # torchtitan casts its TP all-gathers to fp8 under the tensorwise recipe only: the rowwise layer's TP traffic is
    # the bf16 layer's
    model = tiny()
    common = dict(global_batch=1, seq_len=1024, tp=2, dp=1, sequence_parallel=True, engine="torchtitan")
    engine = engine_profile("torchtitan")

    def tp_comm(**fields: object) -> float:
        return float(layer_time(model, HW, Layout(**common, **fields).to_arrays(), moe_layer=False,
                                engine=engine).tp_comm[0])

    assert tp_comm(dtype="fp8", fp8_recipe="rowwise") == tp_comm(dtype="bf16")
    assert tp_comm(dtype="fp8") < tp_comm(dtype="bf16")


def test_only_torchtitan_runs_the_rowwise_recipe():
    model = tiny()
    resolve_layout(model, 8, global_batch=8, seq_len=64, dtype="fp8", fp8_recipe="rowwise", engine="torchtitan")
    for engine in ("megatron", "automodel", "fsdp", "deepspeed"):
        with pytest.raises(PlannerError, match="rowwise"):
            resolve_layout(model, 8, global_batch=8, seq_len=64, dtype="fp8", fp8_recipe="rowwise", engine=engine)


def test_a_compiled_loss_keeps_four_bytes_per_logit_where_the_eager_one_keeps_twelve():
    # torchtitan, one stage, 8,192 tokens of Llama 3.1 8B's 128,256-entry vocabulary: compiling the loss (its own
    # switch, or with the model) frees (12 - 4) x 8,192 x 128,256 bytes at the last stage's peak; the rest is equal
    from planner.engines.load import load_model
    from planner.training.estimate import estimate

    model = load_model("llama-3.1-8b").spec
    hw = round_hw(memory_bytes=200 * 10**9)

    def held(**fields: object) -> float:  # activations held at the peak (full recompute: compile changes no other)
        layout = resolve_layout(model, 8, zero=3, global_batch=8, seq_len=8192, engine="torchtitan",
                                recompute="full", **fields)
        return estimate(model, hw, layout).scalar("activations_bytes")

    eager, compiled = held(), held(compile_loss=True)
    assert eager - compiled == pytest.approx(8 * 8192 * 128_256, rel=1e-12)
    assert held(compile=True) == held(compile=True, compile_loss=True) == compiled
    assert held(compile=True, compile_loss=False) == eager
    with pytest.raises(PlannerError, match="compile_loss"):
        resolve_layout(model, 8, zero=1, global_batch=8, seq_len=8192, engine="megatron", compile_loss=True)
    arrays = Layout(global_batch=8, seq_len=8192, engine="torchtitan", compile=True).to_arrays()
    assert arrays.compile_loss.tolist() == [True] and arrays.to_layout(0, engine="torchtitan").compile_loss is None


def test_experts_with_few_tokens_each_read_their_whole_weights():
    # 8 local experts of k 4,096, n 1,024 with 16 tokens each, bf16: 8 x 2 x 16 x 4,096 x 1,024 = 1.07e9 FLOP,
    # 1.342e-6 s at 0.8 PFLOP/s; their traffic 8 x (2 (16 x 4,096 + 4,096 x 1,024) + 2 x 16 x 1,024) = 68,419,584
    # bytes, 3.801e-5 s at 1.8e12: memory-bound. Fixed: (7.5 + 7 x 0.75) us / 0.8. Without the bytes, the math alone.
    from planner.physics.kernels import grouped_matmul_seconds

    flop = 2.0 * 16 * 4096 * 1024
    moved = 8 * (2 * (16 * 4096 + 4096 * 1024) + 2 * 16 * 1024)
    fixed = (7.5e-6 + 7 * 0.75e-6) / 0.8
    assert moved == 68_419_584
    assert float(grouped_matmul_seconds(HW, flop, 8, 1e15, 0.8, moved)) == pytest.approx(moved / 1.8e12 + fixed,
                                                                                        rel=1e-12)
    assert float(grouped_matmul_seconds(HW, flop, 8, 1e15, 0.8)) == pytest.approx(8 * flop / 0.8e15 + fixed,
                                                                                rel=1e-12)


def test_op_level_ac_replays_the_forward_all_gathers_in_the_backward():
    # torchtitan's op-level AC saves the reduce-scatters' outputs, not the all-gathers': with sequence parallelism the
    # backward gathers the two layer inputs again. tiny at tp 2, 1,024 tokens of h 64 in bf16: each all-gather moves
    # 131,072 bytes; op AC's TP traffic is no recompute's plus two of them (no fp8 gather in bf16).
    from planner.physics.comm import all_gather_seconds, group_link

    model = tiny()
    engine = engine_profile("torchtitan")
    common = dict(global_batch=1, seq_len=1024, tp=2, dp=1, sequence_parallel=True, engine="torchtitan")

    def tp_comm(recompute: str) -> float:
        return float(layer_time(model, HW, Layout(recompute=recompute, **common).to_arrays(), moe_layer=False,
                                engine=engine).tp_comm[0])

    gather = float(all_gather_seconds(np.array([1024 * 64 * 2.0]), np.array([2]), group_link(HW, np.array([2]), 1))[0])
    assert tp_comm("op") - tp_comm("none") == pytest.approx(2 * gather, rel=1e-12)
