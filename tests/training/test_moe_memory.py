"""MoE memory: expert weights under expert TP / EP / ZeRO, optimizer-state precision, capacity and permutation
buffers, fine-grained recompute of the MoE modules, multi-token prediction.

Expected values are worked out by hand in the comments, never by running the code under test.

Tiny MoE (tests/round_specs.tiny with MoE layers): L 2, h 64, 4 heads of 16 (MHA), LayerNorm (weight and bias),
standard GeLU MLP, V 100, untied, dropout masks; both layers MoE with 4 experts of 32, top-2, no shared expert:
  attention 4 h^2 = 16,384; one expert 2 x 64 x 32 = 4,096, four 16,384; router 64 x 4 = 256; norms 2 x 2h = 256.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny  # noqa: E402

from planner.engines.load import load_model
from planner.errors import PlannerError
from planner.physics.shapes import expert_data_parallel, expert_shard_degree, layer_params_per_rank
from planner.specs.layout import Layout
from planner.training.memory import (
    layer_activation_bytes_per_token,
    model_state_bytes,
    stage_activation_bytes,
    stage_memory,
    stage_params,
)
from planner.training.rules import check_layout
from planner.training.time import layer_time, stage_time

MOE = dict(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=32)
ONE = np.zeros(1, dtype=np.int64)
HF_DSV3 = "tests/fixtures/hf/deepseek-v3.json"


def tiny_moe(**overrides):  # type: ignore[no-untyped-def]
    return tiny(moe=dict(MOE, **overrides.pop("moe", {})), **overrides)


# Expert weights under ETP / EP / ZeRO ----------------------------------------------------------------------
def test_expert_tp_equal_to_tp_keeps_the_split_over_tp_times_ep():
    # tp 2, ep 2, etp unset (= tp): experts 16,384 / (2 x 2) = 4,096 per rank; attention 16,384 / 2 = 8,192,
    # norms 256 and router 256 replicated: dense 8,704.
    default = layer_params_per_rank(tiny_moe(), lay(tp=2, dp=2, ep=2), moe_layer=True)
    explicit = layer_params_per_rank(tiny_moe(), lay(tp=2, dp=2, ep=2, etp=2), moe_layer=True)
    assert (default.dense.tolist(), default.expert.tolist()) == ([8_704], [4_096])
    assert (explicit.dense.tolist(), explicit.expert.tolist()) == ([8_704], [4_096])


def test_expert_tp_1_under_tp_2_doubles_the_experts_per_rank_not_the_rest():
    # etp 1: experts 16,384 / (1 x 2) = 8,192 per rank; attention, norms and router still over tp = 2.
    p = layer_params_per_rank(tiny_moe(), lay(tp=2, dp=2, ep=2, etp=1), moe_layer=True)
    assert (p.dense.tolist(), p.expert.tolist()) == ([8_704], [8_192])


def test_expert_data_parallel_group_is_tp_cp_dp_over_etp_ep():
    # Megatron: edp = tp x cp x dp / (etp x ep). tp 2, dp 2, ep 2: etp 2 -> 1; etp 1 -> 2 (a smaller expert TP
    # leaves more ranks holding the same experts). tp 2, cp 2, dp 4, ep 4, etp 1 -> 4.
    assert expert_data_parallel(lay(tp=2, dp=2, ep=2, etp=2)).tolist() == [1]
    assert expert_data_parallel(lay(tp=2, dp=2, ep=2, etp=1)).tolist() == [2]
    assert expert_data_parallel(lay(tp=2, cp=2, dp=4, ep=4, etp=1)).tolist() == [4]
    # HSDP: the shard group holds shard_group / (dp x cp) of them: shard 4 of dp x cp 8 -> 4 x 2 / (1 x 4) = 2.
    assert expert_shard_degree(lay(tp=2, cp=2, dp=4, ep=4, etp=1, shard_group=4)).tolist() == [2]


def test_parallel_folding_ep_over_tp_times_dp_is_a_valid_layout():
    # ep 4 x etp 1 divides tp 2 x dp 2 = 4 (MoE parallel folding) although ep does not divide dp.
    check_layout(tiny_moe(), Layout(tp=2, dp=2, ep=4, etp=1, sequence_parallel=True, global_batch=2, seq_len=32), 4)


@pytest.mark.parametrize(("etp", "weights", "optim"), [
    # pp 1, tp 2, dp 2, ep 2, ZeRO-1 (bf16 weights, bf16 grads, fp32 Adam 12 B):
    #   dense per rank: embedding 6,400/2 = 3,200 + head 6,400/2 + 128 = 3,328 + 2 layers x 8,704 = 23,936
    #   experts per rank: 2 x 4,096 = 8,192 (etp 2), 2 x 8,192 = 16,384 (etp 1)
    #   weights 2 x (23,936 + 8,192) = 64,256; 2 x (23,936 + 16,384) = 80,640
    #   optimizer 12 x (23,936 / 2 + 8,192 / edp 1) = 241,920; 12 x (11,968 + 16,384 / edp 2) = 241,920
    (2, 64_256, 241_920),
    (1, 80_640, 241_920),
])
def test_expert_states_shard_over_the_expert_data_parallel_group(etp, weights, optim):
    layout = lay(tp=2, dp=2, ep=2, etp=etp, zero=1)
    w, g, o = model_state_bytes(layout, stage_params(tiny_moe(), layout, ONE))
    assert (w.tolist(), g.tolist(), o.tolist()) == ([weights], [weights], [optim])


def test_zero3_shards_expert_weights_over_the_expert_data_parallel_group_too():
    # etp 1, ZeRO-3: weights 2 x (23,936 / 2 + 16,384 / 2) = 40,320.
    layout = lay(tp=2, dp=2, ep=2, etp=1, zero=3)
    w, _, _ = model_state_bytes(layout, stage_params(tiny_moe(), layout, ONE))
    assert w.tolist() == [40_320]


# Optimizer-state precision ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("fields", "bytes_per_param"), [
    ({}, 12),  # fp32 master + two fp32 moments
    ({"optimizer_state_dtype": "bf16"}, 8),  # Megatron's precision-aware optimizer as DeepSeek-V3's recipe runs it
    ({"master_weights_dtype": "bf16"}, 8),  # the bf16 weights are the master: two fp32 moments
    ({"optimizer_state_dtype": "bf16", "master_weights_dtype": "bf16"}, 4),
])
def test_optimizer_state_bytes_apply_to_dense_and_expert_parts(fields, bytes_per_param):
    # tp 2, dp 2, ep 2, etp 2, ZeRO-1: sharded parameters per rank 23,936 / 2 + 8,192 / 1 = 20,160.
    layout = lay(tp=2, dp=2, ep=2, zero=1, **fields)
    _, _, o = model_state_bytes(layout, stage_params(tiny_moe(), layout, ONE))
    assert o.tolist() == [bytes_per_param * 20_160]


# Activations: expert TP, capacity, permutation buffers ---------------------------------------------------------
# Per token of one MoE layer, tp 1, bf16, flash attention, no recompute:
#   norm inputs 2 x 2h = 256, post-norm GEMM inputs 2 x 2h = 256, dropout masks 2h = 128         ->   640
#   Q, K, V 3 x 2h = 384, attention output 2h = 128                                            ->   512
#   log-sum-exp 4 heads x 4                                                                     ->    16
#   experts: k f = 2 x 32 = 64 wide; fc1 output 2 x 64 + GeLU output 2 x 64                      ->   256
#   routed copies: k = 2, each fc1's input 2h = 128 + probability 4 + sort row 4                  ->   272
#   router scores 4 E = 16, permutation row map 4 (2E + 1) = 36                                 ->    52
#   total                                                                                          1,748
MOE_TOKEN = 1_748


def per_token(model=None, **fields):  # type: ignore[no-untyped-def]
    return layer_activation_bytes_per_token(model or tiny_moe(), lay(**fields), moe_layer=True)


def test_moe_layer_activations_by_hand():
    acts = per_token()
    assert acts.stored.tolist() == [MOE_TOKEN]
    assert acts.full.tolist() == [MOE_TOKEN]


def test_capacity_factor_scales_the_expert_side_only():
    # c = 1.5: expert internals 1.5 x 256 = 384, routed copies 1.5 x 272 = 408; router and attention unchanged:
    # 640 + 512 + 16 + 384 + 408 + 52 = 2,012. Dropless (unset) is c = 1.
    assert per_token(moe_capacity_factor=1.5).stored.tolist() == [2_012]
    assert per_token(moe_capacity_factor=1.0).stored.tolist() == [MOE_TOKEN]


@pytest.mark.parametrize(("etp", "expected"), [
    # tp 2 with sequence parallelism (each rank routes half the tokens): norm/GEMM/dropout 640 / 2 = 320,
    # attention 512 / 2 = 256, lse 2 heads x 4 = 8, expert internals 256 / 2 = 128, router 52 / 2 = 26;
    # routed copies per token k etp / tp: etp 2 -> 2 x 136 = 272 (the expert-TP group gathers its tokens),
    # etp 1 -> 1 x 136 = 136.
    (2, 320 + 256 + 8 + 128 + 272 + 26),
    (1, 320 + 256 + 8 + 128 + 136 + 26),
])
def test_expert_tp_sets_how_many_routed_copies_a_rank_keeps(etp, expected):
    assert per_token(tp=2, dp=2, ep=2, etp=etp, sequence_parallel=True).stored.tolist() == [expected]


# Fine-grained recompute of the MoE modules ------------------------------------------------------------------------
@pytest.mark.parametrize(("modules", "capacity", "dropped"), [
    (("moe_act",), None, 128),  # the experts' GeLU output: 2 bytes x k f 64
    (("moe_act",), 1.5, 192),  # ... padded to capacity: 1.5 x 128
    (("layernorm",), None, 256),  # the two norm outputs 2 x 2h
    (("moe",), None, 256 + 272 + 52),  # the whole MoE block: internals, routed copies, router
    (("layernorm", "moe_act"), None, 256 + 128),
])
def test_moe_recompute_modules_drop_their_tensors(modules, capacity, dropped):
    acts = per_token(recompute="selective", recompute_modules=modules, moe_capacity_factor=capacity)
    base = per_token(moe_capacity_factor=capacity).stored
    assert (base - acts.stored).tolist() == [dropped]
    assert acts.working.tolist() == [dropped]


def test_shared_experts_recompute_drops_the_shared_experts_internals():
    # one shared expert of 32: its fc1 output 2 x 32 and GeLU output 2 x 32 = 128 per token
    model = tiny_moe(moe=dict(num_shared_experts=1))
    full = per_token(model).stored
    acts = per_token(model, recompute="selective", recompute_modules=("shared_experts",))
    assert (full - acts.stored).tolist() == [128]


def test_mla_up_proj_recompute_drops_the_per_head_queries_keys_and_values():
    # MLA with 4 heads, nope 16, rope 8, v 16: Q and K 4 x 24 = 96 wide, V 64; at tp 1 the up-projections'
    # outputs are 2 x (96 + 96 + 64) = 512 bytes per token.
    model = tiny_moe(mla=dict(q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                              v_head_dim=16))
    full = per_token(model).stored
    acts = per_token(model, recompute="selective", recompute_modules=("mla_up_proj",))
    assert (full - acts.stored).tolist() == [512]


# Multi-token prediction --------------------------------------------------------------------------------------------
def test_mtp_adds_its_module_and_the_embedding_to_the_last_stage_only():
    # pp 2 (one MoE layer per stage), tp 1, model mtp_layers 1. MTP module per rank: its MoE layer's dense part
    # 16,384 + norms 256 + router 256 = 16,896, eh_proj 2 x 64 x 64 = 8,192, three LayerNorms 3 x 128 = 384
    # -> 25,472 dense; experts 16,384. The last stage also builds the embedding (6,400) for it.
    with_mtp = tiny_moe(mtp_layers=1)
    stages = np.arange(2)
    layout = lay(pp=2)
    a, b = stage_params(with_mtp, layout, stages), stage_params(tiny_moe(), layout, stages)
    assert (a.dense - b.dense).tolist() == [0, 25_472 + 6_400]
    assert (a.expert - b.expert).tolist() == [0, 16_384]
    # one stage: the embedding is there already
    one = lay()
    assert (stage_params(with_mtp, one, ONE).dense - stage_params(tiny_moe(), one, ONE).dense).tolist() == [25_472]


def test_layout_mtp_zero_is_exactly_no_mtp_and_null_takes_the_models():
    model = tiny_moe(mtp_layers=1)
    stages = np.arange(2)
    off, none = stage_memory(model, lay(pp=2, mtp_layers=0), stages), stage_memory(tiny_moe(), lay(pp=2), stages)
    for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "buffers_bytes",
                 "reserve_bytes"):
        assert getattr(off, name).tolist() == getattr(none, name).tolist(), name
    layer_off = stage_memory(tiny_moe(), lay(pp=2, mtp_layers=1), stages)
    assert stage_memory(model, lay(pp=2), stages).total_bytes.tolist() == layer_off.total_bytes.tolist()


def test_mtp_activations_on_the_last_stage():
    # pp 2, micro-batch 1 x seq 32 = 32 tokens; the MTP chunk holds one micro-batch (1F1B).
    # Per token: its MoE layer 1,748 + the inputs of enorm and hnorm 2 x 2h (256), eh_proj's input 2 x 2h (256),
    # the final norm's and the head's inputs 2 x 2h (256) = 2,516; its loss's saved softmax: (6 - 2) x V 100 = 400.
    # 32 x (2,516 + 400) = 93,312 bytes on stage 1, none on stage 0.
    stages = np.arange(2)
    layout = lay(pp=2)
    sp_mtp = stage_params(tiny_moe(mtp_layers=1), layout, stages)
    sp_none = stage_params(tiny_moe(), layout, stages)
    held_mtp, _ = stage_activation_bytes(tiny_moe(mtp_layers=1), layout, stages, sp_mtp)
    held_none, _ = stage_activation_bytes(tiny_moe(), layout, stages, sp_none)
    assert (held_mtp - held_none).tolist() == [0, 93_312]


def test_mtp_time_is_one_more_layer_projection_and_head_on_the_last_stage():
    # Round hardware: bf16 1 PFLOP/s at plateau 0.8, 7.5 us per GEMM, HBM 2 TB/s x 0.9. 32 tokens:
    #   LM head: 2 x 32 x 100 x 64 = 409,600 FLOP -> (4.096e-10 + 7.5e-6) / 0.8 = 9.37552e-6 s, three GEMMs
    #            2.812656e-5, logits traffic 3,200 x 18 B / 1.8e12 = 3.2e-8 -> 2.815856e-5
    #   eh_proj: 2 x 32 x 128 x 64 = 524,288 FLOP -> (5.24288e-10 + 7.5e-6) / 0.8 = 9.375655e-6 s, x 3 = 2.8126966e-5
    # plus one MoE layer's forward and backward (layer_time), on the last stage only.
    hw = round_hw()
    stages = np.arange(2)
    layout = lay(pp=2)
    model = tiny_moe(mtp_layers=1)
    with_mtp = stage_time(model, hw, layout, stages, stage_params(model, layout, stages))
    without = stage_time(tiny_moe(), hw, layout, stages, stage_params(tiny_moe(), layout, stages))
    layer = layer_time(tiny_moe(), hw, layout, moe_layer=True)
    extra = with_mtp.compute - without.compute
    assert extra[0] == 0.0
    assert extra[1] - float(layer.forward[0] + layer.backward[0]) == pytest.approx(2.815856e-5 + 2.8126966e-5, rel=1e-6)
    off = stage_time(model, hw, lay(pp=2, mtp_layers=0), stages, stage_params(model, lay(pp=2, mtp_layers=0), stages))
    assert off.compute.tolist() == without.compute.tolist()


def test_deepseek_v3_last_stage_holds_the_mtp_module():
    # DeepSeek-V3 (HF config, num_nextn_predict_layers 1), tp 1, pp 16, dp 16, ep 8, etp 1. MTP module per rank:
    #   dense: the MoE layer less its routed experts 11,507,286,272 - 11,274,289,152 = 232,997,120, eh_proj
    #          102,760,448, three norms 21,504 -> 335,779,072; plus the embedding 129,280 x 7,168 = 926,679,040
    #   experts: 11,274,289,152 / 8 = 1,409,286,144
    # ZeRO-1 bf16 weights grow by 2 x (1,262,458,112 + 1,409,286,144) = 5,343,488,512 bytes.
    model = load_model(HF_DSV3).spec
    off = model.model_copy(update={"mtp_layers": 0})
    layout = lay(pp=16, dp=16, ep=8, etp=1, zero=1, global_batch=256, seq_len=4096)
    last = np.array([15])
    a, b = stage_params(model, layout, last), stage_params(off, layout, last)
    assert (a.dense - b.dense).tolist() == [335_779_072 + 926_679_040]
    assert (a.expert - b.expert).tolist() == [1_409_286_144]
    wa, _, _ = model_state_bytes(layout, a)
    wb, _, _ = model_state_bytes(layout, b)
    assert (wa - wb).tolist() == [5_343_488_512]
    first = np.array([0])
    assert stage_params(model, layout, first).dense.tolist() == stage_params(off, layout, first).dense.tolist()


def test_fp8_keeps_the_moe_layers_pre_mlp_norm_output_in_16_bits():
    # fp8, tp 1: the attention side's post-norm GEMM input drops to 1 byte (64), the MoE side's stays 2 bytes (128:
    # the router keeps it); the attention output stays 128 (the attention kernel's 16-bit copy, which Megatron's
    # projection reads); routed copies 2 x (64 + 8) = 144; expert internals: fc1's output stays 2 x 64 = 128,
    # GeLU's output (fc2's input) 64.
    #   norm inputs 256 + post-norm 64 + 128 + masks 128 = 576; Q, K, V 384 + output 128 = 512; lse 16;
    #   experts 128 + 64 = 192; copies 144; router 52  -> 1,492
    assert per_token(dtype="fp8").stored.tolist() == [1_492]
    # layernorm recompute drops both norm outputs: 64 + 128 = 192
    acts = per_token(dtype="fp8", recompute="selective", recompute_modules=("layernorm",))
    assert acts.stored.tolist() == [1_492 - 192]


@pytest.mark.parametrize(("tp", "dp", "ep"), [(2, 4, 2), (4, 2, 4), (4, 4, 2), (2, 8, 4)])
def test_sharded_expert_states_per_rank_do_not_depend_on_expert_tp(tp, dp, ep):
    # A stage's routed-expert states are spread over all its tp x dp ranks whatever etp is: each rank holds
    # tp / etp times the expert weights and shards them over tp / etp times more expert-data-parallel ranks.
    # So under ZeRO-1 the optimizer bytes per rank are the same for every etp, and the weights scale as 1 / etp.
    model = tiny_moe(moe=dict(num_experts=8, moe_ffn_hidden_size=64))
    results = {}
    for etp in (e for e in (1, 2, 4) if e <= tp and (tp * dp) % (ep * e) == 0):
        layout = lay(tp=tp, dp=dp, ep=ep, etp=etp, zero=1)
        sp = stage_params(model, layout, ONE)
        _, _, optim = model_state_bytes(layout, sp)
        results[etp] = (float(sp.expert[0]) * etp, float(optim[0]))
    assert len(results) >= 2
    assert len({expert for expert, _ in results.values()}) == 1
    assert len({optim for _, optim in results.values()}) == 1


def test_mla_keeps_its_compressed_latents():
    # Tiny MoE with MLA (4 heads, nope 16, rope 8, v 16, kv_lora 16, q_lora 8), tp 1, bf16, per token:
    #   norm inputs / post-norm GEMM inputs / dropout masks 640; Q and K 4 x 24 = 96 wide, V and output 64:
    #   2 x (96 + 96 + 64 + 64) = 640; latents: the down-projections' outputs and their norms' outputs,
    #   2 x (8 + 16) + 2 x (8 + 16) = 96; lse 16; MoE 580 (as in MOE_TOKEN)          -> 1,972
    # With sequence parallelism over tp 2 the latents are per token of the shard: 96 / 2 = 48 of the layer's bytes.
    mla = dict(q_lora_rank=8, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    assert per_token(tiny_moe(mla=mla)).stored.tolist() == [1_972]
    no_q_lora = dict(mla, q_lora_rank=None)
    assert (per_token(tiny_moe(mla=mla)).stored - per_token(tiny_moe(mla=no_q_lora)).stored).tolist() == [2 * 8 + 2 * 8]
    sp = dict(tp=2, dp=2, ep=2, sequence_parallel=True)
    assert (per_token(tiny_moe(mla=mla), **sp).stored - per_token(tiny_moe(mla=no_q_lora), **sp).stored).tolist() == [16]


def test_expert_parallel_with_tensor_parallel_needs_sequence_parallel():
    # Megatron-Core asserts sequence parallelism when EP and TP are combined; planner refuses it the same way.
    with pytest.raises(PlannerError, match="needs sequence_parallel"):
        check_layout(tiny_moe(), Layout(tp=2, dp=2, ep=2, global_batch=2, seq_len=32), 4)


def test_expert_tp_must_fit_the_stage_without_expert_parallelism():
    # etp 4 on 2 GPUs splits each expert over ranks that do not exist (Megatron asserts world % (etp ep pp) == 0)
    with pytest.raises(PlannerError, match="ep \\* etp"):
        check_layout(tiny_moe(), Layout(dp=2, etp=4, global_batch=2, seq_len=32), 2)


def test_dualpipe_keeps_one_embedding_where_the_first_and_last_stage_share_a_rank():
    # DeepSeek-V3 report Sec. 3.2.3: DualPipe puts the embedding's stage and the output head's on one rank, and the
    # MTP module uses the main embedding there. Tiny MoE with mtp_layers 1, pp 4, tp 1, dp 2, ZeRO-1, bf16, fp32
    # grads, Adam 12: the last stage's MTP embedding copy is V 100 x h 64 = 6,400 parameters (no position table,
    # untied). Rank 0 (stages 0 and 3) and rank 3 (stages 3 and 0) hold it once: 6,400 x (2 + 4 + 12 / 2) = 76,800
    # bytes less than the sum of their two stages; ranks 1 and 2 (stages 1 and 2) keep both stages' states.
    from planner.specs.engine import engine_profile
    from planner.training.estimate import _dualpipe_memory

    model = tiny_moe(mtp_layers=1, num_layers=4)
    layout = lay(pp=4, dp=2, zero=1, global_batch=16, schedule="dualpipe", grad_dtype="fp32")
    stages = np.arange(4)
    params = stage_params(model, layout, stages)
    alone = stage_memory(model, layout, stages, params)
    mirror = stage_memory(model, layout, 3 - stages)
    pair = _dualpipe_memory(model, layout, stages, params, alone, engine_profile("megatron"))
    states = ("weights_bytes", "gradients_bytes", "optimizer_bytes")
    summed = sum(getattr(alone, n) + getattr(mirror, n) for n in states)
    assert (summed - sum(getattr(pair, n) for n in states)).tolist() == [76_800, 0, 0, 76_800]
    assert (alone.params + mirror.params - pair.params).tolist() == [6_400, 0, 0, 6_400]
    # without MTP there is no copy to share
    plain = tiny_moe(num_layers=4)
    p_params = stage_params(plain, layout, stages)
    p_alone = stage_memory(plain, layout, stages, p_params)
    p_pair = _dualpipe_memory(plain, layout, stages, p_params, p_alone, engine_profile("megatron"))
    p_mirror = stage_memory(plain, layout, 3 - stages)
    assert (p_alone.weights_bytes + p_mirror.weights_bytes - p_pair.weights_bytes).tolist() == [0, 0, 0, 0]


def test_fp8_activation_input_halves_fc1_outputs_of_a_gated_mlp():
    # Gated experts (SwiGLU) keep fc1's output, gate and up: 2 x k f = 2 x 64 elements per token, 2 bytes each; in
    # fp8 1 byte each, 128 bytes less. Under moe_act recompute that output is what stays (the activation's
    # output, k f x 2 = 128 bytes, is dropped either way), so the saving is the same there.
    gated = tiny_moe(mlp_kind="gated")
    for fields in ({}, {"recompute": "selective", "recompute_modules": ("moe_act",)}):
        kept16 = per_token(gated, **fields).stored
        kept8 = per_token(gated, activation_input_fp8=True, **fields).stored
        assert (kept16 - kept8).tolist() == [128]
    # A dense gated layer: fc1's output 2 x 256 elements, 512 bytes less
    dense = layer_activation_bytes_per_token(tiny(mlp_kind="gated"), lay(activation_input_fp8=True), moe_layer=False)
    assert (layer_activation_bytes_per_token(tiny(mlp_kind="gated"), lay(), moe_layer=False).stored
            - dense.stored).tolist() == [512]


def test_fp8_activation_input_needs_a_gated_mlp():
    with pytest.raises(PlannerError, match="activation_input_fp8 keeps a SwiGLU's input in fp8, and this model's MLP"):
        check_layout(tiny_moe(), Layout(activation_input_fp8=True, global_batch=1, seq_len=32), 1)
    check_layout(tiny_moe(mlp_kind="gated"), Layout(activation_input_fp8=True, global_batch=1, seq_len=32), 1)
