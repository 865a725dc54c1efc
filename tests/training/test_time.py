"""Step time: GEMMs on the efficiency curve, memory-bound kernels, pipeline sends, DP traffic, optimizer,
and how evaluate() assembles them.

A round-number profile makes the arithmetic checkable by hand: 1 PFLOP/s bf16 (2 fp8), matmul plateau
0.8 (fp8 0.7) and the fixed GEMM cost of 7.5 us, so one bf16 GEMM of x FLOP takes (x / 1e15 + 7.5e-6) / 0.8 s; HBM 2 TB/s at 90% =
1.8 TB/s; NVLink 400 GB/s at 50% = 200 GB/s, alpha 3 us. Tiny GPT: L = 2, h = 64, a = 4, f = 256, V = 100,
LayerNorm, GeLU, no biases, dropout, rotary.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny, tiny_gemm_passes  # noqa: E402

from planner.physics.elementwise import elementwise_bytes_per_token
from planner.physics.kernels import (
    GEMM_FIXED_SECONDS,
    attention_efficiency,
    fp8_cast_seconds,
    gemm_peak_flops,
    matmul_seconds,
    memory_seconds,
    peak_16bit_flops,
)
from planner.specs.layout import Layout
from planner.training.estimate import evaluate
from planner.training.memory import stage_params
from planner.training.time import (
    attention_core_seconds,
    fp8_cast_elements_per_token,
    layer_time,
    optimizer_seconds,
    softmax_bytes_per_token,
    stage_time,
)

HW = round_hw()


PSI = 111_744  # tiny GPT's parameters, counted by hand in test_memory.py


# Kernels ------------------------------------------------------------------------------------------
def test_matmul_on_the_saturating_curve():
    # (x / peak + 7.5 us) / 0.8: x = 7.5e9 at 1e15 -> (7.5e-6 + 7.5e-6)/0.8 = 1.875e-5 s (half the plateau:
    # efficiency 0.4); x = 6.75e10 -> (6.75e-5 + 7.5e-6)/0.8 = 9.375e-5 s (efficiency 0.72); no work, no time.
    # fp8: its own peak and plateau, (7.5e9 / 2e15 + 7.5e-6) / 0.7 = 1.125e-5 / 0.7 s.
    got = matmul_seconds(HW, np.array([7.5e9, 6.75e10, 0.0]), 1e15)
    assert got.tolist() == pytest.approx([1.875e-5, 9.375e-5, 0.0])
    assert float(matmul_seconds(HW, 7.5e9, 2e15, 0.7)) == pytest.approx(1.125e-5 / 0.7)
    assert GEMM_FIXED_SECONDS == 7.5e-6


def test_memory_bound_kernels_at_achievable_bandwidth():
    # 1.8e9 bytes at 2e12 x 0.9 = 1.8e12 B/s: 1 ms.
    assert float(memory_seconds(HW, 1.8e9)) == pytest.approx(1e-3)


def test_gemm_peak_follows_the_dtype():
    # fp8 GEMMs run at the fp8 peak (2 PFLOP/s), bf16 at 1; a chip with only fp16 (V100) uses that for 16-bit.
    peaks = gemm_peak_flops(HW, Layout(global_batch=1, seq_len=8, dtype="fp8").to_arrays())
    assert peaks.tolist() == [2e15]
    assert gemm_peak_flops(HW, lay()).tolist() == [1e15]
    assert peak_16bit_flops(round_hw({"fp16": 125e12})) == 125e12


def test_elementwise_traffic_per_token():
    # Per token, one layer, tp 1 (h = 64, f = 256, rotary on Q and K, each 64 wide):
    #   2 LayerNorms, read 2h + write 2h each:               8h = 512
    #   2 residual adds, read 4h + write 2h + 1-byte mask h: 14h = 896
    #   GeLU, read 2f + write 2f:                            4f = 1,024
    #   rotary, read + write Q and K: 2 x 2 x (64 + 64)         = 512
    #   total 2,944 bytes
    m, a = tiny(), lay()
    got = elementwise_bytes_per_token(m, a.tp, moe_layer=False, dropout=m.dropout, sequence_parallel=a.sequence_parallel)
    assert got.tolist() == [2_944]


def test_qk_norms_read_and_write_q_and_k_once_more():
    # tiny with q/k norms (Qwen3-style): the two norms read and write Q and K like the rotary does,
    # 2 x 2 x (64 + 64) = 512 more bytes per token than the 2,944 above; under tp 2 both halve (Q and K split by
    # head; tiny's 4 heads are all K/V heads): 2 x 2 x (32 + 32) = 256.
    m, a = tiny(qk_norm=True), lay()
    got = elementwise_bytes_per_token(m, a.tp, moe_layer=False, dropout=m.dropout, sequence_parallel=a.sequence_parallel)
    assert got.tolist() == [2_944 + 512]
    t2 = lay(tp=2)
    with_norms = elementwise_bytes_per_token(m, t2.tp, moe_layer=False, dropout=m.dropout, sequence_parallel=False)
    without = elementwise_bytes_per_token(tiny(), t2.tp, moe_layer=False, dropout=m.dropout, sequence_parallel=False)
    assert (with_norms - without).tolist() == [256]


def test_parallel_block_adds_both_branches_in_one_pass():
    # GPT-J style (one LayerNorm, attention and MLP in parallel): the residual add reads x, the attention
    # output and the MLP output (3 x 2h) and writes 2h, plus two 1-byte masks: 8h + 2h = 640 instead of 896;
    # one norm 4h = 256 instead of 512. Total 2,944 - 256 - 256 = 2,432.
    model = tiny(parallel_attention_mlp=True, norms_per_layer=1)
    a = lay()
    got = elementwise_bytes_per_token(model, a.tp, moe_layer=False, dropout=model.dropout,
                                      sequence_parallel=a.sequence_parallel)
    assert got.tolist() == [2_432]


def test_unfused_softmax_traffic_per_token():
    # a/t x s score elements per token, 4 bytes (softmax read + write) + 5 (dropout read, write, mask):
    # 4 x 32 x 9 = 1,152.
    assert softmax_bytes_per_token(tiny(), lay()).tolist() == [1_152]


def test_one_tiny_layer_forward_and_backward():
    # b s = M = 32 tokens, tp 1, flash. The GEMMs (k inputs, n outputs): QKV (64, 192), out (64, 64), fc1 (64, 256),
    # fc2 (256, 64). At 32 tokens each is memory-bound: QKV's 786,432 FLOP take 786,432e-15/0.8 = 9.8e-10 s of math
    # but 2(Mk + kn + Mn) = 2(2,048 + 12,288 + 6,144) = 40,960 bytes, 2.28e-8 s at 1.8e12 B/s (out 16,384 bytes,
    # fc1 and fc2 53,248 each, likewise above their math). So the four take 163,840 bytes / 1.8e12 = 9.1022222e-8 s
    # plus four fixed costs of 7.5e-6/0.8: 3.75910222e-5 s. In each backward GEMM the traffic is the same
    # 2(Mk + kn + Mn) (input gradient: read M x n and k x n, write M x k; weight gradient: read M x k and M x n, write
    # k x n), so the backward's GEMMs take twice the forward's.
    # Core: 2 x 32 x 32 x (64 + 64) = 262,144 FLOP, half of it skipped by the causal mask (131,072), at the
    # attention curve: plateau 0.5 x head-dim factor (16/48)/(128/160) = 0.41667 x 32/(32 + 550) = 0.0114548
    # -> 1.14425856e-8 s. Element-wise: 32 x 2,944 bytes / 1.8e12 = 5.233778e-8 s.
    # Forward 3.75910222e-5 + 1.14425856e-8 + 5.233778e-8 = 3.76548026e-5.
    # Backward: GEMMs x 2, flash core x 2.5, element-wise x 2 = 7.51820444e-5 + 2.8606464e-8 + 1.0467556e-7.
    t = layer_time(tiny(), HW, lay(), moe_layer=False)
    assert float(t.forward[0]) == pytest.approx(3.76548026e-5, rel=1e-7)
    assert float(t.backward[0]) == pytest.approx(7.51820444e-5 + 2.8606464e-8 + 1.0467556e-7, rel=1e-7)
    assert float(t.recompute[0]) == 0.0


def test_sliding_window_layers_skip_attention_work_outside_the_window():
    # tiny (2 layers, s = 32) with an 8-token window on one layer: that layer computes 8*9/2 + 24*8 = 228 of
    # the 32*33/2 = 528 causal pairs. The full layer keeps its half of the core, 0.5 x 1.14425856e-8 s forward
    # (test above), at the curve for a causal block of 32 keys; the windowed layer's 0.5 x 228/528 of it runs at
    # the curve for a causal block of 2 W = 16 keys: efficiency ratio (32/582) / (16/566) = 18,112 / 9,312, so
    # it takes 0.5 x 228/528 x 18,112/9,312 = 0.4199580 of the full core, and the saving is 0.0800420 of it.
    full = layer_time(tiny(), HW, lay(), moe_layer=False)
    windowed = layer_time(tiny(sliding_window_tokens=8, sliding_window_layers=1), HW, lay(), moe_layer=False)
    saved = (1 - 0.5 - 0.5 * 228 / 528 * 18112 / 9312) * 1.14425856e-8
    assert float(full.forward[0] - windowed.forward[0]) == pytest.approx(saved, rel=1e-6)
    assert float(full.backward[0] - windowed.backward[0]) == pytest.approx(2.5 * saved, rel=1e-6)
    # The unfused path computes and masks the full scores: no saving.
    unfused = lay(flash_attention=False)
    assert float(layer_time(tiny(sliding_window_tokens=8, sliding_window_layers=1), HW, unfused,
                            moe_layer=False).forward[0]) == float(layer_time(tiny(), HW, unfused, moe_layer=False).forward[0])


def test_a_sliding_window_layer_runs_at_the_curve_of_a_causal_block_of_twice_its_window():
    # Every layer windowed (W = 64) at s = 256 against no window at s = 128 = 2 W, the same tokens per micro-batch:
    # the windowed core does 256 tokens x (keys kept) at the efficiency of a 128-key causal block, so per kept
    # query-key pair it costs exactly what the 128-token causal core costs per pair. Pairs per layer as the
    # flash path counts them: s^2/2 x causal_pairs(s, W)/causal_pairs(s) and s^2/2.
    from planner.physics.kernels import causal_pairs

    model = tiny(sliding_window_tokens=64, sliding_window_layers=2)
    long = attention_core_seconds(model, HW, lay(seq_len=256, micro_batch=1))[0][0]
    short = attention_core_seconds(tiny(), HW, lay(seq_len=128, micro_batch=2))[0][0]
    kept = 256 * 256 / 2 * float(causal_pairs(np.array(256.0), 64) / causal_pairs(np.array(256.0)))
    assert float(long) / kept == pytest.approx(float(short) / (2 * 128 * 128 / 2), rel=1e-12)
    # and below the full causal rate at its own length: more time per pair than the 256-token causal core
    full = attention_core_seconds(tiny(), HW, lay(seq_len=256, micro_batch=1))[0][0]
    assert float(long) / kept > float(full) / (256 * 256 / 2)


def test_full_recompute_repeats_the_forward():
    t = layer_time(tiny(), HW, lay(recompute="full"), moe_layer=False)
    assert float(t.recompute[0]) == pytest.approx(float(t.forward[0]))


def test_optimizer_streams_its_states():
    # Adam, bf16 gradients: read and write 12 bytes of states (24), read the 2-byte gradient, write the
    # 2-byte weight: 28 bytes per parameter. 111,744 x 28 = 3,128,832 bytes / 1.8e12 = 1.73824e-6 s.
    # ZeRO-1 on dp 4: each rank updates a quarter: 4.3456e-7 s.
    z = np.zeros(1, dtype=np.int64)
    a = lay()
    assert optimizer_seconds(HW, a, stage_params(tiny(), a, z)).tolist() == pytest.approx([1.73824e-6])
    a = lay(dp=4, zero=1)
    assert optimizer_seconds(HW, a, stage_params(tiny(), a, z)).tolist() == pytest.approx([4.3456e-7])


# The step -----------------------------------------------------------------------------------------
def test_dp_gradient_all_reduce_without_overlap():
    # dp 2 in one node, ZeRO 0, reduction after backward: all-reduce of 111,744 x 2 = 223,488 bytes, under
    # the 256 KiB one-shot limit: 3e-6 + 223,488/200e9 = 4.11744e-6 s (the ring would take 7.11744e-6).
    r = evaluate(tiny(), HW, lay(dp=2, overlap_grad_reduce=False))
    assert r.dp_comm_seconds.tolist() == pytest.approx([4.11744e-6])


def test_zero1_moves_the_same_volume_as_a_ring_all_reduce():
    # Reduce-scatter of the gradients + all-gather of the weights: 2 x (1/2 x 223,488/200e9 + 3e-6) = 7.11744e-6,
    # the volume and steps of a ring all-reduce.
    r = evaluate(tiny(), HW, lay(dp=2, zero=1, overlap_grad_reduce=False))
    assert r.dp_comm_seconds.tolist() == pytest.approx([7.11744e-6])


def test_dp_traffic_hides_behind_the_backward_with_overlap():
    # 7.1 us of reduction against a last backward of two layers (2 x 10.1 us): nothing exposed.
    r = evaluate(tiny(), HW, lay(dp=2, overlap_grad_reduce=True))
    assert r.dp_comm_seconds.tolist() == [0.0]


def test_pipeline_sends():
    # pp 2 (neighbouring stages 1 rank apart, one node): per micro-batch one activation forward and one
    # gradient backward of b s h x 2 = 4,096 bytes: 2 x (3e-6 + 4,096/200e9) = 6.04096e-6; m = 4 -> 2.416384e-5.
    r = evaluate(tiny(), HW, lay(pp=2, global_batch=4))
    assert r.pp_comm_seconds.tolist() == pytest.approx([2.416384e-5])


def test_no_pipeline_no_sends_no_bubble():
    r = evaluate(tiny(), HW, lay(global_batch=4))
    assert r.pp_comm_seconds.tolist() == [0.0]
    assert r.bubble_seconds.tolist() == [0.0]


def test_bubble_is_p_minus_1_over_v_m_of_the_pipelined_work():
    # Narayanan et al. 2021: the bubble is (p - 1)/(v m) of the time the slowest stage spends on its m
    # micro-batches (compute and the exposed per-micro-batch communication). p = 4, v = 2, m = 8: 3/16.
    model = tiny(num_layers=8)
    r = evaluate(model, HW, lay(pp=4, interleave=2, global_batch=8))
    pipelined = (r.compute_seconds + r.tp_comm_seconds + r.cp_comm_seconds + r.ep_comm_seconds + r.pp_comm_seconds
                 + r.host_seconds)
    assert r.bubble_seconds.tolist() == pytest.approx((3 / 16 * pipelined).tolist())


def test_step_is_the_sum_of_its_parts_and_throughput_follows():
    model = tiny(num_layers=4)
    a = lay(tp=2, pp=2, dp=2, zero=1, global_batch=8, seq_len=32)
    r = evaluate(model, HW, a)
    step = r.compute_seconds + r.communication_seconds + r.host_seconds + r.bubble_seconds + r.optimizer_seconds
    assert r.step_seconds.tolist() == pytest.approx(step.tolist(), rel=1e-12)
    parts = r.tp_comm_seconds + r.cp_comm_seconds + r.ep_comm_seconds + r.pp_comm_seconds + r.dp_comm_seconds
    assert r.communication_seconds.tolist() == pytest.approx(parts.tolist(), rel=1e-12)
    # 8 sequences x 32 tokens per step; MFU = model FLOP / step / 8 GPUs / 1e15.
    assert r.tokens_per_second.tolist() == pytest.approx((256 / r.step_seconds).tolist())
    assert r.mfu.tolist() == pytest.approx((r.model_flop / r.step_seconds / 8 / 1e15).tolist())
    assert r.model_tflops_per_gpu.tolist() == pytest.approx((r.model_flop / r.step_seconds / 8 / 1e12).tolist())
    assert r.hardware_tflops_per_gpu.tolist() == pytest.approx((r.hardware_flop / r.step_seconds / 8 / 1e12).tolist())


def test_optimizer_time_includes_the_fixed_step_overhead():
    # pp 1: the optimizer stream (1.73824e-6 s, above) plus the calibrated per-step overhead.
    r = evaluate(tiny(), HW, lay())
    assert r.optimizer_seconds.tolist() == pytest.approx([1.73824e-6 + HW.efficiency.step_overhead_seconds])


def test_fp8_speeds_up_large_gemms_and_slows_small_ones():
    # A 4,096-wide layer on 8,192 tokens, 4 micro-batches a step: fp8 GEMMs at 2 PFLOP/s x 0.7 beat bf16 at
    # 1 x 0.8 even after the casts (the weight casts, 6 bytes per weight, are shared by the micro-batches).
    # The tiny GEMMs of a 512-wide layer on 1,024 tokens are dominated by the fixed cost, which the lower
    # fp8 plateau and the casts make longer (torchao measures 0.80x at 1,024 x 2,048 x 1,024).
    big = tiny(hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384)
    a16 = lay(seq_len=8192, micro_batch=1, global_batch=4)
    a8 = Layout(seq_len=8192, micro_batch=1, global_batch=4, dtype="fp8").to_arrays()
    assert float(layer_time(big, HW, a8, moe_layer=False).forward[0]) < float(layer_time(big, HW, a16, moe_layer=False).forward[0])
    small = tiny(hidden_size=512, ffn_hidden_size=2048)
    a16 = lay(seq_len=128, micro_batch=8, global_batch=8)
    a8 = Layout(seq_len=128, micro_batch=8, global_batch=8, dtype="fp8").to_arrays()
    assert float(layer_time(small, HW, a8, moe_layer=False).forward[0]) > float(layer_time(small, HW, a16, moe_layer=False).forward[0])


def test_fp8_cast_traffic_per_token():
    # tiny GPT (h 64, q = o = 64, K + V = 128, f 256, standard MLP), tp 1:
    # forward inputs: QKV h 64 + out-proj 64 + fc1 h 64 + fc2 f 256 = 448;
    # backward output gradients: QKV 64 + 128 = 192, out-proj h 64, fc1 f 256, fc2 h 64 = 576.
    fwd, bwd = fp8_cast_elements_per_token(tiny(), lay(), moe_layer=False)
    assert (float(np.asarray(fwd).ravel()[0]), float(np.asarray(bwd).ravel()[0])) == (448.0, 576.0)
    # 6 bytes each at 1.8e12 B/s.
    assert float(fp8_cast_seconds(HW, 1.8e12 / 6)) == pytest.approx(1.0)


def test_delayed_scaling_saves_the_amax_read_of_every_cast():
    # The same fp8 layer under delayed and tensorwise scaling differs only in its casts, by the amax pass's 2 bytes
    # per quantized element at 1.8e12 B/s: forward, the 32 tokens x 448 inputs and the layer's 49,152 weight
    # elements (QKV 12,288 + out 4,096 + fc1 16,384 + fc2 16,384; one micro-batch per step, so not amortised);
    # backward, 32 x 576 output gradients.
    model = tiny()
    current = Layout(global_batch=1, seq_len=32, dtype="fp8").to_arrays()
    delayed = Layout(global_batch=1, seq_len=32, dtype="fp8", fp8_recipe="delayed").to_arrays()
    t_cur, t_del = layer_time(model, HW, current, moe_layer=False), layer_time(model, HW, delayed, moe_layer=False)
    assert float(t_cur.forward[0] - t_del.forward[0]) == pytest.approx((32 * 448 + 49_152) * 2 / 1.8e12, rel=1e-9)
    assert float(t_cur.backward[0] - t_del.backward[0]) == pytest.approx(32 * 576 * 2 / 1.8e12, rel=1e-9)
    with pytest.raises(ValueError, match="fp8_recipe delayed applies only with dtype fp8"):
        Layout(global_batch=1, seq_len=32, fp8_recipe="delayed")


def test_fp8_forward_adds_exactly_the_casts_to_the_gemm_change():
    # Same layer in fp8 and bf16: the forward differs by the GEMM time change plus the input casts
    # (tokens x 448 x 6 bytes) and the weight casts amortised over the micro-batches (weights x 6 bytes / m).
    model = tiny()
    a16, a8 = lay(), Layout(global_batch=1, seq_len=32, dtype="fp8").to_arrays()
    t16, t8 = layer_time(model, HW, a16, moe_layer=False), layer_time(model, HW, a8, moe_layer=False)
    gemm16 = tiny_gemm_passes(operand_bytes=2, peak=1e15, plateau=0.8)[0]
    gemm8 = tiny_gemm_passes(operand_bytes=1, peak=2e15, plateau=0.7)[0]
    casts = (32 * 448 * 6 + 49_152 * 6) / 1.8e12
    assert float(t8.forward[0] - t16.forward[0]) == pytest.approx(gemm8 - gemm16 + casts, rel=1e-9)



def test_the_lm_head_and_attention_core_stay_16_bit_under_fp8():
    model = tiny(vocab_size=50_000)
    a16 = lay(seq_len=512, global_batch=1)
    a8 = Layout(global_batch=1, seq_len=512, dtype="fp8").to_arrays()
    assert attention_core_seconds(model, HW, a8)[0].tolist() == attention_core_seconds(model, HW, a16)[0].tolist()
    last = np.zeros(1, dtype=np.int64)
    head16 = stage_time(model, HW, a16, last, stage_params(model, a16, last)).compute
    head8 = stage_time(model, HW, a8, last, stage_params(model, a8, last)).compute
    layers16 = 2 * sum(getattr(layer_time(model, HW, a16, moe_layer=False), f) for f in ("forward", "backward"))
    layers8 = 2 * sum(getattr(layer_time(model, HW, a8, moe_layer=False), f) for f in ("forward", "backward"))
    assert float((head8 - layers8)[0]) == pytest.approx(float((head16 - layers16)[0]), rel=1e-12)


# Attention curve and context parallelism ----------------------------------------------------------------------------
def test_attention_efficiency_saturates_with_the_block():
    # plateau 0.5, head dim 128 (factor 1): causal 0.5 x s/(s + 550), full mask 0.5 x s/(s + 200).
    got = attention_efficiency(HW, np.array([550.0, 16384.0]), 128, causal=True)
    assert got.tolist() == pytest.approx([0.25, 0.5 * 16384 / 16934])
    assert float(attention_efficiency(HW, 200.0, 128, causal=False)) == pytest.approx(0.25)
    # head dim 64: (64/96)/(128/160) = 0.8333 of head dim 128; 256 is held at 128's rate.
    ratio = attention_efficiency(HW, 4096.0, 64, causal=True) / attention_efficiency(HW, 4096.0, 128, causal=True)
    assert float(ratio) == pytest.approx(0.8333333, rel=1e-6)
    assert float(attention_efficiency(HW, 4096.0, 256, causal=True)) == float(attention_efficiency(HW, 4096.0, 128, causal=True))


def test_attention_time_per_flop_falls_with_sequence_length():
    # Per token the causal work grows as s, the time a little faster at short s (lower efficiency), so
    # time / s falls towards the plateau as s grows.
    model = tiny(hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384)
    per_s = [float(attention_core_seconds(model, HW, lay(seq_len=s, global_batch=1))[0][0]) / s**2 for s in (1024, 4096, 16384)]
    assert per_s[0] > per_s[1] > per_s[2]
    plateau = 0.5 * 2 * 1 * (4096 + 4096) / 1e15 / 0.5  # causal half of 2 s^2 (q + o) at 0.5 of 1e15, per s^2
    assert per_s[2] == pytest.approx(plateau * (16384 + 550) / 16384, rel=1e-9)


def test_ring_context_parallelism_pays_for_small_blocks_and_launches():
    # cp 4 on 8k tokens: each rank does a quarter of the causal work, but the off-diagonal steps run
    # unmasked on blocks of 1,024 and 2,048 keys, the diagonal on 2,048, plus 3 extra steps, each launching
    # (4 kernels x 7.5 us) and the merge traffic: more than a quarter of the cp 1 time.
    model = tiny(hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384)
    one = attention_core_seconds(model, HW, lay(seq_len=8192, global_batch=1))
    four = attention_core_seconds(model, HW, lay(seq_len=8192, global_batch=1, cp=4))
    assert float(four[0][0]) > float(one[0][0]) / 4
    work = 0.5 * 2 * 2048 * 8192 * 8192 / 1e15  # causal work on the rank, seconds at peak
    eff = lambda s, c: float(attention_efficiency(HW, s, 128, causal=c))  # noqa: E731
    kernels = work * (0.25 / eff(2048, True) + 0.75 * (0.5 / eff(1024, False) + 0.5 / eff(2048, False)))
    merge = 3 * (3e-5 + 2048 * 4096 * 10 / 1.8e12)
    assert float(four[0][0]) == pytest.approx(kernels + merge, rel=1e-9)


def test_ring_exchange_is_exposed_per_step_when_blocks_are_small():
    # The same K/V bytes per step; short sequences give each step too little attention to hide behind.
    model = tiny(hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384, num_kv_heads=32)
    short = layer_time(model, HW, lay(seq_len=2048, global_batch=1, cp=8, dp=1), moe_layer=False)
    long = layer_time(model, HW, lay(seq_len=65536, global_batch=1, cp=8, dp=1), moe_layer=False)
    assert float(short.cp_comm[0]) > 0.0
    assert float(long.cp_comm[0]) == 0.0


def test_dualpipe_needs_twice_as_many_micro_batches_as_ranks():
    # deepseek-ai/DualPipe dualpipe.py step() asserts num_chunks >= 2 x num_ranks
    from planner.errors import PlannerError
    from planner.training.rules import check_layout

    model = tiny(num_layers=8)
    check_layout(model, Layout(pp=4, global_batch=8, seq_len=32, schedule="dualpipe"), 4)
    with pytest.raises(PlannerError, match="at least 2 x pp"):
        check_layout(model, Layout(pp=4, global_batch=4, seq_len=32, schedule="dualpipe"), 4)
