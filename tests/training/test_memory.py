"""Training memory per GPU: parameters per rank, ZeRO model states, Korthikanti activations, buffers, reserve.

Expected values are worked out by hand in the comments from the tiny specs' shapes (and, for the
done-when checks, from the formulas the ZeRO and Korthikanti papers print), never by running the
code under test. Tiny GPT: L = 2, h = 64, a = 4 (d = 16), f = 256 = 4h, V = 100, LayerNorm, GeLU MLP,
no biases, untied, rotary (no position table), dropout masks as in Korthikanti et al. 2022.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, tiny  # noqa: E402

from planner.engines.load import load_hardware, load_model
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate
from planner.training.memory import (
    FRAGMENTATION_FRACTION,
    buffer_bytes,
    layer_activation_bytes_per_token,
    model_state_bytes,
    stage_activation_bytes,
    stage_memory,
    stage_params,
)


def stages(layout_arrays) -> np.ndarray:
    return np.arange(int(layout_arrays.pp[0]))


# By hand, tiny GPT (tp = 1):
#   attention  q, k, v, o: 4 h^2               = 16,384
#   MLP        fc1 + fc2:  2 h f = 8 h^2       = 32,768
#   norms      2 LayerNorms x (weight + bias) 2h =   256
#   one layer                                  = 49,408
#   embedding  V h                             =  6,400
#   head       final LayerNorm 2h + LM head V h = 128 + 6,400 = 6,528
#   total      6,400 + 2 x 49,408 + 6,528       = 111,744
PSI = 111_744
LAYER = 49_408


# Parameters per rank ------------------------------------------------------------------------------
def test_stage_params_one_stage_holds_everything():
    sp = stage_params(tiny(), lay(), np.zeros(1, dtype=np.int64))
    assert sp.dense.tolist() == [PSI]
    assert sp.expert.tolist() == [0]
    assert sp.largest_layer_dense.tolist() == [LAYER]
    assert sp.num_layers.tolist() == [2]


def test_stage_params_tensor_parallel_splits_matrices_not_norms():
    # tp = 2: per layer 16,384/2 + 32,768/2 + 256 (norms replicated) = 24,832;
    # vocabulary-parallel embedding 6,400/2 = 3,200; head 6,400/2 + 128 = 3,328.
    # 3,200 + 2 x 24,832 + 3,328 = 56,192.
    sp = stage_params(tiny(), lay(tp=2), np.zeros(1, dtype=np.int64))
    assert sp.dense.tolist() == [56_192]
    assert sp.largest_layer_dense.tolist() == [24_832]


def test_biases_split_like_their_matrices():
    # With QKV, output and MLP biases (tp = 2): column-parallel biases split, QKV 3h/2 = 96 and fc1 f/2 = 128;
    # row-parallel ones (output projection h, fc2 h) are replicated, 128. Layer: 24,832 + 96 + 128 + 128 = 25,184.
    model = tiny(qkv_bias=True, attention_output_bias=True, mlp_bias=True)
    sp = stage_params(model, lay(tp=2), np.zeros(1, dtype=np.int64))
    assert sp.largest_layer_dense.tolist() == [25_184]
    # tp = 1: every bias once, 3h + h + f + h = 192 + 64 + 256 + 64 = 576 more than the bias-free 49,408.
    assert stage_params(model, lay(), np.zeros(1, dtype=np.int64)).largest_layer_dense.tolist() == [49_984]


def test_stage_params_pipeline_puts_embedding_first_and_head_last():
    # pp = 2, one layer each: stage 0 = 49,408 + 6,400 = 55,808; stage 1 = 49,408 + 6,528 = 55,936.
    a = lay(pp=2)
    assert stage_params(tiny(), a, stages(a)).dense.tolist() == [55_808, 55_936]


def test_tied_embeddings_share_with_one_stage_and_copy_with_two():
    # Tied, pp = 1: no LM head matrix, the head is the final norm only: 111,744 - 6,400 = 105,344.
    # Tied, pp = 2: the last stage keeps its own copy of the word table (Megatron): 49,408 + 128 + 6,400.
    model = tiny(tied_embeddings=True)
    assert stage_params(model, lay(), np.zeros(1, dtype=np.int64)).dense.tolist() == [105_344]
    a = lay(pp=2)
    assert stage_params(model, a, stages(a)).dense.tolist() == [55_808, 55_936]


def test_gqa_kv_heads_replicate_when_tp_exceeds_them():
    # a = 4, 2 KV heads of d = 16 (K and V widths 32). tp = 4 > 2 KV heads: each rank keeps one KV head.
    # Per rank per layer: q h*64/4 = 1,024; k, v 2 * h*32 / 2 = 2,048; o 64*h/4 = 1,024;
    # MLP 32,768/4 = 8,192; norms 256 -> 12,544.
    sp = stage_params(tiny(num_kv_heads=2), lay(tp=4), np.zeros(1, dtype=np.int64))
    assert sp.largest_layer_dense.tolist() == [12_544]


# ZeRO model states -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "zero, weights, grads, optim",
    [
        # 2, 2 and 12 bytes per parameter (mixed-precision Adam), sharded over dp = 4 from stage 3, 2, 1.
        (0, 2 * PSI, 2 * PSI, 12 * PSI),  # 223,488 / 223,488 / 1,340,928
        (1, 2 * PSI, 2 * PSI, 3 * PSI),  # optimizer 12 PSI / 4 = 335,232
        (2, 2 * PSI, PSI // 2, 3 * PSI),  # gradients 2 PSI / 4 = 55,872
        (3, PSI // 2, PSI // 2, 3 * PSI),  # weights 2 PSI / 4 = 55,872
    ],
)
def test_zero_stages_shard_model_states_over_dp(zero, weights, grads, optim):
    a = lay(dp=4, zero=zero)
    sp = stage_params(tiny(), a, np.zeros(1, dtype=np.int64))
    w, g, o = model_state_bytes(a, sp)
    assert (w.tolist(), g.tolist(), o.tolist()) == ([weights], [grads], [optim])


def test_zero_shards_over_dp_times_cp():
    # dp 2 x cp 2 is a sharding group of 4: ZeRO-3 gives 16 PSI / 4 = 446,976 bytes.
    a = lay(dp=2, cp=2, zero=3)
    w, g, o = model_state_bytes(a, stage_params(tiny(), a, np.zeros(1, dtype=np.int64)))
    assert float((w + g + o)[0]) == 4 * PSI


def test_fp32_gradients_and_sgd():
    # fp32 gradients: 4 bytes per parameter = 446,976; SGD with momentum keeps 8 bytes (master + momentum).
    a = lay(grad_dtype="fp32", optimizer="sgd")
    _, g, o = model_state_bytes(a, stage_params(tiny(), a, np.zeros(1, dtype=np.int64)))
    assert g.tolist() == [4 * PSI]
    assert o.tolist() == [8 * PSI]


def test_bitsandbytes_8bit_moments():
    # bitsandbytes' 8-bit AdamW (the Trainer's --optim adamw_bnb_8bit): the fp32 master (4) and two uint8 moments (1 + 1)
    a = lay(optimizer_state_dtype="int8", engine="fsdp")
    _, _, o = model_state_bytes(a, stage_params(tiny(), a, np.zeros(1, dtype=np.int64)))
    assert o.tolist() == [6 * PSI]
    with pytest.raises(ValueError, match="optimizer_state_dtype int8 applies to adam's moments only"):
        Layout(optimizer="sgd", optimizer_state_dtype="int8", global_batch=1, seq_len=32)


def gpt_7p5b() -> ModelSpec:
    # The 7.5B GPT of Narayanan et al. 2021 Table 1 (L 36, h 4096, a 32), the size of ZeRO's Figure 1 example.
    return ModelSpec(name="GPT 7.5B", num_layers=36, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384,
                     mlp_kind="standard", vocab_size=51200, tied_embeddings=True, position_embedding="learned",
                     norm_kind="layernorm", qkv_bias=True, attention_output_bias=True, mlp_bias=True,
                     max_seq_len=2048, dropout=True)


@pytest.mark.parametrize(
    "zero, bytes_per_param",
    [
        # Rajbhandari et al. 2020, Figure 1 (Nd = 64 GPUs, K = 12), in bytes per parameter Psi:
        (0, 16.0),  # (2 + 2 + K) Psi
        (1, 4.0 + 12.0 / 64),  # 2 Psi + 2 Psi + K Psi / Nd
        (2, 2.0 + 14.0 / 64),  # 2 Psi + (2 + K) Psi / Nd
        (3, 16.0 / 64),  # (2 + 2 + K) Psi / Nd
    ],
)
def test_zero_figure_1_on_64_gpus(zero, bytes_per_param):
    # Psi of this 7.5B GPT, by hand: per layer 12 h^2 + 13 h (QKV bias 3h, out bias h, fc1 bias 4h, fc2 bias h,
    # 2 LayerNorms 4h) = 201,326,592 + 53,248 = 201,379,840; x 36 = 7,249,674,240; word table 51,200 h =
    # 209,715,200; positions 2,048 h = 8,388,608; final LayerNorm 2h = 8,192 (tied: no LM head) -> 7,467,786,240.
    psi = 7_467_786_240
    layout = Layout(dp=64, zero=zero, global_batch=64, seq_len=2048, dtype="fp16", grad_dtype="fp16")
    memory = estimate(gpt_7p5b(), load_hardware("a100-80gb").spec, layout).to_json()["memory"]
    states = memory["weights_bytes"] + memory["gradients_bytes"] + memory["optimizer_bytes"]
    assert states == pytest.approx(bytes_per_param * psi, rel=0.01)


# Activations per token of one layer (Korthikanti et al. 2022, Table 2) ---------------------------
# Tiny GPT, s = 32, b = 1, 16-bit activations, 1-byte dropout masks: per token 34h + 5as with no
# parallelism, h = 64 -> 34h = 2,176; a = 4, s = 32 -> 5as = 640.
@pytest.mark.parametrize(
    "fields, expected",
    [
        (dict(), 2_816),  # 34h + 5as = 2,176 + 640
        (dict(tp=2), 1_728),  # 10h + 24h/t + 5as/t = 640 + 768 + 320
        (dict(tp=2, sequence_parallel=True), 1_408),  # (34h + 5as)/t
        (dict(tp=2, sequence_parallel=True, recompute="selective"), 1_088),  # 34h/t
        (dict(tp=2, recompute="selective"), 1_408),  # 10h + 24h/t
        (dict(recompute="full"), 128),  # 2h: the layer input only
        (dict(tp=2, recompute="full"), 128),  # 2h, replicated without SP
        (dict(tp=2, sequence_parallel=True, recompute="full"), 64),  # 2h/t with SP
    ],
)
def test_korthikanti_per_layer_activations_without_flash(fields, expected):
    a = lay(flash_attention=False, **fields)
    assert layer_activation_bytes_per_token(tiny(), a, moe_layer=False).stored.tolist() == pytest.approx([expected])


def test_flash_attention_replaces_scores_by_an_fp32_lse_per_head():
    # Flash: the 5as of scores become 4 bytes (fp32 log-sum-exp) per head per token: 34h + 4a = 2,176 + 16.
    # With tp 2 + SP: (34h + 4a)/2 = 1,096. Selective recompute has nothing left to drop: the same 2,192.
    model = tiny()
    assert layer_activation_bytes_per_token(model, lay(), moe_layer=False).stored.tolist() == [2_192]
    a = lay(tp=2, sequence_parallel=True)
    assert layer_activation_bytes_per_token(model, a, moe_layer=False).stored.tolist() == [1_096]
    assert layer_activation_bytes_per_token(model, lay(recompute="selective"), moe_layer=False).stored.tolist() == [2_192]


def test_parallel_block_keeps_the_shared_layer_input_once():
    # Flash, tp 1: sequential 34h + 4a = 2,192. A parallel block with one norm (GPT-J, Cohere) keeps that norm's
    # input and its output (the input of both QKV and fc1) once each, 4h, where the sequential layer keeps two
    # norm inputs and two GEMM inputs, 8h: 4h = 256 fewer, 1,936.
    model = tiny(parallel_attention_mlp=True, norms_per_layer=1)
    assert layer_activation_bytes_per_token(model, lay(), moe_layer=False).stored.tolist() == [1_936]
    # GPT-NeoX's parallel residual keeps its two norms (two GEMM inputs) but both read x, kept once: 2h fewer.
    neox = tiny(parallel_attention_mlp=True)
    assert layer_activation_bytes_per_token(neox, lay(), moe_layer=False).stored.tolist() == [2_192 - 128]


def test_no_dropout_drops_the_masks():
    # Without dropout: the two 1-byte masks (2h) go, and of the scores only the softmax output (2as) stays:
    # 32h + 2as = 2,048 + 256 = 2,304.
    a = lay(flash_attention=False)
    assert layer_activation_bytes_per_token(tiny(dropout=False), a, moe_layer=False).stored.tolist() == [2_304]


def test_gated_mlp_keeps_three_f_wide_tensors():
    # SwiGLU keeps fc1's two outputs (gate, up) and the activation output: 3 x 2f = 6f = 1,536 (GeLU: 4f = 1,024).
    # No dropout, flash: 8h (norm/GEMM inputs) + 8h (Q, K, V, attention output) + 6f + 4a = 512 + 512 + 1,536 + 16.
    model = tiny(dropout=False, mlp_kind="gated")
    assert layer_activation_bytes_per_token(model, lay(), moe_layer=False).stored.tolist() == [2_576]


def test_gqa_shrinks_k_and_v():
    # 2 KV heads of 16: K and V are 32 wide. No dropout, flash, tp 1:
    #   8h = 512; Q 2*64 + K, V 2*(32 + 32) + attention output 2*64 = 384; MLP 4f = 1,024; LSE 4a = 16 -> 1,936.
    # tp 4 (> 2 KV heads, so K/V are split only 2 ways): 512 + (32 + 64 + 32) + 256 + 4 = 900.
    model = tiny(dropout=False, num_kv_heads=2)
    assert layer_activation_bytes_per_token(model, lay(), moe_layer=False).stored.tolist() == [1_936]
    assert layer_activation_bytes_per_token(model, lay(tp=4), moe_layer=False).stored.tolist() == [900]


# Activations of a stage ------------------------------------------------------------------------
def test_stage_activations_one_stage():
    # pp = 1, one micro-batch in flight, tokens b s = 32, no flash:
    #   layers     L x 2,816 x 32                 = 180,224
    #   embedding  dropout mask, 1 byte x s h    =   2,048
    #   head       final-norm and LM-head inputs 2 x 2h, and at the loss's peak the fp32 softmax and the
    #              bf16 gradient of the logits, 6V: 32 x (256 + 600) = 27,392
    #   total                                     = 209,664
    # (Korthikanti's extra term for p = 1, sbhp + 4sbh(1 + V/h) = 2,048 + 8,192 + 12,800, counts only the fp32
    # logits: 4V instead of 6V, 6,400 bytes less.)
    a = lay(flash_attention=False)
    sp = stage_params(tiny(), a, np.zeros(1, dtype=np.int64))
    held, working = stage_activation_bytes(tiny(), a, np.zeros(1, dtype=np.int64), sp)
    assert held.tolist() == [209_664]
    assert working.tolist() == [0]


def test_stage_activations_two_stages_1f1b():
    # pp = 2, m = 4: stage 0 holds min(2, 4) = 2 micro-batches of its one layer, stage 1 holds 1.
    #   stage 0: 2 x 2,816 x 32 + embedding masks 2 x 32 x 64 = 180,224 + 4,096 = 184,320
    #   stage 1: 1 x 2,816 x 32 + head 27,392                 =  90,112 + 27,392 = 117,504
    a = lay(pp=2, global_batch=4, flash_attention=False)
    st = stages(a)
    held, _ = stage_activation_bytes(tiny(), a, st, stage_params(tiny(), a, st))
    assert held.tolist() == [184_320, 117_504]


def test_full_recompute_keeps_inputs_and_a_working_set():
    # Full recompute, pp = 1: each layer keeps its 2h input: 2 x 128 x 32 = 8,192, + embedding 2,048 + head
    # 27,392 = 37,632; while one layer is recomputed the rest of its activations are live again: its
    # 2,816 per token less the 128 already held as the checkpoint, 2,688 x 32 = 86,016.
    a = lay(recompute="full", flash_attention=False)
    z = np.zeros(1, dtype=np.int64)
    held, working = stage_activation_bytes(tiny(), a, z, stage_params(tiny(), a, z))
    assert held.tolist() == [37_632]
    assert working.tolist() == [86_016]


def test_selective_recompute_holds_one_layers_scores_in_backward():
    # Selective, no flash, pp = 1: each layer keeps 34h = 2,176 per token: 2 x 2,176 x 32 = 139,264, + embedding
    # 2,048 + head 27,392 = 168,704; the backward recomputes one layer's scores, 5as = 640 per token: 20,480.
    # With flash attention there are no scores to drop or to recompute: no working set.
    z = np.zeros(1, dtype=np.int64)
    a = lay(recompute="selective", flash_attention=False)
    held, working = stage_activation_bytes(tiny(), a, z, stage_params(tiny(), a, z))
    assert (held.tolist(), working.tolist()) == ([168_704], [20_480])
    a = lay(recompute="selective")
    assert stage_activation_bytes(tiny(), a, z, stage_params(tiny(), a, z))[1].tolist() == [0]


def test_block_recompute_recomputes_only_k_layers():
    # recompute_layers_per_stage = 1 of 2: layer one keeps 2h (128), layer two keeps everything (2,816):
    # (128 + 2,816) x 32 = 94,208, + embedding 2,048 + head 27,392 = 123,648.
    a = lay(recompute="full", recompute_layers_per_stage=1, flash_attention=False)
    z = np.zeros(1, dtype=np.int64)
    held, _ = stage_activation_bytes(tiny(), a, z, stage_params(tiny(), a, z))
    assert held.tolist() == [123_648]


# Buffers and reserve ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "zero, expected",
    [
        (0, 0),
        (1, 0),
        # Only what lies beyond the rank's own shard is extra: (1 - 1/dp) = 3/4 of each buffer at dp = 4.
        (2, 2 * LAYER * 3 // 4),  # one layer's bf16 gradients as the reduce bucket: 98,816 x 3/4 = 74,112
        # two gathered layers of bf16 weights (the stage holds more than two) + one layer's gradients:
        # 296,448 x 3/4 = 222,336
        (3, (2 * 2 + 2) * LAYER * 3 // 4),
    ],
)
def test_zero_buffers(zero, expected):
    a = lay(dp=4, zero=zero)
    assert buffer_bytes(a, stage_params(tiny(), a, np.zeros(1, dtype=np.int64))).tolist() == [expected]


def test_stage_memory_adds_up_by_hand():
    # pp = 1, tp = 1, dp = 1, ZeRO 0, no flash, no recompute:
    #   model states 16 x 111,744 = 1,787,904; activations 209,664; buffers 0;
    #   reserve: CUDA context 512 MiB + library workspaces 256 MiB = 805,306,368, no NCCL communicator
    #   (every degree is 1), + 5% of 209,664 = 805,306,368 + 10,483.2.
    mem = stage_memory(tiny(), lay(flash_attention=False), np.zeros(1, dtype=np.int64))
    assert mem.weights_bytes.tolist() == [2 * PSI]
    assert mem.gradients_bytes.tolist() == [2 * PSI]
    assert mem.optimizer_bytes.tolist() == [12 * PSI]
    assert mem.activations_bytes.tolist() == [209_664]
    assert float(mem.other_bytes[0]) == pytest.approx(805_306_368 + 10_483.2, abs=1e-3)
    assert float(mem.total_bytes[0]) == pytest.approx(1_787_904 + 209_664 + 805_306_368 + 10_483.2, abs=1e-3)


def test_reserve_counts_one_nccl_communicator_per_parallel_dimension():
    # tp 2 and dp 2 in use: two communicators of 256 MiB on top of the process's 768 MiB
    # (context 512 MiB + library workspaces 256 MiB); fragmentation is 5% of the activations.
    base = stage_memory(tiny(), lay(), np.zeros(1, dtype=np.int64))
    both = stage_memory(tiny(), lay(tp=2, dp=2), np.zeros(1, dtype=np.int64))
    assert FRAGMENTATION_FRACTION == 0.05
    mib = 2**20
    assert float(base.reserve_bytes[0]) == pytest.approx(768 * mib + 0.05 * float(base.activations_bytes[0]))
    assert float(both.reserve_bytes[0]) == pytest.approx(1280 * mib + 0.05 * float(both.activations_bytes[0]))


# Recompute accounting: what the peak of backward holds ----------------------------------------
def test_full_recompute_of_a_one_layer_stage_needs_no_more_than_no_recompute():
    # Stage 1 of pp = 2 holds one layer and one micro-batch in flight (tiny GPT, s = 32, no flash).
    # No recompute: it keeps the layer's 2,816 x 32 = 90,112 bytes (+ head 20,992).
    # Full recompute: it keeps the layer input, 2h x 32 = 4,096, and in backward recomputes the layer, whose
    # 90,112 bytes include that same input tensor (the first LayerNorm's input, part of 34h). The peak is
    # 90,112 again, not 4,096 + 90,112. So full recompute can never need more than no recompute.
    a_none = lay(pp=2, global_batch=4, flash_attention=False)
    a_full = lay(pp=2, global_batch=4, flash_attention=False, recompute="full")
    last = np.ones(1, dtype=np.int64)
    none = stage_memory(tiny(), a_none, last).total_bytes
    full = stage_memory(tiny(), a_full, last).total_bytes
    assert float(full[0]) <= float(none[0])


def test_selective_recompute_of_a_one_layer_stage_peaks_like_no_recompute():
    # Stage 1 of pp = 2, one layer, one micro-batch in flight, no flash (tiny GPT, s = 32).
    # Selective keeps 34h per token (2,176 x 32 = 69,632) and, in the layer's backward, recomputes the
    # 5as = 640 bytes per token of scores (20,480) and holds them until the layer's backward is done:
    # peak 69,632 + 20,480 = 90,112, exactly what no recompute holds. Same peak, same total.
    a_none = lay(pp=2, global_batch=4, flash_attention=False)
    a_sel = lay(pp=2, global_batch=4, flash_attention=False, recompute="selective")
    last = np.ones(1, dtype=np.int64)
    none = float(stage_memory(tiny(), a_none, last).total_bytes[0])
    sel = float(stage_memory(tiny(), a_sel, last).total_bytes[0])
    assert sel == pytest.approx(none)


# Done-when: GPT-3 175B first-stage activations vs Korthikanti's closed forms ----------------------
# s = 2048, b = 1, h = 12288, L = 96, a = 96, t = 8, pp = 8 (12 layers x 8 micro-batches in flight on
# stage 0 = L layers' worth), flash attention off, dropout on (the catalog's gpt3-175b).
#   sbhL = 2048 x 12288 x 96 = 2,415,919,104;  5as/h = 5 x 96 x 2048 / 12288 = 80.
#   no SP:            sbhL (10 + 24/8 + 80/8)   = 2,415,919,104 x 23       = 55,566,139,392  (51.75 GiB)
#   SP:               (sbhL/8)(34 + 80)         = 301,989,888 x 114        = 34,426,847,232  (32.06 GiB)
#   SP + selective:   34 sbhL/8                 = 301,989,888 x 34         = 10,267,656,192  ( 9.56 GiB)
# The stage also holds the embedding's dropout masks (sbhp, /t with SP): 0.36% / 0.25% of these.
@pytest.mark.parametrize(
    "sequence_parallel, recompute, expected",
    [
        (False, "none", 55_566_139_392),
        (True, "none", 34_426_847_232),
        (True, "selective", 10_267_656_192),
    ],
)
def test_gpt3_175b_first_stage_matches_korthikanti(sequence_parallel, recompute, expected):
    layout = Layout(tp=8, pp=8, dp=1, micro_batch=1, global_batch=64, seq_len=2048, flash_attention=False,
                    sequence_parallel=sequence_parallel, recompute=recompute)
    result = estimate(load_model("gpt3-175b").spec, load_hardware("a100-80gb").spec, layout)
    first = result.stages[0]
    assert first.layers == 12
    assert first.activations_bytes == pytest.approx(expected, rel=0.03)


def test_fp8_keeps_gemm_inputs_in_one_byte():
    # Tiny GPT, tp = 1, flash attention: under fp8 the saved GEMM inputs shrink from 2 to 1 byte each:
    #   the two post-norm GEMM inputs       2 x h = 128 bytes saved
    #   fc2's input (GeLU output)           f     = 256 bytes saved
    # 384 bytes per token in all; the residual stream, Q/K/V, fc1's output and the masks stay as they are, and so
    # does the attention output (a x d = 64 elements), which the attention kernel keeps in 16 bits for its own
    # backward: Megatron-Core's output projection reads that copy (save_original_input), 2 bytes as in bf16.
    bf16 = layer_activation_bytes_per_token(tiny(), lay(), moe_layer=False).stored
    fp8 = layer_activation_bytes_per_token(tiny(), lay(dtype="fp8"), moe_layer=False).stored
    assert (bf16 - fp8).tolist() == [384]
    # An engine whose projection keeps its own fp8 cast too (TE's delayed-scaling Linear, torchao's Float8Linear)
    # holds 2 + 1 bytes per output element: 64 more than in bf16, 384 - 64 = 320 below it.
    copy = layer_activation_bytes_per_token(tiny(), lay(dtype="fp8"), moe_layer=False, proj_cast_copy=True).stored
    assert (bf16 - copy).tolist() == [320]
    # in bf16 the projection's input is the attention output itself, whatever the engine
    same = layer_activation_bytes_per_token(tiny(), lay(), moe_layer=False, proj_cast_copy=True).stored
    assert same.tolist() == bf16.tolist()


def test_without_flash_attention_the_attention_output_is_only_the_projections_input():
    # Without flash attention no kernel keeps the attention output (the AV batched matmul's backward needs its
    # inputs, not its output): only the output projection's saved input remains, 1 byte under fp8 (the engine's
    # cast) instead of the fused kernel's 2. Tiny GPT, a x d = 64 output elements per token: fp8 saves 64 bytes
    # more per token without flash attention than with it (384 + 64 = 448 below bf16).
    bf16 = layer_activation_bytes_per_token(tiny(), lay(flash_attention=False), moe_layer=False).stored
    fp8 = layer_activation_bytes_per_token(tiny(), lay(dtype="fp8", flash_attention=False), moe_layer=False).stored
    assert (bf16 - fp8).tolist() == [448]


def test_stage_memory_takes_the_attention_output_copies_from_the_engine():
    # Tiny GPT on one stage, fp8, micro-batch 1 x seq 32: the nemo profile keeps the projection's fp8 cast beside the
    # attention output (1 byte x a d 64 per token per layer), the megatron profile does not: 2 layers x 32 tokens
    # x 64 = 4,096 bytes more activations under nemo.
    from planner.specs.engine import engine_profile

    a = lay(dtype="fp8")
    z = np.zeros(1, dtype=np.int64)
    megatron = stage_memory(tiny(), a, z, engine=engine_profile("megatron"))
    nemo = stage_memory(tiny(), a, z, engine=engine_profile("nemo"))
    assert (nemo.activations_bytes - megatron.activations_bytes).tolist() == [4_096]



def test_tp_comm_overlap_allocates_transformer_engines_userbuffers():
    """TE's initialize_ub: 12 buffers of the gathered activation [s b / cp, h], the 8 all-gather ones in fp8 under an
    fp8 recipe. Llama 3.1 8B (h 4096), s 8192, b 1, cp 2: 4096 x 4096 x (8 x 2 + 4 x 2) bytes = 402,653,184 in bf16,
    4096 x 4096 x (8 x 1 + 4 x 2) = 268,435,456 in fp8; nothing without SP or without the overlap."""
    from planner.engines.load import load_model
    from planner.specs.layout import Layout
    from planner.training.memory import userbuffer_bytes

    model = load_model("llama-3.1-8b").spec
    base = {"tp": 2, "cp": 2, "global_batch": 1, "seq_len": 8192, "sequence_parallel": True}
    assert float(userbuffer_bytes(model, Layout(overlap_tp_comm=True, **base).to_arrays())[0]) == 402_653_184
    assert float(userbuffer_bytes(model, Layout(overlap_tp_comm=True, dtype="fp8", **base).to_arrays())[0]) == 268_435_456
    assert float(userbuffer_bytes(model, Layout(**base).to_arrays())[0]) == 0.0
    no_sp = {**base, "sequence_parallel": False}
    assert float(userbuffer_bytes(model, Layout(overlap_tp_comm=True, **no_sp).to_arrays())[0]) == 0.0
